package policy

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// overFallback returns an Enforcer of config over a sluice.Fallback in
// mode, whose primary always fails, on a fake clock, with rec as its
// Observer and log as its Logger.
func overFallback(t *testing.T, config string, mode sluice.FailureMode, rec *keyRecorder, log *bytes.Buffer) (*Enforcer, *ratetest.Clock) {
	t.Helper()
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	fb := sluice.NewFallback(downStore{}, sluice.FallbackOptions{Mode: mode, Timeout: -1, RetryAfter: 3 * time.Second, Clock: clock})
	o := Options{Observer: rec}
	if log != nil {
		o.Logger = slog.New(slog.NewTextHandler(log, nil))
	}
	return generation(t, config, fb, clock, o), clock
}

// enforceOne decides one request from 192.0.2.1.
func enforceOne(t *testing.T, e *Enforcer) Outcome {
	t.Helper()
	r := httptest.NewRequest("GET", "/", nil)
	out := e.Enforce(t.Context(), &Request{HTTP: r, Header: r.Header, Client: netip.MustParsePrefix("192.0.2.1/32")})
	out.Done()
	return out
}

// A Fallback that refuses because its primary cannot decide (FailClosed)
// refused for no limit: the request is Unavailable, with the Fallback's
// RetryAfter, no limit to report and no policy violated, and the Observer
// is told of a store failure, as on_store_error: closed would make it. A
// policy's max_delay does not hold it back: waiting would not bring the
// store back, and the wait is the Fallback's, not a limit's.
func TestEnforceOverFailClosedFallback(t *testing.T) {
	for _, config := range []string{
		`{name: api, limits: ["10/s"], on_store_error: closed}`,
		`{name: patient, limits: ["10/s"], max_delay: 5s}`,
	} {
		t.Run(config, func(t *testing.T) {
			rec := &keyRecorder{}
			e, clock := overFallback(t, "policies:\n  - "+config+"\n", sluice.FailClosed, rec, nil)
			start := clock.Now()
			for i := range 2 { // the primary's failure, then the breaker open
				rec.events = nil
				out := enforceOne(t, e)
				if out.Verdict != Unavailable || out.RetryAfter != 3*time.Second || out.Limit != nil || out.Violated != nil || out.Refused != nil {
					t.Errorf("request %d: %v, retry after %v, limit %v, violated %v, refused %v; want unavailable after 3s, blaming no limit",
						i+1, out.Verdict, out.RetryAfter, out.Limit, out.Violated, out.Refused)
				}
				if !errors.Is(out.Err, sluice.ErrStoreDown) {
					t.Errorf("request %d: Err %v, want one wrapping sluice.ErrStoreDown", i+1, out.Err)
				}
				if out.Waited != 0 || clock.Now() != start {
					t.Errorf("request %d: held back %v (clock moved %v), want no wait", i+1, out.Waited, clock.Now().Sub(start))
				}
				if len(rec.events) != 1 {
					t.Fatalf("request %d: %d events, want 1", i+1, len(rec.events))
				}
				if ev := rec.events[0]; !errors.Is(ev.StoreErr, sluice.ErrStoreDown) || ev.Decision.Allowed || ev.Decision.RetryAfter != 3*time.Second {
					t.Errorf("request %d: observed with StoreErr %v, %+v; want the store down, refused for 3s", i+1, ev.StoreErr, ev.Decision)
				}
			}
		})
	}
}

// A Fallback that admits because its primary cannot decide (FailOpen)
// admits for no limit: the request is allowed with no limit to report,
// and the Observer is told of a store failure.
func TestEnforceOverFailOpenFallback(t *testing.T) {
	rec := &keyRecorder{}
	e, _ := overFallback(t, `
policies:
  - {name: api, limits: ["10/s"], on_store_error: closed}
`, sluice.FailOpen, rec, nil)
	for i := range 2 {
		rec.events = nil
		out := enforceOne(t, e)
		if out.Verdict != Allow || out.Limit != nil || !errors.Is(out.Err, sluice.ErrStoreDown) {
			t.Errorf("request %d: %v, limit %v, Err %v; want allow, no limit, the store down", i+1, out.Verdict, out.Limit, out.Err)
		}
		if len(rec.events) != 1 || !errors.Is(rec.events[0].StoreErr, sluice.ErrStoreDown) || !rec.events[0].Decision.Allowed {
			t.Errorf("request %d: events %+v, want one, allowed, with the store down", i+1, rec.events)
		}
	}
}

