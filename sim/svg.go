package sim

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/chart"
	"github.com/sluicehq/sluice/rate"
)

// The picture's vertical geometry, in pixels; the horizontal one, the
// colours and the column binning are package chart's, shared with the
// dashboard's live picture.
const (
	headerH = 104
	rowH    = 78
	barH    = 46 // the tallest column
	barTop  = 14 // room for the ✕ count above a column
	// digitW is the width of a digit in the 10 px labels, a little over
	// DejaVu Sans's 0.636 em.
	digitW = 6.5
	// noteH is the height of a line of the header's notes, and noteLen
	// the most characters one holds: 928 px over about 6.9 px, the mean
	// width of a character of DejaVu Sans at 12.5 px, with a margin.
	noteH   = 18
	noteLen = 128
	// The per-client table under the time axis, from the heading's top:
	// the line of names, the first row's line, each next row's.
	clientsHeadH = 24
	clientsNameH = 18
	clientsLineH = 15
)

// heldFill is the shade of the requests held back before they went
// ahead: a paler green on the green of those that passed, so that a
// column still reads as passed at a glance.
const heldFill = "#b2f2bb"

// WriteSVG draws r as an SVG picture, readable without a legend: one row
// per algorithm and setup, one column per second (or per few seconds in
// long scenarios, the last narrower if it covers fewer), with the
// requests that passed in green and those refused stacked above them in
// hatched red under a ✕ and their count. Of those that passed, the ones
// held back before they went ahead (Row.Held) are the paler top of the
// green: every column counts requests in the second they arrived.
// The title says the limit, the max delay and the bucket algorithms'
// burst; header notes say what is held and which requests cost more than
// the capacity; each row ends with its totals, held and over-capacity
// counts; dashed lines mark fixed-window boundaries. For 2 to MaxClients
// clients a table under the time axis gives each row's per-client totals.
//
// Every row and column carries its counts as data-* attributes
// (data-held and data-over-capacity on a row, data-held on a column's
// held mark, the client's counts on each client's cell) and a <title>
// tooltip, for scripts and for people hovering in a browser.
func WriteSVG(w io.Writer, r Result) error {
	p := chart.NewPrinter(w)
	seconds := max(r.Seconds, 1)
	bin, cols, colW := chart.Bins(seconds)

	// One scale for every row: the busiest column.
	peak := 1
	for _, row := range r.Rows {
		for c := range cols {
			n := 0
			for _, s := range binned(row.PerSecond, c, bin) {
				n += s.Passed + s.Refused
			}
			peak = max(peak, n)
		}
	}
	unit := float64(barH) / float64(peak)

	// The header's notes come first: their lines push the rows down.
	var notes []string
	var first []string
	if b := bucketNote(r); b != "" {
		first = append(first, b+".")
	}
	boundaries := windowBoundaries(r, seconds)
	if len(boundaries) > 0 {
		first = append(first, fmt.Sprintf("Dashed lines: fixed-window boundaries, every %v.", r.Limit.Period))
	}
	if len(first) > 0 {
		notes = append(notes, strings.Join(first, " "))
	}
	if h := heldLegend(r); h != "" {
		notes = append(notes, wrapLines(h, noteLen)...)
	}
	if o := overCapacityNote(r); o != "" {
		notes = append(notes, wrapLines(o, noteLen)...)
		notes = append(notes, overCapacityWhy)
	}
	notesTop := 68 // the first note's baseline, after the title and the how line
	if r.Summary != "" {
		notesTop += 18
	}
	top := max(headerH, notesTop+len(notes)*noteH)
	clients := shownClients(firstClients(r))
	clientsH := 0
	if len(clients) > 0 {
		clientsH = clientsHeadH + clientsNameH + (len(r.Rows)-1)*clientsLineH + 14
	}

	height := top + len(r.Rows)*rowH + 44 + clientsH
	p.Printf(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p.Printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" data-scenario="%s" data-seconds="%d" data-bin="%d" data-unit="%.4f">`+"\n",
		chart.Width, height, chart.Width, height, chart.Attr(r.Scenario), r.Seconds, bin, unit)
	p.Printf(`<title>%s</title>`+"\n", chart.Text(r.Scenario+": "+title(r)))
	p.Hatch("refused")
	p.Background(height)

	// Header: what, the limit, how to read it.
	p.Printf(`<text x="%d" y="30" font-size="18" font-weight="bold" fill="%s">%s</text>`+"\n", chart.Margin, chart.Ink, chart.Text(r.Scenario+" — "+title(r)))
	y := 50
	if r.Summary != "" {
		p.Printf(`<text x="%d" y="%d" font-size="12.5" fill="%s">%s</text>`+"\n", chart.Margin, y, chart.Ink, chart.Text(chart.Capitalize(r.Summary)))
		y += 18
	}
	how := "one column per second"
	if bin > 1 {
		how = fmt.Sprintf("one column per %d seconds", bin)
	}
	// The last column may cover fewer seconds than the others. Drawn as
	// wide, its bar, which counts requests, would make traffic seem to
	// fall at the end; drawn narrower in proportion it keeps the time
	// scale that the ticks and window boundaries use and ends where the
	// scenario ends, while its bar still counts requests on the one
	// scale (a bar scaled to a rate would not). The header says so in
	// few words: the line is nearly full.
	lastSecs := seconds - (cols-1)*bin
	if lastSecs < bin {
		how += fmt.Sprintf(" (last: %d s)", lastSecs)
	}
	p.Printf(`<text x="%d" y="%d" font-size="12.5" fill="%s">%s: requests <tspan fill="%s" font-weight="bold">passed</tspan> in green, <tspan fill="%s" font-weight="bold">refused ✕</tspan> hatched red on top; one scale for all rows (tallest column: %d).</text>`+"\n",
		chart.Margin, y, chart.Grey, chart.Text(chart.Capitalize(how)), chart.Green, chart.Red, peak)
	y += 18
	for _, n := range notes {
		p.Printf(`<text x="%d" y="%d" font-size="12.5" fill="%s">%s</text>`+"\n", chart.Margin, y, chart.Grey, chart.Text(n))
		y += noteH
	}

	bottom := top + len(r.Rows)*rowH
	for _, b := range boundaries {
		x := float64(chart.PlotLeft) + b*colW/float64(bin)
		p.Printf(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1" stroke-dasharray="4 3"/>`+"\n", x, top, x, bottom+4, chart.Grey)
	}

	setups := rowSetups(r)
	for i, row := range r.Rows {
		rowTop := top + i*rowH
		base := float64(rowTop + barTop + barH)
		p.Printf(`<g class="row" data-algorithm="%s" data-setup="%s" data-passed="%d" data-refused="%d" data-held="%d" data-over-capacity="%d">`+"\n",
			row.Algorithm, row.Setup, row.Passed, row.Refused, row.Held, row.OverCapacity)
		if i > 0 {
			p.RowRule(rowTop)
		}
		// Label: the algorithm, then what is particular to this row.
		p.Printf(`<text x="%d" y="%d" font-size="14" font-weight="bold" fill="%s">%s</text>`+"\n", chart.Margin, rowTop+26, chart.Ink, row.Algorithm)
		ly := rowTop + 42
		if len(setups) > 1 || row.Setup != Single {
			p.Printf(`<text x="%d" y="%d" font-size="11" fill="%s">%s</text>`+"\n", chart.Margin, ly, chart.Grey, chart.Text(setupShort(row)))
			ly += 14
		}
		if row.Algorithm.HasBurst() {
			p.Printf(`<text x="%d" y="%d" font-size="11" fill="%s">burst %d</text>`+"\n", chart.Margin, ly, chart.Grey, row.Limit.Capacity())
		}
		// Baseline and columns.
		p.Baseline(base)
		// The right end of the last pass count drawn, so that the next
		// keeps a character's gap: "2 4 8" must not read as 248.
		labelEnd := math.Inf(-1)
		for c := range cols {
			var passed, refused, held int
			for _, s := range binned(row.PerSecond, c, bin) {
				passed += s.Passed
				refused += s.Refused
				held += s.Held
			}
			if passed+refused == 0 {
				continue
			}
			t := c * bin
			label := fmt.Sprintf("%d s", t)
			if bin > 1 {
				label = fmt.Sprintf("%d–%d s", t, min(t+bin, seconds)-1)
			}
			what := fmt.Sprintf("%d passed", passed)
			if held > 0 {
				what += fmt.Sprintf(" (%d held back first)", held)
			}
			col := chart.Column{Index: c, Width: colW, Base: base, Unit: unit,
				T: int64(t), Passed: int64(passed), Refused: int64(refused),
				Title: fmt.Sprintf("%s: %s, %d refused", label, what, refused), Pattern: "refused"}
			narrow := c == cols-1 && lastSecs < bin
			shift := 0.0 // how far the column is moved right, to absolute x
			if narrow {
				// chart.Column places a column at Index times its Width:
				// a narrower one is drawn first and moved to its place.
				col.Index, col.Width = 0, colW*float64(lastSecs)/float64(bin)
				shift = float64(c) * colW
				p.Printf(`<g transform="translate(%.2f 0)">`, shift)
			}
			w := col.Width
			cx, top := p.Column(col)
			if held > 0 {
				// The top of the green bar, as tall as the held requests:
				// as wide as chart.Column draws the bar, about cx.
				bw := max(w*0.72, 1)
				hp := float64(passed) * unit
				p.Printf(`<rect class="held" data-held="%d" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>`,
					held, cx-bw/2, base-hp, bw, float64(held)*unit, heldFill)
			}
			if refused > 0 {
				mark := "✕"
				if w >= 7*(float64(len(fmt.Sprint(refused)))+1.5) {
					mark = fmt.Sprintf("✕%d", refused)
				}
				if w >= 7 {
					p.Printf(`<text x="%.2f" y="%.2f" font-size="10" text-anchor="middle" fill="%s">%s</text>`, cx, top-3, chart.Red, mark)
				}
			}
			// A pass count is drawn if it fits under its column and
			// keeps a character's gap from the last one drawn.
			if lw := digitW * float64(len(fmt.Sprint(passed))); passed > 0 && w >= lw && shift+cx-lw/2 >= labelEnd+digitW {
				p.Printf(`<text x="%.2f" y="%.2f" font-size="10" text-anchor="middle" fill="%s">%d</text>`, cx, base+11, chart.Green, passed)
				labelEnd = shift + cx + lw/2
			}
			p.Printf("</g>\n")
			if narrow {
				p.Printf("</g>\n")
			}
		}
		// Totals.
		tx := chart.PlotRight + 16
		p.Printf(`<text x="%d" y="%d" font-size="13" font-weight="bold" fill="%s">%d passed</text>`+"\n", tx, rowTop+24, chart.Green, row.Passed)
		refusedText := fmt.Sprintf("%d refused", row.Refused)
		if row.Refused > 0 {
			refusedText = "✕ " + refusedText
		}
		p.Printf(`<text x="%d" y="%d" font-size="13" font-weight="bold" fill="%s">%s</text>`+"\n", tx, rowTop+40, chart.Red, refusedText)
		ny := rowTop + 55
		if row.Held > 0 {
			p.Printf(`<text x="%d" y="%d" font-size="11" fill="%s">%d held, up to %v</text>`+"\n", tx, ny, chart.Green, row.Held, row.MaxDelay.Round(time.Millisecond))
			ny += 13
		}
		if row.OverCapacity > 0 {
			p.Printf(`<text x="%d" y="%d" font-size="11" fill="%s">of them %d over capacity</text>`+"\n", tx, ny, chart.Red, row.OverCapacity)
		}
		p.Printf("</g>\n")
	}

	// Time axis under the last row.
	step := chart.TickStep(bin, colW, 24)
	for t := 0; t < seconds; t += step {
		// The middle of second t, on the time scale the columns and the
		// window boundaries share: in the column that holds it.
		x := float64(chart.PlotLeft) + (float64(t)+0.5)/float64(bin)*colW
		p.Printf(`<text x="%.1f" y="%d" font-size="10.5" text-anchor="middle" fill="%s">%d</text>`+"\n", x, bottom+22, chart.Grey, t)
	}
	p.Printf(`<text x="%d" y="%d" font-size="10.5" fill="%s">seconds →</text>`+"\n", chart.PlotRight+16, bottom+22, chart.Grey)
	if len(clients) > 0 {
		writeClients(p, r, clients, bottom+44)
	}
	p.Printf("</svg>\n")
	return p.Flush()
}

// heldLegend says what the paler green of the picture is, if any row
// held requests back: why each algorithm that did held them, and that
// the columns count them when they arrived; or "".
func heldLegend(r Result) string {
	var leaky, bucket bool
	for _, row := range r.Rows {
		if row.Held > 0 {
			leaky = leaky || row.Algorithm == rate.LeakyBucket
			bucket = bucket || row.Algorithm != rate.LeakyBucket
		}
	}
	var why []string
	if leaky {
		why = append(why, "for a leaky_bucket's turn")
	}
	if bucket {
		why = append(why, fmt.Sprintf("for units to refill, within max delay %v", r.MaxDelay))
	}
	if len(why) == 0 {
		return ""
	}
	return fmt.Sprintf("Pale green: passed, but held back first (%s). Every column counts requests in the second they arrived.", strings.Join(why, "; "))
}

// firstClients returns the client totals of r's first row, whose
// clients, in order, are every row's; nil if r has no rows.
func firstClients(r Result) []ClientTotal {
	if len(r.Rows) == 0 {
		return nil
	}
	return r.Rows[0].Clients
}

// writeClients draws, from y down, the table of each row's per-client
// totals: a heading, the clients' names, and a line per row, one column
// per client across the plot and the totals.
func writeClients(p *chart.Printer, r Result, clients []ClientTotal, y int) {
	p.Printf(`<text x="%d" y="%d" font-size="12.5" font-weight="bold" fill="%s">Per client, all seconds: passed ✕refused</text>`+"\n", chart.Margin, y+6, chart.Ink)
	left := float64(chart.PlotLeft)
	cw := float64(chart.Width-chart.Margin-chart.PlotLeft) / float64(len(clients))
	// Names longer than their column are cut, the cut marked.
	fit := max(int(cw/digitW)-1, 4)
	ny := y + clientsHeadH
	for k, c := range clients {
		name := c.Client
		if n := []rune(name); len(n) > fit {
			name = string(n[:fit-1]) + "…"
		}
		p.Printf(`<text x="%.1f" y="%d" font-size="11" font-weight="bold" fill="%s">%s</text>`+"\n", left+float64(k)*cw, ny, chart.Grey, chart.Text(name))
	}
	several := len(rowSetups(r)) > 1
	ly := ny + clientsNameH
	for _, row := range r.Rows {
		label := row.Algorithm.String()
		if several || row.Setup != Single {
			label += " · " + row.Setup.String()
		}
		p.Printf(`<g class="clients" data-algorithm="%s" data-setup="%s">`, row.Algorithm, row.Setup)
		p.Printf(`<text x="%d" y="%d" font-size="11" fill="%s">%s</text>`, chart.Margin, ly, chart.Ink, chart.Text(label))
		for k, c := range shownClients(row.Clients) {
			fill := chart.Green
			if c.Refused > 0 {
				fill = chart.Red
			}
			p.Printf(`<text class="client" data-client="%s" data-passed="%d" data-refused="%d" data-held="%d" x="%.1f" y="%d" font-size="11" fill="%s">%s</text>`,
				chart.Attr(c.Client), c.Passed, c.Refused, c.Held, left+float64(k)*cw, ly, fill, cell(c.Passed, c.Refused))
		}
		p.Printf("</g>\n")
		ly += clientsLineH
	}
}

// binned returns the seconds of column c, bin seconds wide.
func binned(ps []Second, c, bin int) []Second {
	lo := min(c*bin, len(ps))
	return ps[lo:min(lo+bin, len(ps))]
}

// windowBoundaries returns where fixed windows start inside the scenario,
// in seconds from its start, if the scenario has a fixed_window row and
// there are few enough to draw.
func windowBoundaries(r Result, seconds int) []float64 {
	has := false
	for _, row := range r.Rows {
		has = has || row.Algorithm == rate.FixedWindow
	}
	period := r.Limit.Period.Microseconds()
	if !has || period <= 0 || int64(seconds)*1e6/period > 60 {
		return nil
	}
	start := r.Start.UnixMicro()
	first := floorDiv(start, period)*period + period
	var out []float64
	for b := first; b < start+int64(seconds)*1e6; b += period {
		out = append(out, float64(b-start)/1e6)
	}
	return out
}

// setupShort says in a few words how a row's limiters share counters.
func setupShort(row Row) string {
	switch row.Setup {
	case OwnCounters:
		return fmt.Sprintf("%d instances, own counters", row.Instances)
	case SharedCounter:
		return fmt.Sprintf("%d instances, one counter", row.Instances)
	}
	return "one limiter"
}
