package policy

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// drainOne decides one GET / on e with ctx.
func drainOne(ctx context.Context, e *Enforcer) Outcome {
	r := httptest.NewRequest("GET", "/", nil)
	out := e.Enforce(ctx, &Request{HTTP: r, Header: r.Header})
	out.Done()
	return out
}

// Once a drain has begun, no request is held past its end: one whose
// wait would end later is refused at once, as a request whose deadline
// is too near, with nothing reserved. Here the drain ends 5s on, the
// limit lets one request through every 2s, and max_delay would hold
// each for up to 30s: the fourth request's turn, 6s on, is past the end.
// Every algorithm holds alike: a bucket's unit reserved, a leaky_bucket's
// turn, a window's refusal waited out.
func TestDrainBoundsNewWaits(t *testing.T) {
	steps := []struct {
		v      Verdict
		waited time.Duration
	}{{Allow, 0}, {Allow, 2 * time.Second}, {Allow, 2 * time.Second}, {Refuse, 0}}
	for _, limit := range []string{"gcra 1/2s", "token_bucket 1/2s", "leaky_bucket 1/2s burst 10", "fixed_window 1/2s"} {
		t.Run(limit, func(t *testing.T) {
			clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			store := memory.New(memory.Options{Clock: clock})
			config := fmt.Sprintf("policies:\n  - name: held\n    limits: [%q]\n    max_delay: 30s\n", limit)
			var drain Drain
			e := generation(t, config, store, clock, Options{})
			drain.Begin(clock.Now().Add(5 * time.Second))
			ctx := WithDrain(t.Context(), &drain)
			for i, want := range steps {
				before := clock.Now()
				out := drainOne(ctx, e)
				took := clock.Now().Sub(before)
				if out.Verdict != want.v || out.Waited != want.waited || took != want.waited {
					t.Fatalf("request %d: %v after %v (%v on the clock), want %v after %v", i+1, out.Verdict, out.Waited, took, want.v, want.waited)
				}
				if want.v == Refuse && out.RetryAfter <= 0 {
					t.Errorf("request %d: refused with no Retry-After", i+1)
				}
			}
			// The refused request reserved nothing: a request that may
			// wait, without the drain, waits for the turn
			// the third request left, 2s on, not one after the fourth's.
			if out := drainOne(t.Context(), e); out.Verdict != Allow || out.Waited != 2*time.Second {
				t.Errorf("the next request without the drain: %v after %v, want allow after 2s: the refused one took a unit", out.Verdict, out.Waited)
			}
		})
	}
}

// heldClock is a fake clock whose waits block until the test releases
// them or their context ends, each announcing its duration on waits
// first: the test acts while a request is held.
type heldClock struct {
	*ratetest.Clock
	waits   chan time.Duration
	release chan struct{}
}

func newHeldClock() *heldClock {
	return &heldClock{Clock: ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
		waits: make(chan time.Duration, 1), release: make(chan struct{}, 1)}
}

// next returns the duration of the next wait, failing the test if none
// comes within 10s: a bound on a failing test, not a wait for time to
// pass.
func (c *heldClock) next(t *testing.T) time.Duration {
	t.Helper()
	select {
	case w := <-c.waits:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("no wait began")
		return 0
	}
}

func (c *heldClock) Sleep(ctx context.Context, d time.Duration) error {
	c.waits <- d
	select {
	case <-c.release:
		return c.Clock.Sleep(ctx, d)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A request already held when the drain begins is answered at once if
// its turn comes after the drain's end (Unavailable, the rest of its
// wait as RetryAfter, ErrDrained), rather than held until the server
// cuts it with no answer. Its unit or turn is spent, as for a request
// whose context ends while it is held, and it is observed so (throttled);
// a window's wait reserved nothing, and is observed as nothing. One
// whose turn comes before the end goes on waiting, and goes through.
// The local store's waits, the store having failed, end alike.
func TestDrainAnswersHeldRequests(t *testing.T) {
	for _, tt := range []struct {
		limit    string
		wait     time.Duration // of the second request
		observed string        // its result when the drain cuts it; "" for none
	}{
		{"gcra 1/4s", 4 * time.Second, ResultThrottled},
		{"token_bucket 1/4s", 4 * time.Second, ResultThrottled},
		{"leaky_bucket 1/4s burst 10", 4 * time.Second, ResultThrottled},
		{"fixed_window 1/4s", 4 * time.Second, ""},
	} {
		for _, store := range []string{"shared", "local"} {
			for _, end := range []time.Duration{time.Second, 10 * time.Second} {
				cut := end < tt.wait
				t.Run(fmt.Sprintf("%s/%s/drain ends in %v", tt.limit, store, end), func(t *testing.T) {
					clock := newHeldClock()
					rec := &keyRecorder{}
					var drain Drain
					e := generation(t, fmt.Sprintf("policies:\n  - name: held\n    limits: [%q]\n    max_delay: 30s\n    on_store_error: local\n", tt.limit),
						storeOf(store, clock), clock, Options{Observer: rec})
					ctx := WithDrain(t.Context(), &drain)
					if out := drainOne(ctx, e); out.Verdict != Allow || out.Waited != 0 {
						t.Fatalf("first request: %v after %v", out.Verdict, out.Waited)
					}
					rec.events = nil
					done := make(chan Outcome, 1)
					go func() { done <- drainOne(ctx, e) }()
					if w := clock.next(t); w != tt.wait {
						t.Fatalf("second request held for %v, want %v", w, tt.wait)
					}
					drain.Begin(clock.Now().Add(end))
					if !cut {
						// Woken by the drain, it waits for the rest.
						if w := clock.next(t); w != tt.wait {
							t.Fatalf("second request held on for %v, want %v", w, tt.wait)
						}
						clock.release <- struct{}{}
					}
					var out Outcome
					select {
					case out = <-done:
					case <-time.After(10 * time.Second):
						// A bound on a failing test, not a wait for time
						// to pass: the test's context frees the request.
						t.Fatal("the held request was not answered after the drain began")
					}
					switch {
					case cut && (out.Verdict != Unavailable || out.RetryAfter != tt.wait || !errors.Is(out.Err, ErrDrained)):
						t.Errorf("held past the drain's end: %v, retry after %v, err %v; want unavailable, retry after %v, ErrDrained", out.Verdict, out.RetryAfter, out.Err, tt.wait)
					case !cut && (out.Verdict != Allow || out.Waited != tt.wait):
						t.Errorf("held within the drain: %v after %v (err %v), want allow after %v", out.Verdict, out.Waited, out.Err, tt.wait)
					}
					switch {
					case cut && tt.observed == "" && len(rec.events) != 0:
						t.Errorf("a window's wait cut by the drain was observed: %+v", rec.events)
					case cut && tt.observed != "" && (len(rec.events) != 1 || rec.events[0].Result() != tt.observed):
						t.Errorf("cut by the drain: events %+v, want one, %s", rec.events, tt.observed)
					}
				})
			}
		}
	}
}

// A drain is not put off: a second Begin with a later end changes
// nothing. The zero Drain has not begun, and a nil one never does.
func TestDrainBegin(t *testing.T) {
	var nilDrain *Drain
	if _, ok := nilDrain.ending(); ok {
		t.Error("a nil Drain has begun")
	}
	var d Drain
	if _, ok := d.ending(); ok {
		t.Error("the zero Drain has begun")
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d.Begin(at)
	d.Begin(at.Add(time.Hour))
	if end, ok := d.ending(); !ok || !end.Equal(at) {
		t.Errorf("after Begin twice: ends at %v (%t), want %v", end, ok, at)
	}
}
