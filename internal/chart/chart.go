package chart

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The pictures' geometry, in pixels. The width is fixed; columns share the
// plot's width, so they widen for short spans and narrow for long ones,
// down to MinColumn, past which each column covers several seconds.
const (
	// Width is the width of a picture.
	Width = 960
	// Margin is the blank space at the left and right edges.
	Margin = 16
	// LabelWidth is the room for a row's label, left of the plot.
	LabelWidth = 178
	// TotalWidth is the room for a row's totals, right of the plot.
	TotalWidth = 168
	// PlotLeft is where the columns start.
	PlotLeft = Margin + LabelWidth
	// PlotRight is where the columns end.
	PlotRight = Width - Margin - TotalWidth
	// PlotWidth is the width the columns share.
	PlotWidth = PlotRight - PlotLeft
	// MinColumn is the narrowest column; see [Bins].
	MinColumn = 3
)

// Colours: passed green, refused red.
const (
	// Green fills the requests that passed.
	Green = "#2b8a3e"
	// Red outlines the requests refused and writes their ✕.
	Red = "#c92a2a"
	// RedLight is the ground of the refused requests' hatching.
	RedLight = "#ffe3e3"
	// Ink is the colour of titles and labels.
	Ink = "#212529"
	// Grey is the colour of notes, axes and baselines.
	Grey = "#868e96"
	// Rule is the colour of the lines between rows.
	Rule = "#dee2e6"
)

// Bins says how to draw seconds (at least 1) across the plot: bin seconds
// per column, as few as keep every column at least MinColumn pixels wide;
// cols columns; each colW pixels wide.
func Bins(seconds int) (bin, cols int, colW float64) {
	seconds = max(seconds, 1)
	bin = 1
	for (seconds+bin-1)/bin*MinColumn > PlotWidth {
		bin++
	}
	cols = (seconds + bin - 1) / bin
	return bin, cols, float64(PlotWidth) / float64(cols)
}

// TickStep returns how many seconds apart to label the time axis: the
// first of 1, 2, 5, 10, 15, 30 seconds, 1, 2, 5, 10, 15 and 30 minutes
// whose labels stand at least gap pixels apart, given columns of bin
// seconds and colW pixels; 30 minutes if none does.
func TickStep(bin int, colW, gap float64) int {
	step := 1
	for _, s := range []int{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800} {
		step = s
		if float64(s)/float64(bin)*colW >= gap {
			break
		}
	}
	return step
}

// Printer writes a picture's markup through a buffer. It keeps the first
// error: once a write fails, later ones do nothing, and [Printer.Flush]
// returns it, so that drawing code need not check every line.
type Printer struct {
	w   *bufio.Writer
	err error
}

// NewPrinter returns a Printer writing to w.
func NewPrinter(w io.Writer) *Printer {
	return &Printer{w: bufio.NewWriter(w)}
}

// Printf writes format with args, as fmt.Fprintf does, unless an earlier
// write failed.
func (p *Printer) Printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// Flush writes out what is buffered and returns the first error met, if
// any.
func (p *Printer) Flush() error {
	if p.err != nil {
		return p.err
	}
	return p.w.Flush()
}

// Hatch writes the <defs> of the pattern that fills refused requests,
// red lines on light red, under the given id, which must be unique in the
// page: refer to it as url(#id).
func (p *Printer) Hatch(id string) {
	p.Printf(`<defs><pattern id="%s" patternUnits="userSpaceOnUse" width="5" height="5" patternTransform="rotate(45)"><rect width="5" height="5" fill="%s"/><line x1="0" y1="0" x2="0" y2="5" stroke="%s" stroke-width="2"/></pattern></defs>`+"\n", id, RedLight, Red)
}

// Background paints the whole picture, height pixels tall, white.
func (p *Printer) Background(height int) {
	p.Printf(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", Width, height)
}

// RowRule draws the line that separates a row starting at y from the one
// above.
func (p *Printer) RowRule(y int) {
	p.Printf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", Margin, y, Width-Margin, y, Rule)
}

// Baseline draws a row's baseline, at y, across the plot.
func (p *Printer) Baseline(y float64) {
	p.Printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", PlotLeft, y, PlotRight, y, Grey)
}

// Column is one column of a row: the requests that passed and those
// refused over the seconds it covers.
type Column struct {
	// Index is the column's place in its row, from 0 at the plot's left.
	Index int
	// Width is the width of every column of the row, in pixels (colW of
	// [Bins]); the bar fills 72% of it, and at least 1 pixel.
	Width float64
	// Base is the y of the row's baseline, where the bar stands.
	Base float64
	// Unit is the height of one request, in pixels.
	Unit float64
	// T is the column's first second, in the picture's own terms, written
	// as data-t.
	T int64
	// Passed and Refused count the requests; they are written as
	// data-passed and data-refused.
	Passed, Refused int64
	// Title is the tooltip, plain text; Column escapes it.
	Title string
	// Pattern is the id given to [Printer.Hatch], filling the refused part.
	Pattern string
}

// Column opens a <g class="col"> carrying c's counts as data-* attributes
// and its tooltip, and draws in it the passed requests in green with the
// refused ones stacked above, hatched. It returns the column's centre and
// the top of the stack, where callers put their labels (a ✕ and count)
// before closing the group with "</g>\n".
func (p *Printer) Column(c Column) (cx, top float64) {
	x := float64(PlotLeft) + float64(c.Index)*c.Width
	bw := max(c.Width*0.72, 1)
	bx := x + (c.Width-bw)/2
	cx = x + c.Width/2
	p.Printf(`<g class="col" data-t="%d" data-passed="%d" data-refused="%d"><title>%s</title>`, c.T, c.Passed, c.Refused, Text(c.Title))
	hp := float64(c.Passed) * c.Unit
	hr := float64(c.Refused) * c.Unit
	if c.Passed > 0 {
		p.Printf(`<rect class="passed" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>`, bx, c.Base-hp, bw, hp, Green)
	}
	if c.Refused > 0 {
		p.Printf(`<rect class="refused" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="url(#%s)" stroke="%s" stroke-width="0.8"/>`, bx, c.Base-hp-hr, bw, hr, c.Pattern, Red)
	}
	return cx, c.Base - hp - hr
}

// Text escapes s for XML character data.
func Text(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// Attr escapes s for a double-quoted XML attribute. Text's escaping covers
// quotes too; Attr says at the call which use is meant.
func Attr(s string) string { return Text(s) }

// Capitalize returns s with its first letter in upper case.
func Capitalize(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}
