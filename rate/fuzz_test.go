package rate

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// FuzzParseLimit checks ParseLimit on any text: it never panics, refuses
// with an error that wraps ErrSyntax, and what it accepts is a valid limit
// that its String gives back exactly.
func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{
		"10/s", "100/m", "1000/h", "5000/d", "10000/month", "10 per 10s",
		"3 per 7s", "20/s burst 40", "token_bucket 20/s burst 40",
		"sliding_log 5 per 15m", "5 per 1d12h", "1_000/h", "5/ms",
		"leaky_bucket 1 per 2562047h", "9223372036854775807/s", "0/s",
		"10 per -1s", "fixed_window 1/month burst 2", "gcra 1/µs",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLimit(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("ParseLimit(%q): error %v does not wrap ErrSyntax", s, err)
			}
			if l != (Limit{}) {
				t.Fatalf("ParseLimit(%q) failed (%v) but returned %#v", s, err, l)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLimit(%q) = %#v, which is invalid: %v", s, l, err)
		}
		again, err := ParseLimit(l.String())
		if err != nil || again != l {
			t.Fatalf("ParseLimit(%q) = %#v; its String %q parses to %#v, %v", s, l, l.String(), again, err)
		}
	})
}

// FuzzStep steps any valid limit from any state that some limit could have
// written under the same key (times, counts and ticks are below 2^53: a
// state left by a limit since changed, or by another algorithm; for
// sliding_log, a log of times in order, perhaps longer than the count), at
// any time. The step never panics, its decision is well formed, and a refusal
// leaves the state as it was.
func FuzzStep(f *testing.F) {
	f.Add("gcra 10/s burst 20", int64(0), int64(0), int64(0), int64(1_700_000_000_000_000), int64(1), int64(0))
	f.Add("token_bucket 3 per 7s", int64(5), int64(1_700_000_000_000_000), int64(0), int64(1_700_000_000_000_001), int64(3), int64(0))
	f.Add("leaky_bucket 5/s burst 10", int64(1_700_000_000_500_000), int64(3), int64(1_700_000_000_000_000), int64(1_700_000_000_000_000), int64(2), int64(300_000))
	f.Add("sliding_window 100/m", int64(1_699_999_999_980_000), int64(100), int64(7), int64(1_700_000_000_000_000), int64(5), int64(0))
	f.Add("fixed_window 10000/month", int64(1_700_000_000_000_000), int64(1<<52), int64(0), int64(1_700_000_000_000_000), int64(10_000), int64(0))
	f.Add("gcra 5/s", int64(1_700_000_000_000_000), int64(7), int64(1_700_000_000_000_000), int64(1_700_000_000_000_000), int64(5), int64(0))
	f.Add("sliding_log 5 per 15m", int64(8), int64(1_699_999_999_000_000), int64(100_000), int64(1_700_000_000_000_000), int64(2), int64(0))
	f.Fuzz(func(t *testing.T, limit string, a, b, c, now, cost, maxDelay int64) {
		l, err := ParseLimit(limit)
		if err != nil || cost < 0 || cost > l.Capacity() {
			return
		}
		for _, x := range []int64{a, b, c, now} {
			if x < 0 || x >= 1<<53 {
				return // before 1970, or after 2255
			}
		}
		s := State{A: a, B: b, C: c}
		if l.Algorithm == SlidingLog {
			// A log of a%100 times, from b on, c%1e7 µs apart (a log
			// longer than this limit's count was written by a larger one).
			s = State{Log: make([]int64, a%100)}
			for i := range s.Log {
				s.Log[i] = b + int64(i)*(c%10_000_000)
			}
		}
		before := append([]int64(nil), s.Log...)
		next, d := l.StepWithin(s, now, cost, time.Duration(maxDelay))
		if d.Limit != l.Capacity() {
			t.Errorf("Limit = %d, want the capacity %d", d.Limit, l.Capacity())
		}
		if d.Remaining < 0 || d.Remaining > l.Capacity() {
			t.Errorf("Remaining = %d, outside [0, %d]", d.Remaining, l.Capacity())
		}
		if d.ResetAfter < 0 || d.RetryAfter < 0 || d.Delay < 0 {
			t.Errorf("a negative duration: %v", d)
		}
		if d.Allowed && d.RetryAfter != 0 {
			t.Errorf("allowed with RetryAfter %v", d.RetryAfter)
		}
		if !d.Allowed && (next.A != s.A || next.B != s.B || next.C != s.C || !slices.Equal(next.Log, s.Log)) {
			t.Errorf("refused, but the state moved from %+v to %+v", s, next)
		}
		if !slices.Equal(s.Log, before) {
			t.Errorf("the step wrote into the log it was given: %v, was %v", s.Log, before)
		}
		if cost == 0 && !d.Allowed {
			t.Errorf("cost 0 refused: %v", d)
		}
		if t.Failed() {
			t.Logf("%v from %+v at %d, cost %d, max delay %v: %v, next %+v", l, s, now, cost, time.Duration(maxDelay), d, next)
		}
	})
}