// A FailLocal Fallback's decision is a limit's, of the local store: the
// request is decided as the store decided it, with the limit reported.
func TestEnforceOverFailLocalFallback(t *testing.T) {
	rec := &keyRecorder{}
	e, _ := overFallback(t, `
policies:
  - {name: api, limits: ["2/m"], on_store_error: closed}
`, sluice.FailLocal, rec, nil)
	for i, want := range []Verdict{Allow, Allow, Refuse} {
		rec.events = nil
		out := enforceOne(t, e)
		if out.Verdict != want || out.Limit == nil || out.Err != nil {
			t.Errorf("request %d: %v, limit %v, Err %v; want %v by the limit", i+1, out.Verdict, out.Limit, out.Err, want)
		}
		if len(rec.events) != 1 || rec.events[0].StoreErr != nil {
			t.Errorf("request %d: events %+v, want one with no store error", i+1, rec.events)
		}
	}
}

// A shadow policy over a fail-closed Fallback would refuse nothing: the
// Fallback's refusal is no limit's. It is observed as a store failure and
// not logged as a refusal it would make.
func TestShadowOverFailClosedFallback(t *testing.T) {
	rec := &keyRecorder{}
	var log bytes.Buffer
	e, _ := overFallback(t, `
policies:
  - {name: trial, shadow: true, limits: ["10/s"]}
`, sluice.FailClosed, rec, &log)
	out := enforceOne(t, e)
	if out.Verdict != Allow {
		t.Errorf("verdict %v, want allow: a shadow policy refuses nothing", out.Verdict)
	}
	if len(rec.events) != 1 || !errors.Is(rec.events[0].StoreErr, sluice.ErrStoreDown) {
		t.Errorf("events %+v, want one with the store down", rec.events)
	}
	if strings.Contains(log.String(), "would refuse") {
		t.Errorf("logged a refusal of the shadow policy:\n%s", log.String())
	}
}

// The Enforcer asks a Fallback who decided on every request: that costs
// no allocation beyond what the store it wraps costs, whoever decides.
func TestEnforceOverFallbackAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops what is put back")
	}
	set, err := Load("test.yaml", []byte(`
policies:
  - {name: api, key: "header:X-API-Key", limits: ["1000000/s"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "k1")
	allocs := func(st sluice.Store) float64 {
		e := NewEnforcer(set, st, Options{})
		enforce := func() {
			out := e.Enforce(t.Context(), &Request{HTTP: r, Header: r.Header})
			out.Done()
		}
		enforce() // a fail mode's breaker opens at the first failure
		return testing.AllocsPerRun(100, enforce)
	}
	base := allocs(memory.New(memory.Options{}))
	// On a clock that stands still, no probe reaches the primary.
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	for _, tt := range []struct {
		name  string
		store sluice.Store
	}{
		{"primary", sluice.NewFallback(memory.New(memory.Options{}), sluice.FallbackOptions{Timeout: -1})},
		{"fail_closed", sluice.NewFallback(downStore{}, sluice.FallbackOptions{Mode: sluice.FailClosed, Timeout: -1, Clock: clock})},
		{"fail_open", sluice.NewFallback(downStore{}, sluice.FallbackOptions{Mode: sluice.FailOpen, Timeout: -1, Clock: clock})},
	} {
		if n := allocs(tt.store); n > base {
			t.Errorf("%s: %v allocations per request, want at most the memory store's %v", tt.name, n, base)
		}
	}
}
