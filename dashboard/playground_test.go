package dashboard_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/sim"
)

// floodByHand is what the flood scenario passes, counted by hand in its
// description: 3 instances with their own window counters pass 3 times
// the limit of 10, one shared counter 10; the buckets refill 1 token a
// second on top, 19 per counter.
var floodByHand = map[string]map[string]int{
	"fixed_window":   {"own-counters": 30, "shared-counter": 10},
	"sliding_log":    {"own-counters": 30, "shared-counter": 10},
	"sliding_window": {"own-counters": 30, "shared-counter": 10},
	"token_bucket":   {"own-counters": 57, "shared-counter": 19},
	"leaky_bucket":   {"own-counters": 57, "shared-counter": 19},
	"gcra":           {"own-counters": 57, "shared-counter": 19},
}

// TestSimFlood runs the flood scenario through POST api/sim as JSON and
// checks the totals by hand and against sim.Run, second by second, and
// the picture: well-formed XML whose rows and columns count the same.
func TestSimFlood(t *testing.T) {
	d := dashboard.New(dashboard.Options{})
	rec := do(t, d, "POST", "/api/sim", "application/json", strings.NewReader(`{"scenario": "flood", "svg": true}`))
	res := decode[dashboard.SimResponse](t, rec, http.StatusOK, "application/json")

	sc, err := sim.Builtin("flood", sim.Params{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := sim.Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scenario != "flood" || res.Limit != "10 per 10s" || res.Seconds != 10 || res.Instances != 3 || res.Requests != 100 || res.Summary == "" || res.Description == "" {
		t.Errorf("response header %+v", res)
	}
	if len(res.Results) != 12 || len(res.Results) != len(want.Rows) {
		t.Fatalf("%d results, want 12", len(res.Results))
	}
	for i, row := range res.Results {
		w := want.Rows[i]
		a, s := row.Algorithm.String(), row.Setup.String()
		if byHand := floodByHand[a][s]; row.Passed != byHand || row.Passed+row.Refused != 100 {
			t.Errorf("%s %s: %d passed, %d refused; want %d of 100", a, s, row.Passed, row.Refused, byHand)
		}
		if row.Algorithm != w.Algorithm || row.Setup != w.Setup || fmt.Sprint(row.PerSecond) != fmt.Sprint(w.PerSecond) {
			t.Errorf("row %d: %s %s %v, sim.Run says %s %s %v", i, a, s, row.PerSecond, w.Algorithm, w.Setup, w.PerSecond)
		}
	}

	root, rows := parseSVG(t, []byte(res.SVG))
	if root["data-scenario"] != "flood" || len(rows) != len(res.Results) {
		t.Fatalf("picture of %q with %d rows, want flood with %d", root["data-scenario"], len(rows), len(res.Results))
	}
	for i, r := range rows {
		row := res.Results[i]
		if r.Attrs["data-algorithm"] != row.Algorithm.String() || r.Attrs["data-setup"] != row.Setup.String() ||
			r.Attrs["data-passed"] != fmt.Sprint(row.Passed) || r.ColPassed != row.Passed || r.ColRefused != row.Refused || r.Cols != 10 {
			t.Errorf("picture row %d: %v, %d columns adding up to %d passed, %d refused; want %s %s %d, %d", i, r.Attrs, r.Cols, r.ColPassed, r.ColRefused, row.Algorithm, row.Setup, row.Passed, row.Refused)
		}
	}

	// Without "svg", no picture.
	rec = do(t, d, "POST", "/api/sim", "application/json", strings.NewReader(`{"scenario": "flood"}`))
	if res := decode[dashboard.SimResponse](t, rec, http.StatusOK, "application/json"); res.SVG != "" || len(res.Results) != 12 {
		t.Errorf("without svg: %d results and %d bytes of picture", len(res.Results), len(res.SVG))
	}
}

// TestSimForm sends forms as the page and curl do: fields narrowed,
// lists repeated or comma-separated, CSV as a field or as an uploaded
// file; and asks for the picture alone.
func TestSimForm(t *testing.T) {
	d := dashboard.New(dashboard.Options{})

	rec := do(t, d, "POST", "/api/sim", "application/x-www-form-urlencoded", form(
		"scenario", "flood", "algorithms", "fixed_window", "algorithms", "gcra,token_bucket",
		"setups", "own-counters", "instances", "5", "seconds", "4"))
	res := decode[dashboard.SimResponse](t, rec, http.StatusOK, "application/json")
	// 5 instances, 4 s of 10 requests a second: each instance sees 8 and
	// its window of 10 passes them all; its bucket of 10 too.
	got := ""
	for _, r := range res.Results {
		got += fmt.Sprintf("%s/%s/%d/%d ", r.Algorithm, r.Setup, r.Passed, r.Refused)
	}
	if want := "fixed_window/own-counters/40/0 gcra/own-counters/40/0 token_bucket/own-counters/40/0 "; got != want || res.Instances != 5 || res.Seconds != 4 {
		t.Errorf("results %q (%d instances, %d s), want %q", got, res.Instances, res.Seconds, want)
	}

	// Pasted CSV, a limit of 2 per second: the header and the comment are
	// skipped; alice's third request in second 0 is refused, and bob's
	// request of cost 3 is more than the burst.
	csv := "time,key,cost\n# a comment\n0.1,alice\n0.2,alice\n0.3,alice\n0.4,bob,3\n1.5,alice\n"
	rec = do(t, d, "POST", "/api/sim", "application/x-www-form-urlencoded", form(
		"csv", csv, "limit", "2/s", "algorithms", "fixed_window", "setups", "all"))
	res = decode[dashboard.SimResponse](t, rec, http.StatusOK, "application/json")
	if res.Scenario != "csv" || res.Requests != 5 || res.Seconds != 2 || len(res.Results) != 3 {
		t.Fatalf("csv: %+v", res)
	}
	for _, r := range res.Results {
		want := [2]int{3, 2} // one limiter or a shared counter
		if r.Setup == sim.OwnCounters {
			want = [2]int{4, 1} // alice's three land on three instances
		}
		if [2]int{r.Passed, r.Refused} != want {
			t.Errorf("csv %s: %d passed, %d refused; want %v", r.Setup, r.Passed, r.Refused, want)
		}
	}

	// The same CSV uploaded as a file, and the picture alone.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("csv", "traffic.csv")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write([]byte(csv))
	mw.WriteField("limit", "2/s")
	mw.WriteField("algorithms", "fixed_window")
	mw.Close()
	req := httptestRequest("POST", "/api/sim", mw.FormDataContentType(), &body)
	req.Header.Set("Accept", "image/svg+xml")
	rr := serve(d, req)
	if rr.Code != http.StatusOK || rr.Header().Get("Content-Type") != "image/svg+xml; charset=utf-8" {
		t.Fatalf("multipart, svg: status %d, %q: %s", rr.Code, rr.Header().Get("Content-Type"), rr.Body)
	}
	root, rows := parseSVG(t, rr.Body.Bytes())
	if root["data-scenario"] != "csv" || len(rows) != 1 || rows[0].Attrs["data-passed"] != "3" || rows[0].Attrs["data-refused"] != "2" {
		t.Errorf("multipart picture: %v, rows %d", root, len(rows))
	}
}

// TestSimProblems sends what cannot run: each is answered with a
// problem+json naming the field, and the CSV line at fault.
func TestSimProblems(t *testing.T) {
	d := dashboard.New(dashboard.Options{MaxBody: 4 << 10})
	big := strings.Repeat("0.1,alice\n", 500) // 5,000 bytes
	for _, c := range []struct {
		name, ct, body string
		status         int
		field          string
		line           int
		detail         string
	}{
		{"bad time", "application/json", `{"csv": "0.1,a\n0.2,a\nsoon,a\n", "limit": "5/s"}`, 400, "csv", 3, `csv line 3: time "soon"`},
		{"bad cost", "application/x-www-form-urlencoded", "csv=time,key,cost%0A1,a,2%0A2,a,0%0A&limit=5/s", 400, "csv", 3, `line 3: cost "0"`},
		{"quote", "application/json", `{"csv": "1,a\n2,\"b\n", "limit": "5/s"}`, 400, "csv", 2, "line 2"},
		{"empty csv", "application/json", `{"csv": "# nothing\n", "limit": "5/s"}`, 400, "csv", 0, "no requests"},
		{"no limit", "application/json", `{"csv": "1,a\n"}`, 400, "limit", 0, "needs a limit"},
		{"both", "application/json", `{"scenario": "flood", "csv": "1,a\n", "limit": "1/s"}`, 400, "csv", 0, "not both"},
		{"neither", "application/json", `{}`, 400, "scenario", 0, "choose a scenario"},
		{"unknown scenario", "application/json", `{"scenario": "tsunami"}`, 400, "scenario", 0, `unknown scenario "tsunami"`},
		{"bad limit", "application/json", `{"scenario": "flood", "limit": "lots"}`, 400, "limit", 0, "invalid limit"},
		{"algorithm in limit", "application/json", `{"scenario": "flood", "limit": "gcra 5/s"}`, 400, "limit", 0, "names an algorithm"},
		{"monthly", "application/json", `{"scenario": "flood", "limit": "100/month"}`, 400, "limit", 0, "monthly"},
		{"bad algorithm", "application/json", `{"scenario": "flood", "algorithms": ["fixed_window", "magic"]}`, 400, "algorithms", 0, `"magic"`},
		{"bad setup", "application/x-www-form-urlencoded", "scenario=flood&setups=cloud", 400, "setups", 0, `"cloud"`},
		{"instances", "application/json", `{"scenario": "flood", "instances": 65}`, 400, "instances", 0, "between 1 and 64"},
		{"seconds", "application/x-www-form-urlencoded", "scenario=flood&seconds=3601", 400, "seconds", 0, "between 1 and 3600"},
		{"seconds not a number", "application/x-www-form-urlencoded", "scenario=flood&seconds=ten", 400, "seconds", 0, "whole number"},
		{"too short", "application/json", `{"scenario": "boundary", "seconds": 5}`, 400, "", 0, "after the scenario's 5 seconds"},
		{"unknown json field", "application/json", `{"scenario": "flood", "colour": "red"}`, 400, "", 0, `unknown field "colour"`},
		{"two json values", "application/json", `{"scenario": "flood"} {}`, 400, "", 0, "more than one"},
		{"the page's form without its script", "application/x-www-form-urlencoded", "source=builtin&scenario=flood&csv=&setups=cloud", 400, "setups", 0, `"cloud"`},
		{"unknown form field", "application/x-www-form-urlencoded", "scenario=flood&colour=red", 400, "colour", 0, `unknown field "colour"`},
		{"content type", "text/plain", "scenario=flood", 415, "", 0, "text/plain"},
		{"no content type", "", `{"scenario": "flood"}`, 415, "", 0, "send application/json"},
		{"large json", "application/json", `{"limit": "5/s", "csv": "` + strings.ReplaceAll(big, "\n", `\n`) + `"}`, 413, "", 0, "larger than 4 KiB"},
		{"large form", "application/x-www-form-urlencoded", "limit=5/s&csv=" + strings.ReplaceAll(big, "\n", "%0A"), 413, "", 0, "larger than 4 KiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := problemOf(t, do(t, d, "POST", "/api/sim", c.ct, strings.NewReader(c.body)), c.status)
			if p.Field != c.field || p.Line != c.line || !strings.Contains(p.Detail, c.detail) {
				t.Errorf("problem %+v, want field %q, line %d, detail containing %q", p, c.field, c.line, c.detail)
			}
		})
	}

	t.Run("large multipart", func(t *testing.T) {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, _ := mw.CreateFormFile("csv", "traffic.csv")
		fw.Write([]byte(big))
		mw.Close()
		p := problemOf(t, do(t, d, "POST", "/api/sim", mw.FormDataContentType(), &body), http.StatusRequestEntityTooLarge)
		if !strings.Contains(p.Detail, "4 KiB") {
			t.Errorf("detail %q", p.Detail)
		}
	})
	t.Run("just under the limit", func(t *testing.T) {
		body := `{"limit": "5/s", "algorithms": ["gcra"], "csv": "` + strings.Repeat(`0.1,alice\n`, 360) + `"}`
		if len(body) > 4<<10 || len(body) < 4000 {
			t.Fatalf("the body has %d bytes, want just under 4 KiB", len(body))
		}
		rec := do(t, d, "POST", "/api/sim", "application/json", strings.NewReader(body))
		if res := decode[dashboard.SimResponse](t, rec, http.StatusOK, "application/json"); res.Requests != 360 || res.Results[0].Passed != 5 {
			t.Errorf("%d requests, %d passed; want 360, 5", res.Requests, res.Results[0].Passed)
		}
	})
	t.Run("GET", func(t *testing.T) {
		if rec := do(t, d, "GET", "/api/sim", "", nil); rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("GET api/sim: status %d, want 405", rec.Code)
		}
	})
}

