package httplimit

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

const apiConfig = `
policies:
  - name: api
    limits: ["1/s burst 2"]
`

// The allowed and refused paths, every header and the body.
func TestAllowedAndRefused(t *testing.T) {
	e := newEnv(t, apiConfig, Options{}, nil)
	policyHdr := `"api";q=2;w=2`
	steps := []struct {
		name    string
		advance time.Duration
		status  int
		headers map[string]string
		body    map[string]any
	}{
		{"first", 0, 200, map[string]string{
			"RateLimit-Policy": policyHdr, "RateLimit": `"api";r=1;t=1`,
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1", "Retry-After": "",
		}, nil},
		{"second", 0, 200, map[string]string{
			"RateLimit": `"api";r=0;t=2`, "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "2", "Retry-After": "",
		}, nil},
		// Refused, t is the wait, as Retry-After: more quota comes then
		// (the draft's t); X-RateLimit-Reset keeps the time until whole.
		{"refused", 0, 429, map[string]string{
			"RateLimit-Policy": policyHdr, "RateLimit": `"api";r=0;t=1`,
			"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "2",
			"Retry-After": "1", "Cache-Control": "no-store",
		}, map[string]any{
			"type": "about:blank", "title": "Too Many Requests", "status": 429.0,
			"detail":      `rate limited by policy "api" (limit gcra 1/s burst 2); retry in 1s`,
			"retry_after": 1.0, "violated-policies": []any{"api"},
		}},
		// 400 ms later the next unit is still 600 ms away: Retry-After
		// rounds up.
		{"refused again", 400 * time.Millisecond, 429, map[string]string{
			"Retry-After": "1", "RateLimit": `"api";r=0;t=1`, "X-RateLimit-Reset": "2",
		}, nil},
		{"after the wait", 600 * time.Millisecond, 200, map[string]string{
			"RateLimit": `"api";r=0;t=2`, "X-RateLimit-Remaining": "0",
		}, nil},
	}
	for _, s := range steps {
		e.clock.Advance(s.advance)
		w := e.do(req{remote: "203.0.113.7:1000"})
		expect(t, s.name, w, s.status, s.headers, s.body)
		if s.status == 200 && w.Body.String() != "ok" {
			t.Errorf("%s: body %q, want the handler's", s.name, w.Body)
		}
	}
}

func TestHeaderSwitches(t *testing.T) {
	for _, tt := range []struct {
		o               Options
		draft, legacy   bool
		wantRetryAfter  string
		wantProblemType string
	}{
		{Options{}, true, true, "1", "about:blank"},
		{Options{NoDraftHeaders: true}, false, true, "1", "about:blank"},
		{Options{NoLegacyHeaders: true, ProblemType: "https://example.com/probs/rate"}, true, false, "1", "https://example.com/probs/rate"},
		{Options{NoDraftHeaders: true, NoLegacyHeaders: true}, false, false, "1", "about:blank"},
	} {
		e := newEnv(t, `
policies:
  - {name: api, limits: ["1/s burst 1"]}
`, tt.o, nil)
		e.do(req{})
		w := e.do(req{})
		name := fmt.Sprintf("%+v", tt.o)
		if got := w.Header().Get("RateLimit") != ""; got != tt.draft {
			t.Errorf("%s: RateLimit present %v, want %v", name, got, tt.draft)
		}
		if got := w.Header().Get("X-RateLimit-Remaining") != ""; got != tt.legacy {
			t.Errorf("%s: X-RateLimit-Remaining present %v, want %v", name, got, tt.legacy)
		}
		// Retry-After is not a rate limit header: a refusal always has it.
		expect(t, name, w, 429, map[string]string{"Retry-After": tt.wantRetryAfter}, nil)
		if want := `"type":"` + tt.wantProblemType + `"`; !strings.Contains(w.Body.String(), want) {
			t.Errorf("%s: body %s lacks %s", name, w.Body, want)
		}
	}
}

