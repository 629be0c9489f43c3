package policy

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
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
// the local store, the store having failed, is cut short: Unavailable
// and not observed, as when the store decides its turn.
func TestLocalTurnCutShortNotObserved(t *testing.T) {
	for _, store := range []string{"shared", "local"} {
		t.Run(store, func(t *testing.T) {
			clock := endingClock{ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
			rec := &keyRecorder{}
			var st sluice.Store = downStore{}
			if store == "shared" {
				st = memory.New(memory.Options{Clock: clock})
			}
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
				if cut && (out.Verdict != Unavailable || len(rec.events) != 0) {
					t.Errorf("request %d, its turn's wait cut short: %v, events %+v; want unavailable, none observed", i+1, out.Verdict, rec.events)
				}
				if !cut && (out.Verdict != Allow || len(rec.events) != 1) {
					t.Errorf("request %d: %v, events %+v; want allow, one event", i+1, out.Verdict, rec.events)
				}
			}
		})
	}
}
