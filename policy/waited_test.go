package policy

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// An Event says how long the policy held its request back: the
// max_delay wait of a policy that refused it at first, under every
// algorithm, and a leaky_bucket's turn. The wait ends before the request
// is decided again, whose Decision then carries no Delay: without
// Waited an Observer would count a request admitted after a second's
// wait as one admitted at once. A policy that matched the request
// without holding it back (here "other", and the shadow "next") held it
// for nothing.
func TestEventWaited(t *testing.T) {
	for _, limit := range []string{"gcra 1/s", "token_bucket 1/s", "fixed_window 1/s", "sliding_window 1/s", "leaky_bucket 1/s burst 5"} {
		t.Run(limit, func(t *testing.T) {
			clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			rec := &keyRecorder{}
			e := generation(t, fmt.Sprintf(`
policies:
  - name: held
    limits: [%q]
    max_delay: 2s
  - name: other
    limits: ["100/m"]
  - name: next
    shadow: true
    limits: ["100/m"]
`, limit), memory.New(memory.Options{Clock: clock}), clock, Options{Observer: rec})
			// The second request waits: a second, or two for a sliding
			// window, whose previous window still weighs in.
			for i, wait := range []bool{false, true} {
				rec.events = nil
				r := httptest.NewRequest("GET", "/", nil)
				out := e.Enforce(t.Context(), &Request{HTTP: r, Header: r.Header, Client: netip.MustParsePrefix("192.0.2.1/32")})
				out.Done()
				if out.Verdict != Allow || (out.Waited > 0) != wait {
					t.Fatalf("request %d: %v after %v, want allow, after a wait: %v", i+1, out.Verdict, out.Waited, wait)
				}
				want := out.Waited
				waited := map[string]time.Duration{}
				for _, ev := range rec.events {
					waited[ev.Policy.Name] = ev.Waited
				}
				if len(rec.events) != 3 || waited["held"] != want || waited["other"] != 0 || waited["next"] != 0 {
					t.Errorf("request %d: %d events, waited %v; want held %v, other and next 0", i+1, len(rec.events), waited, want)
				}
			}
		})
	}
}

// A leaky_bucket's turn waited in the local store, Redis having failed
// under on_store_error: local, is a wait of its policy's too.
func TestEventWaitedLocalFallback(t *testing.T) {
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rec := &keyRecorder{}
	e := generation(t, `
policies:
  - name: shaped
    limits: ["leaky_bucket 1/s burst 5"]
    max_delay: 10s
    on_store_error: local
`, downStore{}, clock, Options{Observer: rec})
	for i, want := range []time.Duration{0, time.Second} {
		rec.events = nil
		r := httptest.NewRequest("GET", "/", nil)
		out := e.Enforce(t.Context(), &Request{HTTP: r, Header: r.Header})
		out.Done()
		if len(rec.events) != 1 || out.Waited != want || rec.events[0].Waited != want {
			t.Errorf("request %d: waited %v, events %+v; want one event, the request and it waited %v", i+1, out.Waited, rec.events, want)
		}
	}
}

// endingClock is a fake clock on which every wait is cut short, as by the
// end of the request's context while it waits.
type endingClock struct{ *ratetest.Clock }

func (endingClock) Sleep(context.Context, time.Duration) error { return context.Canceled }