// Retry-After is whole seconds rounded up and never 0: the window ends
// 1 ms, 1000 ms and 1001 ms after the refused request.
func TestRetryAfterRounding(t *testing.T) {
	for _, tt := range []struct {
		left time.Duration
		want string
	}{
		{time.Millisecond, "1"},
		{1000 * time.Millisecond, "1"},
		{1001 * time.Millisecond, "2"},
	} {
		e := newEnv(t, `
policies:
  - {name: w, limits: ["fixed_window 1 per 10s"]}
`, Options{}, nil)
		e.clock.Set(start.Add(10*time.Second - tt.left))
		expect(t, "first", e.do(req{}), 200, nil, nil)
		w := e.do(req{})
		expect(t, tt.left.String()+" left", w, 429, map[string]string{"Retry-After": tt.want}, nil)
	}
}

// A shadow policy decides and reports, but never refuses and sends no
// headers; an enforcing policy beside it is unaffected.
func TestShadow(t *testing.T) {
	e := newEnv(t, `
policies:
  - {name: trial, shadow: true, limits: ["1/s burst 1"]}
  - {name: real, limits: ["10/s burst 10"]}
`, Options{}, nil)
	for i := range 3 {
		w := e.do(req{})
		expect(t, fmt.Sprint("request ", i), w, 200, map[string]string{
			"RateLimit-Policy": `"real";q=10;w=1`, "RateLimit": fmt.Sprintf(`"real";r=%d;t=1`, 9-i),
		}, nil)
	}
	allowed, refused, _ := e.observer.count("trial")
	if allowed != 1 || refused != 2 {
		t.Errorf("shadow policy observed %d allowed, %d refused; want 1 and 2", allowed, refused)
	}
	for _, ev := range e.observer.events {
		if ev.Policy.Name == "trial" && !ev.Shadow {
			t.Error("shadow event not marked Shadow")
		}
	}
	// Shadow alone: no headers at all.
	e = newEnv(t, `
policies:
  - {name: trial, shadow: true, limits: ["1/s burst 1"]}
`, Options{}, nil)
	e.do(req{})
	expect(t, "shadow only", e.do(req{}), 200, map[string]string{"RateLimit": "", "X-RateLimit-Limit": "", "Retry-After": ""}, nil)
}

// max_delay holds back a request that would pass within it, on the
// injected clock (the fake clock's Sleep advances time, never blocks).
func TestThrottled(t *testing.T) {
	e := newEnv(t, `
policies:
  - name: slow
    limits: ["1/s burst 1"]
    max_delay: 1500ms
`, Options{}, nil)
	// None more passes at once (one would be held for its unit).
	expect(t, "first", e.do(req{}), 200, map[string]string{"RateLimit": `"slow";r=0;t=1`}, nil)
	// Held a second for its unit: the bucket is full again a second
	// after the answer.
	w := e.do(req{})
	expect(t, "waited", w, 200, map[string]string{"RateLimit": `"slow";r=0;t=1`, "Retry-After": ""}, nil)
	if slept, n := e.clock.Slept(); slept != time.Second || n != 1 {
		t.Errorf("slept %v in %d sleeps, want 1s in 1", slept, n)
	}
	// Two requests at once: the second would wait 2 s, beyond max_delay.
	// Its Retry-After is when it would be held for its unit within
	// max_delay: in half a second, rounded up.
	e.do(req{})
	e.clock.Advance(-time.Second) // back to where the queue holds one
	w = e.do(req{})
	expect(t, "too long to wait", w, 429, map[string]string{"Retry-After": "1"}, nil)

	// A leaky bucket shapes instead: each request waits for its turn.
	// The clock is rewound after each wait, so that the four requests
	// arrive at the same instant, as concurrent ones would.
	e = newEnv(t, `
policies:
  - name: shaped
    limits: ["leaky_bucket 2/s burst 4"]
    max_delay: 1s
`, Options{}, nil)
	for i, tt := range []struct {
		status int
		wait   time.Duration
	}{{200, 0}, {200, 500 * time.Millisecond}, {200, time.Second}, {429, 0}} {
		before, _ := e.clock.Slept()
		w := e.do(req{})
		after, _ := e.clock.Slept()
		e.clock.Advance(before - after)
		expect(t, fmt.Sprint("leaky ", i), w, tt.status, nil, nil)
		if after-before != tt.wait {
			t.Errorf("leaky %d: waited %v, want %v", i, after-before, tt.wait)
		}
	}
}

