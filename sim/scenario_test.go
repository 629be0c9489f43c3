package sim

import (
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
