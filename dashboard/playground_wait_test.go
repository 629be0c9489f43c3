package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/sim"
)

// TestSimMaxDelay: the playground waits as sluice serve's max_delay does.
// Limit 1/s burst 2, 6 requests at once, a wait of 3 s:
//   - gcra lets the burst of 2 through and holds the 3rd, 4th and 5th
//     until their units refill, 1, 2 and 3 s later; the 6th, due in 4 s,
//     is refused: 5 passed, 3 held.
//   - leaky_bucket's queue of 2 takes the 1st at once and the 2nd a
//     second later: 2 passed, 1 held.
//   - fixed_window (1 per second) passes the 1st; of the 5 it refuses,
//     waiting 1 s for the next window, one passes: 2 passed, 1 held.
//
// As JSON and as the page's form send it.
func TestSimMaxDelay(t *testing.T) {
	d := dashboard.New(dashboard.Options{})
	csv := strings.Repeat("0,k\n", 6)
	want := map[string][3]int{"gcra": {5, 1, 3}, "leaky_bucket": {2, 4, 1}, "fixed_window": {2, 4, 1}}
	for _, c := range []struct {
		name string
		rec  func() *http.Request
	}{
		{"json", func() *http.Request {
			return httptestRequest("POST", "/api/sim", "application/json", strings.NewReader(
				`{"csv": "`+strings.ReplaceAll(csv, "\n", `\n`)+`", "limit": "1/s burst 2", "max_delay": "3s", "algorithms": ["gcra", "leaky_bucket", "fixed_window"]}`))
		}},
		{"form", func() *http.Request {
			return httptestRequest("POST", "/api/sim", "application/x-www-form-urlencoded", form(
				"csv", csv, "limit", "1/s burst 2", "max_delay", "3s", "algorithms", "gcra,leaky_bucket,fixed_window"))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := decode[dashboard.SimResponse](t, serve(d, c.rec()), http.StatusOK, "application/json")
			if res.MaxDelay != "3s" || len(res.Results) != 3 {
				t.Fatalf("max delay %q, %d results; want 3s and 3", res.MaxDelay, len(res.Results))
			}
			for _, r := range res.Results {
				if got := [3]int{r.Passed, r.Refused, r.Held}; got != want[r.Algorithm.String()] {
					t.Errorf("%s: passed, refused, held %v; want %v", r.Algorithm, got, want[r.Algorithm.String()])
				}
			}
		})
	}
}

// TestSimMaxDelayProblems: a wait that is no duration, or a negative
// one, names its field.
func TestSimMaxDelayProblems(t *testing.T) {
	d := dashboard.New(dashboard.Options{})
	for _, c := range []struct{ ct, body string }{
		{"application/json", `{"scenario": "flood", "max_delay": "-1s"}`},
		{"application/json", `{"scenario": "flood", "max_delay": "soon"}`},
		{"application/x-www-form-urlencoded", "scenario=flood&max_delay=3"},
	} {
		p := problemOf(t, do(t, d, "POST", "/api/sim", c.ct, strings.NewReader(c.body)), http.StatusBadRequest)
		if p.Field != "max_delay" || !strings.Contains(p.Detail, "max_delay") {
			t.Errorf("%s: problem %+v, want field max_delay", c.body, p)
		}
	}
}

// TestSimMaxDelayNote: a built-in scenario's figures are without a wait;
// a run with one says so, by the form's label.
func TestSimMaxDelayNote(t *testing.T) {
	d := dashboard.New(dashboard.Options{})
	res := decode[dashboard.SimResponse](t, do(t, d, "POST", "/api/sim", "application/json",
		strings.NewReader(`{"scenario": "boundary", "max_delay": "3s"}`)), http.StatusOK, "application/json")
	if !strings.HasSuffix(res.Description, "this run sets Max delay.)") {
		t.Errorf("description ends %q, want the note naming Max delay", res.Description[max(0, len(res.Description)-80):])
	}
}

// TestSimClientTotals: the clients scenario's description points to the
// per-client totals; the playground's JSON has them, as sim.Run counts
// them, and its picture draws them.
func TestSimClientTotals(t *testing.T) {
	d := dashboard.New(dashboard.Options{})
	res := decode[dashboard.SimResponse](t, do(t, d, "POST", "/api/sim", "application/json",
		strings.NewReader(`{"scenario": "clients", "svg": true}`)), http.StatusOK, "application/json")
	sc, _ := sim.Builtin("clients", sim.Params{})
	want, err := sim.Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != len(want.Rows) {
		t.Fatalf("%d results, want %d", len(res.Results), len(want.Rows))
	}
	for i, r := range res.Results {
		w := want.Rows[i].Clients
		if len(r.Clients) != 4 || len(w) != 4 {
			t.Errorf("%s: %d clients, want 4", r.Algorithm, len(r.Clients))
			continue
		}
		for k := range w {
			if r.Clients[k] != w[k] {
				t.Errorf("%s: client %+v, sim.Run says %+v", r.Algorithm, r.Clients[k], w[k])
			}
		}
	}
	// A group of client totals per row, with a cell per client.
	if n := strings.Count(res.SVG, `<g class="clients"`); n != len(res.Results) {
		t.Errorf("%d groups of client totals in the picture, want %d", n, len(res.Results))
	}
	for _, name := range []string{"alice", "bob", "carol", "dave"} {
		if n := strings.Count(res.SVG, `data-client="`+name+`"`); n != len(res.Results) {
			t.Errorf("client %s drawn %d times, want once per row (%d)", name, n, len(res.Results))
		}
	}
}

// TestPageMaxDelayField: the page's form has the field the playground
// reads.
func TestPageMaxDelayField(t *testing.T) {
	d := dashboard.New(dashboard.Options{})
	rec := do(t, d, "GET", "/", "", nil)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `name="max_delay"`) {
		t.Errorf("status %d; the page has no max_delay field", rec.Code)
	}
}