// A path with repeated slashes or . and .. segments is decided as the
// clean path it means: a router that cleans paths, or an upstream behind
// a proxy, serves //search as /search, so none of these escapes the
// policy on /search.
func TestUncleanPathMatchesCleanPolicy(t *testing.T) {
	e := newEnv(t, `
policies:
  - {name: search, match: "GET /search/{q}", key: "path:q", limits: ["1/m"]}
`, Options{}, nil)
	expect(t, "first", e.do(req{path: "/search/cats"}), 200, nil, nil)
	for _, p := range []string{"/search/cats", "//search/cats", "/search//cats", "/./search/cats", "/x/../search/cats", "/search/dogs/../cats"} {
		expect(t, p, e.do(req{path: p}), 429, nil, nil)
	}
	expect(t, "another query", e.do(req{path: "//search/dogs"}), 200, nil, nil)
}

// deadlineCtx has a deadline on the fake clock and never ends by itself:
// what matters is what the middleware makes of the deadline.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// A request is never held back for a wait its deadline cannot cover: it
// is refused at once, with the wait as its Retry-After, and a
// leaky_bucket gives it no turn in its queue.
func TestThrottledWithinDeadline(t *testing.T) {
	within := func(e *env, d time.Duration) (*httptest.ResponseRecorder, time.Duration) {
		t.Helper()
		hr := httptest.NewRequest("GET", "/", nil)
		if d > 0 {
			hr = hr.WithContext(deadlineCtx{hr.Context(), e.clock.Now().Add(d)})
		}
		before, _ := e.clock.Slept()
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, hr)
		after, _ := e.clock.Slept()
		e.clock.Advance(before - after) // the next request arrives at the same instant
		return w, after - before
	}
	e := newEnv(t, `
policies:
  - {name: slow, limits: ["1/s burst 1"], max_delay: 5s}
`, Options{}, nil)
	e.do(req{})
	if w, waited := within(e, 500*time.Millisecond); w.Code != 429 || waited != 0 || w.Header().Get("Retry-After") != "1" {
		t.Errorf("a 1s wait with 500ms left: %d, Retry-After %q, after waiting %v; want 429, 1, at once", w.Code, w.Header().Get("Retry-After"), waited)
	}
	if w, waited := within(e, 1500*time.Millisecond); w.Code != 200 || waited != time.Second {
		t.Errorf("a 1s wait with 1.5s left: %d after waiting %v; want 200 after 1s", w.Code, waited)
	}

	e = newEnv(t, `
policies:
  - {name: shaped, limits: ["leaky_bucket 2/s burst 4"]}
`, Options{}, nil)
	for i, tt := range []struct {
		left   time.Duration // 0: no deadline
		status int
		wait   time.Duration
	}{
		{700 * time.Millisecond, 200, 0},
		{700 * time.Millisecond, 200, 500 * time.Millisecond},
		{700 * time.Millisecond, 429, 0}, // its turn would come after 1s
		{0, 200, time.Second},            // the turn the refused one did not take
	} {
		if w, waited := within(e, tt.left); w.Code != tt.status || waited != tt.wait {
			t.Errorf("leaky %d: %d after waiting %v, want %d after %v", i, w.Code, waited, tt.status, tt.wait)
		}
	}
}

// A request whose context ends while it waits is not served.
func TestThrottledContextEnds(t *testing.T) {
	e := newEnv(t, `
policies:
  - {name: slow, limits: ["1/s burst 1"], max_delay: 5s}
`, Options{}, nil)
	e.do(req{})
	hr := httptest.NewRequest("GET", "/", nil)
	ctx, cancel := contextWithCancel(hr)
	cancel()
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, hr.WithContext(ctx))
	expect(t, "canceled", w, 503, map[string]string{"Retry-After": "1"}, nil)
}

