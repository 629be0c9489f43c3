package sim

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/rate"
)

// The picture's geometry, in pixels. The width is fixed; columns share the
// plot's width, so they widen for short scenarios and narrow for long
// ones, down to minColumn, past which each column covers several seconds.
const (
	svgWidth   = 960
	svgMargin  = 16
	labelWidth = 178
	totalWidth = 168
	plotLeft   = svgMargin + labelWidth
	plotRight  = svgWidth - svgMargin - totalWidth
	plotWidth  = plotRight - plotLeft
	headerH    = 104
	rowH       = 78
	barH       = 46 // the tallest column
	barTop     = 14 // room for the ✕ count above a column
	minColumn  = 3
)

// Colours: passed green, refused red.
const (
	green    = "#2b8a3e"
	red      = "#c92a2a"
	redLight = "#ffe3e3"
	ink      = "#212529"
	grey     = "#868e96"
	rule     = "#dee2e6"
)

// WriteSVG draws r as an SVG picture, readable without a legend: one row
// per algorithm and setup, one column per second (or per few seconds in
// long scenarios), with the requests that passed in green and those
// refused stacked above them in hatched red under a ✕ and their count.
// The title says the limit and the bucket algorithms' burst; each row ends
// with its totals; dashed lines mark fixed-window boundaries.
//
// Every row and column carries its counts as data-* attributes and a
// <title> tooltip, for scripts and for people hovering in a browser.
func WriteSVG(w io.Writer, r Result) error {
	bw := bufio.NewWriter(w)
	p := &svgPrinter{w: bw}
	seconds := max(r.Seconds, 1)
	bin := 1
	for (seconds+bin-1)/bin*minColumn > plotWidth {
		bin++
	}
	cols := (seconds + bin - 1) / bin
	colW := float64(plotWidth) / float64(cols)

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
	p.printf(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" data-scenario="%s" data-seconds="%d" data-bin="%d" data-unit="%.4f">`+"\n",
		svgWidth, height, svgWidth, height, attr(r.Scenario), r.Seconds, bin, unit)
	p.printf(`<title>%s</title>`+"\n", text(r.Scenario+": "+title(r)))
	p.printf(`<defs><pattern id="refused" patternUnits="userSpaceOnUse" width="5" height="5" patternTransform="rotate(45)"><rect width="5" height="5" fill="%s"/><line x1="0" y1="0" x2="0" y2="5" stroke="%s" stroke-width="2"/></pattern></defs>`+"\n", redLight, red)
	p.printf(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgWidth, height)

	// Header: what, the limit, how to read it.
	p.printf(`<text x="%d" y="30" font-size="18" font-weight="bold" fill="%s">%s</text>`+"\n", svgMargin, ink, text(r.Scenario+" — "+title(r)))
	y := 50
	if r.Summary != "" {
		p.printf(`<text x="%d" y="%d" font-size="12.5" fill="%s">%s</text>`+"\n", svgMargin, y, ink, text(capitalize(r.Summary)))
		y += 18
	}
	how := "one column per second"
	if bin > 1 {
		how = fmt.Sprintf("one column per %d seconds", bin)
	}
	p.printf(`<text x="%d" y="%d" font-size="12.5" fill="%s">%s: requests <tspan fill="%s" font-weight="bold">passed</tspan> in green, <tspan fill="%s" font-weight="bold">refused ✕</tspan> hatched red on top; one scale for all rows (tallest column: %d).</text>`+"\n",
		svgMargin, y, grey, text(capitalize(how)), green, red, peak)
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
		p.printf(`<text x="%d" y="%d" font-size="12.5" fill="%s">%s</text>`+"\n", svgMargin, y, grey, text(strings.Join(notes, " ")))
	}

	top := headerH
	bottom := headerH + len(r.Rows)*rowH
	for _, b := range boundaries {
		x := float64(plotLeft) + b*colW/float64(bin)
		p.printf(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1" stroke-dasharray="4 3"/>`+"\n", x, top, x, bottom+4, grey)
	}

	setups := rowSetups(r)
	for i, row := range r.Rows {
		rowTop := top + i*rowH
		base := float64(rowTop + barTop + barH)
		p.printf(`<g class="row" data-algorithm="%s" data-setup="%s" data-passed="%d" data-refused="%d">`+"\n", row.Algorithm, row.Setup, row.Passed, row.Refused)
		if i > 0 {
			p.printf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", svgMargin, rowTop, svgWidth-svgMargin, rowTop, rule)
		}
		// Label: the algorithm, then what is particular to this row.
		p.printf(`<text x="%d" y="%d" font-size="14" font-weight="bold" fill="%s">%s</text>`+"\n", svgMargin, rowTop+26, ink, row.Algorithm)
		ly := rowTop + 42
		if len(setups) > 1 || row.Setup != Single {
			p.printf(`<text x="%d" y="%d" font-size="11" fill="%s">%s</text>`+"\n", svgMargin, ly, grey, text(setupShort(row)))
			ly += 14
		}
		if isBucket(row.Algorithm) {
			p.printf(`<text x="%d" y="%d" font-size="11" fill="%s">burst %d</text>`+"\n", svgMargin, ly, grey, row.Limit.Capacity())
		}
		// Baseline and columns.
		p.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", plotLeft, base, plotRight, base, grey)
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
			x := float64(plotLeft) + float64(c)*colW
			bw := max(colW*0.72, 1)
			bx := x + (colW-bw)/2
			cx := x + colW/2
			label := fmt.Sprintf("%d s", t)
			if bin > 1 {
				label = fmt.Sprintf("%d–%d s", t, min(t+bin, seconds)-1)
			}
			p.printf(`<g class="col" data-t="%d" data-passed="%d" data-refused="%d"><title>%s: %d passed, %d refused</title>`, t, passed, refused, label, passed, refused)
			hp := float64(passed) * unit
			hr := float64(refused) * unit
			if passed > 0 {
				p.printf(`<rect class="passed" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>`, bx, base-hp, bw, hp, green)
			}
			if refused > 0 {
				p.printf(`<rect class="refused" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="url(#refused)" stroke="%s" stroke-width="0.8"/>`, bx, base-hp-hr, bw, hr, red)
				mark := "✕"
				if colW >= 7*(float64(len(fmt.Sprint(refused)))+1.5) {
					mark = fmt.Sprintf("✕%d", refused)
				}
				if colW >= 7 {
					p.printf(`<text x="%.2f" y="%.2f" font-size="10" text-anchor="middle" fill="%s">%s</text>`, cx, base-hp-hr-3, red, mark)
				}
			}
			if passed > 0 && colW >= 6.5*float64(len(fmt.Sprint(passed))) {
				p.printf(`<text x="%.2f" y="%.2f" font-size="10" text-anchor="middle" fill="%s">%d</text>`, cx, base+11, green, passed)
			}
			p.printf("</g>\n")
		}
		// Totals.
		tx := plotRight + 16
		p.printf(`<text x="%d" y="%d" font-size="13" font-weight="bold" fill="%s">%d passed</text>`+"\n", tx, rowTop+24, green, row.Passed)
		refusedText := fmt.Sprintf("%d refused", row.Refused)
		if row.Refused > 0 {
			refusedText = "✕ " + refusedText
		}
		p.printf(`<text x="%d" y="%d" font-size="13" font-weight="bold" fill="%s">%s</text>`+"\n", tx, rowTop+40, red, refusedText)
		ny := rowTop + 55
		if n := len(row.Clients); n >= 2 && n <= 3 {
			var parts []string
			for _, c := range row.Clients {
				parts = append(parts, fmt.Sprintf("%s ✕%d", c.Client, c.Refused))
			}
			p.printf(`<text x="%d" y="%d" font-size="11" fill="%s">%s</text>`+"\n", tx, ny, grey, text(strings.Join(parts, " · ")))
			ny += 13
		}
		if row.MaxDelay > 0 {
			p.printf(`<text x="%d" y="%d" font-size="11" fill="%s">queued up to %v</text>`+"\n", tx, ny, grey, row.MaxDelay.Round(time.Millisecond))
		}
		p.printf("</g>\n")
	}

	// Time axis under the last row.
	step := 1
	for _, s := range []int{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800} {
		step = s
		if float64(s)/float64(bin)*colW >= 24 {
			break
		}
	}
	for t := 0; t < seconds; t += step {
		x := float64(plotLeft) + (float64(t)/float64(bin)+0.5)*colW
		p.printf(`<text x="%.1f" y="%d" font-size="10.5" text-anchor="middle" fill="%s">%d</text>`+"\n", x, bottom+22, grey, t)
	}
	p.printf(`<text x="%d" y="%d" font-size="10.5" fill="%s">seconds →</text>`+"\n", plotRight+16, bottom+22, grey)
	p.printf("</svg>\n")
	if p.err != nil {
		return p.err
	}
	return bw.Flush()
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

// svgPrinter writes formatted text and keeps the first error.
type svgPrinter struct {
	w   io.Writer
	err error
}

func (p *svgPrinter) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// text escapes s for XML character data.
func text(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// capitalize returns s with its first letter in upper case.
func capitalize(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// attr escapes s for a double-quoted XML attribute.
func attr(s string) string { return text(s) }
