package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/sim"
)

// artifactDir returns where tests leave files for people to look at:
// $SLUICE_TEST_ARTIFACTS, or a temporary folder.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SLUICE_TEST_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestBrowser loads the page in headless Chromium, as a person would: the
// live rows show what was recorded, the playground runs the flood scenario
// when Run is clicked and shows its totals and picture, a CSV error names
// its line, and nothing on the page raises an error or breaks the
// Content-Security-Policy. It leaves screenshots in artifactDir.
func TestBrowser(t *testing.T) {
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	clock := ratetest.NewClock(now)
	d := dashboard.New(dashboard.Options{Clock: clock})

	// A minute of traffic on three policies: "api" busy and refused in
	// bursts, "login" refused steadily, and a name that would be markup
	// if the page did not escape it.
	const hostile = `<img src=x id=pwned>"&'`
	type totals struct{ Passed, Refused int64 }
	want := map[string]totals{}
	for ago := 59; ago >= 0; ago-- {
		clock.Set(now.Add(-time.Duration(ago) * time.Second))
		record := func(policy string, passed, refused int) {
			for range passed {
				d.Record(policy, true)
			}
			for range refused {
				d.Record(policy, false)
			}
			w := want[policy]
			w.Passed += int64(passed)
			w.Refused += int64(refused)
			want[policy] = w
		}
		burst := 0
		if ago%15 < 4 {
			burst = 12 - 3*(ago%15)
		}
		record("api", 20+ago%7, burst)
		record("login", 2, ago%3)
		if ago%10 == 0 {
			record(hostile, 1, 1)
		}
	}
	clock.Set(now.Add(500 * time.Millisecond))

	srv := httptest.NewServer(d)
	defer srv.Close()
	b := startBrowser(t, 1280, 900)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.navigate(ctx, srv.URL+"/")

	// Live: one row per policy, its totals those recorded.
	b.waitFor(ctx, `document.querySelectorAll("#live-picture svg g.row").length === 3`)
	var rows []struct {
		Policy          string
		Passed, Refused int64
	}
	b.eval(ctx, `Array.from(document.querySelectorAll("#live-picture g.row"), (g) => ({
		Policy: g.dataset.policy, Passed: +g.dataset.passed, Refused: +g.dataset.refused}))`, &rows)
	if len(rows) != len(want) {
		t.Fatalf("live rows %+v, want %d policies", rows, len(want))
	}
	for _, r := range rows {
		if w, ok := want[r.Policy]; !ok || (totals{r.Passed, r.Refused}) != w {
			t.Errorf("live row %q: %d passed, %d refused; want %+v", r.Policy, r.Passed, r.Refused, w)
		}
	}
	var injected bool
	b.eval(ctx, `document.getElementById("pwned") !== null`, &injected)
	if injected {
		t.Error("a policy name became markup in the page")
	}

	// Playground: choose flood and click Run.
	b.eval(ctx, `(() => {
		const s = document.getElementById("scenario");
		s.value = "flood";
		s.dispatchEvent(new Event("change"));
	})()`, nil)
	b.click(ctx, "#run")
	b.waitFor(ctx, `!document.getElementById("sim-result").hidden && document.querySelector("#sim-picture svg") !== null`)

	type cell struct {
		Algorithm, Setup string
		Passed, Refused  int
		Text             string
	}
	var cells []cell
	b.eval(ctx, `Array.from(document.querySelectorAll("#totals td[data-algorithm]"), (td) => ({
		Algorithm: td.dataset.algorithm, Setup: td.dataset.setup,
		Passed: +td.dataset.passed, Refused: +td.dataset.refused, Text: td.textContent}))`, &cells)
	var pictured []cell
	b.eval(ctx, `Array.from(document.querySelectorAll("#sim-picture g.row"), (g) => ({
		Algorithm: g.dataset.algorithm, Setup: g.dataset.setup,
		Passed: +g.dataset.passed, Refused: +g.dataset.refused}))`, &pictured)

	sc, err := sim.Builtin("flood", sim.Params{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != len(res.Rows) || len(pictured) != len(res.Rows) {
		t.Fatalf("the page shows %d cells and %d picture rows, want %d each", len(cells), len(pictured), len(res.Rows))
	}
	for i, row := range res.Rows {
		c, p := cells[i], pictured[i]
		if c.Algorithm != row.Algorithm.String() || c.Setup != row.Setup.String() || c.Passed != row.Passed || c.Refused != row.Refused {
			t.Errorf("cell %d: %+v, want %s %s %d passed %d refused", i, c, row.Algorithm, row.Setup, row.Passed, row.Refused)
		}
		if p.Algorithm != c.Algorithm || p.Setup != c.Setup || p.Passed != c.Passed || p.Refused != c.Refused {
			t.Errorf("picture row %d: %+v, table cell %+v", i, p, c)
		}
		if !strings.Contains(c.Text, strconv.Itoa(row.Passed)+" passed") {
			t.Errorf("cell %d reads %q, want %d passed", i, c.Text, row.Passed)
		}
	}
	// What the flood scenario is about, counted by hand: 3 instances with
	// their own window counters let 3 times the limit of 10 through; one
	// shared counter, 10.
	for _, a := range []rate.Algorithm{rate.FixedWindow, rate.SlidingLog, rate.SlidingWindow} {
		for _, c := range cells {
			if c.Algorithm != a.String() {
				continue
			}
			if wantPassed := map[string]int{"own-counters": 30, "shared-counter": 10}[c.Setup]; c.Passed != wantPassed {
				t.Errorf("%s %s: the page shows %d passed, want %d", a, c.Setup, c.Passed, wantPassed)
			}
		}
	}

	dir := artifactDir(t)
	shot := filepath.Join(dir, "dashboard.png")
	if err := os.WriteFile(shot, b.screenshot(ctx, 1280), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)

	// A link that runs a scenario as the page opens: boundary, whose
	// fixed window lets twice the limit of 10 through around a window
	// boundary, and every other algorithm 10.
	b.navigate(ctx, srv.URL+"/?scenario=boundary&run=1")
	b.waitFor(ctx, `!document.getElementById("sim-result").hidden`)
	var linked []cell
	b.eval(ctx, `Array.from(document.querySelectorAll("#totals td[data-algorithm]"), (td) => ({
		Algorithm: td.dataset.algorithm, Setup: td.dataset.setup,
		Passed: +td.dataset.passed, Refused: +td.dataset.refused}))`, &linked)
	if len(linked) != len(rate.Algorithms()) {
		t.Fatalf("?scenario=boundary&run=1 shows %d cells, want one per algorithm", len(linked))
	}
	for _, c := range linked {
		want := 10
		if c.Algorithm == rate.FixedWindow.String() {
			want = 20
		}
		if c.Setup != "single" || c.Passed != want || c.Passed+c.Refused != 20 {
			t.Errorf("boundary: %+v, want single with %d of 20 passed", c, want)
		}
	}

	if p := b.problems(); len(p) > 0 {
		t.Errorf("the page reported errors:\n%s", strings.Join(p, "\n"))
	}
	before := len(b.problems())

	// Pasted CSV with an error on line 3: the page says which line.
	b.click(ctx, `input[name=source][value=csv]`)
	b.eval(ctx, `(() => {
		document.getElementById("csv").value = "time,key\n0.1,alice\nsoon,alice\n";
		document.getElementById("limit").value = "10 per 10s";
	})()`, nil)
	b.click(ctx, "#run")
	b.waitFor(ctx, `!document.getElementById("sim-error").hidden`)
	var errText string
	b.eval(ctx, `document.getElementById("sim-error").textContent`, &errText)
	if !strings.Contains(errText, "line 3") || !strings.Contains(errText, "soon") {
		t.Errorf("the page shows the CSV error %q, want it to name line 3 and its time", errText)
	}
	var selected string
	b.eval(ctx, `(() => { const c = document.getElementById("csv"); return c.value.slice(c.selectionStart, c.selectionEnd); })()`, &selected)
	if selected != "soon,alice" {
		t.Errorf("the page selects %q in the CSV, want the line at fault", selected)
	}
	errShot := filepath.Join(dir, "dashboard-csv-error.png")
	if err := os.WriteFile(errShot, b.screenshot(ctx, 1280), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", errShot)

	var hidden bool
	b.eval(ctx, `document.getElementById("sim-result").hidden`, &hidden)
	if !hidden {
		t.Error("the flood result is still shown under the CSV error")
	}
	// The browser logs the 400 itself, and nothing else may appear.
	after := b.problems()[before:]
	if len(after) != 1 || !strings.Contains(after[0], "400") || !strings.Contains(after[0], "/api/sim") {
		t.Errorf("after the CSV error the page reported %q, want only the 400 of api/sim", after)
	}
}

// With the playground off, the page says so and how to turn it on, the
// API refuses simulations with 403, and the live picture still draws:
// the script's playground part finds no form and leaves the rest alone.
func TestBrowserPlaygroundOff(t *testing.T) {
	clock := ratetest.NewClock(time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC))
	d := dashboard.New(dashboard.Options{Clock: clock, NoPlayground: true})
	d.Record("api", true)
	d.Record("api", false)
	srv := httptest.NewServer(d)
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/api/sim", "application/json", strings.NewReader(`{"scenario":"boundary"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "sluice serve --playground") {
		t.Errorf("POST api/sim with the playground off: %d %s, want 403 saying how to turn it on", resp.StatusCode, body)
	}

	b := startBrowser(t, 1280, 900)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.navigate(ctx, srv.URL+"/")
	b.waitFor(ctx, `document.querySelectorAll("#live-picture svg g.row").length === 1`)
	var state struct {
		Form bool
		Text string
	}
	b.eval(ctx, `({Form: document.getElementById("sim-form") !== null,
		Text: document.getElementById("playground").textContent})`, &state)
	if state.Form || !strings.Contains(state.Text, "sluice serve --playground") {
		t.Errorf("the page with the playground off: form %v, text %q", state.Form, state.Text)
	}
}

// TestBrowserCSVNearMaxBody pastes traffic a little under the size the
// page promises (Options.MaxBody): the page sends it as it is, not
// percent-encoded to nearly twice its size, and the server runs it.
func TestBrowserCSVNearMaxBody(t *testing.T) {
	const maxBody = 8 << 10
	d := dashboard.New(dashboard.Options{MaxBody: maxBody})
	srv := httptest.NewServer(d)
	defer srv.Close()
	csv := strings.Repeat("0.1,alice\n", 600) // 6,000 bytes
	if len(csv) >= maxBody-1500 {
		t.Fatalf("the traffic has %d bytes, want room for the other fields under %d", len(csv), maxBody)
	}

	b := startBrowser(t, 1280, 900)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.navigate(ctx, srv.URL+"/")
	var hint string
	b.eval(ctx, `document.getElementById("csv-fields").textContent`, &hint)
	if !strings.Contains(hint, "At most 8 KiB") {
		t.Errorf("the page says %q, want it to name the limit, 8 KiB", hint)
	}
	// The source is chosen by script, not by a click: what this test is
	// about is the size of what the page sends. A click on the small
	// radio button that a loaded machine's browser dropped ran the built-in
	// scenario instead (TestBrowser clicks it as a user would).
	b.eval(ctx, `(() => {
		const r = document.querySelector("input[name=source][value=csv]");
		r.checked = true;
		r.dispatchEvent(new Event("change", {bubbles: true}));
		document.getElementById("csv").value = `+jsString(csv)+`;
		document.getElementById("limit").value = "5/s";
	})()`, nil)
	b.waitFor(ctx, `!document.getElementById("csv-fields").hidden`)
	b.click(ctx, "#run")
	b.waitFor(ctx, `!document.getElementById("sim-result").hidden || !document.getElementById("sim-error").hidden`)
	var state struct {
		Error  string
		Status string
		Passed []int
	}
	b.eval(ctx, `({Error: document.getElementById("sim-error").hidden ? "" : document.getElementById("sim-error").textContent,
		Status: document.getElementById("sim-status").textContent,
		Passed: Array.from(document.querySelectorAll("#totals td[data-algorithm]"), (td) => +td.dataset.passed)})`, &state)
	if state.Error != "" {
		t.Fatalf("%d bytes of traffic, under the %d the page promises: %s", len(csv), maxBody, state.Error)
	}
	if state.Status != "600 requests replayed" || len(state.Passed) != len(rate.Algorithms()) {
		t.Errorf("status %q, %d cells; want 600 requests and one cell per algorithm", state.Status, len(state.Passed))
	}
	for _, p := range state.Passed {
		if p != 5 {
			t.Errorf("cells %v, want 5 passed in each: 600 requests in one second, a limit of 5/s", state.Passed)
			break
		}
	}
	if p := b.problems(); len(p) > 0 {
		t.Errorf("the page reported errors:\n%s", strings.Join(p, "\n"))
	}
}