// One client's traffic never refuses another's.
func TestKeysAreIndependent(t *testing.T) {
	e := newEnv(t, apiConfig, Options{}, nil)
	for i := range 50 {
		victim := fmt.Sprintf("198.51.100.%d:1", i)
		for range 5 {
			e.do(req{remote: "203.0.113.66:1"}) // the noisy client, refused after 2
		}
		expect(t, "victim "+victim, e.do(req{remote: victim}), 200, nil, nil)
	}
}

// A spoofed X-Forwarded-For from an untrusted peer does not change its
// key; through a trusted proxy the right client is limited; addresses in
// one IPv6 /64 share a key.
func TestClientAddress(t *testing.T) {
	e := newEnv(t, `
client_ip:
  trusted_proxies: [10.0.0.0/8]
policies:
  - {name: api, limits: ["1/s burst 1"]}
`, Options{}, nil)
	steps := []struct {
		name   string
		remote string
		xff    string
		status int
	}{
		{"client", "203.0.113.7:1", "198.51.100.1", 200},
		{"same client, other spoofed header", "203.0.113.7:2", "198.51.100.2", 429},
		{"same client, no header", "203.0.113.7:3", "", 429},
		{"proxy forwards client A", "10.0.0.2:1", "198.51.100.1", 200},
		{"proxy forwards client B", "10.0.0.2:1", "198.51.100.2", 200},
		{"other proxy forwards client A", "10.0.0.3:1", "192.0.2.99, 198.51.100.1", 429},
		{"client A spoofs a hop behind the proxy", "10.0.0.2:1", "198.51.100.1, 10.0.0.5", 429},
		{"v6 client", "[2001:db8:1:2::1]:1", "", 200},
		{"same /64", "[2001:db8:1:2:ffff::9]:1", "", 429},
		{"other /64", "[2001:db8:1:3::1]:1", "", 200},
	}
	for _, s := range steps {
		h := map[string]string{}
		if s.xff != "" {
			h["X-Forwarded-For"] = s.xff
		}
		expect(t, s.name, e.do(req{remote: s.remote, header: h}), s.status, nil, nil)
	}
}

// Garbage in headers never panics and never errors.
func TestMalformedHeaders(t *testing.T) {
	e := newEnv(t, `
client_ip:
  trusted_proxies: [0.0.0.0/0]
  header: Forwarded
policies:
  - {name: api, key: [ip, "header:X-API-Key"], limits: ["100/s"]}
`, Options{}, nil)
	for _, v := range []string{"", ",", `for="`, "for=[::1", "\x00\xff", string(make([]byte, 10000)), `for="\"", for=unknown`, "for=1.2.3.4:99999"} {
		w := e.do(req{header: map[string]string{"Forwarded": v, "X-API-Key": v}})
		if w.Code != 200 {
			t.Errorf("header %.20q: status %d", v, w.Code)
		}
	}
}

// Priority under pressure: with the concurrency limit near full, a
// low-priority route is shed with 503 while a critical one passes.
func TestPriorityShedding(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
	})
	e := newEnv(t, `
concurrency:
  max_in_flight: 4
  shares: {low: 50%, normal: 75%, critical: 100%}
  retry_after: 3s
policies:
  - {name: analytics, match: /analytics/, priority: low}
  - {name: payments, match: "POST /payments", priority: critical}
`, Options{}, next)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.do(req{path: "/slow"})
		}()
		<-entered
	}
	// Two of four slots in use: low may use two, so it is shed.
	w := e.do(req{path: "/analytics/beacon"})
	expect(t, "low", w, 503, map[string]string{"Retry-After": "3"}, map[string]any{
		"type": "about:blank", "title": "Service Unavailable", "status": 503.0,
		"detail": "the server is at capacity for requests of this priority; retry in 3s", "retry_after": 3.0,
	})
	expect(t, "normal", e.do(req{path: "/other"}), 200, nil, nil)
	expect(t, "critical", e.do(req{method: "POST", path: "/payments"}), 200, nil, nil)
	// A third slow request fills normal's share (3 of 4): now normal is
	// shed too, and critical still passes.
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.do(req{path: "/slow"})
	}()
	<-entered
	expect(t, "normal at 3", e.do(req{path: "/other"}), 503, nil, nil)
	expect(t, "critical at 3", e.do(req{method: "POST", path: "/payments"}), 200, nil, nil)
	close(release)
	wg.Wait()
	expect(t, "low after", e.do(req{path: "/analytics/beacon"}), 200, nil, nil)
	if len(e.observer.shed) != 2 {
		t.Errorf("observer saw %d sheds, want 2", len(e.observer.shed))
	}
}

