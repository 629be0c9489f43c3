package policy

import (
	"context"
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

// stillClock is a fake clock whose sleeps return at once without moving
// it, so that requests held back one after another all arrive at one
// instant, as concurrent requests do.
type stillClock struct{ *ratetest.Clock }

func (stillClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// max_delay on a gcra or token_bucket limit holds a request past the
// burst for its unit, reserved, as far as max_delay reaches: of 14
// requests at once under 10/s burst 9 with max_delay 400ms, 9 pass at
// once, the next 4 are held 100, 200, 300 and 400ms, each for a unit of
// its own, and the 14th is refused at once, not held only to be refused
// (NGINX's limit_req burst=12 delay=8). Before, every request past the
// burst waited the same 100ms and was decided again at one instant, when
// one unit at most had come back.
func TestMaxDelayReservesBucketUnits(t *testing.T) {
	for _, alg := range []string{"gcra", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			clock := stillClock{Clock: ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
			e := generation(t, fmt.Sprintf(`
policies:
  - name: api
    limits: ["%s 10/s burst 9"]
    max_delay: 400ms
`, alg), memory.New(memory.Options{Clock: clock}), clock, Options{})
			for i := range 14 {
				r := httptest.NewRequest("GET", "/", nil)
				out := e.Enforce(t.Context(), &Request{HTTP: r, Header: r.Header})
				out.Done()
				var want time.Duration
				if i >= 9 {
					want = time.Duration(i-8) * 100 * time.Millisecond
				}
				switch {
				case i == 13:
					if out.Verdict != Refuse || out.Waited != 0 || out.RetryAfter != 100*time.Millisecond {
						t.Errorf("request 14: %v after %v, retry %v; want refused at once, retry in 100ms", out.Verdict, out.Waited, out.RetryAfter)
					}
				case out.Verdict != Allow || out.Waited != want:
					t.Errorf("request %d: %v after %v; want allowed after %v", i+1, out.Verdict, out.Waited, want)
				}
			}
		})
	}
}

// A request that waited out a window's refusal (max_delay) is held for a
// bucket's unit only as long as max_delay has left: in all it is held no
// longer than max_delay. Here it waits 900ms for its user's window, while
// others from its address reserve the address's units; its own comes
// 200ms after the wait, past what is left of the second, so it is
// refused, not held 1.1s.
func TestMaxDelayBoundsAWaitAndAUnitTogether(t *testing.T) {
	clock := &deadlineClock{Clock: ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 100_000_000, time.UTC))}
	store := memory.New(memory.Options{Clock: clock})
	rec := &keyRecorder{}
	e := generation(t, `
policies:
  - name: per-ip
    key: ip
    limits: ["gcra 10/s burst 1"]
    max_delay: 1s
  - name: per-user
    key: "header:X-User"
    limits: ["fixed_window 1/s"]
    max_delay: 1s
`, store, clock, Options{Observer: rec})
	send := func(user string) Outcome {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-User", user)
		out := e.Enforce(t.Context(), &Request{HTTP: r, Header: r.Header, Client: netip.MustParsePrefix("192.0.2.1/32")})
		out.Done()
		return out
	}
	if out := send("u1"); out.Verdict != Allow || out.Waited != 0 {
		t.Fatalf("first request: %v after %v", out.Verdict, out.Waited)
	}
	var ipKey string
	for _, ev := range rec.events {
		if ev.Policy.Name == "per-ip" {
			ipKey = ev.Key
		}
	}
	ip := rate.MustParseLimit("gcra 10/s burst 1")
	clock.meanwhile = func() {
		for i := range 10 {
			if d, err := store.Decide(t.Context(), rate.Request{Key: ipKey, Limit: ip, Cost: 1, MaxDelay: time.Second}); err != nil || !d.Allowed {
				t.Fatalf("another user from the address, %d: %v %v", i, d, err)
			}
		}
	}
	out := send("u1")
	if out.Waited > time.Second || out.Verdict != Refuse {
		t.Errorf("after waiting out its window: %v after %v in all; want refused, held no longer than max_delay (1s)", out.Verdict, out.Waited)
	}
}

