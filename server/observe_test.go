package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/redistest"
)

// wantMetrics checks each "series value" line against /metrics.
func (ts *testServer) wantMetrics(when string, lines ...string) {
	ts.t.Helper()
	for _, want := range lines {
		series, _, _ := strings.Cut(want, " ")
		if got := ts.metric(series + " "); got != want {
			ts.t.Errorf("%s: %q, want %q", when, got, want)
		}
	}
}

// storeErrorPolicies limit three paths alike in Redis, each with its own
// on_store_error.
const storeErrorPolicies = `
policies:
  - name: local
    match: /local/
    key: ip
    limits: ["2/m"]
    on_store_error: local
  - name: closed
    match: /closed/
    key: ip
    limits: ["2/m"]
    on_store_error: closed
  - name: open
    match: /open/
    key: ip
    limits: ["2/m"]
    on_store_error: open
`

// With Redis down, a decision is counted under what its client got: the
// local store's 429 as refused (and in /debug/top), a fail-closed 503 as
// unavailable, a fail-open pass as allowed; that on_store_error made it
// is counted apart, per policy, in sluice_fallback_decisions_total.
func TestStoreErrorResults(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	ts := startServer(t, `
store: {redis: "redis://`+rs.Addr()+`/0", timeout: 200ms}`+storeErrorPolicies, Options{Upstream: up.URL})
	rs.Kill()
	for _, step := range []struct {
		path string
		want int
	}{
		{"/local/a", 200}, {"/local/a", 200}, {"/local/a", 429},
		{"/closed/a", 503},
		{"/open/a", 200},
	} {
		if got := ts.status(step.path); got != step.want {
			t.Fatalf("Redis down, %s: %d, want %d", step.path, got, step.want)
		}
	}
	ts.wantMetrics("Redis down",
		`sluice_decisions_total{policy="local",result="allowed"} 2`,
		`sluice_decisions_total{policy="local",result="refused"} 1`,
		`sluice_decisions_total{policy="closed",result="unavailable"} 1`,
		`sluice_decisions_total{policy="closed",result="refused"} 0`,
		`sluice_decisions_total{policy="open",result="allowed"} 1`,
		`sluice_fallback_decisions_total{policy="local"} 3`,
		`sluice_fallback_decisions_total{policy="closed"} 1`,
		`sluice_fallback_decisions_total{policy="open"} 1`,
		`sluice_requests_total{code="allowed",listener="proxy"} 3`,
		`sluice_requests_total{code="429",listener="proxy"} 1`,
		`sluice_requests_total{code="503",listener="proxy"} 1`,
	)
	if got := ts.metric(`sluice_decisions_total{policy="closed",result="error"}`); got != "" {
		t.Errorf("a result of error remains: %q", got)
	}
	_, body := get(t, ts.Addrs().Admin, "/debug/top")
	var top TopReport
	if err := json.Unmarshal([]byte(body), &top); err != nil {
		t.Fatal(err)
	}
	if top.Refused != 1 || len(top.Keys) != 1 || !strings.Contains(top.Keys[0].Key, "local") {
		t.Errorf("/debug/top: %s; want the local store's refusal", body)
	}
}