// Store failures follow each policy's on_store_error and are counted.
func TestStoreErrors(t *testing.T) {
	for _, tt := range []struct {
		mode     string
		statuses []int
		headers  map[string]string
	}{
		{"open", []int{200, 200, 200}, map[string]string{"RateLimit": "", "Retry-After": ""}},
		{"closed", []int{503, 503, 503}, map[string]string{"Retry-After": "1"}},
		// Two instances share 4/s burst 4: alone, each allows 2.
		{"local", []int{200, 200, 429}, map[string]string{"X-RateLimit-Limit": "2"}},
	} {
		e := newEnv(t, `
instances: 2
policies:
  - {name: api, limits: ["4/s burst 4"], on_store_error: `+tt.mode+`}
`, Options{}, nil)
		e.store.down.Store(true)
		var last *httptest.ResponseRecorder
		for i, want := range tt.statuses {
			last = e.do(req{})
			expect(t, fmt.Sprintf("%s %d", tt.mode, i), last, want, nil, nil)
		}
		expect(t, tt.mode+" headers", last, last.Code, tt.headers, nil)
		if _, _, errs := e.observer.count("api"); errs != len(tt.statuses) {
			t.Errorf("%s: observer saw %d store errors, want %d", tt.mode, errs, len(tt.statuses))
		}
		// Recovery is automatic.
		e.store.down.Store(false)
		expect(t, tt.mode+" recovered", e.do(req{}), 200, map[string]string{"X-RateLimit-Limit": "4"}, nil)
	}
}

// A store that times out on its own (a Redis call timeout: a wrapped
// DeadlineExceeded while the request is alive) is a failed store: the
// problem says the limiter is unavailable, not that the request ended.
func TestStoreTimeoutIsUnavailable(t *testing.T) {
	e := newEnv(t, `
policies:
  - {name: api, limits: ["4/s burst 4"], on_store_error: closed}
`, Options{}, nil)
	e.store.err = fmt.Errorf("redis: script call: %w", context.DeadlineExceeded)
	e.store.down.Store(true)
	w := e.do(req{})
	expect(t, "store timeout", w, 503, map[string]string{"Retry-After": "1"}, nil)
	if body := w.Body.String(); !strings.Contains(body, "the rate limiter is unavailable") {
		t.Errorf("problem body %s, want it to say the rate limiter is unavailable", body)
	}
}

// ctxStore is a real store that gives up when the call's context ends,
// as a store across the network does.
type ctxStore struct{ sluice.Store }

func (s ctxStore) DecideAll(ctx context.Context, rs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	if err := ctx.Err(); err != nil {
		return rate.Decision{}, err
	}
	return s.Store.DecideAll(ctx, rs, out)
}

func (s ctxStore) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	if err := ctx.Err(); err != nil {
		return rate.Decision{}, err
	}
	return s.Store.Decide(ctx, r)
}

