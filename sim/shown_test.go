package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/rate"
)

// svgMarks is what a parsed picture shows beyond the bars of checkSVG:
// per row, its held requests and over-capacity count, and the per-client
// totals drawn for it; and all the picture's text, run together.
type svgMarks struct {
	rows []svgMarkRow
	text string
}

// svgMarkRow is one row's marks.
type svgMarkRow struct {
	alg, setup     string
	held, over     string  // the row's data-held and data-over-capacity
	rectHeld       float64 // the heights of its held marks, summed
	colsHeld       int     // its columns' data-held, summed
	text           string  // the row's own text, run together
	clients        map[string][2]int
	clientsCell    map[string]string // the text drawn for each client
	clientsAllowed bool              // a clients group names this row
}

// parseMarks decodes a picture for the marks tested here.
func parseMarks(t *testing.T, doc []byte) svgMarks {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var (
		out       svgMarks
		all       strings.Builder
		rowDepth  int // depth of the open row, 0 if none
		depth     int
		clientRow = -1 // the row a clients group is about, -1 if none open
		inClient  string
	)
	attrs := func(se xml.StartElement) map[string]string {
		m := map[string]string{}
		for _, a := range se.Attr {
			m[a.Name.Local] = a.Value
		}
		return m
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("invalid XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			depth++
			a := attrs(tok)
			switch {
			case tok.Name.Local == "g" && a["class"] == "row":
				out.rows = append(out.rows, svgMarkRow{alg: a["data-algorithm"], setup: a["data-setup"],
					held: a["data-held"], over: a["data-over-capacity"]})
				rowDepth = depth
			case tok.Name.Local == "g" && a["class"] == "clients":
				clientRow = -1
				for i, r := range out.rows {
					if r.alg == a["data-algorithm"] && r.setup == a["data-setup"] {
						clientRow = i
					}
				}
				if clientRow < 0 {
					t.Fatalf("client totals for %s/%s, a row the picture does not have", a["data-algorithm"], a["data-setup"])
				}
				r := &out.rows[clientRow]
				r.clientsAllowed = true
				r.clients, r.clientsCell = map[string][2]int{}, map[string]string{}
			case tok.Name.Local == "text" && a["class"] == "client" && clientRow >= 0:
				p, err1 := strconv.Atoi(a["data-passed"])
				f, err2 := strconv.Atoi(a["data-refused"])
				if err1 != nil || err2 != nil {
					t.Fatalf("client %q: counts %q and %q", a["data-client"], a["data-passed"], a["data-refused"])
				}
				inClient = a["data-client"]
				out.rows[clientRow].clients[inClient] = [2]int{p, f}
			case rowDepth > 0 && tok.Name.Local == "rect" && a["class"] == "held":
				h, err := strconv.ParseFloat(a["height"], 64)
				if err != nil {
					t.Fatalf("held mark of height %q", a["height"])
				}
				out.rows[len(out.rows)-1].rectHeld += h
				n, err := strconv.Atoi(a["data-held"])
				if err != nil {
					t.Fatalf("held mark counting %q", a["data-held"])
				}
				out.rows[len(out.rows)-1].colsHeld += n
			}
		case xml.CharData:
			s := string(tok)
			all.WriteString(s)
			all.WriteString(" ")
			if rowDepth > 0 {
				r := &out.rows[len(out.rows)-1]
				r.text += s + " "
			}
			if inClient != "" {
				out.rows[clientRow].clientsCell[inClient] += s
			}
		case xml.EndElement:
			inClient = ""
			if depth == rowDepth {
				rowDepth = 0
			}
			depth--
		}
	}
	out.text = strings.Join(strings.Fields(all.String()), " ")
	for i := range out.rows {
		out.rows[i].text = strings.Join(strings.Fields(out.rows[i].text), " ")
	}
	return out
}

// svgOf draws r, checked as checkSVG checks every picture.
func svgOf(t *testing.T, r Result) []byte {
	t.Helper()
	return checkSVG(t, r)
}

// jsonRows decodes the JSON form of r into plain maps, as a script
// reading "sluice sim --json" would.
func jsonRows(t *testing.T, r Result) []map[string]any {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out.Results
}

// num reads a JSON number that may be left out (as 0).
func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

