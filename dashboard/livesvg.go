package dashboard

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/chart"
)

// The live picture's vertical geometry, in pixels. The horizontal one and
// the colours are package chart's, shared with the pictures of package sim
// (see sim.WriteSVG), so that the live rows and the playground read alike.
const (
	liveHeadH   = 76 // the title and two lines of legend
	liveShadowH = 16 // one more legend line, when a row has shadow refusals
	liveRowH    = 66
	liveBarTop  = 12
	liveBarH    = 40
	labelRunes  = 22 // the longest policy name drawn whole
)

// The colours of a shadow policy's would-be refusals, which package sim's
// pictures never show: amber, neither the green of a plain pass nor the
// red of a refusal, as the requests passed but would not have.
const (
	shadowFill = "#fab005"
	shadowInk  = "#e67700" // text: darker, to read on white
)

// writeLiveSVG draws a live snapshot in the style of package sim's
// pictures: one row per policy, one column per second (or per few seconds
// when they are many), the newest on the right; what the row's policy
// allowed in green, what a shadow policy would have refused in amber at
// the top of the green (those passed too), refused stacked above in
// hatched red under a ✕. Each row has its own scale, as policies differ
// in traffic by orders of magnitude; its label says its peak. Rows and
// columns carry their counts as data-* attributes and a <title> tooltip.
//
// A row says "allowed", not "passed": it counts its policy's decisions,
// and a request it allowed may have been refused, whole, by another (see
// Live).
func writeLiveSVG(w io.Writer, lv Live) error {
	p := chart.NewPrinter(w)
	seconds := max(lv.Seconds, 1)
	bin, cols, colW := chart.Bins(seconds)

	shadow := false
	for _, pol := range lv.Policies {
		shadow = shadow || pol.ShadowRefused > 0
	}
	headH := liveHeadH
	if shadow {
		headH += liveShadowH
	}
	rows := max(len(lv.Policies), 1)
	height := headH + rows*liveRowH + 30
	p.Printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" class="live" data-now="%d" data-seconds="%d" data-bin="%d" data-policies="%d">`+"\n",
		chart.Width, height, chart.Width, height, lv.Now, lv.Seconds, bin, len(lv.Policies))
	p.Printf("<title>%s</title>\n", chart.Text(fmt.Sprintf("sluice: decisions per policy, the last %s", spanText(seconds))))
	p.Hatch("live-refused")
	p.Background(height)

	p.Printf(`<text x="%d" y="26" font-size="16" font-weight="bold" fill="%s">Decisions per policy, the last %s</text>`+"\n", chart.Margin, chart.Ink, chart.Text(spanText(seconds)))
	how := "one column per second"
	if bin > 1 {
		how = fmt.Sprintf("one column per %d seconds", bin)
	}
	p.Printf(`<text x="%d" y="46" font-size="12.5" fill="%s">%s, newest on the right, each row to its own scale: <tspan fill="%s" font-weight="bold">allowed</tspan> by the row’s policy in green, <tspan fill="%s" font-weight="bold">refused ✕</tspan> hatched red on top.</text>`+"\n",
		chart.Margin, chart.Grey, chart.Text(chart.Capitalize(how)), chart.Green, chart.Red)
	p.Printf(`<text x="%d" y="63" font-size="11.5" fill="%s">Each row counts its own policy’s decisions: a request that one policy allowed may have been refused by another, and its client got the refusal.</text>`+"\n",
		chart.Margin, chart.Grey)
	if shadow {
		p.Printf(`<text x="%d" y="79" font-size="11.5" fill="%s">In amber, on top of the green, <tspan fill="%s" font-weight="bold">would refuse</tspan> (shadow): what a shadow policy would have refused, had it enforced; those requests passed.</text>`+"\n",
			chart.Margin, chart.Grey, shadowInk)
	}

	top := headH
	if len(lv.Policies) == 0 {
		p.Printf(`<text x="%d" y="%d" font-size="13" fill="%s" class="empty">No decisions in the last %s. Requests through sluice appear here, one row per policy.</text>`+"\n",
			chart.Margin, top+liveRowH/2, chart.Grey, chart.Text(spanText(seconds)))
	}
	for i, pol := range lv.Policies {
		rowTop := top + i*liveRowH
		base := float64(rowTop + liveBarTop + liveBarH)
		p.Printf(`<g class="row" data-policy="%s" data-passed="%d" data-refused="%d" data-shadow-refused="%d">`+"\n", chart.Attr(pol.Policy), pol.Passed, pol.Refused, pol.ShadowRefused)
		if i > 0 {
			p.RowRule(rowTop)
		}
		peak := int64(0)
		for c := range cols {
			ps, rs, _ := binnedLive(pol.PerSecond, c, bin)
			peak = max(peak, ps+rs)
		}
		unit := float64(liveBarH) / float64(max(peak, 1))
		name := pol.Policy
		if utf8.RuneCountInString(name) > labelRunes {
			name = string([]rune(name)[:labelRunes-1]) + "…"
		}
		p.Printf(`<text x="%d" y="%d" font-size="14" font-weight="bold" fill="%s"><title>%s</title>%s</text>`+"\n", chart.Margin, rowTop+26, chart.Ink, chart.Text(pol.Policy), chart.Text(name))
		per := "/s"
		if bin > 1 {
			per = fmt.Sprintf(" per %d s", bin)
		}
		p.Printf(`<text x="%d" y="%d" font-size="11" fill="%s">peak %s%s</text>`+"\n", chart.Margin, rowTop+42, chart.Grey, group(peak), per)

		p.Baseline(base)
		for c := range cols {
			passed, refused, shadowed := binnedLive(pol.PerSecond, c, bin)
			if passed+refused == 0 {
				continue
			}
			// The newest column may hold fewer than bin seconds.
			first := pol.PerSecond[c*bin].T
			last := pol.PerSecond[min((c+1)*bin, len(pol.PerSecond))-1].T
			title := fmt.Sprintf("%s: %s allowed, %s refused", clockText(first, last, lv.Now), group(passed), group(refused))
			if shadowed > 0 {
				title += fmt.Sprintf("; would refuse %s of the allowed (shadow)", group(shadowed))
			}
			cx, top := liveColumn(p, chart.Column{Index: c, Width: colW, Base: base, Unit: unit,
				T: first, Passed: passed, Refused: refused, Title: title, Pattern: "live-refused"}, shadowed)
			if refused > 0 && colW >= 7 {
				p.Printf(`<text x="%.2f" y="%.2f" font-size="9" text-anchor="middle" fill="%s">✕</text>`, cx, top-2, chart.Red)
			}
			p.Printf("</g>\n")
		}
		// The totals: three lines, four with would-be refusals.
		tx := chart.PlotRight + 16
		y := [4]int{24, 40, 0, 55}
		if pol.ShadowRefused > 0 {
			y = [4]int{19, 33, 47, 60}
		}
		p.Printf(`<text x="%d" y="%d" font-size="13" font-weight="bold" fill="%s">%s allowed</text>`+"\n", tx, rowTop+y[0], chart.Green, group(pol.Passed))
		refusedText := group(pol.Refused) + " refused"
		if pol.Refused > 0 {
			refusedText = "✕ " + refusedText
		}
		p.Printf(`<text x="%d" y="%d" font-size="13" font-weight="bold" fill="%s">%s</text>`+"\n", tx, rowTop+y[1], chart.Red, refusedText)
		if pol.ShadowRefused > 0 {
			p.Printf(`<text x="%d" y="%d" font-size="12" font-weight="bold" fill="%s"><title>allowed, though a shadow policy would have refused them</title>%s would refuse</text>`+"\n",
				tx, rowTop+y[2], shadowInk, group(pol.ShadowRefused))
		}
		if total := pol.Passed + pol.Refused; total > 0 {
			p.Printf(`<text x="%d" y="%d" font-size="11" fill="%s">%s refused</text>`+"\n", tx, rowTop+y[3], chart.Grey, percent(pol.Refused, total))
		}
		p.Printf("</g>\n")
	}

	// Time axis: seconds before now, under the last row.
	bottom := top + rows*liveRowH
	step := chart.TickStep(bin, colW, 44)
	for ago := 0; ago < seconds; ago += step {
		c := (seconds - 1 - ago) / bin
		x := float64(chart.PlotLeft) + (float64(c)+0.5)*colW
		label := "now"
		if ago > 0 {
			label = fmt.Sprintf("−%d s", ago)
		}
		p.Printf(`<text x="%.1f" y="%d" font-size="10.5" text-anchor="middle" fill="%s">%s</text>`+"\n", x, bottom+18, chart.Grey, label)
	}
	p.Printf(`<text x="%d" y="%d" font-size="10.5" fill="%s">%s UTC</text>`+"\n", chart.PlotRight+16, bottom+18, chart.Grey, time.Unix(lv.Now, 0).UTC().Format("15:04:05"))
	p.Printf("</svg>\n")
	return p.Flush()
}

