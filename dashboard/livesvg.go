package dashboard

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The live picture's geometry and colours, in pixels, those of the
// pictures of package sim (see sim.WriteSVG), so that the live rows and
// the playground read alike.
const (
	svgWidth   = 960
	svgMargin  = 16
	labelWidth = 178
	totalWidth = 168
	plotLeft   = svgMargin + labelWidth
	plotRight  = svgWidth - svgMargin - totalWidth
	plotWidth  = plotRight - plotLeft
	liveHeadH  = 66
	liveRowH   = 66
	liveBarTop = 12
	liveBarH   = 40
	minColumn  = 3
	labelRunes = 22 // the longest policy name drawn whole

	green    = "#2b8a3e"
	red      = "#c92a2a"
	redLight = "#ffe3e3"
	ink      = "#212529"
	grey     = "#868e96"
	rule     = "#dee2e6"
)

// writeLiveSVG draws a live snapshot in the style of package sim's
// pictures: one row per policy, one column per second (or per few seconds
// when they are many), the newest on the right; passed in green, refused
// stacked above in hatched red under a ✕. Each row has its own scale, as
// policies differ in traffic by orders of magnitude; its label says its
// peak. Rows and columns carry their counts as data-* attributes and a
// <title> tooltip.
func writeLiveSVG(w io.Writer, lv Live) error {
	bw := bufio.NewWriter(w)
	p := &printer{w: bw}
	seconds := max(lv.Seconds, 1)
	bin := 1
	for (seconds+bin-1)/bin*minColumn > plotWidth {
		bin++
	}
	cols := (seconds + bin - 1) / bin
	colW := float64(plotWidth) / float64(cols)

	rows := max(len(lv.Policies), 1)
	height := liveHeadH + rows*liveRowH + 30
	p.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" class="live" data-now="%d" data-seconds="%d" data-bin="%d" data-policies="%d">`+"\n",
		svgWidth, height, svgWidth, height, lv.Now, lv.Seconds, bin, len(lv.Policies))
	p.printf("<title>%s</title>\n", esc(fmt.Sprintf("sluice: decisions per policy, the last %s", spanText(seconds))))
	p.printf(`<defs><pattern id="live-refused" patternUnits="userSpaceOnUse" width="5" height="5" patternTransform="rotate(45)"><rect width="5" height="5" fill="%s"/><line x1="0" y1="0" x2="0" y2="5" stroke="%s" stroke-width="2"/></pattern></defs>`+"\n", redLight, red)
	p.printf(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgWidth, height)

	p.printf(`<text x="%d" y="26" font-size="16" font-weight="bold" fill="%s">Decisions per policy, the last %s</text>`+"\n", svgMargin, ink, esc(spanText(seconds)))
	how := "one column per second"
	if bin > 1 {
		how = fmt.Sprintf("one column per %d seconds", bin)
	}
	p.printf(`<text x="%d" y="46" font-size="12.5" fill="%s">%s, the newest on the right: requests <tspan fill="%s" font-weight="bold">passed</tspan> in green, <tspan fill="%s" font-weight="bold">refused ✕</tspan> hatched red on top; each row has its own scale.</text>`+"\n",
		svgMargin, grey, esc(capitalize(how)), green, red)

	top := liveHeadH
	if len(lv.Policies) == 0 {
		p.printf(`<text x="%d" y="%d" font-size="13" fill="%s" class="empty">No decisions in the last %s. Requests through sluice appear here, one row per policy.</text>`+"\n",
			svgMargin, top+liveRowH/2, grey, esc(spanText(seconds)))
	}
	for i, pol := range lv.Policies {
		rowTop := top + i*liveRowH
		base := float64(rowTop + liveBarTop + liveBarH)
		p.printf(`<g class="row" data-policy="%s" data-passed="%d" data-refused="%d">`+"\n", esc(pol.Policy), pol.Passed, pol.Refused)
		if i > 0 {
			p.printf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", svgMargin, rowTop, svgWidth-svgMargin, rowTop, rule)
		}
		peak := int64(0)
		for c := range cols {
			ps, rs := binnedLive(pol.PerSecond, c, bin)
			peak = max(peak, ps+rs)
		}
		unit := float64(liveBarH) / float64(max(peak, 1))
		name := pol.Policy
		if utf8.RuneCountInString(name) > labelRunes {
			name = string([]rune(name)[:labelRunes-1]) + "…"
		}
		p.printf(`<text x="%d" y="%d" font-size="14" font-weight="bold" fill="%s"><title>%s</title>%s</text>`+"\n", svgMargin, rowTop+26, ink, esc(pol.Policy), esc(name))
		per := "/s"
		if bin > 1 {
			per = fmt.Sprintf(" per %d s", bin)
		}
		p.printf(`<text x="%d" y="%d" font-size="11" fill="%s">peak %s%s</text>`+"\n", svgMargin, rowTop+42, grey, group(peak), per)

		p.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", plotLeft, base, plotRight, base, grey)
		for c := range cols {
			passed, refused := binnedLive(pol.PerSecond, c, bin)
			if passed+refused == 0 {
				continue
			}
			first := pol.PerSecond[c*bin].T
			x := float64(plotLeft) + float64(c)*colW
			bw := max(colW*0.72, 1)
			bx := x + (colW-bw)/2
			cx := x + colW/2
			p.printf(`<g class="col" data-t="%d" data-passed="%d" data-refused="%d"><title>%s: %s passed, %s refused</title>`,
				first, passed, refused, esc(clockText(first, bin, lv.Now)), group(passed), group(refused))
			hp := float64(passed) * unit
			hr := float64(refused) * unit
			if passed > 0 {
				p.printf(`<rect class="passed" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>`, bx, base-hp, bw, hp, green)
			}
			if refused > 0 {
				p.printf(`<rect class="refused" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="url(#live-refused)" stroke="%s" stroke-width="0.8"/>`, bx, base-hp-hr, bw, hr, red)
				if colW >= 7 {
					p.printf(`<text x="%.2f" y="%.2f" font-size="9" text-anchor="middle" fill="%s">✕</text>`, cx, base-hp-hr-2, red)
				}
			}
			p.printf("</g>\n")
		}
		tx := plotRight + 16
		p.printf(`<text x="%d" y="%d" font-size="13" font-weight="bold" fill="%s">%s passed</text>`+"\n", tx, rowTop+24, green, group(pol.Passed))
		refusedText := group(pol.Refused) + " refused"
		if pol.Refused > 0 {
			refusedText = "✕ " + refusedText
		}
		p.printf(`<text x="%d" y="%d" font-size="13" font-weight="bold" fill="%s">%s</text>`+"\n", tx, rowTop+40, red, refusedText)
		if total := pol.Passed + pol.Refused; total > 0 {
			p.printf(`<text x="%d" y="%d" font-size="11" fill="%s">%s refused</text>`+"\n", tx, rowTop+55, grey, percent(pol.Refused, total))
		}
		p.printf("</g>\n")
	}

	// Time axis: seconds before now, under the last row.
	bottom := top + rows*liveRowH
	step := 1
	for _, s := range []int{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800} {
		step = s
		if float64(s)/float64(bin)*colW >= 44 {
			break
		}
	}
	for ago := 0; ago < seconds; ago += step {
		c := (seconds - 1 - ago) / bin
		x := float64(plotLeft) + (float64(c)+0.5)*colW
		label := "now"
		if ago > 0 {
			label = fmt.Sprintf("−%d s", ago)
		}
		p.printf(`<text x="%.1f" y="%d" font-size="10.5" text-anchor="middle" fill="%s">%s</text>`+"\n", x, bottom+18, grey, label)
	}
	p.printf(`<text x="%d" y="%d" font-size="10.5" fill="%s">%s UTC</text>`+"\n", plotRight+16, bottom+18, grey, time.Unix(lv.Now, 0).UTC().Format("15:04:05"))
	p.printf("</svg>\n")
	if p.err != nil {
		return p.err
	}
	return bw.Flush()
}