// A request that ends while the store decides it is not served, and is
// no store failure: an open policy does not let it through, nothing is
// logged or counted as an outage, and the problem says that the request
// ended, not that it was held back, as it never was.
func TestRequestEndsDuringStoreCall(t *testing.T) {
	set, err := policy.Load("test.yaml", []byte(`
policies:
  - {name: api, limits: ["4/s burst 4"], on_store_error: open}
  - {name: watch, limits: ["4/s burst 4"], shadow: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	obs := &recorder{}
	served := 0
	h := Middleware(set, ctxStore{memory.New(memory.Options{})}, Options{Options: policy.Options{
		Observer: obs,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	}})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }))

	hr := httptest.NewRequest("GET", "/", nil)
	ctx, cancel := context.WithCancel(hr.Context())
	cancel()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, hr.WithContext(ctx))
	expect(t, "ended", w, 503, nil, map[string]any{
		"type": "about:blank", "title": "Service Unavailable", "status": 503.0,
		"detail": "the request ended before it could be served", "retry_after": 1.0,
	})
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	expect(t, "next", w, 200, nil, nil)
	if served != 1 {
		t.Errorf("handler served %d requests, want 1 (not the one that ended)", served)
	}
	if logs.Len() != 0 {
		t.Errorf("logged %q, want nothing: the store never failed", logs.String())
	}
	for _, name := range []string{"api", "watch"} {
		if allowed, refused, errs := obs.count(name); allowed != 1 || refused != 0 || errs != 0 {
			t.Errorf("%s: observer saw %d allowed, %d refused, %d store errors; want 1, 0, 0", name, allowed, refused, errs)
		}
	}
}

// Policies that key by a path wildcard count each item apart, and leave
// the application's own path values alone.
func TestPathWildcardKey(t *testing.T) {
	mux := http.NewServeMux()
	var got []string
	mux.HandleFunc("GET /things/{name}", func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.PathValue("name"))
	})
	set := `
policies:
  - {name: things, match: "GET /things/{id}", key: "path:id", limits: ["1/m burst 1"]}
`
	e := newEnv(t, set, Options{}, mux)
	expect(t, "a", e.do(req{path: "/things/a"}), 200, nil, nil)
	expect(t, "b", e.do(req{path: "/things/b"}), 200, nil, nil)
	expect(t, "a again", e.do(req{path: "/things/a"}), 429, nil, nil)
	if fmt.Sprint(got) != "[a b]" {
		t.Errorf("handler saw %v, want [a b]", got)
	}
	// Mounted inside the application's mux, the middleware sees the
	// application's pattern and must not disturb it.
	app := http.NewServeMux()
	var seen string
	app.Handle("GET /things/{name}", e2(t, set, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Pattern + " " + r.PathValue("name")
	})))
	app.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/things/z", nil))
	if seen != "GET /things/{name} z" {
		t.Errorf("inner handler saw %q", seen)
	}
}

func e2(t *testing.T, config string, next http.Handler) http.Handler {
	return newEnv(t, config, Options{}, next).h
}

// After a reload, a policy whose limit is unchanged keeps its counters,
// and one whose limit changed starts afresh.
func TestReloadKeepsUnchangedCounters(t *testing.T) {
	clock := ratetest.NewClock(start)
	store := memory.New(memory.Options{Clock: clock})
	load := func(limit string) http.Handler {
		set, err := policy.Load("t.yaml", []byte(`
policies:
  - {name: api, limits: ["`+limit+`"]}
`))
		if err != nil {
			t.Fatal(err)
		}
		return Middleware(set, store, Options{Options: policy.Options{Clock: clock}})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	}
	status := func(h http.Handler) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		return w.Code
	}
	first := load("1/m burst 1")
	if got := status(first); got != 200 {
		t.Fatalf("first: %d", got)
	}
	if got := status(load("1/m burst 1")); got != 429 {
		t.Errorf("same limit after reload: %d, want 429 (counters kept)", got)
	}
	if got := status(load("2/m burst 2")); got != 200 {
		t.Errorf("changed limit after reload: %d, want 200 (fresh counters)", got)
	}
}

// Plans select limits: from an API key table, from a header a trusted
// proxy sets, or from the application (WithPlan), in that order of trust.
func TestPlans(t *testing.T) {
	config := `
client_ip: {trusted_proxies: [192.0.2.1]}
plans:
  names: [free, pro]
  default: free
  header: X-Plan
  api_key_header: X-API-Key
  api_keys: {k-pro: pro}
policies:
  - name: api
    key: ip
    limits: ["1/m burst 1"]
    plans:
      pro: ["5/m burst 5"]
`
	for _, tt := range []struct {
		name   string
		remote string
		header map[string]string
		plan   func(*http.Request) string
		ctx    string // the plan an application puts in the context (WithPlan)
		want   string
	}{
		{"default plan", "", nil, nil, "", "1"},
		{"api key", "", map[string]string{"X-API-Key": "k-pro"}, nil, "", "5"},
		{"unknown api key", "", map[string]string{"X-API-Key": "k-nope"}, nil, "", "1"},
		{"plan header", "192.0.2.1:1234", map[string]string{"X-Plan": "pro"}, nil, "", "5"},
		{"plan header from a client", "203.0.113.9:1234", map[string]string{"X-Plan": "pro"}, nil, "", "1"},
		{"plan header naming no plan", "192.0.2.1:1234", map[string]string{"X-Plan": "platinum"}, nil, "", "1"},
		{"application", "", nil, func(*http.Request) string { return "pro" }, "", "5"},
		{"application, in the context", "", nil, nil, "pro", "5"},
		{"context naming no plan", "", nil, nil, "platinum", "1"},
	} {
		e := newEnv(t, config, Options{Plan: tt.plan}, nil)
		expect(t, tt.name, e.do(req{remote: tt.remote, header: tt.header, plan: tt.ctx}), 200, map[string]string{"X-RateLimit-Limit": tt.want}, nil)
	}
}

// Header values longer than the block they are built in stay intact.
func TestLongPolicyName(t *testing.T) {
	name := strings.Repeat("p", 64)
	e := newEnv(t, `
policies:
  - {name: `+name+`, limits: ["1000000000/s burst 1000000000", "999999999/s"]}
`, Options{}, nil)
	w := e.do(req{})
	expect(t, "long name", w, 200, map[string]string{
		"RateLimit":             `"` + name + `.2";r=999999998;t=1`,
		"X-RateLimit-Remaining": "999999998",
		"X-RateLimit-Reset":     "1",
	}, nil)
}

// A refused HEAD request gets the status and headers of a refused GET,
// and no body (RFC 9110, section 9.3.2); the handler is not called.
func TestHeadRefusedHasNoBody(t *testing.T) {
	served := 0
	e := newEnv(t, apiConfig, Options{}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }))
	get := req{}
	e.do(get)
	e.do(get)
	wantLen := e.do(get).Header().Get("Content-Length")
	if wantLen == "" {
		t.Fatal("refused GET: no Content-Length")
	}
	w := e.do(req{method: "HEAD"})
	expect(t, "HEAD", w, 429, map[string]string{
		"Retry-After": "1", "RateLimit": `"api";r=0;t=1`, "Content-Type": "application/problem+json",
		"Content-Length": wantLen,
	}, nil)
	if w.Body.Len() != 0 {
		t.Errorf("HEAD: body %q, want none", w.Body)
	}
	if served != 2 {
		t.Errorf("handler served %d requests, want 2 (not the refused ones)", served)
	}
}

// Options.ProblemType names the problem of a 429; a 503 (the store is
// down under on_store_error: closed, or the request was shed) is another
// problem, and keeps about:blank, so that a client that tells problems
// apart by their type (RFC 9457, section 3.1.1) does not take an outage
// for its own quota.
func TestProblemTypeOnlyForRefusals(t *testing.T) {
	const quota = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	e := newEnv(t, `
policies:
  - {name: api, limits: ["1/m"], on_store_error: closed}
`, Options{ProblemType: quota}, nil)
	e.do(req{})
	if w := e.do(req{}); w.Code != 429 || !strings.Contains(w.Body.String(), `"type":"`+quota+`"`) {
		t.Errorf("refused: %d %s, want 429 of type %s", w.Code, w.Body, quota)
	}
	e.store.down.Store(true)
	if w := e.do(req{}); w.Code != 503 || !strings.Contains(w.Body.String(), `"type":"about:blank"`) {
		t.Errorf("store down: %d %s, want 503 of type about:blank", w.Code, w.Body)
	}
}

// Two middlewares stacked, one for the whole API and one for a route, each
// add their item to the RateLimit fields (lists of quota policies), where
// the inner one's replaced the outer one's and hid a quota nearly spent.
func TestStackedMiddlewaresListBoth(t *testing.T) {
	inner := newEnv(t, `
policies:
  - {name: search, limits: ["10/m"]}
`, Options{}, nil)
	outer := newEnv(t, `
policies:
  - {name: api, limits: ["2/m"]}
`, Options{}, inner.h)
	w := outer.do(req{path: "/search"})
	if got, want := w.Header().Values("RateLimit"), []string{`"api";r=1;t=30`, `"search";r=9;t=6`}; !slices.Equal(got, want) {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
	if got := w.Header().Values("RateLimit-Policy"); len(got) != 2 {
		t.Errorf("RateLimit-Policy %q, want the two policies", got)
	}
}

// A handler may edit a header value in place (h[k][0] = v, as middlewares
// that normalise headers do). The values are the response's own: the
// next response, of this client or any other, has its headers intact.
func TestHandlerEditsOnlyItsOwnHeaders(t *testing.T) {
	edit := true
	e := newEnv(t, `
policies:
  - {name: api, limits: ["100/s"]}
`, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if edit {
			edit = false
			for _, vs := range w.Header() {
				for i := range vs {
					vs[i] = "edited"
				}
			}
		}
	}))
	e.do(req{})
	expect(t, "next response", e.do(req{}), 200, map[string]string{
		"RateLimit-Policy": `"api";q=100;w=1`, "RateLimit": `"api";r=98;t=1`,
		"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "98", "X-RateLimit-Reset": "1",
	}, nil)
}

// A ProblemType that is not valid UTF-8 still makes a body of valid JSON,
// which is UTF-8 (RFC 8259): each stray byte becomes U+FFFD, as
// encoding/json writes it.
func TestProblemTypeInvalidUTF8(t *testing.T) {
	e := newEnv(t, `
policies:
  - {name: api, limits: ["1/m"]}
`, Options{ProblemType: "https://example.com/\xff"}, nil)
	e.do(req{})
	w := e.do(req{})
	expect(t, "refused", w, 429, nil, map[string]any{
		"type": "https://example.com/\ufffd", "title": "Too Many Requests", "status": 429.0,
		"detail":      `rate limited by policy "api" (limit gcra 1/m); retry in 60s`,
		"retry_after": 60.0, "violated-policies": []any{"api"},
	})
	if !utf8.Valid(w.Body.Bytes()) {
		t.Errorf("body %q is not UTF-8", w.Body)
	}
}

// The middleware hands the handler the ResponseWriter as it came, so
// Hijack (a websocket upgrade) and Flush work through it, on a real
// connection.
func TestHijackThroughMiddleware(t *testing.T) {
	e := newEnv(t, `
policies:
  - {name: api, limits: ["100/s"]}
`, Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(http.Flusher); !ok {
			t.Error("the ResponseWriter is no http.Flusher")
		}
		c, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = rw.Flush()
	}))
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 101 ") {
		t.Errorf("status line %q (%v), want 101 Switching Protocols", line, err)
	}
}

// A nil store is a memory store, as for sluice.NewLimiter: the first
// request is decided, not a nil dereference.
func TestNilStoreIsMemory(t *testing.T) {
	set, err := policy.Load("test.yaml", []byte(apiConfig))
	if err != nil {
		t.Fatal(err)
	}
	h := Middleware(set, nil, Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	var codes []int
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		codes = append(codes, w.Code)
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Errorf("statuses %v, want [200 200 429] under 1/s burst 2", codes)
	}
}
