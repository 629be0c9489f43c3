package sluice_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// The outage's lines use the attribute names and the duration form the
// other lines of sluice serve use: error, not err, and an outage's length
// as a duration's text, not nanoseconds (a JSON log wrote down_for as
// 25003000000).
func TestFallbackLogAttributes(t *testing.T) {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	b := &breakable{Store: memory.New(memory.Options{Clock: clk})}
	logs := &logLines{}
	f := sluice.NewFallback(b, sluice.FallbackOptions{Mode: sluice.FailOpen, Clock: clk, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	b.state.Store(1)
	f.Decide(context.Background(), r)
	b.state.Store(0)
	clk.Advance(2500 * time.Millisecond)
	for range 20 { // until a probe finds the primary back
		f.Decide(context.Background(), r)
		clk.Advance(time.Second)
	}
	all := strings.Join(logs.lines(), "\n")
	if !strings.Contains(all, `"error":"connection refused"`) || strings.Contains(all, `"err":`) {
		t.Errorf("the outage's line: want the error as error, not err:\n%s", all)
	}
	if !strings.Contains(all, `"down_for":"2.5s"`) {
		t.Errorf("the recovery's line: want down_for as 2.5s:\n%s", all)
	}
}

// A primary that hangs is logged as one: the outage's line said only what
// ended the last call, often the caller's own cancel ("context
// canceled"), which reads as no fault of the store's.
func TestFallbackLogHungPrimary(t *testing.T) {
	f, b, clk, logs := setup(t, sluice.FallbackOptions{Mode: sluice.FailClosed, Timeout: -1, MaxSilence: 200 * time.Millisecond})
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	b.state.Store(2)
	for _, step := range []time.Duration{0, 100 * time.Millisecond, 100 * time.Millisecond, time.Millisecond} {
		clk.Advance(step)
		callBy(f, shortDeadline, r)
	}
	if !f.Stats().Down {
		t.Fatal("the hung primary was not taken down")
	}
	if all := strings.Join(logs.lines(), "\n"); !strings.Contains(all, "completed no call for 200ms") {
		t.Errorf("the outage's line does not say the primary hangs:\n%s", all)
	}
}

// failing is a primary that fails every call with err, which the test
// changes.
type failing struct {
	sluice.Store
	err atomic.Value // error
}

func (s *failing) DecideAll(context.Context, []rate.Request, []rate.Decision) (rate.Decision, error) {
	return rate.Decision{}, s.err.Load().(error)
}

func (s *failing) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	return s.DecideAll(ctx, []rate.Request{r}, make([]rate.Decision, 1))
}

// A probe that fails for another reason than the outage began with is
// logged: Redis killed, then back with another password, kept failing
// for the second reason with no line saying so.
func TestFallbackLogNewCause(t *testing.T) {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	p := &failing{Store: memory.New(memory.Options{Clock: clk})}
	p.err.Store(errors.New("connection refused"))
	logs := &logLines{}
	f := sluice.NewFallback(p, sluice.FallbackOptions{Mode: sluice.FailOpen, Clock: clk, MinBackoff: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	f.Decide(context.Background(), r)
	for _, cause := range []string{"connection refused", "WRONGPASS invalid username-password pair", "WRONGPASS invalid username-password pair"} {
		p.err.Store(errors.New(cause))
		clk.Advance(10 * time.Second) // past any backoff: a probe
		f.Decide(context.Background(), r)
	}
	all := strings.Join(logs.lines(), "\n")
	if n := strings.Count(all, "WRONGPASS"); n != 1 {
		t.Errorf("the new cause logged %d times, want once:\n%s", n, all)
	}
	if n := strings.Count(all, "connection refused"); n != 1 {
		t.Errorf("the first cause logged %d times, want once (probes failing alike add nothing):\n%s", n, all)
	}
}

// A call the Fallback's own Timeout ended is logged as that: "context
// deadline exceeded" alone said neither whose deadline nor how long.
func TestFallbackLogTimeout(t *testing.T) {
	f, b, _, logs := setup(t, sluice.FallbackOptions{Mode: sluice.FailClosed})
	b.state.Store(2)
	callBy(f, time.Second, rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1})
	if all := strings.Join(logs.lines(), "\n"); !strings.Contains(all, "no answer within the timeout, 50ms") {
		t.Errorf("the outage's line does not name the timeout:\n%s", all)
	}
}
