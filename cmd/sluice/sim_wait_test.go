package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSimMaxDelay: what sluice serve passes with max_delay, sluice sim
// shows with --max-delay. Limit 1/s burst 2, 6 requests at once:
//   - gcra lets the burst of 2 through at once and holds the 3rd, 4th
//     and 5th until their units refill, 1, 2 and 3 s later; the 6th,
//     due in 4 s, is refused: 5 passed, 3 held, 1 refused.
//   - leaky_bucket has a queue of 2: the 1st goes at once, the 2nd 1 s
//     later (held), the other 4 find it full: 2 passed, 1 held.
//   - fixed_window (1 per second) passes the 1st; the 5 it refuses wait
//     1 s for the next window, as sluice serve has them wait, and one of
//     them passes then: 2 passed, 1 held, 4 refused.
//
// Without --max-delay gcra passes the burst alone: 2.
func TestSimMaxDelay(t *testing.T) {
	f := filepath.Join(t.TempDir(), "six.csv")
	if err := os.WriteFile(f, []byte(strings.Repeat("0,k\n", 6)), 0o644); err != nil {
		t.Fatal(err)
	}
	type counts struct {
		passed, refused, held int
		maxDelay              time.Duration
	}
	for _, tt := range []struct {
		wait string
		want map[string]counts
	}{
		{"3s", map[string]counts{"gcra": {5, 1, 3, 3 * time.Second}, "leaky_bucket": {2, 4, 1, time.Second}, "fixed_window": {2, 4, 1, time.Second}}},
		{"", map[string]counts{"gcra": {2, 4, 0, 0}, "leaky_bucket": {2, 4, 1, time.Second}, "fixed_window": {1, 5, 0, 0}}},
	} {
		args := []string{"sim", "--csv", f, "--limit", "1/s burst 2", "--algorithms", "gcra,leaky_bucket,fixed_window", "--json"}
		if tt.wait != "" {
			args = append(args, "--max-delay", tt.wait)
		}
		code, stdout, stderr := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("--max-delay %q: exit %d: %s", tt.wait, code, stderr)
		}
		for _, r := range decodeStrict(t, stdout).Results {
			got := counts{r.Passed, r.Refused, r.Held, time.Duration(r.MaxDelay)}
			if w := tt.want[r.Algorithm]; got != w {
				t.Errorf("--max-delay %q, %s: %+v, want %+v", tt.wait, r.Algorithm, got, w)
			}
			if len(r.PerSecond) != 1 || r.PerSecond[0].Held != r.Held {
				t.Errorf("--max-delay %q, %s: per second %+v, want the %d held in second 0", tt.wait, r.Algorithm, r.PerSecond, r.Held)
			}
		}
	}

	// The text says the wait and what gcra did with it.
	code, stdout, stderr := runCLI(t, "sim", "--csv", f, "--limit", "1/s burst 2", "--algorithms", "gcra", "--max-delay", "3s")
	text := strings.Join(strings.Fields(stdout), " ")
	if code != 0 || !strings.Contains(text, "limit 1/s, max delay 3s") || !strings.Contains(text, "5 (3 held) ✕1") {
		t.Errorf("text: exit %d, %s\n%s", code, stderr, stdout)
	}
}

// TestSimMaxDelayBad: a wait that is no duration, or a negative one, is
// a usage error.
func TestSimMaxDelayBad(t *testing.T) {
	for _, v := range []string{"-1s", "soon", "3"} {
		code, stdout, stderr := runCLI(t, "sim", "--max-delay", v)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "max-delay") {
			t.Errorf("--max-delay %s: exit %d, stderr %q; want 2 naming the flag", v, code, stderr)
		}
	}
}

// TestSimMaxDelayNote: a built-in scenario's figures are without a wait;
// a run with one says so, the windows' included: they wait too.
func TestSimMaxDelayNote(t *testing.T) {
	for _, tt := range []struct {
		args []string
		note bool
	}{
		{[]string{"--scenario", "boundary", "--max-delay", "3s"}, true},
		{[]string{"--scenario", "boundary", "--max-delay", "3s", "--algorithms", "fixed_window"}, true},
		{[]string{"--scenario", "boundary", "--max-delay", "0s"}, false},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"sim"}, tt.args...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", tt.args, code, stderr)
		}
		got := strings.Contains(strings.Join(strings.Fields(stdout), " "), "this run sets --max-delay.)")
		if got != tt.note {
			t.Errorf("%q: note naming --max-delay: %t, want %t\n%s", tt.args, got, tt.note, stdout)
		}
	}
}

// TestSimExitCodesAsHelpSays: a CSV request later than --seconds allows
// is named by its line, but the fault is the flag's: exit 2, a usage
// error, and the help says so under 2, not under 1 with a bad line.
func TestSimExitCodesAsHelpSays(t *testing.T) {
	f := filepath.Join(t.TempDir(), "s.csv")
	if err := os.WriteFile(f, []byte("0,a\n5,a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "sim", "--csv", f, "--seconds", "3", "--limit", "1/s")
	if code != 2 || !strings.Contains(stderr, "line 2") || !strings.Contains(stderr, "--seconds") {
		t.Errorf("exit %d, stderr %q; want 2, the line, and the flag to change", code, stderr)
	}
	_, help, _ := runCLI(t, "sim", "--help")
	_, codes, ok := strings.Cut(help, "Exit codes:")
	if !ok {
		t.Fatal("help has no exit codes")
	}
	codes = strings.Join(strings.Fields(codes), " ")
	_, two, ok := strings.Cut(codes, ", 2 ")
	if !ok || !strings.Contains(two, "--seconds") {
		t.Errorf("help's exit code 2 does not cover a CSV longer than --seconds: %q", codes)
	}
}
