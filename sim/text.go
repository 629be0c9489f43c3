package sim

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/chart"
	"github.com/sluicehq/sluice/rate"
)

// WriteText writes r as text for a terminal: a title that says the limit,
// then for each setup a table with one line per second that saw requests
// and one column per algorithm, each cell "passed ✕refused" (with
// "passed (N held) ✕refused" where N of them were held back before they
// went ahead), by the second the requests arrived, then the totals (per
// client too, for 2 to MaxClients clients), and the scenario's
// description.
func WriteText(w io.Writer, r Result) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s: %s\n", r.Scenario, title(r))
	if r.Summary != "" {
		fmt.Fprintf(bw, "%s\n", chart.Capitalize(r.Summary))
	}
	if b := bucketNote(r); b != "" {
		fmt.Fprintf(bw, "%s\n", b)
	}
	if o := overCapacityNote(r); o != "" {
		wrap(bw, o+" "+overCapacityWhy, 78)
	}
	for _, setup := range rowSetups(r) {
		var rows []Row
		for _, row := range r.Rows {
			if row.Setup == setup {
				rows = append(rows, row)
			}
		}
		fmt.Fprintf(bw, "\n%s — each cell: passed ✕refused\n", setupText(setup, r.Instances))
		writeTable(bw, rows)
		if slices.ContainsFunc(rows, func(row Row) bool { return row.Held > 0 }) {
			wrap(bw, "Each request counts in the second it arrived; “held”: of those passed, how many were held back first and went ahead later.", 78)
		}
		for _, row := range rows {
			if n := heldNote(row, r.MaxDelay); n != "" {
				wrap(bw, n, 78)
			}
		}
	}
	if r.Description != "" {
		bw.WriteString("\n")
		for _, para := range strings.Split(r.Description, "\n") {
			wrap(bw, para, 78)
		}
	}
	return bw.Flush()
}

// title says the limit, and the wait if the run has one: "limit 10 per
// 10s", "limit 1/s, max delay 3s".
func title(r Result) string {
	t := "limit " + describeLimit(r.Limit)
	if r.MaxDelay > 0 {
		t += ", max delay " + r.MaxDelay.String()
	}
	return t
}

// heldNote says, for a row that held requests back, how many, why and
// for how long, and how its cells show them; or "".
func heldNote(row Row, maxDelay time.Duration) string {
	if row.Held == 0 {
		return ""
	}
	if row.Algorithm == rate.LeakyBucket {
		return fmt.Sprintf("%s shapes rather than refuses while its queue has room: it held %d request%s back for their turn, up to %v (“held” in the cells).",
			row.Algorithm, row.Held, plural(row.Held), row.MaxDelay)
	}
	if !row.Algorithm.HasBurst() {
		return fmt.Sprintf("%s held %d request%s it refused for their Retry-After, up to %v, and let them through when decided again (max delay %v; “held” in the cells).",
			row.Algorithm, row.Held, plural(row.Held), row.MaxDelay, maxDelay)
	}
	return fmt.Sprintf("%s held %d request%s past its burst until their units refilled, up to %v (max delay %v; “held” in the cells).",
		row.Algorithm, row.Held, plural(row.Held), row.MaxDelay, maxDelay)
}

// bucketNote says which burst the bucket algorithms use, if r has any.
// They all apply the same limit (see Scenario.LimitFor).
func bucketNote(r Result) string {
	var names []string
	var bucket rate.Limit
	seen := map[rate.Algorithm]bool{}
	for _, row := range r.Rows {
		if row.Algorithm.HasBurst() && !seen[row.Algorithm] {
			seen[row.Algorithm] = true
			names = append(names, row.Algorithm.String())
			bucket = row.Limit
		}
	}
	if len(names) == 0 {
		return ""
	}
	return strings.Join(names, ", ") + ": " + describeBucket(bucket)
}

// overCapacityWhy says why a request costing more than the capacity is
// no ordinary refusal, after overCapacityNote.
const overCapacityWhy = "No wait lets such a request pass: a store answers it with an error, not a refusal. Here it counts as refused."

// overCapacityNote says, if any request cost more than an algorithm's
// capacity, how many did for each: "Costing more than the capacity: 2
// requests for fixed_window (10), 1 for gcra (20)."; or "". The count
// depends on the algorithm's limit alone, not on the setup. The text and
// the picture each add why that is no ordinary refusal (overCapacityWhy).
func overCapacityNote(r Result) string {
	var parts []string
	seen := map[rate.Algorithm]bool{}
	for _, row := range r.Rows {
		if row.OverCapacity == 0 || seen[row.Algorithm] {
			continue
		}
		seen[row.Algorithm] = true
		what := "for"
		if len(parts) == 0 {
			what = "request" + plural(row.OverCapacity) + " for"
		}
		parts = append(parts, fmt.Sprintf("%d %s %s (%d)", row.OverCapacity, what, row.Algorithm, row.Limit.Capacity()))
	}
	if len(parts) == 0 {
		return ""
	}
	return "Costing more than the capacity: " + strings.Join(parts, ", ") + "."
}