// A request whose client leaves while it is held for its unit has spent
// it: the decision is observed, as held (throttled), though the request
// goes no further (Unavailable), rather than vanish from the counts
// while its unit is gone.
func TestHeldRequestGoneIsObserved(t *testing.T) {
	for _, limit := range []string{"gcra 1/s burst 1", "leaky_bucket 1/s burst 3"} {
		clock := &deadlineClock{Clock: ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
		rec := &keyRecorder{}
		e := generation(t, fmt.Sprintf(`
policies:
  - name: held
    limits: [%q]
    max_delay: 5s
`, limit), memory.New(memory.Options{Clock: clock}), clock, Options{Observer: rec})
		r := httptest.NewRequest("GET", "/", nil)
		out := e.Enforce(t.Context(), &Request{HTTP: r, Header: r.Header})
		out.Done()
		rec.events = nil
		ctx, cancel := context.WithCancel(t.Context())
		clock.meanwhile = cancel // the client leaves while held
		out = e.Enforce(ctx, &Request{HTTP: r, Header: r.Header})
		out.Done()
		if out.Verdict != Unavailable {
			t.Errorf("%s: verdict %v, want unavailable: the request went no further", limit, out.Verdict)
		}
		if len(rec.events) != 1 || rec.events[0].Result() != ResultThrottled || rec.events[0].Waited != time.Second {
			t.Errorf("%s: events %+v; want one, throttled after its 1s hold", limit, rec.events)
		}
	}
}

// maxDelays records the MaxDelay of each request it decides.
type maxDelays struct {
	sluice.Store
	seen map[time.Duration]int
}

func (m *maxDelays) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	m.seen[r.MaxDelay]++
	return m.Store.Decide(ctx, r)
}

func (m *maxDelays) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	for _, r := range reqs {
		m.seen[r.MaxDelay]++
	}
	return m.Store.DecideAll(ctx, reqs, out)
}

// Requests whose deadlines, shorter than max_delay, differ by µs ask the
// store with one MaxDelay, not one each: the Redis store's deny cache
// keys a refusal by it, and a flood of such requests would otherwise
// miss it every time.
func TestDeadlineWaitsAreFewValues(t *testing.T) {
	clock := ratetest.NewClock(time.Now().Add(time.Hour).Truncate(time.Second))
	st := &maxDelays{Store: memory.New(memory.Options{Clock: clock}), seen: map[time.Duration]int{}}
	e := generation(t, `
policies:
  - name: api
    limits: ["gcra 1/m burst 1"]
    max_delay: 10s
`, st, clock, Options{})
	for i := range 50 {
		ctx, cancel := context.WithDeadline(t.Context(), clock.Now().Add(5*time.Second+time.Duration(i)*time.Microsecond))
		r := httptest.NewRequest("GET", "/", nil)
		out := e.Enforce(ctx, &Request{HTTP: r, Header: r.Header})
		out.Done()
		cancel()
		if want := i == 0; (out.Verdict == Allow) != want {
			t.Fatalf("request %d: %v", i+1, out.Verdict)
		}
	}
	if len(st.seen) > 2 {
		t.Errorf("50 deadlines a µs apart asked the store with %d MaxDelays, want one or two", len(st.seen))
	}
	// Each within its deadline: 5s less 1µs to four significant bits is
	// 4.83s (see deadline.Wait), not the policy's 10s.
	for d := range st.seen {
		if d <= 0 || d > 4_831_838_208 {
			t.Errorf("the store was asked with MaxDelay %v, want at most 4.831838208s, within the deadline", d)
		}
	}
}

// A deadline gives a gcra limit without max_delay no leave to hold a
// request: beside a window policy with max_delay, under a deadline, a
// request past the gcra's burst is refused at once, not held for a unit
// the deadline could reach.
func TestDeadlineHoldsNoBucketWithoutMaxDelay(t *testing.T) {
	clock := &deadlineClock{Clock: ratetest.NewClock(time.Now().Add(time.Hour).Truncate(time.Second))}
	e := generation(t, `
policies:
  - name: window
    limits: ["fixed_window 100/s"]
    max_delay: 1s
  - name: bucket
    limits: ["gcra 1/s burst 1"]
`, memory.New(memory.Options{Clock: clock}), clock, Options{})
	for i, want := range []Verdict{Allow, Refuse} {
		ctx, cancel := context.WithDeadline(t.Context(), clock.Now().Add(5*time.Second))
		r := httptest.NewRequest("GET", "/", nil)
		out := e.Enforce(ctx, &Request{HTTP: r, Header: r.Header})
		out.Done()
		cancel()
		if out.Verdict != want || out.Waited != 0 {
			t.Errorf("request %d: %v after %v; want %v at once", i+1, out.Verdict, out.Waited, want)
		}
	}
}
