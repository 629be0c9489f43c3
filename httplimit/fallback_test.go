package httplimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// newFallbackMiddlewareEnv is the middleware of config over a
// sluice.Fallback in mode in front of a memory store that the test takes
// down and brings back (e.store.down), all on the env's clock.
func newFallbackMiddlewareEnv(t *testing.T, config string, mode sluice.FailureMode) *env {
	t.Helper()
	set, err := policy.Load("test.yaml", []byte(config))
	if err != nil {
		t.Fatal(err)
	}
	clock := ratetest.NewClock(start)
	primary := &switchStore{Store: memory.New(memory.Options{Clock: clock})}
	fb := sluice.NewFallback(primary, sluice.FallbackOptions{Mode: mode, Timeout: -1, Clock: clock})
	obs := &recorder{}
	o := Options{Options: policy.Options{Clock: clock, Observer: obs, StoreLogs: true}}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	return &env{t: t, clock: clock, store: primary, observer: obs, h: Middleware(set, fb, o)(next)}
}

// TestMiddlewareOverFallback: over a sluice.Fallback whose store is down,
// the policy middleware answers as Limit's does (TestLimitOverFallback):
// a fail-closed refusal is a 503 that blames no limit, a fail-open pass
// carries no quota it did not decide, and a local decision answers as
// the store would. The Observer counts the fail modes' decisions as store
// failures, not as a policy's refusals or passes.
func TestMiddlewareOverFallback(t *testing.T) {
	const config = `
policies:
  - {name: api, limits: ["10/s"], on_store_error: closed}
`
	noQuota := map[string]string{"RateLimit": "", "RateLimit-Policy": "", "X-RateLimit-Limit": "", "X-RateLimit-Remaining": "", "X-RateLimit-Reset": ""}
	for _, c := range []struct {
		mode      sluice.FailureMode
		status    int
		headers   map[string]string
		body      map[string]any
		storeErrs int
	}{
		{sluice.FailClosed, http.StatusServiceUnavailable, noQuota, map[string]any{
			"type": "about:blank", "title": "Service Unavailable", "status": 503.0,
			"detail": "the rate limiter is unavailable; retry in 1s", "retry_after": 1.0,
		}, 1},
		{sluice.FailOpen, http.StatusOK, noQuota, nil, 1},
		{sluice.FailLocal, http.StatusOK, map[string]string{"RateLimit": `"api";r=9;t=1`, "Retry-After": ""}, nil, 0},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			e := newFallbackMiddlewareEnv(t, config, c.mode)
			e.store.down.Store(true)
			w := e.do(req{})
			expect(t, "store down", w, c.status, c.headers, c.body)
			if c.status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") != "1" {
				t.Errorf("Retry-After %q, want 1", w.Header().Get("Retry-After"))
			}
			if _, _, errs := e.observer.count("api"); errs != c.storeErrs {
				t.Errorf("observer saw %d store errors, want %d", errs, c.storeErrs)
			}
			// Once a probe finds the store back, the policy decides again.
			e.store.down.Store(false)
			e.clock.Advance(time.Second)
			expect(t, "store back", e.do(req{}), http.StatusOK, map[string]string{"RateLimit": `"api";r=9;t=1`}, nil)
		})
	}
}
