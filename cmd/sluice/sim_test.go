package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/sim"
)

// simOutput is the documented shape of "sluice sim --json".
type simOutput struct {
	Scenario string `json:"scenario"`
	Results  []struct {
		Algorithm string `json:"algorithm"`
		Setup     string `json:"setup"`
		Passed    int    `json:"passed"`
		Refused   int    `json:"refused"`
		// Held, MaxDelay and OverCapacity are left out when 0, Clients
		// unless there are 2 to 8.
		Held         int   `json:"held"`
		MaxDelay     int64 `json:"max_delay_ns"`
		OverCapacity int   `json:"over_capacity"`
		Clients      []struct {
			Client  string `json:"client"`
			Passed  int    `json:"passed"`
			Refused int    `json:"refused"`
			Held    int    `json:"held"`
		} `json:"clients"`
		PerSecond []struct {
			T       int `json:"t"`
			Passed  int `json:"passed"`
			Refused int `json:"refused"`
			Held    int `json:"held"`
		} `json:"per_second"`
	} `json:"results"`
}

// runCLI runs sluice with args in-process.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errs bytes.Buffer
	code = run(context.Background(), args, &out, &errs)
	return code, out.String(), errs.String()
}

// decodeStrict decodes the documented shape, refusing any other field.
func decodeStrict(t *testing.T, s string) simOutput {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var o simOutput
	if err := dec.Decode(&o); err != nil {
		t.Fatalf("output does not decode into the documented shape: %v\n%s", err, s)
	}
	if dec.More() {
		t.Fatal("more than one JSON value")
	}
	return o
}

func TestSimJSONFlood(t *testing.T) {
	code, stdout, stderr := runCLI(t, "sim", "--json", "--scenario", "flood")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	o := decodeStrict(t, stdout)
	if o.Scenario != "flood" {
		t.Errorf("scenario %q", o.Scenario)
	}
	// Windows: 10 per counter in [0,10): 3×10 with own counters, 10 shared.
	// Buckets: 10 at once + 9 refills per counter: 3×19 and 19.
	want := map[string]int{
		"fixed_window/own-counters": 30, "fixed_window/shared-counter": 10,
		"sliding_log/own-counters": 30, "sliding_log/shared-counter": 10,
		"sliding_window/own-counters": 30, "sliding_window/shared-counter": 10,
		"token_bucket/own-counters": 57, "token_bucket/shared-counter": 19,
		"leaky_bucket/own-counters": 57, "leaky_bucket/shared-counter": 19,
		"gcra/own-counters": 57, "gcra/shared-counter": 19,
	}
	if len(o.Results) != len(want) {
		t.Errorf("%d results, want %d", len(o.Results), len(want))
	}
	for _, r := range o.Results {
		name := r.Algorithm + "/" + r.Setup
		w, ok := want[name]
		if !ok {
			t.Errorf("unexpected result %s", name)
			continue
		}
		if r.Passed != w || r.Refused != 100-w {
			t.Errorf("%s: passed %d refused %d, want %d and %d", name, r.Passed, r.Refused, w, 100-w)
		}
		// Only leaky_bucket shapes: its queue, one place a second, holds
		// the whole burst of 10 per counter in the first second, the last
		// admitted 9 s after it came.
		if wantDelay := int64(0); r.Algorithm == "leaky_bucket" {
			wantDelay = int64(9 * time.Second)
			if r.MaxDelay != wantDelay {
				t.Errorf("%s: max_delay_ns %d, want %d", name, r.MaxDelay, wantDelay)
			}
		} else if r.MaxDelay != 0 {
			t.Errorf("%s: max_delay_ns %d, want none", name, r.MaxDelay)
		}
		if r.OverCapacity != 0 {
			t.Errorf("%s: over_capacity %d, want none", name, r.OverCapacity)
		}
		// The flood, 10 a second, outruns the queue's drain, 1 a second:
		// once its first request has gone, the queue of each counter
		// never empties, and every request admitted after it is held.
		wantHeld := 0
		if r.Algorithm == "leaky_bucket" {
			wantHeld = w - 1
			if r.Setup == "own-counters" {
				wantHeld = w - 3
			}
		}
		heldSum := 0
		for _, s := range r.PerSecond {
			heldSum += s.Held
		}
		if r.Held != wantHeld || heldSum != wantHeld {
			t.Errorf("%s: held %d (per second %d), want %d", name, r.Held, heldSum, wantHeld)
		}
		if len(r.PerSecond) != 10 {
			t.Errorf("%s: %d seconds, want 10", name, len(r.PerSecond))
		}
		sum := 0
		for i, s := range r.PerSecond {
			if s.T != i || s.Passed+s.Refused != 10 {
				t.Errorf("%s: second %d is %+v, want t=%d and 10 requests", name, i, s, i)
			}
			sum += s.Passed
		}
		if sum != r.Passed {
			t.Errorf("%s: per_second passes add up to %d, not %d", name, sum, r.Passed)
		}
	}
}

