package sim

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

func TestParseLimit(t *testing.T) {
	for _, c := range []struct {
		text   string
		count  int64
		period time.Duration
		burst  int64
		err    string // a part of the error; empty for none
	}{
		{text: "10 per 10s", count: 10, period: 10 * time.Second},
		{text: "5/s burst 20", count: 5, period: time.Second, burst: 20},
		// Too large for gcra's (and the other buckets') arithmetic, which
		// rate.ParseLimit checks when the text names no algorithm; the
		// windows can count it.
		{text: "9000000000000/d", count: 9000000000000, period: 24 * time.Hour},
		{text: "gcra 5/s", err: "names an algorithm"},
		{text: "100/month", err: "monthly"},
		{text: "0/s", err: "count"},
		{text: "five a second", err: "limit"},
	} {
		l, err := ParseLimit(c.text)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseLimit(%q) = %v, %v; want an error about %q", c.text, l, err, c.err)
			}
		case err != nil:
			t.Errorf("ParseLimit(%q): %v", c.text, err)
		case l.Count != c.count || l.Period != c.period || l.Burst != c.burst || l.Algorithm != 0:
			t.Errorf("ParseLimit(%q) = %+v; want %d per %v, burst %d, no algorithm", c.text, l, c.count, c.period, c.burst)
		}
	}
	// Validate says which algorithm cannot apply what ParseLimit read.
	l, err := ParseLimit("9000000000000/d")
	if err != nil {
		t.Fatal(err)
	}
	sc := Scenario{Name: "quota", Limit: l, Algorithms: []rate.Algorithm{rate.FixedWindow, rate.GCRA}, Events: []Event{{Key: "k"}}}
	if err := sc.Validate(); err == nil || !strings.Contains(err.Error(), "gcra") {
		t.Errorf("a limit gcra cannot apply, compared on gcra: %v", err)
	}
	sc.Algorithms = []rate.Algorithm{rate.FixedWindow}
	if err := sc.Validate(); err != nil {
		t.Errorf("the same limit on fixed_window alone: %v", err)
	}
}

// TestValidateNamesCSVLine: a request read from a file is named by its
// line, as ReadCSV's errors name it, not by its index among the requests.
func TestValidateNamesCSVLine(t *testing.T) {
	events, start, err := ReadCSV(strings.NewReader("time,key\n# a comment\n1,a\n\n8,a\n"))
	if err != nil {
		t.Fatal(err)
	}
	sc := Scenario{Name: "t.csv", Limit: tenPer10s, Start: start, Seconds: 5, Events: events}
	err = sc.Validate()
	var le *LineError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &le) || le.Line != 5 ||
		!strings.Contains(err.Error(), "line 5: ") || strings.Contains(err.Error(), "request 1") {
		t.Errorf("error %v, want ErrInvalid naming line 5", err)
	}
	// Requests built by hand have no line: their index names them.
	sc.Events = []Event{{At: time.Second, Key: "a"}, {At: 8 * time.Second, Key: "a"}}
	if err := sc.Validate(); err == nil || !strings.Contains(err.Error(), "request 1 arrives at 8s") || errors.As(err, &le) {
		t.Errorf("error %v, want request 1 named", err)
	}
}

// TestParseLimitBurstTheWindowsIgnore: a burst too large for the buckets
// does not stop a run on the windows, which ignore it; compared on a
// bucket, the error advises what sim can do.
func TestParseLimitBurstTheWindowsIgnore(t *testing.T) {
	l, err := ParseLimit("5/s burst 100000000000")
	if err != nil {
		t.Fatalf("ParseLimit: %v", err)
	}
	if l.Count != 5 || l.Period != time.Second || l.Burst != 100000000000 || l.Algorithm != 0 {
		t.Fatalf("ParseLimit = %+v, want 5/s burst 100000000000", l)
	}
	windows := []rate.Algorithm{rate.FixedWindow, rate.SlidingLog, rate.SlidingWindow}
	sc := Scenario{Name: "burst", Limit: l, Algorithms: windows, Events: []Event{{Key: "k"}}}
	if err := sc.Validate(); err != nil {
		t.Errorf("on the windows: %v", err)
	}
	sc.Algorithms = nil
	err = sc.Validate()
	if err == nil || !strings.Contains(err.Error(), "burst") || !strings.Contains(err.Error(), "leave token_bucket out") || strings.Contains(err.Error(), "use fixed_window") {
		t.Errorf("on every algorithm: %v; want advice on the burst and on leaving token_bucket out, none to name fixed_window in the limit", err)
	}
	if err != nil && !strings.Contains(err.Error(), "at most 4503599627") {
		t.Errorf("on every algorithm: %v; want the largest burst that fits", err)
	}

	// A quota too large for the buckets: compare the windows.
	l, err = ParseLimit("9000000000000/d")
	if err != nil {
		t.Fatal(err)
	}
	sc = Scenario{Name: "quota", Limit: l, Algorithms: []rate.Algorithm{rate.FixedWindow, rate.GCRA}, Events: []Event{{Key: "k"}}}
	err = sc.Validate()
	if err == nil || !strings.Contains(err.Error(), "leave gcra out") || strings.Contains(err.Error(), "use fixed_window") ||
		!strings.Contains(err.Error(), "fixed_window can apply it") {
		t.Errorf("a quota on gcra: %v; want gcra left out, and no limit naming fixed_window", err)
	}
}
