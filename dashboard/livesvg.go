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
	liveHeadH  = 66
	liveRowH   = 66
	liveBarTop = 12
	liveBarH   = 40
	labelRunes = 22 // the longest policy name drawn whole
)

// writeLiveSVG draws a live snapshot in the style of package sim's
// pictures: one row per policy, one column per second (or per few seconds
// when they are many), the newest on the right; passed in green, refused
// stacked above in hatched red under a ✕. Each row has its own scale, as
// policies differ in traffic by orders of magnitude; its label says its
// peak. Rows and columns carry their counts as data-* attributes and a
// <title> tooltip.
func writeLiveSVG(w io.Writer, lv Live) error {
	p := chart.NewPrinter(w)
	seconds := max(lv.Seconds, 1)
	bin, cols, colW := chart.Bins(seconds)

	rows := max(len(lv.Policies), 1)
	height := liveHeadH + rows*liveRowH + 30
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
	p.Printf(`<text x="%d" y="46" font-size="12.5" fill="%s">%s, the newest on the right: requests <tspan fill="%s" font-weight="bold">passed</tspan> in green, <tspan fill="%s" font-weight="bold">refused ✕</tspan> hatched red on top; each row has its own scale.</text>`+"\n",
		chart.Margin, chart.Grey, chart.Text(chart.Capitalize(how)), chart.Green, chart.Red)

	top := liveHeadH
	if len(lv.Policies) == 0 {
		p.Printf(`<text x="%d" y="%d" font-size="13" fill="%s" class="empty">No decisions in the last %s. Requests through sluice appear here, one row per policy.</text>`+"\n",
			chart.Margin, top+liveRowH/2, chart.Grey, chart.Text(spanText(seconds)))
	}
	for i, pol := range lv.Policies {
		rowTop := top + i*liveRowH
		base := float64(rowTop + liveBarTop + liveBarH)
		p.Printf(`<g class="row" data-policy="%s" data-passed="%d" data-refused="%d">`+"\n", chart.Attr(pol.Policy), pol.Passed, pol.Refused)
		if i > 0 {
			p.RowRule(rowTop)
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
		p.Printf(`<text x="%d" y="%d" font-size="14" font-weight="bold" fill="%s"><title>%s</title>%s</text>`+"\n", chart.Margin, rowTop+26, chart.Ink, chart.Text(pol.Policy), chart.Text(name))
		per := "/s"
		if bin > 1 {
			per = fmt.Sprintf(" per %d s", bin)
		}
		p.Printf(`<text x="%d" y="%d" font-size="11" fill="%s">peak %s%s</text>`+"\n", chart.Margin, rowTop+42, chart.Grey, group(peak), per)

		p.Baseline(base)
		for c := range cols {
			passed, refused := binnedLive(pol.PerSecond, c, bin)
			if passed+refused == 0 {
				continue
			}
			// The newest column may hold fewer than bin seconds.
			first := pol.PerSecond[c*bin].T
			last := pol.PerSecond[min((c+1)*bin, len(pol.PerSecond))-1].T
			cx, top := p.Column(chart.Column{Index: c, Width: colW, Base: base, Unit: unit,
				T: first, Passed: passed, Refused: refused,
				Title:   fmt.Sprintf("%s: %s passed, %s refused", clockText(first, last, lv.Now), group(passed), group(refused)),
				Pattern: "live-refused"})
			if refused > 0 && colW >= 7 {
				p.Printf(`<text x="%.2f" y="%.2f" font-size="9" text-anchor="middle" fill="%s">✕</text>`, cx, top-2, chart.Red)
			}
			p.Printf("</g>\n")
		}
		tx := chart.PlotRight + 16
		p.Printf(`<text x="%d" y="%d" font-size="13" font-weight="bold" fill="%s">%s passed</text>`+"\n", tx, rowTop+24, chart.Green, group(pol.Passed))
		refusedText := group(pol.Refused) + " refused"
		if pol.Refused > 0 {
			refusedText = "✕ " + refusedText
		}
		p.Printf(`<text x="%d" y="%d" font-size="13" font-weight="bold" fill="%s">%s</text>`+"\n", tx, rowTop+40, chart.Red, refusedText)
		if total := pol.Passed + pol.Refused; total > 0 {
			p.Printf(`<text x="%d" y="%d" font-size="11" fill="%s">%s refused</text>`+"\n", tx, rowTop+55, chart.Grey, percent(pol.Refused, total))
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

// binnedLive sums the seconds of column c, bin seconds wide.
func binnedLive(ps []LiveSecond, c, bin int) (passed, refused int64) {
	lo := min(c*bin, len(ps))
	for _, s := range ps[lo:min(lo+bin, len(ps))] {
		passed += s.Passed
		refused += s.Refused
	}
	return passed, refused
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