// binnedLive sums the seconds of column c, bin seconds wide.
func binnedLive(ps []LiveSecond, c, bin int) (passed, refused int64) {
	lo := min(c*bin, len(ps))
	for _, s := range ps[lo:min(lo+bin, len(ps))] {
		passed += s.Passed
		refused += s.Refused
	}
	return passed, refused
}

// clockText names the column starting at second t: "12:00:05 UTC, 3 s
// ago", or a span of bin seconds.
func clockText(t int64, bin int, now int64) string {
	at := time.Unix(t, 0).UTC().Format("15:04:05")
	if bin > 1 {
		at += "–" + time.Unix(t+int64(bin)-1, 0).UTC().Format("15:04:05")
	}
	switch ago := now - t; {
	case ago <= 0:
		return at + " UTC, now"
	default:
		return fmt.Sprintf("%s UTC, %d s ago", at, ago)
	}
}

// spanText says a number of seconds as people do: "60 seconds", "5
// minutes".
func spanText(seconds int) string {
	switch {
	case seconds == 60:
		return "minute"
	case seconds%60 == 0:
		return fmt.Sprintf("%d minutes", seconds/60)
	case seconds == 1:
		return "second"
	}
	return fmt.Sprintf("%d seconds", seconds)
}

// group writes n with thousands separators: 1,234,567.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// percent returns part/total as a percentage with at most one decimal,
// never rounding a non-zero part to 0% or a partial one to 100%.
func percent(part, total int64) string {
	if total == 0 || part == 0 {
		return "0%"
	}
	if part == total {
		return "100%"
	}
	v := float64(part) * 100 / float64(total)
	switch {
	case v < 0.1:
		return "<0.1%"
	case v > 99.9:
		return ">99.9%"
	case v >= 10:
		return fmt.Sprintf("%.0f%%", v)
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0") + "%"
}

// capitalize returns s with its first letter in upper case.
func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// esc escapes s for XML character data and double-quoted attributes.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// printer writes formatted text and keeps the first error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}