// TestSimTimeout: a simulation that outlasts Options.Timeout is answered
// 503.
func TestSimTimeout(t *testing.T) {
	d := dashboard.New(dashboard.Options{Timeout: time.Nanosecond})
	// An hour of the clients scenario: over 10,000 requests per algorithm,
	// so that the run looks at its context.
	p := problemOf(t, do(t, d, "POST", "/api/sim", "application/json", strings.NewReader(`{"scenario": "clients", "seconds": 3600}`)), http.StatusServiceUnavailable)
	if !strings.Contains(p.Detail, "longer than 1ns") {
		t.Errorf("detail %q", p.Detail)
	}
	// The same with time enough passes.
	d = dashboard.New(dashboard.Options{})
	rec := do(t, d, "POST", "/api/sim", "application/json", strings.NewReader(`{"scenario": "clients", "seconds": 3600, "algorithms": ["gcra"]}`))
	if res := decode[dashboard.SimResponse](t, rec, http.StatusOK, "application/json"); res.Requests < 10_000 || res.Results[0].Algorithm != rate.GCRA {
		t.Errorf("an hour of clients: %d requests, %+v", res.Requests, res.Results)
	}
}

// TestSimCrossOrigin: a page of another origin cannot make a visitor's
// browser run simulations.
func TestSimCrossOrigin(t *testing.T) {
	d := dashboard.New(dashboard.Options{})
	req := httptestRequest("POST", "/api/sim", "application/x-www-form-urlencoded", form("scenario", "flood"))
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if rec := serve(d, req); rec.Code != http.StatusForbidden {
		t.Errorf("cross-site POST: status %d, want 403", rec.Code)
	}
	req = httptestRequest("POST", "/api/sim", "application/x-www-form-urlencoded", form("scenario", "flood"))
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if rec := serve(d, req); rec.Code != http.StatusOK {
		t.Errorf("same-origin POST: status %d, want 200", rec.Code)
	}
}

