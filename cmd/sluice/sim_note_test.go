package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimNoteOnlyWhenChanged: the note under a description names the
// flags that change what its figures depend on, judged by the values
// they give, not by their presence.
func TestSimNoteOnlyWhenChanged(t *testing.T) {
	for _, tt := range []struct {
		args []string
		sets string // the flags named, or "" for no note
	}{
		{[]string{"--scenario", "boundary", "--limit", "5 per 10s"}, "--limit"},
		{[]string{"--scenario", "steady", "--limit", "5 per 10s", "--seconds", "40"}, "--limit, --seconds"},
		{[]string{"--scenario", "clients", "--seed", "7"}, "--seed"},
		{[]string{"--scenario", "flood", "--instances", "5"}, "--instances"},
		// The scenario's own values, or ones its figures do not depend on.
		{[]string{"--scenario", "boundary", "--limit", "10 per 10s", "--seconds", "20"}, ""},
		{[]string{"--scenario", "boundary", "--seed", "7", "--instances", "5"}, ""},
		{[]string{"--scenario", "clients", "--seed", "1"}, ""},
		{[]string{"--scenario", "flood", "--instances", "3"}, ""},
		// A burst only the buckets hold, compared on a window.
		{[]string{"--scenario", "boundary", "--limit", "10 per 10s burst 50", "--algorithms", "fixed_window"}, ""},
		{[]string{"--scenario", "boundary", "--limit", "10 per 10s burst 50", "--algorithms", "gcra"}, "--limit"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"sim"}, tt.args...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", tt.args, code, stderr)
		}
		// The note is wrapped like the rest of the description.
		_, got, found := strings.Cut(strings.Join(strings.Fields(stdout), " "), "this run sets ")
		if tt.sets == "" && found || tt.sets != "" && !strings.HasPrefix(got, tt.sets+".)") {
			t.Errorf("%q: note %q, want one naming %q", tt.args, got, tt.sets)
		}
	}
}

// TestSimCSVTooShortNamesLine: --seconds shorter than the traffic names
// the line of the first request past them, as the other CSV errors do.
func TestSimCSVTooShortNamesLine(t *testing.T) {
	f := filepath.Join(t.TempDir(), "t.csv")
	if err := os.WriteFile(f, []byte("time,key\n1,a\n\n# later\n8,a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "sim", "--csv", f, "--limit", "5/s", "--seconds", "5")
	if code != 2 || !strings.Contains(stderr, "line 5: ") || strings.Contains(stderr, "request 1") {
		t.Errorf("exit %d, stderr %q; want 2 and line 5 named", code, stderr)
	}
}

// TestSimBurstOnlyTheBucketsHold: a burst too large for every bucket
// does not stop a run on a window, which ignores it; on a bucket the
// advice is one sim can follow.
func TestSimBurstOnlyTheBucketsHold(t *testing.T) {
	code, stdout, stderr := runCLI(t, "sim", "--limit", "5/s burst 100000000000", "--algorithms", "fixed_window", "--json")
	if code != 0 {
		t.Fatalf("on fixed_window: exit %d: %s", code, stderr)
	}
	if o := decodeStrict(t, stdout); len(o.Results) != 1 || o.Results[0].Passed != 10 {
		t.Errorf("on fixed_window: %+v, want 10 passed (5 in each window of a second)", o.Results)
	}
	code, _, stderr = runCLI(t, "sim", "--limit", "5/s burst 100000000000", "--algorithms", "gcra")
	if code != 2 || !strings.Contains(stderr, "leave gcra out") || strings.Contains(stderr, "use fixed_window") {
		t.Errorf("on gcra: exit %d, stderr %q; want 2, gcra left out, and no limit naming an algorithm", code, stderr)
	}
}
