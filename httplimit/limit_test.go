package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// keyedEnv is a handler behind Limit, on a fake clock.
type keyedEnv struct {
	clock *ratetest.Clock
	l     *sluice.Limiter
	h     http.Handler
	store *switchStore
}

func newKeyedEnv(t *testing.T, name string, key KeyFunc, o LimitOptions, limits ...string) *keyedEnv {
	t.Helper()
	return newKeyedEnvAt(t, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), name, key, o, limits...)
}

// newFallbackEnv is a limiter named api, of limit, over a Fallback of
// opts (on the env's clock) in front of a memory store that the test
// takes down and brings back (e.store.down), and Limit's middleware over
// it, keyed by client address, in front of a handler that answers 204.
func newFallbackEnv(t *testing.T, opts sluice.FallbackOptions, limit string) *keyedEnv {
	t.Helper()
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	primary := &switchStore{Store: memory.New(memory.Options{Clock: clock})}
	opts.Clock = clock
	l, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "api", Limits: []rate.Limit{rate.MustParseLimit(limit)},
		Store: sluice.NewFallback(primary, opts), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return &keyedEnv{clock: clock, l: l, store: primary,
		h: Limit(l, ByClientIP(nil), LimitOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))}
}

// newKeyedEnvAt is newKeyedEnv with its fake clock at start.
func newKeyedEnvAt(t *testing.T, start time.Time, name string, key KeyFunc, o LimitOptions, limits ...string) *keyedEnv {
	t.Helper()
	clock := ratetest.NewClock(start)
	var ls []rate.Limit
	for _, s := range limits {
		l, err := rate.ParseLimit(s)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	store := &switchStore{Store: memory.New(memory.Options{Clock: clock})}
	l, err := sluice.NewLimiter(sluice.LimiterOptions{Name: name, Limits: ls, Store: store, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return &keyedEnv{clock: clock, l: l, h: Limit(l, key, o)(next), store: store}
}

func (e *keyedEnv) do(remote string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

// TestLimitByClientIP: each client address has its own quota, a
// forwarding header from an untrusted peer is not believed, and the
// answers carry the same headers and problem body as Middleware's.
func TestLimitByClientIP(t *testing.T) {
	e := newKeyedEnv(t, "api", ByClientIP(nil), LimitOptions{}, "2/m burst 2")
	a, b := "192.0.2.1:1000", "192.0.2.2:1000"
	expect(t, "a 1", e.do(a), http.StatusNoContent, map[string]string{
		"RateLimit-Policy":      `"api";q=2;w=60`,
		"RateLimit":             `"api";r=1;t=30`,
		"X-RateLimit-Limit":     "2",
		"X-RateLimit-Remaining": "1",
		"X-RateLimit-Reset":     "30",
		"Retry-After":           "",
	}, nil)
	expect(t, "a 2, claiming another address", e.do(a, "X-Forwarded-For", "198.51.100.9"), http.StatusNoContent, map[string]string{
		"RateLimit": `"api";r=0;t=60`,
	}, nil)
	expect(t, "a 3", e.do(a), http.StatusTooManyRequests, map[string]string{
		"RateLimit":             `"api";r=0;t=30`,
		"X-RateLimit-Remaining": "0",
		"Retry-After":           "30",
	}, map[string]any{
		"type": "about:blank", "title": "Too Many Requests", "status": 429.0,
		"detail":            `rate limited by "api" (limit gcra 2/m burst 2); retry in 30s`,
		"retry_after":       30.0,
		"violated-policies": []any{"api"},
	})
	expect(t, "b 1", e.do(b), http.StatusNoContent, map[string]string{"X-RateLimit-Remaining": "1"}, nil)
	e.clock.Advance(30 * time.Second)
	expect(t, "a after Retry-After", e.do(a), http.StatusNoContent, map[string]string{"X-RateLimit-Remaining": "0"}, nil)
}

// TestLimitTrustedProxy: behind a trusted proxy the client it names is
// the key.
func TestLimitTrustedProxy(t *testing.T) {
	res, err := clientip.New(clientip.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	e := newKeyedEnv(t, "api", ByClientIP(res), LimitOptions{}, "1/m")
	proxy := "10.1.1.1:5000"
	expect(t, "client 1", e.do(proxy, "X-Forwarded-For", "198.51.100.1"), http.StatusNoContent, nil, nil)
	expect(t, "client 2", e.do(proxy, "X-Forwarded-For", "198.51.100.2"), http.StatusNoContent, nil, nil)
	expect(t, "client 1 again", e.do(proxy, "X-Forwarded-For", "198.51.100.1"), http.StatusTooManyRequests, nil, nil)
}

// TestLimitSeveral: with several limits, the headers report the most
// restrictive, the body names the limits that refused by name.N, and the
// middleware shares its state with the Limiter's own methods.
func TestLimitSeveral(t *testing.T) {
	byHeader := func(r *http.Request) string { return r.Header.Get("X-Api-Key") }
	e := newKeyedEnv(t, "per-key", byHeader, LimitOptions{NoLegacyHeaders: true}, "10/s", "fixed_window 3/h")
	key := []string{"X-Api-Key", "k1"}
	expect(t, "1", e.do("192.0.2.1:1", key...), http.StatusNoContent, map[string]string{
		"RateLimit-Policy":  `"per-key.2";q=3;w=3600`,
		"RateLimit":         `"per-key.2";r=2;t=3600`,
		"X-RateLimit-Limit": "",
	}, nil)
	if d, err := e.l.Allow(context.Background(), "k1"); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("Limiter.Allow on the middleware's key: %+v, %v; want allowed with 1 left", d, err)
	}
	expect(t, "3", e.do("192.0.2.1:1", key...), http.StatusNoContent, map[string]string{"RateLimit": `"per-key.2";r=0;t=3600`}, nil)
	expect(t, "4", e.do("192.0.2.1:1", key...), http.StatusTooManyRequests, map[string]string{
		"RateLimit-Policy": `"per-key.2";q=3;w=3600`,
		"Retry-After":      "3600",
	}, map[string]any{
		"type": "about:blank", "title": "Too Many Requests", "status": 429.0,
		"detail":            `rate limited by "per-key.2" (limit fixed_window 3/h); retry in 3600s`,
		"retry_after":       3600.0,
		"violated-policies": []any{"per-key.2"},
	})
	expect(t, "another key", e.do("192.0.2.1:1", "X-Api-Key", "k2"), http.StatusNoContent, nil, nil)
}

// TestLimitBothRefuse: when several limits refuse, the body names them
// all, the longest wait first, and the headers and Retry-After report
// that one.
func TestLimitBothRefuse(t *testing.T) {
	e := newKeyedEnv(t, "api", ByClientIP(nil), LimitOptions{}, "2/s", "fixed_window 3/h")
	a := "192.0.2.1:1"
	expect(t, "1", e.do(a), http.StatusNoContent, nil, nil)
	e.clock.Advance(time.Second)
	expect(t, "2", e.do(a), http.StatusNoContent, nil, nil)
	expect(t, "3, the last of both", e.do(a), http.StatusNoContent, map[string]string{"X-RateLimit-Remaining": "0"}, nil)
	expect(t, "4", e.do(a), http.StatusTooManyRequests, map[string]string{
		"RateLimit-Policy": `"api.2";q=3;w=3600`,
		"Retry-After":      "3599",
	}, map[string]any{
		"type": "about:blank", "title": "Too Many Requests", "status": 429.0,
		"detail":            `rate limited by "api.2" (limit fixed_window 3/h); retry in 3599s`,
		"retry_after":       3599.0,
		"violated-policies": []any{"api.2", "api.1"},
	})
}

// TestLimitStoreDown: a store that cannot decide gets the request a 503,
// and the handler is not called.
func TestLimitStoreDown(t *testing.T) {
	for _, limits := range [][]string{{"5/s"}, {"5/s", "100/h"}} {
		e := newKeyedEnv(t, "", ByClientIP(nil), LimitOptions{}, limits...)
		e.store.down.Store(true)
		expect(t, "down", e.do("192.0.2.1:1"), http.StatusServiceUnavailable, map[string]string{
			"Retry-After": "1", "RateLimit": "", "X-RateLimit-Limit": "",
		}, map[string]any{
			"type": "about:blank", "title": "Service Unavailable", "status": 503.0,
			"detail": "the rate limiter is unavailable; retry in 1s", "retry_after": 1.0,
		})
		e.store.down.Store(false)
		expect(t, "back", e.do("192.0.2.1:1"), http.StatusNoContent, nil, nil)
	}
}

// TestLimitLeakyBucket: a leaky_bucket's request waits for its turn on
// the limiter's clock before it is served; one whose request ends first
// is not served.
func TestLimitLeakyBucket(t *testing.T) {
	e := newKeyedEnv(t, "shaped", ByClientIP(nil), LimitOptions{}, "leaky_bucket 2/s burst 4")
	start := e.clock.Now()
	for i := range 3 {
		expect(t, "in turn", e.do("192.0.2.1:1"), http.StatusNoContent, nil, nil)
		if waited, want := e.clock.Now().Sub(start), time.Duration(i)*500*time.Millisecond; waited != want {
			t.Errorf("request %d served after %v, want %v", i+1, waited, want)
		}
		start = e.clock.Now().Add(-time.Duration(i) * 500 * time.Millisecond)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	ctx, cancel := context.WithCancel(r.Context())
	cancel()
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r.WithContext(ctx))
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("a request that ended while waiting for its turn: %d, want 503", w.Code)
	}
}

// TestLimitNamesAndPanics: a limiter without a name is "limit" in the
// headers; nil arguments panic at once, not at the first request.
func TestLimitNamesAndPanics(t *testing.T) {
	e := newKeyedEnv(t, "", ByClientIP(nil), LimitOptions{NoLegacyHeaders: true}, "5/s")
	expect(t, "unnamed", e.do("192.0.2.1:1"), http.StatusNoContent, map[string]string{"RateLimit-Policy": `"limit";q=5;w=1`}, nil)
	for name, f := range map[string]func(){
		"nil limiter": func() { Limit(nil, ByClientIP(nil), LimitOptions{}) },
		"nil key":     func() { Limit(e.l, nil, LimitOptions{}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestLimitOverFallback: over a sluice.Fallback whose store is down, a
// fail-closed refusal is a 503 that blames no limit, a fail-open pass
// carries no quota it did not decide, and a local decision answers as
// the store would.
func TestLimitOverFallback(t *testing.T) {
	for _, c := range []struct {
		mode    sluice.FailureMode
		status  int
		headers map[string]string
	}{
		{sluice.FailClosed, http.StatusServiceUnavailable, map[string]string{"RateLimit": "", "X-RateLimit-Remaining": "", "Retry-After": "1"}},
		{sluice.FailOpen, http.StatusNoContent, map[string]string{"RateLimit": "", "X-RateLimit-Remaining": "", "Retry-After": ""}},
		{sluice.FailLocal, http.StatusNoContent, map[string]string{"RateLimit": `"api";r=4;t=12`, "Retry-After": ""}},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			e := newFallbackEnv(t, sluice.FallbackOptions{Mode: c.mode}, "5/m")
			e.store.down.Store(true)
			var body map[string]any
			if c.status == http.StatusServiceUnavailable {
				body = map[string]any{
					"type": "about:blank", "title": "Service Unavailable", "status": 503.0,
					"detail": "the rate limiter is unavailable; retry in 1s", "retry_after": 1.0,
				}
			}
			expect(t, "store down", e.do("192.0.2.1:1"), c.status, c.headers, body)
		})
	}
}

// TestLimitMaxDelay: a leaky_bucket's request whose turn is further away
// than MaxDelay, or than its deadline leaves, is refused at once.
func TestLimitMaxDelay(t *testing.T) {
	e := newKeyedEnv(t, "q", ByClientIP(nil), LimitOptions{MaxDelay: 2 * time.Second}, "leaky_bucket 1/m burst 3")
	expect(t, "first, no wait", e.do("192.0.2.1:1"), http.StatusNoContent, nil, nil)
	start := e.clock.Now()
	expect(t, "a turn a minute away", e.do("192.0.2.1:1"), http.StatusTooManyRequests, nil, nil)
	if e.clock.Now() != start {
		t.Errorf("the refused request waited %v", e.clock.Now().Sub(start))
	}

	// A deadline is real time: the fake clock starts at the real one.
	e = newKeyedEnvAt(t, time.Now(), "q", ByClientIP(nil), LimitOptions{}, "leaky_bucket 1/m burst 3")
	start = e.clock.Now()
	expect(t, "first, no wait", e.do("192.0.2.1:1"), http.StatusNoContent, nil, nil)
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r.WithContext(ctx))
	if w.Code != http.StatusTooManyRequests {
		t.Errorf("a turn a minute away with 2s to the deadline: %d, want 429", w.Code)
	}
	expect(t, "no MaxDelay, no deadline: waits its turn", e.do("192.0.2.1:1"), http.StatusNoContent, nil, nil)
	if waited := e.clock.Now().Sub(start); waited != time.Minute {
		t.Errorf("waited %v, want a minute", waited)
	}
}

// TestLimitSkipAndKeys: skipped requests bypass the limiter; a client's
// key is its address as l.Allow takes it.
func TestLimitSkipAndKeys(t *testing.T) {
	skipHealth := func(r *http.Request) bool { return r.URL.Path == "/healthz" }
	e := newKeyedEnv(t, "api", ByClientIP(nil), LimitOptions{Skip: skipHealth}, "2/m burst 2")
	for range 3 {
		r := httptest.NewRequest("GET", "/healthz", nil)
		r.RemoteAddr = "192.0.2.1:1"
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		expect(t, "skipped", w, http.StatusNoContent, map[string]string{"RateLimit": ""}, nil)
	}
	if d, err := e.l.Allow(context.Background(), "192.0.2.1"); err != nil || d.Remaining != 1 {
		t.Fatalf("Allow(192.0.2.1) = %+v, %v: the skipped requests counted, or the key differs", d, err)
	}
	expect(t, "the same client's request", e.do("192.0.2.1:1"), http.StatusNoContent, map[string]string{"X-RateLimit-Remaining": "0"}, nil)
}

// TestLimitFailLocalReportsTheShare: over a FailLocal Fallback of 4
// instances, a decision of the local store reports the instance's share
// of the limit (25/m of 100/m), the quota its remaining counts down from,
// in every header and in a refusal's body; a decision of the primary
// reports the whole limit, before the outage and after it.
func TestLimitFailLocalReportsTheShare(t *testing.T) {
	e := newFallbackEnv(t, sluice.FallbackOptions{Mode: sluice.FailLocal, Instances: 4}, "100/m")
	primary := e.store
	a := "192.0.2.1:1"
	whole := map[string]string{
		"RateLimit-Policy":      `"api";q=100;w=60`,
		"RateLimit":             `"api";r=99;t=1`,
		"X-RateLimit-Limit":     "100",
		"X-RateLimit-Remaining": "99",
	}
	expect(t, "primary up", e.do(a), http.StatusNoContent, whole, nil)

	primary.down.Store(true)
	expect(t, "primary down", e.do(a), http.StatusNoContent, map[string]string{
		"RateLimit-Policy":      `"api";q=25;w=60`,
		"RateLimit":             `"api";r=24;t=3`,
		"X-RateLimit-Limit":     "25",
		"X-RateLimit-Remaining": "24",
	}, nil)
	for range 24 {
		e.do(a)
	}
	expect(t, "the share spent", e.do(a), http.StatusTooManyRequests, map[string]string{
		"RateLimit-Policy":      `"api";q=25;w=60`,
		"RateLimit":             `"api";r=0;t=3`,
		"X-RateLimit-Limit":     "25",
		"X-RateLimit-Remaining": "0",
		"Retry-After":           "3",
	}, map[string]any{
		"type": "about:blank", "title": "Too Many Requests", "status": 429.0,
		"detail":            `rate limited by "api" (limit gcra 25/m); retry in 3s`,
		"retry_after":       3.0,
		"violated-policies": []any{"api"},
	})

	// The next probe, after the backoff, finds the primary back.
	primary.down.Store(false)
	e.clock.Advance(time.Second)
	expect(t, "primary back", e.do("192.0.2.2:1"), http.StatusNoContent, whole, nil)
}

// TestLimitMaxDelayBucket: under a gcra limit, MaxDelay holds a request
// past the burst for its unit, reserved, when the unit refills within
// MaxDelay and within what the request's deadline leaves; it refuses the
// request at once otherwise, and without a MaxDelay.
func TestLimitMaxDelayBucket(t *testing.T) {
	e := newKeyedEnv(t, "q", ByClientIP(nil), LimitOptions{MaxDelay: 2 * time.Minute}, "gcra 1/m burst 1")
	start := e.clock.Now()
	for i, want := range []time.Duration{0, time.Minute, 2 * time.Minute} {
		// A held request's reset counts from when it goes ahead: its
		// unit came due then, and the bucket is full a minute later.
		expect(t, fmt.Sprint("request ", i+1), e.do("192.0.2.1:1"), http.StatusNoContent, map[string]string{"X-RateLimit-Reset": "60"}, nil)
		if got := e.clock.Now().Sub(start); got != want {
			t.Errorf("request %d went ahead at +%v, want +%v", i+1, got, want)
		}
	}
	// Back at the start, as a request that came with the first three
	// would: its unit comes in three minutes, more than MaxDelay.
	e.clock.Advance(-2 * time.Minute)
	before := e.clock.Now()
	expect(t, "a unit past MaxDelay", e.do("192.0.2.1:1"), http.StatusTooManyRequests, nil, nil)
	if e.clock.Now() != before {
		t.Errorf("the refused request waited %v", e.clock.Now().Sub(before))
	}

	// A deadline is real time: the fake clock starts at the real one.
	e = newKeyedEnvAt(t, time.Now(), "q", ByClientIP(nil), LimitOptions{MaxDelay: 2 * time.Minute}, "gcra 1/m burst 1")
	expect(t, "first, no wait", e.do("192.0.2.1:1"), http.StatusNoContent, nil, nil)
	start = e.clock.Now()
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r.WithContext(ctx))
	if w.Code != http.StatusTooManyRequests || e.clock.Now() != start {
		t.Errorf("a unit a minute away with 2s to the deadline: %d after %v, want 429 at once", w.Code, e.clock.Now().Sub(start))
	}

	e = newKeyedEnv(t, "q", ByClientIP(nil), LimitOptions{}, "gcra 1/m burst 1")
	expect(t, "first, no wait", e.do("192.0.2.1:1"), http.StatusNoContent, nil, nil)
	expect(t, "no MaxDelay: refused", e.do("192.0.2.1:1"), http.StatusTooManyRequests, nil, nil)
}