// TestHeldShown: a leaky_bucket admits a burst into its queue and delays
// it; every output says how many of those passed were held back, so that
// its row no longer reads exactly as gcra's.
//
// The token-bucket scenario, limit 5 per 5s (a queue of 5 drained one a
// second): 7 requests at 0 s, 3 at 2 s, 10 at 10 s.
//   - 0 s: the queue is empty, the first goes at once, the next 4 wait
//     1…4 s for their turn, the last 2 find it full: 5 passed, 4 held,
//     2 refused.
//   - 2 s: 2 turns drained (the queue ends at 5 s, 3 places taken):
//     2 passed, both held (turns at 5 s and 6 s), 1 refused.
//   - 10 s: the queue drained at 7 s: as at 0 s, 5 passed, 4 held,
//     5 refused.
//
// 10 held in all. gcra passes the same requests at once: none held.
func TestHeldShown(t *testing.T) {
	sc, _ := Builtin("token-bucket", Params{})
	r, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	wantHeld := map[int]int{0: 4, 2: 2, 10: 4}

	// JSON: a held count per second and per row, left out when 0.
	for _, row := range jsonRows(t, r) {
		alg, _ := row["algorithm"].(string)
		per, _ := row["per_second"].([]any)
		total := 0
		for i, s := range per {
			sec, _ := s.(map[string]any)
			want := 0
			if alg == "leaky_bucket" {
				want = wantHeld[i]
			}
			if got := num(sec["held"]); got != want {
				t.Errorf("JSON %s second %d: held %d, want %d", alg, i, got, want)
			}
			if _, ok := sec["held"]; ok && want == 0 {
				t.Errorf("JSON %s second %d: held given as 0, want it left out", alg, i)
			}
			total += num(sec["held"])
		}
		if got := num(row["held"]); got != total || alg == "leaky_bucket" && got != 10 {
			t.Errorf("JSON %s: held %d, per second %d; want 10 for leaky_bucket, 0 for the others", alg, got, total)
		}
	}

	// Text: the cell of second 0 for leaky_bucket says 4 of the 5 were
	// held; gcra's does not.
	text := textOf(t, sc)
	var second0 string
	for _, line := range strings.Split(text, "\n") {
		if head, cells, ok := strings.Cut(line, "│"); ok && strings.TrimSpace(head) == "0" {
			second0 = strings.Join(strings.Fields(cells), " ")
		}
	}
	// Columns in the order of rate.Algorithms: the windows pass 5 of 7,
	// token_bucket 5, leaky_bucket 5 with 4 held, gcra 5.
	if want := "5 ✕2 5 ✕2 5 ✕2 5 ✕2 5 (4 held) ✕2 5 ✕2"; second0 != want {
		t.Errorf("text, second 0: %q, want %q\n%s", second0, want, text)
	}
	if !strings.Contains(strings.Join(strings.Fields(text), " "), "Each request counts in the second it arrived; “held”: of those passed") {
		t.Errorf("text does not say what held means and when requests are counted:\n%s", text)
	}

	// SVG: the held part of each column in its own mark, as tall as the
	// requests it counts, and a legend that says what it is.
	doc := svgOf(t, r)
	_, unit := parseSVG(t, doc)
	m := parseMarks(t, doc)
	for _, row := range m.rows {
		want := 0
		if row.alg == "leaky_bucket" {
			want = 10
		}
		if row.held != strconv.Itoa(want) || row.colsHeld != want || math.Abs(row.rectHeld-float64(want)*unit) > 0.05 {
			t.Errorf("SVG %s: data-held %q, columns %d, marks %.2f px; want %d held at %.4f px each", row.alg, row.held, row.colsHeld, row.rectHeld, want, unit)
		}
		if want > 0 && !strings.Contains(row.text, "10 held") {
			t.Errorf("SVG %s: totals %q do not say 10 held", row.alg, row.text)
		}
	}
	if !strings.Contains(m.text, "held back") || !strings.Contains(m.text, "the second they arrived") {
		t.Errorf("SVG legend does not say what a held mark is and when requests are counted: %q", m.text)
	}
}