// A request whose context ends while it waits its leaky_bucket turn in
// the local store, the store having failed, is cut short: Unavailable,
// and observed as held, its turn taken, as when the store decides its
// turn.
func TestLocalTurnCutShortObserved(t *testing.T) {
	for _, store := range []string{"shared", "local"} {
		t.Run(store, func(t *testing.T) {
			clock := endingClock{ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
			rec := &keyRecorder{}
			st := storeOf(store, clock)
			e := generation(t, `
policies:
  - name: shaped
    limits: ["leaky_bucket 1/s burst 5"]
    on_store_error: local
`, st, clock, Options{Observer: rec})
			for i, cut := range []bool{false, true} {
				rec.events = nil
				r := httptest.NewRequest("GET", "/", nil)
				out := e.Enforce(t.Context(), &Request{HTTP: r, Header: r.Header})
				out.Done()
				if cut && (out.Verdict != Unavailable || len(rec.events) != 1 || rec.events[0].Result() != ResultThrottled) {
					t.Errorf("request %d, its turn's wait cut short: %v, events %+v; want unavailable, observed as throttled", i+1, out.Verdict, rec.events)
				}
				if !cut && (out.Verdict != Allow || len(rec.events) != 1) {
					t.Errorf("request %d: %v, events %+v; want allow, one event", i+1, out.Verdict, rec.events)
				}
			}
		})
	}
}

// deadlineClock is a fake clock whose waits end at the context's
// deadline, on the fake clock's timeline, and whose first wait first runs
// meanwhile, as other requests would while one waits.
type deadlineClock struct {
	*ratetest.Clock
	meanwhile func()
}

func (c *deadlineClock) Sleep(ctx context.Context, d time.Duration) error {
	if f := c.meanwhile; f != nil {
		c.meanwhile = nil
		f()
	}
	if dl, ok := ctx.Deadline(); ok && c.Now().Add(d).After(dl) {
		c.Set(dl)
		return context.DeadlineExceeded
	}
	return c.Clock.Sleep(ctx, d)
}

// A request that waited out one policy's refusal (max_delay) takes no
// leaky_bucket turn its deadline cannot reach: its bound is what is left
// after the wait, not before. It is refused then, and the queue holds no
// turn of a request that will have gone by then.
func TestLeakyTurnAfterMaxDelayWaitWithinDeadline(t *testing.T) {
	// The context's deadline is on the fake clock's timeline, which must
	// then run ahead of the real one: context ends it at that real time.
	clock := &deadlineClock{Clock: ratetest.NewClock(time.Now().Add(time.Hour).Truncate(time.Second))}
	store := memory.New(memory.Options{Clock: clock})
	rec := &keyRecorder{}
	e := generation(t, `
policies:
  - name: shape
    limits: ["leaky_bucket 10/s burst 50"]
    max_delay: 10s
  - name: quota
    limits: ["fixed_window 1/s"]
    max_delay: 2s
`, store, clock, Options{Observer: rec})
	send := func(ctx context.Context) Outcome {
		r := httptest.NewRequest("GET", "/", nil)
		out := e.Enforce(ctx, &Request{HTTP: r, Header: r.Header, Client: netip.MustParsePrefix("192.0.2.1/32")})
		out.Done()
		return out
	}
	if out := send(t.Context()); out.Verdict != Allow {
		t.Fatalf("first request: %v", out.Verdict)
	}
	var key string
	for _, ev := range rec.events {
		if ev.Policy.Name == "shape" {
			key = ev.Key
		}
	}
	shape := rate.MustParseLimit("leaky_bucket 10/s burst 50")
	// While the second request waits out quota's second, 16 others join
	// the queue: its turn would come 1.7s after the first request, 0.7s
	// after its wait, past its deadline.
	clock.meanwhile = func() {
		for range 16 {
			if d, err := store.Decide(t.Context(), rate.Request{Key: key, Limit: shape, Cost: 1}); err != nil || !d.Allowed {
				t.Fatalf("joining the queue: %v %v", d, err)
			}
		}
	}
	start := clock.Now()
	ctx, cancel := context.WithDeadline(t.Context(), start.Add(1500*time.Millisecond))
	defer cancel()
	out := send(ctx)
	if took := clock.Now().Sub(start); out.Verdict != Refuse || took != time.Second {
		t.Errorf("a turn beyond the deadline after the wait: %v (%v) after %v, want refused after the 1s wait", out.Verdict, out.Err, took)
	}
	look, err := store.Decide(t.Context(), rate.Request{Key: key, Limit: shape, Cost: 0})
	if want := 1700*time.Millisecond - clock.Now().Sub(start); err != nil || look.Delay != want {
		t.Errorf("the queue's next turn in %v (%v), want %v: the refused request took none", look.Delay, err, want)
	}
}

// max_delay holds whichever store decides: with the store failing under
// on_store_error: local, a request the local store refuses but would pass
// within max_delay waits, as it does when the store decides, rather than
// being refused at once. Each step is one request at the same instant;
// the waits are the ones the store decides too, and the Event says so.
func TestLocalFallbackWaitsMaxDelay(t *testing.T) {
	for _, tt := range []struct {
		limit string
		waits []time.Duration // of requests 1, 2, ..., all allowed
	}{
		{"gcra 1/s", []time.Duration{0, time.Second}},
		{"token_bucket 1/s", []time.Duration{0, time.Second}},
		{"fixed_window 1/s", []time.Duration{0, time.Second}},
		{"gcra 2/s burst 2", []time.Duration{0, 0, 500 * time.Millisecond}},
		{"leaky_bucket 1/s burst 5", []time.Duration{0, time.Second, time.Second}},
	} {
		for _, store := range []string{"shared", "local"} {
			t.Run(tt.limit+"/"+store, func(t *testing.T) {
				clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
				st := storeOf(store, clock)
				rec := &keyRecorder{}
				e := generation(t, fmt.Sprintf(`
policies:
  - name: held
    limits: [%q]
    max_delay: 2s
    on_store_error: local
`, tt.limit), st, clock, Options{Observer: rec})
				for i, want := range tt.waits {
					rec.events = nil
					start := clock.Now()
					r := httptest.NewRequest("GET", "/", nil)
					out := e.Enforce(t.Context(), &Request{HTTP: r, Header: r.Header})
					out.Done()
					if out.Verdict != Allow || out.Waited != want || clock.Now().Sub(start) != want {
						t.Errorf("request %d: %v after waiting %v (%v on the clock), retry_after %v; want allow after %v",
							i+1, out.Verdict, out.Waited, clock.Now().Sub(start), out.RetryAfter, want)
					}
					if len(rec.events) != 1 || rec.events[0].Waited != want || !rec.events[0].Decision.Allowed {
						t.Errorf("request %d: events %+v; want one, allowed, Waited %v", i+1, rec.events, want)
					}
				}
			})
		}
	}
}

// A wait max_delay cannot cover is refused at once, locally as in the
// store, with the wait after which max_delay would cover it as its
// Retry-After: 5s away, the unit can be held for from 3s on.
func TestLocalFallbackRefusesBeyondMaxDelay(t *testing.T) {
	for _, store := range []string{"shared", "local"} {
		t.Run(store, func(t *testing.T) {
			clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			st := storeOf(store, clock)
			e := generation(t, `
policies:
  - name: held
    limits: ["gcra 1/5s"]
    max_delay: 2s
    on_store_error: local
`, st, clock, Options{})
			for i, want := range []Verdict{Allow, Refuse} {
				r := httptest.NewRequest("GET", "/", nil)
				out := e.Enforce(t.Context(), &Request{HTTP: r, Header: r.Header})
				out.Done()
				if out.Verdict != want || out.Waited != 0 || (want == Refuse && out.RetryAfter != 3*time.Second) {
					t.Errorf("request %d: %v after waiting %v, retry_after %v; want %v at once", i+1, out.Verdict, out.Waited, out.RetryAfter, want)
				}
			}
		})
	}
}

// scriptStore answers each call with the next of its answers, an error
// for a nil one, and fails once they run out.
type scriptStore struct{ answers []*rate.Decision }

func (s *scriptStore) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	decs := make([]rate.Decision, 1)
	return s.DecideAll(ctx, []rate.Request{r}, decs)
}