// liveColumn draws column c with chart.Column's geometry, so that live
// rows and package sim's pictures read alike, but for the top shadow of
// c.Passed, drawn in amber: chart.Column knows only passed and refused,
// and its group has no room for data-shadow-refused. It returns the
// column's centre and the top of its stack, the group left open for the
// caller's labels, as chart.Column does.
func liveColumn(p *chart.Printer, c chart.Column, shadow int64) (cx, top float64) {
	x := float64(chart.PlotLeft) + float64(c.Index)*c.Width
	bw := max(c.Width*0.72, 1)
	bx := x + (c.Width-bw)/2
	cx = x + c.Width/2
	p.Printf(`<g class="col" data-t="%d" data-passed="%d" data-refused="%d" data-shadow-refused="%d"><title>%s</title>`,
		c.T, c.Passed, c.Refused, shadow, chart.Text(c.Title))
	hp := float64(c.Passed-shadow) * c.Unit
	hs := float64(shadow) * c.Unit
	hr := float64(c.Refused) * c.Unit
	if c.Passed > shadow {
		p.Printf(`<rect class="passed" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>`, bx, c.Base-hp, bw, hp, chart.Green)
	}
	if shadow > 0 {
		p.Printf(`<rect class="shadow-refused" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>`, bx, c.Base-hp-hs, bw, hs, shadowFill)
	}
	if c.Refused > 0 {
		p.Printf(`<rect class="refused" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="url(#%s)" stroke="%s" stroke-width="0.8"/>`, bx, c.Base-hp-hs-hr, bw, hr, c.Pattern, chart.Red)
	}
	return cx, c.Base - hp - hs - hr
}

// binnedLive sums the seconds of column c, bin seconds wide: passed,
// refused, and of passed, shadowed, what a shadow policy would have
// refused.
func binnedLive(ps []LiveSecond, c, bin int) (passed, refused, shadowed int64) {
	lo := min(c*bin, len(ps))
	for _, s := range ps[lo:min(lo+bin, len(ps))] {
		passed += s.Passed
		refused += s.Refused
		shadowed += s.ShadowRefused
	}
	return passed, refused, shadowed
}

// clockText names the column of the seconds from t to last: "12:00:05
// UTC, 3 s ago", or "12:00:05–12:00:09 UTC, 7 s ago" for several.
func clockText(t, last, now int64) string {
	at := time.Unix(t, 0).UTC().Format("15:04:05")
	if last > t {
		at += "–" + time.Unix(last, 0).UTC().Format("15:04:05")
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