func TestSimList(t *testing.T) {
	code, stdout, _ := runCLI(t, "sim", "--list")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	scenarios := sim.Builtins(sim.Params{})
	if len(lines) != len(scenarios) {
		t.Errorf("%d lines for %d scenarios:\n%s", len(lines), len(scenarios), stdout)
	}
	for _, sc := range scenarios {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, sc.Name+" ") && strings.Contains(l, sc.Summary)
		}
		if !found {
			t.Errorf("--list does not name %s with its summary:\n%s", sc.Name, stdout)
		}
	}
}

func TestSimDefault(t *testing.T) {
	code, stdout, stderr := runCLI(t, "sim")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"boundary: limit 10 per 10s", "all │ 20", "sluice sim --list"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestSimHelp(t *testing.T) {
	for _, args := range [][]string{{"sim", "--help"}, {"sim", "-h"}, {"help", "sim"}} {
		code, stdout, _ := runCLI(t, args...)
		if code != 0 {
			t.Errorf("%q: exit %d", args, code)
		}
		for _, fl := range []string{"--list", "--scenario", "--limit", "--algorithms", "--setup", "--instances", "--csv", "--seconds", "--seed", "--max-delay", "--json", "--svg"} {
			if !strings.Contains(stdout, "  "+fl+" ") {
				t.Errorf("%q: help does not explain %s", args, fl)
			}
		}
		if !strings.Contains(stdout, "Exit codes: 0 ") {
			t.Errorf("%q: help does not say what the exit codes mean", args)
		}
		if n := strconv.Itoa(rate.MaxLogCount); !strings.Contains(stdout, "at most "+n) {
			t.Errorf("%q: help does not give sliding_log's largest count, %s", args, n)
		}
	}
}

func TestSimBadFlags(t *testing.T) {
	dir := t.TempDir()
	csvFile := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(csvFile, []byte("0,a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "not defined: -bogus"},
		{[]string{"--scenario", "nope"}, `unknown scenario "nope"`},
		{[]string{"--limit", "lots"}, "--limit"},
		{[]string{"--limit", "gcra 5/s"}, "names an algorithm"},
		{[]string{"--limit", "10/month"}, "monthly"},
		// A limit one of the algorithms cannot apply: say which, and how
		// to leave it out.
		{[]string{"--limit", "70000/m"}, "sliding_log"},
		{[]string{"--limit", "70000/m"}, "leave sliding_log out"},
		{[]string{"--limit", "2000000/h", "--algorithms", "fixed_window,gcra"}, "gcra"},
		{[]string{"--algorithms", "fixed_window,leaky"}, `unknown algorithm "leaky"`},
		{[]string{"--algorithms", "all,leaky"}, `--algorithms: unknown algorithm "leaky"`},
		{[]string{"--setup", "cluster"}, `unknown setup "cluster"`},
		{[]string{"--instances", "0"}, "--instances must be between 1 and 64"},
		{[]string{"--seconds", "-1"}, "--seconds"},
		{[]string{"--seconds", "5"}, "after the scenario's 5 seconds"},
		{[]string{"--seed", "x"}, "-seed"},
		{[]string{"--csv", csvFile}, "--csv needs --limit"},
		{[]string{"--csv", csvFile, "--scenario", "flood", "--limit", "1/s"}, "give one"},
		{[]string{"--svg"}, "flag needs an argument"},
		{[]string{"--csv", "", "--limit", "1/s"}, "--csv needs a file name"},
		{[]string{"boundary"}, `unexpected argument "boundary"`},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCLI(t, append([]string{"sim"}, tt.args...)...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2", tt.args, code)
		}
		if stdout != "" {
			t.Errorf("%q: wrote to stdout: %q", tt.args, stdout)
		}
		if !strings.HasPrefix(stderr, "sluice sim: ") || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: stderr %q, want a message with %q", tt.args, stderr, tt.want)
		}
	}
}

func TestSimCSV(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "traffic.csv")
	// Two keys: a at the boundary of 10 per 10s, b once.
	data := "time,key,cost\n9.5,a,6\n9.9,a,4\n10.1,a,5\n12,b\n"
	if err := os.WriteFile(good, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "sim", "--csv", good, "--limit", "10 per 10s", "--algorithms", "fixed_window,sliding_log", "--setup", "single,own-counters", "--instances", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	o := decodeStrict(t, stdout)
	if o.Scenario != "traffic.csv" || len(o.Results) != 4 {
		t.Fatalf("scenario %q with %d results, want traffic.csv with 4", o.Scenario, len(o.Results))
	}
	// single: fixed_window passes all 4 (10 units in [0,10), 5 and 1 in
	// [10,20)); sliding_log refuses the 5 units at 10.1 s (10 in the log).
	// own-counters, 2 instances: requests 0 and 2 go to one, 1 and 3 to
	// the other. fixed_window: 6 in [0,10) then 5 in [10,20) on one, 4 and
	// b's 1 on the other: all pass. sliding_log: 6 at 9.5 s and 5 at
	// 10.1 s on one counter make 11 within 10 s: refused.
	want := map[string][2]int{
		"fixed_window/single": {4, 0}, "fixed_window/own-counters": {4, 0},
		"sliding_log/single": {3, 1}, "sliding_log/own-counters": {3, 1},
	}
	for _, r := range o.Results {
		w := want[r.Algorithm+"/"+r.Setup]
		if r.Passed != w[0] || r.Refused != w[1] {
			t.Errorf("%s/%s: %d/%d, want %v", r.Algorithm, r.Setup, r.Passed, r.Refused, w)
		}
		if len(r.PerSecond) != 13 {
			t.Errorf("%d seconds, want 13 (up to the last request at 12 s)", len(r.PerSecond))
		}
	}

	// A request costing more than the capacity (10) is counted in JSON too.
	over := filepath.Join(dir, "over.csv")
	if err := os.WriteFile(over, []byte("0,a,11\n0,a,10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, "sim", "--csv", over, "--limit", "10 per 10s", "--algorithms", "fixed_window", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if o := decodeStrict(t, stdout); len(o.Results) != 1 || o.Results[0].Refused != 1 || o.Results[0].OverCapacity != 1 {
		t.Errorf("over capacity: %+v, want one result with the cost-11 request refused and counted in over_capacity", o.Results)
	}

	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("0,a\n1,a,-2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, "sim", "--csv", bad, "--limit", "1/s")
	if code != 1 || !strings.Contains(stderr, "bad.csv: line 2: cost") {
		t.Errorf("bad csv: exit %d, stderr %q; want 1 and the line", code, stderr)
	}
	code, _, stderr = runCLI(t, "sim", "--csv", filepath.Join(dir, "missing.csv"), "--limit", "1/s")
	if code != 1 || !strings.Contains(stderr, "missing.csv") {
		t.Errorf("missing csv: exit %d, stderr %q; want 1 and the file", code, stderr)
	}
}

func TestSimSVG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calm.svg")
	code, stdout, stderr := runCLI(t, "sim", "--scenario", "calm-burst", "--svg", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "calm-burst: limit 10 per 10s") || !strings.Contains(stderr, "wrote "+path) {
		t.Errorf("stdout %q…, stderr %q", stdout[:min(80, len(stdout))], stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	rows := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("invalid XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "g" {
			for _, a := range se.Attr {
				if a.Name.Local == "class" && a.Value == "row" {
					rows++
				}
			}
		}
	}
	if rows != 6 {
		t.Errorf("%d rows drawn, want 6", rows)
	}
	code, _, stderr = runCLI(t, "sim", "--svg", filepath.Join(t.TempDir(), "no", "such", "dir.svg"))
	if code != 1 || !strings.Contains(stderr, "dir.svg") {
		t.Errorf("unwritable svg: exit %d, stderr %q", code, stderr)
	}
}

// TestSimChangedDefaultsSaySo: a description's figures are for the
// scenario as it comes; a run with another limit must not pass them off
// as its own.
func TestSimChangedDefaultsSaySo(t *testing.T) {
	_, stdout, _ := runCLI(t, "sim", "--scenario", "steady", "--limit", "5 per 10s")
	if !strings.Contains(stdout, "this run sets --limit") {
		t.Errorf("no word that the figures are the defaults':\n%s", stdout)
	}
	_, stdout, _ = runCLI(t, "sim", "--scenario", "steady")
	if strings.Contains(stdout, "this run sets") {
		t.Error("a default run says it changed something")
	}
}

// TestSimLimitForChosenAlgorithms: --limit is checked against the
// algorithms the run compares, not against gcra: a quota too large for
// the buckets but fine for fixed_window runs on fixed_window, and a
// burst, which the window algorithms ignore, does not stop them.
func TestSimLimitForChosenAlgorithms(t *testing.T) {
	for _, tt := range []struct {
		limit, algorithms string
		passed            int
	}{
		// boundary's 20 requests fit in any of these.
		{"2000000/h", "fixed_window", 20},
		{"100000/d", "fixed_window", 20},
		{"10 per 10s burst 20", "fixed_window", 20},
		{"10 per 10s burst 20", "gcra", 20},
	} {
		code, stdout, stderr := runCLI(t, "sim", "--limit", tt.limit, "--algorithms", tt.algorithms, "--json")
		if code != 0 {
			t.Errorf("--limit %q --algorithms %s: exit %d: %s", tt.limit, tt.algorithms, code, stderr)
			continue
		}
		o := decodeStrict(t, stdout)
		if len(o.Results) != 1 || o.Results[0].Algorithm != tt.algorithms || o.Results[0].Passed != tt.passed {
			t.Errorf("--limit %q --algorithms %s: %+v, want %d passed", tt.limit, tt.algorithms, o.Results, tt.passed)
		}
	}
}

// TestSimChangedSetupSaysSo: the description's figures are for the
// scenario's own setups; a run in others says so.
func TestSimChangedSetupSaysSo(t *testing.T) {
	for _, tt := range []struct {
		args []string
		note bool
	}{
		{[]string{"--scenario", "boundary", "--setup", "own-counters"}, true},
		{[]string{"--scenario", "boundary", "--setup", "single"}, false},
		{[]string{"--scenario", "flood", "--setup", "own-counters,shared-counter"}, false},
		{[]string{"--scenario", "flood", "--setup", "single"}, true},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"sim"}, tt.args...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", tt.args, code, stderr)
		}
		if got := strings.Contains(stdout, "this run sets --setup"); got != tt.note {
			t.Errorf("%q: note on --setup %t, want %t:\n%s", tt.args, got, tt.note, stdout)
		}
	}
}

// TestBinary runs the sluice command as a user would.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	out, err := sluiceCommand(t, "sim", "--json", "--scenario", "flood").Output()
	if err != nil {
		t.Fatalf("sluice sim --json: %v", err)
	}
	o := decodeStrict(t, string(out))
	if len(o.Results) != 12 || o.Results[0].Passed != 30 {
		t.Errorf("%d results, first passed %d; want 12 and 30", len(o.Results), o.Results[0].Passed)
	}
	cmd := sluiceCommand(t, "sim", "--scenario", "nope")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr.String(), "unknown scenario") {
		t.Errorf("bad flag: %v, stderr %q; want exit 2 and a message", err, stderr.String())
	}
}

// TestSimCSVSummary: the summary counts the file's requests in words
// that fit the count.
func TestSimCSVSummary(t *testing.T) {
	dir := t.TempDir()
	for data, want := range map[string]string{
		"0,a\n":      "1 request from t.csv\n",
		"0,a\n1,b\n": "2 requests from t.csv\n",
	} {
		f := filepath.Join(dir, "t.csv")
		if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI(t, "sim", "--csv", f, "--limit", "1/s")
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("%q: exit %d, stderr %q, stdout lacks %q:\n%s", data, code, stderr, want, stdout)
		}
	}
}
