package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
)

// deadlineReporter fails every call with a deadline, as a remote store's
// client reports one: context.DeadlineExceeded, wrapped.
type deadlineReporter struct{}

func (deadlineReporter) Decide(context.Context, rate.Request) (rate.Decision, error) {
	return rate.Decision{}, fmt.Errorf("read: %w", context.DeadlineExceeded)
}

func (deadlineReporter) DecideAll(context.Context, []rate.Request, []rate.Decision) (rate.Decision, error) {
	return rate.Decision{}, fmt.Errorf("read: %w", context.DeadlineExceeded)
}

// earlyContext is a context whose deadline is always in from now and
// whose timer never fires: a store that reports a deadline then saw it
// that long before it passed.
type earlyContext struct {
	context.Context
	in time.Duration
}

func (c earlyContext) Deadline() (time.Time, bool) { return time.Now().Add(c.in), true }

// A deadline the primary reports 1ms before its caller's passes is the
// caller's: its error, no failure of the primary, as the rls service
// also reads it. One it reports an hour before is the primary's own
// bound: a failure, which FailError answers with the error.
func TestFallbackCallersDeadlineJustBeforeItPasses(t *testing.T) {
	r := []rate.Request{{Key: "k", Limit: tenPerMinute, Cost: 1}}
	for _, c := range []struct {
		in       time.Duration
		src      sluice.Source
		failures uint64
	}{
		{time.Millisecond, sluice.SourcePrimary, 0},
		{time.Hour, sluice.SourceError, 1},
	} {
		f := sluice.NewFallback(deadlineReporter{}, sluice.FallbackOptions{Mode: sluice.FailError})
		_, src, err := f.DecideAllSource(earlyContext{context.Background(), c.in}, r, make([]rate.Decision, 1))
		if !errors.Is(err, context.DeadlineExceeded) || src != c.src {
			t.Errorf("deadline reported %v early: %v from %v, want DeadlineExceeded from %v", c.in, err, src, c.src)
		}
		if st := f.Stats(); st.Failures != c.failures || st.Down != (c.failures > 0) {
			t.Errorf("deadline reported %v early: stats %+v, want %d failures", c.in, st, c.failures)
		}
	}
}
