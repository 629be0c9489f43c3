package sluice_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
)

// A Fallback refuses an out too short for its requests in the stores'
// words (see rate.CheckOut), under its own prefix, and before the primary
// hears of the call: the mistake is the caller's, in every failure mode.
func TestFallbackShortOut(t *testing.T) {
	for _, down := range []bool{false, true} {
		f, b, _, _ := setup(t, sluice.FallbackOptions{Mode: sluice.FailOpen})
		if down {
			b.state.Store(1)
		}
		r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
		_, src, err := f.DecideAllSource(context.Background(), []rate.Request{r, r}, make([]rate.Decision, 1))
		const want = "fallback: out is shorter than reqs (1 < 2)"
		if err == nil || err.Error() != want || src != sluice.SourcePrimary {
			t.Errorf("primary down %v: %v, %v; want %q, source primary", down, src, err, want)
		}
		if n := b.calls.Load(); n != 0 {
			t.Errorf("primary down %v: the primary was called %d times, want 0", down, n)
		}
	}
}

// A request no store can decide (a negative cost, an invalid limit) is the
// caller's mistake: the Fallback returns its error before the primary is
// asked, so that the primary's refusal of it cannot count as the primary
// failing, take it down and let the failure mode decide what is invalid.
// (A cost over the capacity is caught by rate.CheckGroup as well.)
func TestFallbackInvalidRequestLeavesPrimaryUp(t *testing.T) {
	f, b, _, _ := setup(t, sluice.FallbackOptions{Mode: sluice.FailOpen})
	for _, r := range []rate.Request{
		{Key: "k", Limit: tenPerMinute, Cost: -1},
		{Key: "k", Limit: rate.Limit{Count: 1}, Cost: 1},
	} {
		if _, src, err := f.DecideAllSource(context.Background(), []rate.Request{r}, make([]rate.Decision, 1)); err == nil || src != sluice.SourcePrimary {
			t.Errorf("%+v: %v, %v; want an error, source primary", r, src, err)
		}
	}
	if n := b.calls.Load(); n != 0 {
		t.Errorf("the primary was called %d times, want 0", n)
	}
	if st := f.Stats(); st.Down || st.Failures != 0 || st.Fallback != 0 {
		t.Errorf("after invalid requests: %+v, want the primary up, no failure, nothing decided by the failure mode", st)
	}
}