// sluice_requests_total counts each request once, under what sluice
// answered it: a request two policies decide, refused by one, is one 429,
// where sluice_decisions_total counts it refused by one and allowed by
// the other. The check endpoints count the status the client gets
// (NGINX's 403 is the 429 its error_page answers), and what sluice
// answers before any decision (a path it will not forward, a check that
// describes no request) under its own status. Every code of a listener
// has its series from the start.
func TestRequestsTotal(t *testing.T) {
	up := newUpstream(t)
	ts := startServer(t, `
client_ip: {trusted_proxies: [127.0.0.1]}
policies:
  - {name: tight, key: ip, limits: ["1/m"]}
  - {name: loose, key: ip, limits: ["5/m"]}
`, Options{Upstream: up.URL})
	ts.wantMetrics("at start",
		`sluice_requests_total{code="allowed",listener="proxy"} 0`,
		`sluice_requests_total{code="429",listener="proxy"} 0`,
		`sluice_requests_total{code="503",listener="proxy"} 0`,
		`sluice_requests_total{code="400",listener="proxy"} 0`,
		`sluice_requests_total{code="allowed",listener="check"} 0`,
		`sluice_requests_total{code="429",listener="check"} 0`,
		`sluice_requests_total{code="503",listener="check"} 0`,
	)
	if got := ts.metric(`sluice_requests_total{code="allowed",listener="grpc"}`); got != "" {
		t.Errorf("the gRPC listener is off, yet %q", got)
	}
	for i, want := range []int{200, 429} {
		if got := ts.status("/"); got != want {
			t.Fatalf("proxy request %d: %d, want %d", i+1, got, want)
		}
	}
	if resp, _ := rawRequest(t, ts.Addrs().Proxy, "GET /a/../b HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 400 {
		t.Fatalf("a path with .. segments: %d, want 400", resp.StatusCode)
	}
	check := func(path, uri string, want int) {
		t.Helper()
		resp, _ := get(t, ts.Addrs().Check, path, "X-Forwarded-For", "192.0.2.9", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", uri)
		if resp.StatusCode != want {
			t.Fatalf("%s about %s: %d, want %d", path, uri, resp.StatusCode, want)
		}
	}
	check("/check", "/", 200)
	check("/check/nginx", "/", 403) // X-Sluice-Status: 429
	check("/check", "/", 429)
	check("/check", "http://[::1", 400)
	if resp, _ := get(t, ts.Addrs().Check, "/healthz"); resp.StatusCode != 200 {
		t.Fatalf("the check listener's /healthz: %d", resp.StatusCode)
	}
	ts.wantMetrics("after the requests",
		`sluice_decisions_total{policy="tight",result="refused"} 3`,
		`sluice_decisions_total{policy="loose",result="allowed"} 5`,
		`sluice_requests_total{code="allowed",listener="proxy"} 1`,
		`sluice_requests_total{code="429",listener="proxy"} 1`,
		`sluice_requests_total{code="400",listener="proxy"} 1`,
		`sluice_requests_total{code="allowed",listener="check"} 1`,
		`sluice_requests_total{code="429",listener="check"} 2`,
		`sluice_requests_total{code="400",listener="check"} 1`,
	)
}

// Envoy's calls are counted on the gRPC listener: OK as allowed,
// OVER_LIMIT as the 429 Envoy answers, a call sluice cannot take as 400,
// a store that cannot decide as 503.
func TestRequestsTotalEnvoy(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, "", Options{EnvoyConfigs: []string{cfg}, RedisURL: "redis://" + rs.Addr() + "/0"})
	ts.wantMetrics("at start",
		`sluice_requests_total{code="allowed",listener="grpc"} 0`,
		`sluice_requests_total{code="429",listener="grpc"} 0`,
		`sluice_requests_total{code="503",listener="grpc"} 0`,
		`sluice_requests_total{code="400",listener="grpc"} 0`,
		`sluice_decisions_total{policy="rls:d",result="refused"} 0`,
	)
	c, _ := envoyClient(t, ts)
	if r := ask(t, c, "d", "a", "1"); r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call: %v", r)
	}
	if r := ask(t, c, "d", "a", "1"); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second call: %v", r)
	}
	if _, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a call with no descriptor: %v, want InvalidArgument", err)
	}
	rs.Kill()
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "a", Value: "2"}}},
	}}
	if _, err := c.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.Unavailable {
		t.Fatalf("Redis down: %v, want Unavailable", err)
	}
	ts.wantMetrics("after the calls",
		`sluice_requests_total{code="allowed",listener="grpc"} 1`,
		`sluice_requests_total{code="429",listener="grpc"} 1`,
		`sluice_requests_total{code="400",listener="grpc"} 1`,
		`sluice_requests_total{code="503",listener="grpc"} 1`,
	)
}