// TestClientTotalsShown: the clients scenario says "the per-client
// totals show it"; its four clients' totals are in the JSON, the picture
// and the text, the same as Row.Clients. A scenario of one client lists
// none (they would repeat the row's totals), and one of more than
// MaxClients neither.
func TestClientTotalsShown(t *testing.T) {
	sc, _ := Builtin("clients", Params{})
	if !strings.Contains(sc.Description, "per-client totals") {
		t.Fatalf("the description no longer speaks of per-client totals: %q", sc.Description)
	}
	r, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"alice", "bob", "carol", "dave"}

	rows := jsonRows(t, r)
	for i, row := range rows {
		list, _ := row["clients"].([]any)
		if len(list) != len(names) {
			t.Errorf("JSON %v: %d clients, want %d", row["algorithm"], len(list), len(names))
			continue
		}
		// In the order of their first request, as Row.Clients.
		for k, c := range list {
			c, _ := c.(map[string]any)
			want := r.Rows[i].Clients[k]
			if c["client"] != want.Client || num(c["passed"]) != want.Passed || num(c["refused"]) != want.Refused || num(c["held"]) != want.Held {
				t.Errorf("JSON %v client %d: %v, want %+v", row["algorithm"], k, c, want)
			}
			if !slices.Contains(names, want.Client) {
				t.Errorf("client %q in the clients scenario", want.Client)
			}
		}
	}

	m := parseMarks(t, svgOf(t, r))
	for i, row := range m.rows {
		if !row.clientsAllowed {
			t.Errorf("SVG %s: no client totals", row.alg)
			continue
		}
		for _, c := range r.Rows[i].Clients {
			got, ok := row.clients[c.Client]
			if !ok || got != [2]int{c.Passed, c.Refused} {
				t.Errorf("SVG %s client %s: %v (drawn: %t), want %d/%d", row.alg, c.Client, got, ok, c.Passed, c.Refused)
			}
			if want := cell(c.Passed, c.Refused); row.clientsCell[c.Client] != want {
				t.Errorf("SVG %s client %s reads %q, want %q", row.alg, c.Client, row.clientsCell[c.Client], want)
			}
		}
	}
	for _, n := range names {
		if !strings.Contains(m.text, n) {
			t.Errorf("SVG does not name client %s", n)
		}
	}

	text := textOf(t, sc)
	for _, n := range names {
		if !strings.Contains(text, "\n"+pad(n, 5, true)+" │") {
			t.Errorf("text has no line for client %s:\n%s", n, text)
		}
	}

	// One client: nothing to split. Nine: more than the outputs list.
	for _, n := range []int{1, MaxClients + 1} {
		one := Scenario{Name: "few", Limit: tenPer10s}
		for k := range n {
			one.Events = append(one.Events, Event{Key: "k", Client: "c" + strconv.Itoa(k)})
		}
		r, err := Run(context.Background(), one)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range jsonRows(t, r) {
			if _, ok := row["clients"]; ok {
				t.Errorf("%d clients: JSON lists them", n)
			}
		}
		for _, row := range parseMarks(t, svgOf(t, r)).rows {
			if row.clientsAllowed {
				t.Errorf("%d clients: SVG lists them", n)
			}
		}
	}
}

// TestSVGOverCapacity: a request that costs more than the capacity is
// no ordinary refusal (a store answers it with an error); the picture
// says so as the text does, in its header and in each row's totals.
// The scenario of TestOverCapacityNoted: costs 15 and 25 against
// fixed_window's 10 (both over) and gcra's burst of 20 (the 25 over).
func TestSVGOverCapacity(t *testing.T) {
	sc := Scenario{Name: "cost", Limit: rate.Limit{Count: 10, Period: 10 * sec, Burst: 20},
		Algorithms: []rate.Algorithm{rate.FixedWindow, rate.GCRA},
		Events:     []Event{{At: 0, Key: "k", Cost: 15}, {At: 0, Key: "k", Cost: 25}, {At: sec, Key: "k"}}}
	r, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	m := parseMarks(t, svgOf(t, r))
	if want := "Costing more than the capacity: 2 requests for fixed_window (10), 1 for gcra (20)"; !strings.Contains(m.text, want) {
		t.Errorf("SVG lacks %q: %q", want, m.text)
	}
	for _, w := range []struct {
		alg  string
		over int
	}{{"fixed_window", 2}, {"gcra", 1}} {
		found := false
		for _, row := range m.rows {
			if row.alg != w.alg {
				continue
			}
			found = true
			if row.over != strconv.Itoa(w.over) || !strings.Contains(row.text, strconv.Itoa(w.over)+" over capacity") {
				t.Errorf("SVG %s: data-over-capacity %q, totals %q; want %d over capacity", w.alg, row.over, row.text, w.over)
			}
		}
		if !found {
			t.Errorf("SVG has no row %s", w.alg)
		}
	}
	// Where every cost fits, no word of it.
	r, err = Run(context.Background(), Scenario{Name: "fits", Limit: tenPer10s, Events: []Event{{Key: "k", Cost: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	if m := parseMarks(t, svgOf(t, r)); strings.Contains(m.text, "capacity") {
		t.Errorf("a note on capacity where every cost fits: %q", m.text)
	}
}
