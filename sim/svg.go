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
)

// WriteSVG draws r as an SVG picture, readable without a legend: one row
// per algorithm and setup, one column per second (or per few seconds in
// long scenarios, the last narrower if it covers fewer), with the
// requests that passed in green and those refused stacked above them in
// hatched red under a ✕ and their count.
// The title says the limit and the bucket algorithms' burst; each row ends
// with its totals; dashed lines mark fixed-window boundaries.
//
// Every row and column carries its counts as data-* attributes and a
// <title> tooltip, for scripts and for people hovering in a browser.
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

	height := headerH + len(r.Rows)*rowH + 44
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
	var notes []string
	if b := bucketNote(r); b != "" {
		notes = append(notes, b+".")
	}
	boundaries := windowBoundaries(r, seconds)
	if len(boundaries) > 0 {
		notes = append(notes, fmt.Sprintf("Dashed lines: fixed-window boundaries, every %v.", r.Limit.Period))
	}
	if len(notes) > 0 {
		p.Printf(`<text x="%d" y="%d" font-size="12.5" fill="%s">%s</text>`+"\n", chart.Margin, y, chart.Grey, chart.Text(strings.Join(notes, " ")))
	}

	top := headerH
	bottom := headerH + len(r.Rows)*rowH
	for _, b := range boundaries {
		x := float64(chart.PlotLeft) + b*colW/float64(bin)
		p.Printf(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1" stroke-dasharray="4 3"/>`+"\n", x, top, x, bottom+4, chart.Grey)
	}

	setups := rowSetups(r)
	for i, row := range r.Rows {
		rowTop := top + i*rowH
		base := float64(rowTop + barTop + barH)
		p.Printf(`<g class="row" data-algorithm="%s" data-setup="%s" data-passed="%d" data-refused="%d">`+"\n", row.Algorithm, row.Setup, row.Passed, row.Refused)
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
			var passed, refused int
			for _, s := range binned(row.PerSecond, c, bin) {
				passed += s.Passed
				refused += s.Refused
			}
			if passed+refused == 0 {
				continue
			}
			t := c * bin
			label := fmt.Sprintf("%d s", t)
			if bin > 1 {
				label = fmt.Sprintf("%d–%d s", t, min(t+bin, seconds)-1)
			}
			col := chart.Column{Index: c, Width: colW, Base: base, Unit: unit,
				T: int64(t), Passed: int64(passed), Refused: int64(refused),
				Title: fmt.Sprintf("%s: %d passed, %d refused", label, passed, refused), Pattern: "refused"}
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
		if n := len(row.Clients); n >= 2 && n <= 3 {
			var parts []string
			for _, c := range row.Clients {
				parts = append(parts, fmt.Sprintf("%s ✕%d", c.Client, c.Refused))
			}
			p.Printf(`<text x="%d" y="%d" font-size="11" fill="%s">%s</text>`+"\n", tx, ny, chart.Grey, chart.Text(strings.Join(parts, " · ")))
			ny += 13
		}
		if row.MaxDelay > 0 {
			p.Printf(`<text x="%d" y="%d" font-size="11" fill="%s">queued up to %v</text>`+"\n", tx, ny, chart.Grey, row.MaxDelay.Round(time.Millisecond))
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
	p.Printf("</svg>\n")
	return p.Flush()
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