// TestSimClientGone: a client that hangs up during its simulation stops
// it, and that is no error of the server's: nothing is logged above
// debug, and nothing is answered.
func TestSimClientGone(t *testing.T) {
	var logs logRecords
	d := dashboard.New(dashboard.Options{Logger: slog.New(&logs)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// An hour of the clients scenario: enough steps that the run looks
	// at its context.
	req := httptestRequest("POST", "/api/sim", "application/json", strings.NewReader(`{"scenario": "clients", "seconds": 3600}`)).WithContext(ctx)
	rec := serve(d, req)
	if rec.Body.Len() != 0 {
		t.Errorf("answered a client that is gone: status %d, %s", rec.Code, rec.Body)
	}
	if got := logs.above(slog.LevelDebug); len(got) > 0 {
		t.Errorf("logged %q, want nothing above debug", got)
	}
}

// logRecords is a slog.Handler that keeps the messages and attributes it
// is given.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecords) WithGroup(string) slog.Handler            { return h }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// above returns the records above level, as "LEVEL message key=value …".
func (h *logRecords) above(level slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Level <= level {
			continue
		}
		s := r.Level.String() + " " + r.Message
		r.Attrs(func(a slog.Attr) bool {
			s += " " + a.String()
			return true
		})
		out = append(out, s)
	}
	return out
}

// TestSimUnknownFile: a multipart form's files are fields too; one the
// playground does not read is refused, as an unknown field is.
func TestSimUnknownFile(t *testing.T) {
	d := dashboard.New(dashboard.Options{})
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("traffic", "traffic.csv")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write([]byte("0.1,alice\n"))
	mw.WriteField("limit", "2/s")
	mw.Close()
	p := problemOf(t, do(t, d, "POST", "/api/sim", mw.FormDataContentType(), &body), http.StatusBadRequest)
	if p.Field != "traffic" || !strings.Contains(p.Detail, `unknown field "traffic"`) {
		t.Errorf("problem %+v, want the unknown field traffic", p)
	}
}

// TestSimChangedSettingsSaySo: a built-in scenario's description gives
// the figures of the scenario as it comes; a run that changes a setting
// they depend on says so under them, naming the fields as the page
// labels them, and a run as the page sends it by default, with the
// scenario's own values filled in, does not.
func TestSimChangedSettingsSaySo(t *testing.T) {
	d := dashboard.New(dashboard.Options{})
	const note = "(The figures above are for the scenario as it comes; this run sets "
	for _, c := range []struct {
		name string
		body io.Reader
		ct   string
		sets string // the fields named, or "" for no note
	}{
		{"limit", strings.NewReader(`{"scenario": "boundary", "limit": "5 per 10s"}`), "application/json", "Limit."},
		{"limit and seconds", strings.NewReader(`{"scenario": "steady", "limit": "5 per 10s", "seconds": 40}`), "application/json", "Limit, Seconds."},
		{"instances", form("scenario", "flood", "instances", "5", "setups", "own-counters"), "application/x-www-form-urlencoded", "Instances."},
		{"setups", form("scenario", "boundary", "setups", "single,own-counters"), "application/x-www-form-urlencoded", "Setups."},
		{"seed", strings.NewReader(`{"scenario": "clients", "seed": 7}`), "application/json", "Seed."},
		{"as it comes", strings.NewReader(`{"scenario": "boundary"}`), "application/json", ""},
		// What the page sends for a scenario it has not touched: the
		// scenario's own limit, seconds and setups, and 3 instances.
		{"the page's defaults", form("scenario", "boundary", "limit", "10 per 10s", "seconds", "20", "setups", "single", "instances", "3",
			"algorithms", "fixed_window,sliding_log,sliding_window,token_bucket,leaky_bucket,gcra"), "application/x-www-form-urlencoded", ""},
		{"fewer algorithms", form("scenario", "flood", "limit", "10 per 10s", "seconds", "10", "setups", "own-counters,shared-counter", "instances", "3", "algorithms", "gcra"), "application/x-www-form-urlencoded", ""},
		{"a seed where nothing is random", strings.NewReader(`{"scenario": "boundary", "seed": 7}`), "application/json", ""},
		{"instances with one limiter", strings.NewReader(`{"scenario": "boundary", "instances": 5}`), "application/json", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := decode[dashboard.SimResponse](t, do(t, d, "POST", "/api/sim", c.ct, c.body), http.StatusOK, "application/json")
			if !strings.HasPrefix(res.Description, "Limit ") {
				t.Fatalf("description %q, want the scenario's", res.Description)
			}
			_, got, found := strings.Cut(res.Description, note)
			if c.sets == "" && found || c.sets != "" && got != c.sets+")" {
				t.Errorf("description ends %q, want the note naming %q", res.Description[max(0, len(res.Description)-120):], c.sets)
			}
		})
	}
}

// TestSimCSVTooShortNamesLine: seconds shorter than pasted traffic are
// answered with the line of the first request past them, as the page
// selects it.
func TestSimCSVTooShortNamesLine(t *testing.T) {
	d := dashboard.New(dashboard.Options{})
	p := problemOf(t, do(t, d, "POST", "/api/sim", "application/json",
		strings.NewReader(`{"csv": "time,key\n1,a\n\n# later\n8,a\n", "limit": "5/s", "seconds": 5}`)), http.StatusBadRequest)
	if p.Line != 5 || !strings.Contains(p.Detail, "line 5: ") || strings.Contains(p.Detail, "request 1") {
		t.Errorf("problem %+v, want line 5 named", p)
	}
}