// sluice_store_latency_seconds{store="redis"} times calls sent to Redis:
// not the refusals the deny cache answers in memory, nor the calls the
// breaker answers at once while Redis is down, which read as a Redis
// faster than any.
func TestStoreLatencyIsRedisCalls(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	ts := startServer(t, `
store: {redis: "redis://`+rs.Addr()+`/0", timeout: 200ms}
policies:
  - {name: api, key: "header:X-Id", limits: ["1/m"], on_store_error: open}
`, Options{Upstream: up.URL})
	const observed, scripts = `sluice_store_latency_seconds_count{store="redis"}`, `sluice_redis_script_calls_total`
	send := func(id string, want int) {
		t.Helper()
		if resp, _ := get(t, ts.Addrs().Proxy, "/", "X-Id", id); resp.StatusCode != want {
			t.Fatalf("X-Id %s: %d, want %d", id, resp.StatusCode, want)
		}
	}
	send("a", 200)
	for range 5 {
		send("a", 429) // Redis's refusal, then the deny cache's
	}
	if hits := ts.counter(`sluice_deny_cache_hits_total`); hits != 4 {
		t.Fatalf("%d deny cache hits, want 4", hits)
	}
	if n, calls := ts.counter(observed), ts.counter(scripts); n != calls || n != 2 {
		t.Errorf("%d calls observed, %d script calls sent; want both 2", n, calls)
	}
	rs.Kill()
	for _, id := range []string{"b", "c", "d", "e"} {
		send(id, 200) // on_store_error: open
	}
	if f := ts.st.breaker.Stats().Failures; f != 1 {
		t.Fatalf("%d calls failed, want 1: the one that found Redis down", f)
	}
	if n := ts.counter(observed); n != 3 {
		t.Errorf("%d calls observed, want 3: the one that found Redis down, and none the breaker answered (%d)",
			n, ts.counter(`sluice_store_errors_total{kind="down"}`))
	}
}

// Each policy's decision series, and each Envoy domain's, are there from
// the start at 0, for every result, so that increase() sees a policy's
// first refusal; a reload adds those of the policies it adds, and drops
// those of the ones it removes.
func TestDecisionSeriesFromTheStart(t *testing.T) {
	dir := t.TempDir()
	envoy := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(envoy, []byte("domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, `
policies:
  - {name: api, key: ip, limits: ["2/m"]}
  - {name: trial, key: ip, limits: ["1/m"], shadow: true}
`, Options{EnvoyConfigs: []string{envoy}})
	ts.wantMetrics("at start",
		`sluice_decisions_total{policy="api",result="allowed"} 0`,
		`sluice_decisions_total{policy="api",result="refused"} 0`,
		`sluice_decisions_total{policy="api",result="throttled"} 0`,
		`sluice_decisions_total{policy="api",result="unavailable"} 0`,
		`sluice_decisions_total{policy="trial",result="allowed"} 0`,
		`sluice_decisions_total{policy="trial",result="shadow_refused"} 0`,
		`sluice_decisions_total{policy="rls:edge",result="allowed"} 0`,
		`sluice_decisions_total{policy="rls:edge",result="refused"} 0`,
		`sluice_decisions_total{policy="rls:edge",result="shadow_refused"} 0`,
		`sluice_fallback_decisions_total{policy="api"} 0`,
		`sluice_fallback_decisions_total{policy="trial"} 0`,
	)
	writeFile(t, ts.dir, "sluice.yaml", "policies:\n  - {name: api, key: ip, limits: [\"2/m\"]}\n  - {name: login, key: ip, limits: [\"1/m\"]}\n")
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts.wantMetrics("after the reload",
		`sluice_decisions_total{policy="login",result="refused"} 0`,
		`sluice_decisions_total{policy="api",result="refused"} 0`,
		`sluice_decisions_total{policy="rls:edge",result="refused"} 0`,
		`sluice_fallback_decisions_total{policy="login"} 0`,
	)
	for _, gone := range []string{`sluice_decisions_total{policy="trial"`, `sluice_fallback_decisions_total{policy="trial"`} {
		if got := ts.metric(gone); got != "" {
			t.Errorf("after the reload, the removed policy's series stays: %q", got)
		}
	}
}

// A reload whose store section changed serves its policies on the store
// in use: sluice_config_restart_required says so until a reload brings
// the section back to what runs.
func TestConfigRestartRequired(t *testing.T) {
	const policies = "policies: [{name: api, key: ip, limits: [\"10/m\"]}]\n"
	ts := startServer(t, "store: {max_keys: 64}\n"+policies, Options{})
	reload := func(file string) {
		t.Helper()
		writeFile(t, ts.dir, "sluice.yaml", file)
		if err := ts.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ts.wantMetrics("at start", `sluice_config_restart_required 0`)
	reload("store: {max_keys: 128}\n" + policies)
	ts.wantMetrics("the store section changed", `sluice_config_restart_required 1`, `sluice_config_last_reload_successful 1`)
	writeFile(t, ts.dir, "sluice.yaml", "policies: [")
	if err := ts.Reload(context.Background()); err == nil {
		t.Fatal("a file cut short reloaded")
	}
	ts.wantMetrics("then a reload failed", `sluice_config_restart_required 1`)
	reload("store: {max_keys: 64}\n" + policies)
	ts.wantMetrics("the store section back as it runs", `sluice_config_restart_required 0`)
}