// plural returns "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// rowSetups returns the setups of r's rows in order of appearance.
func rowSetups(r Result) []Setup {
	var out []Setup
	for _, row := range r.Rows {
		found := false
		for _, s := range out {
			found = found || s == row.Setup
		}
		if !found {
			out = append(out, row.Setup)
		}
	}
	return out
}

// setupText says in words what a setup is.
func setupText(s Setup, instances int) string {
	switch s {
	case OwnCounters:
		return fmt.Sprintf("%d instances behind round robin, each with its own counter", instances)
	case SharedCounter:
		return fmt.Sprintf("%d instances behind round robin, sharing one counter", instances)
	}
	return "one limiter"
}

// cell formats a count: "10", "0 ✕10".
func cell(passed, refused int) string {
	if refused == 0 {
		return strconv.Itoa(passed)
	}
	return fmt.Sprintf("%d ✕%d", passed, refused)
}

// heldCell formats a count with the requests held back among those
// passed: "10 (9 held) ✕5"; as cell if none were.
func heldCell(passed, held, refused int) string {
	if held == 0 {
		return cell(passed, refused)
	}
	c := fmt.Sprintf("%d (%d held)", passed, held)
	if refused > 0 {
		c += fmt.Sprintf(" ✕%d", refused)
	}
	return c
}

// writeTable writes the per-second table of rows, which share a setup.
func writeTable(w *bufio.Writer, rows []Row) {
	if len(rows) == 0 {
		return
	}
	clients := shownClients(rows[0].Clients)
	first := max(3, len(strconv.Itoa(len(rows[0].PerSecond)-1)))
	for _, c := range clients {
		first = max(first, min(utf8.RuneCountInString(c.Client), 16))
	}
	widths := make([]int, len(rows))
	for i, row := range rows {
		widths[i] = max(utf8.RuneCountInString(row.Algorithm.String()), utf8.RuneCountInString(heldCell(row.Passed, row.Held, row.Refused)))
		for _, s := range row.PerSecond {
			widths[i] = max(widths[i], utf8.RuneCountInString(heldCell(s.Passed, s.Held, s.Refused)))
		}
		for _, c := range shownClients(row.Clients) {
			widths[i] = max(widths[i], utf8.RuneCountInString(heldCell(c.Passed, c.Held, c.Refused)))
		}
	}
	line := func(label string, cells []string) {
		fmt.Fprintf(w, "%s │", pad(label, first, true))
		for i, c := range cells {
			w.WriteString(" ")
			if i == len(cells)-1 {
				w.WriteString(c)
			} else {
				w.WriteString(pad(c, widths[i], false))
				w.WriteString(" ")
			}
		}
		w.WriteString("\n")
	}
	rule := func() {
		total := 0
		for _, x := range widths {
			total += x + 2
		}
		fmt.Fprintf(w, "%s┼%s\n", strings.Repeat("─", first+1), strings.Repeat("─", total))
	}
	names := make([]string, len(rows))
	for i, row := range rows {
		names[i] = row.Algorithm.String()
	}
	line("sec", names)
	rule()
	gap := false
	for t := range rows[0].PerSecond {
		cells := make([]string, len(rows))
		busy := false
		for i, row := range rows {
			s := row.PerSecond[t]
			busy = busy || s.Passed+s.Refused > 0
			cells[i] = heldCell(s.Passed, s.Held, s.Refused)
		}
		if !busy {
			if !gap && t > 0 {
				line("⋮", nil)
			}
			gap = true
			continue
		}
		gap = false
		line(strconv.Itoa(t), cells)
	}
	rule()
	cells := make([]string, len(rows))
	for i, row := range rows {
		cells[i] = heldCell(row.Passed, row.Held, row.Refused)
	}
	line("all", cells)
	for k, c := range clients {
		for i, row := range rows {
			cells[i] = heldCell(row.Clients[k].Passed, row.Clients[k].Held, row.Clients[k].Refused)
		}
		name := c.Client
		if utf8.RuneCountInString(name) > 16 {
			name = string([]rune(name)[:15]) + "…"
		}
		line(name, cells)
	}
}

// pad pads s with spaces to n runes, on the left if right is true.
func pad(s string, n int, right bool) string {
	k := n - utf8.RuneCountInString(s)
	if k <= 0 {
		return s
	}
	if right {
		return strings.Repeat(" ", k) + s
	}
	return s + strings.Repeat(" ", k)
}

// wrap writes text wrapped at width columns, or an empty line.
func wrap(w *bufio.Writer, text string, width int) {
	for _, line := range wrapLines(text, width) {
		w.WriteString(line)
		w.WriteString("\n")
	}
}

// wrapLines splits text into lines of at most width runes, breaking
// between words (a longer word has a line of its own); one empty line
// for no words.
func wrapLines(text string, width int) []string {
	var lines []string
	var b strings.Builder
	col := 0
	for _, word := range strings.Fields(text) {
		n := utf8.RuneCountInString(word)
		if col > 0 && col+1+n > width {
			lines = append(lines, b.String())
			b.Reset()
			col = 0
		}
		if col > 0 {
			b.WriteString(" ")
			col++
		}
		b.WriteString(word)
		col += n
	}
	return append(lines, b.String())
}