func (s *scriptStore) DecideAll(_ context.Context, reqs []rate.Request, decs []rate.Decision) (rate.Decision, error) {
	if len(s.answers) == 0 || s.answers[0] == nil {
		if len(s.answers) > 0 {
			s.answers = s.answers[1:]
		}
		return rate.Decision{}, errors.New("store down")
	}
	d := *s.answers[0]
	s.answers = s.answers[1:]
	for i := range decs {
		decs[i] = d
	}
	return d, nil
}

// max_delay lets a request wait once: one that waited out the store's
// refusal, and whose store then failed, is refused if the local store
// refuses it too, rather than waiting a second time.
func TestMaxDelayWaitsOnceWhenTheStoreFailsAfter(t *testing.T) {
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	// Request 1: the store fails, the local store allows it (its
	// fixed_window 1/s then has room again in a second). Request 2: the
	// store refuses it for half a second; after that wait the store
	// fails, and the local store refuses it for the other half. (A
	// window's refusal is waited out; a bucket reserves its unit instead.)
	st := &scriptStore{answers: []*rate.Decision{nil, {RetryAfter: 500 * time.Millisecond}, nil}}
	e := generation(t, `
policies:
  - name: held
    limits: ["fixed_window 1/s"]
    max_delay: 2s
    on_store_error: local
`, st, clock, Options{})
	for i, want := range []struct {
		v      Verdict
		waited time.Duration
	}{{Allow, 0}, {Refuse, 500 * time.Millisecond}} {
		r := httptest.NewRequest("GET", "/", nil)
		out := e.Enforce(t.Context(), &Request{HTTP: r, Header: r.Header})
		out.Done()
		if out.Verdict != want.v || out.Waited != want.waited {
			t.Errorf("request %d: %v after waiting %v (retry_after %v); want %v after %v", i+1, out.Verdict, out.Waited, out.RetryAfter, want.v, want.waited)
		}
	}
}

// storeOf returns the store the tests above decide against: "shared", a
// memory store on clock, or "local", one that always fails, so that the
// policies' on_store_error: local decides in the local store.
func storeOf(which string, clock rate.Clock) sluice.Store {
	if which == "shared" {
		return memory.New(memory.Options{Clock: clock})
	}
	return downStore{}
}
