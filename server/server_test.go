package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/internal/redistest"
)

const limit3 = `
policies:
  - name: api
    key: ip
    limits: ["3/m"]
`

// status returns the status of a request through the proxy.
func (ts *testServer) status(path string) int {
	ts.t.Helper()
	resp, _ := get(ts.t, ts.Addrs().Proxy, path)
	return resp.StatusCode
}

// Reloads on a file change: a good file changes the limits at once,
// keeping the counters of an unchanged limit; a bad one leaves the old
// configuration serving, and is counted and logged.
func TestReloadOnFileChange(t *testing.T) {
	up := newUpstream(t)
	ts := startServer(t, limit3, Options{Upstream: up.URL, WatchInterval: 5 * time.Millisecond})
	for i := range 2 {
		if got := ts.status("/"); got != 200 {
			t.Fatalf("request %d: %d", i, got)
		}
	}
	// The same limit, with a policy added: the counter carries over (one
	// request left), and the new policy applies.
	writeFile(t, ts.dir, "sluice.yaml", limit3+`
  - name: admin
    match: /admin/
    key: ip
    limits: ["1/m"]
`)
	eventually(t, "the file change to be reloaded", func() bool {
		return strings.HasSuffix(ts.metric(`sluice_config_reloads_total{result="success"}`), " 1")
	})
	if got := []int{ts.status("/admin/x"), ts.status("/")}; got[0] != 200 || got[1] != 429 {
		t.Fatalf("after the reload: %v, want [200 429]: the api counter kept its two requests", got)
	}
	if ts.status("/admin/y") != 429 {
		t.Fatal("the new admin policy does not apply")
	}
	writeFile(t, ts.dir, "sluice.yaml", "policies:\n  - name: api\n    limits: [\"3/fortnight\"]\n")
	eventually(t, "the bad file to be counted", func() bool {
		return strings.HasSuffix(ts.metric(`sluice_config_reloads_total{result="failure"}`), " 1")
	})
	if ts.status("/admin/z") != 429 {
		t.Fatal("after a failed reload the old configuration does not serve")
	}
	if !strings.Contains(ts.logs.String(), "file="+ts.o.ConfigFile+` line=3 column=14 error="invalid limit \"3/fortnight\"`) {
		t.Errorf("the failure is not logged with its file:line:col:\n%s", ts.logs.String())
	}
}

// Reload, as SIGHUP calls it: the same, without a watcher.
func TestReloadByCall(t *testing.T) {
	up := newUpstream(t)
	ts := startServer(t, limit3, Options{Upstream: up.URL})
	if ts.status("/") != 200 {
		t.Fatal("first request refused")
	}
	writeFile(t, ts.dir, "sluice.yaml", "policies:\n  - name: api\n    limits: [\"3/fortnight\"]\n")
	err := ts.Reload(context.Background())
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), ts.o.ConfigFile+":3:14:") {
		t.Fatalf("Reload of a bad file: %v, want ErrConfig and its file:line:col", err)
	}
	if got := []int{ts.status("/"), ts.status("/"), ts.status("/")}; got[2] != 429 {
		t.Fatalf("after a failed reload: %v, want the old 3/m", got)
	}
	writeFile(t, ts.dir, "sluice.yaml", strings.Replace(limit3, "3/m", "10/m", 1))
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ts.status("/") != 200 {
		t.Fatal("a changed limit starts afresh")
	}
	for _, want := range []string{`sluice_config_reloads_total{result="failure"} 1`, `sluice_config_reloads_total{result="success"} 1`} {
		if ts.metric(want) == "" {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// A reload to a file whose policies list is empty (a template's unset
// value) would lift every limit: it fails, at the list's line, and the
// old limits keep serving.
func TestReloadToEmptyPoliciesFails(t *testing.T) {
	up := newUpstream(t)
	ts := startServer(t, limit3, Options{Upstream: up.URL})
	for _, empty := range []string{"policies:\n", "prefix: sluice\npolicies: []\n"} {
		writeFile(t, ts.dir, "sluice.yaml", empty)
		if err := ts.Reload(context.Background()); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "the policies list is empty") {
			t.Errorf("Reload to %q: %v, want ErrConfig: the policies list is empty", empty, err)
		}
	}
	if got := []int{ts.status("/"), ts.status("/"), ts.status("/"), ts.status("/")}; got[3] != 429 {
		t.Errorf("after the failed reloads: %v, want the old 3/m", got)
	}
}

// store.max_keys bounds the memory store: a flood of client addresses
// past it evicts old keys, which /metrics counts, and the store never
// holds more.
func TestMemoryStoreMaxKeys(t *testing.T) {
	ts := startServer(t, `
store: {max_keys: 64}
client_ip: {trusted_proxies: [127.0.0.1]}
policies:
  - name: api
    key: ip
    limits: ["10/m"]
`, Options{})
	for i := range 300 {
		resp, _ := get(t, ts.Addrs().Check, "/check", "X-Forwarded-For", fmt.Sprintf("198.51.%d.%d", i/250, i%250))
		if resp.StatusCode != 200 {
			t.Fatalf("client %d: %d", i, resp.StatusCode)
		}
	}
	value := func(series string) float64 {
		t.Helper()
		line := ts.metric(series + " ")
		v, err := strconv.ParseFloat(strings.TrimPrefix(line, series+" "), 64)
		if err != nil {
			t.Fatalf("%s on /metrics: %q", series, line)
		}
		return v
	}
	if n := value(`sluice_memory_max_keys{store="memory"}`); n != 64 {
		t.Errorf("max_keys on /metrics: %v, want 64", n)
	}
	if n := value(`sluice_memory_keys{store="memory"}`); n > 64 || n < 32 {
		t.Errorf("keys held after 300 clients: %v, want at most 64 (and most of them)", n)
	}
	if n := value(`sluice_memory_evictions_total{store="memory"}`); n < 300-64 {
		t.Errorf("evictions after 300 clients into 64 keys: %v, want at least %d", n, 300-64)
	}

	// --max-keys, as Options.MaxKeys, overrides the file.
	ts = startServer(t, "store: {max_keys: 64}\npolicies: [{name: api, limits: [\"10/m\"]}]\n", Options{MaxKeys: 32})
	if n := value(`sluice_memory_max_keys{store="memory"}`); n != 32 {
		t.Errorf("max_keys with MaxKeys 32 over the file's 64: %v, want 32", n)
	}
}

// The admin listener: health, readiness, metrics, the most refused keys
// and the dashboard's live counts.
func TestAdmin(t *testing.T) {
	up := newUpstream(t)
	ts := startServer(t, `
policies:
  - name: api
    key: ip
    limits: ["2/m"]
  - name: trial
    shadow: true
    key: ip
    limits: ["1/m"]
`, Options{Upstream: up.URL})
	for range 4 {
		ts.status("/")
	}
	admin := ts.Addrs().Admin
	for _, p := range []string{"/healthz", "/readyz"} {
		if resp, body := get(t, admin, p); resp.StatusCode != 200 || body != "ok\n" {
			t.Errorf("%s: %d %q", p, resp.StatusCode, body)
		}
	}
	for _, want := range []string{
		`sluice_decisions_total{policy="api",result="allowed"} 2`,
		`sluice_decisions_total{policy="api",result="refused"} 2`,
		`sluice_decisions_total{policy="trial",result="allowed"} 1`,
		// The shadow policy is decided only for the 2 requests api let
		// through: 6 decisions, 2 refusing.
		`sluice_decisions_total{policy="trial",result="shadow_refused"} 1`,
		`sluice_refused_ratio 0.333`,
		`sluice_store_latency_seconds_count{store="memory"} `,
		`sluice_config_reloads_total{result="failure"} 0`,
		`sluice_memory_keys{store="memory"} 2`, // api and trial, one client
		`sluice_memory_max_keys{store="memory"} 1.048576e+06`,
		`sluice_memory_evictions_total{store="memory"} 0`,
		`go_goroutines `,
		`process_cpu_seconds_total `,
	} {
		if ts.metric(want) == "" {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	_, body := get(t, admin, "/debug/top?n=5")
	var top TopReport
	if err := json.Unmarshal([]byte(body), &top); err != nil {
		t.Fatal(err)
	}
	if top.Refused != 2 || len(top.Keys) != 1 || top.Keys[0].Count != 2 || !strings.HasPrefix(top.Keys[0].Key, "{sluice:api:") {
		t.Errorf("/debug/top: %s", body)
	}
	_, body = get(t, admin, "/api/live?seconds=60")
	var live dashboard.Live
	if err := json.Unmarshal([]byte(body), &live); err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int64{}
	for _, p := range live.Policies {
		got[p.Policy] = [2]int64{p.Passed, p.Refused}
	}
	if got["api"] != [2]int64{2, 2} || got["trial"] != [2]int64{2, 0} {
		t.Errorf("dashboard live counts %v; want api 2 passed 2 refused, trial 2 passed (shadow refusals pass)", got)
	}
	if resp, _ := get(t, admin, "/debug/pprof/"); resp.StatusCode != 404 {
		t.Errorf("pprof without Options.Pprof: %d", resp.StatusCode)
	}
}

// Shutdown: readiness turns false, and a request in flight finishes.
func TestShutdownDrains(t *testing.T) {
	up, entered, release := heldUpstream(t)
	ts := startServer(t, limit3, Options{Upstream: up})

	type result struct {
		code int
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + ts.Addrs().Proxy + "/slow")
		if err != nil {
			done <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{resp.StatusCode, string(b), err}
	}()
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- ts.stop() }()
	eventually(t, "readiness to turn false", func() bool { return ts.draining.Load() })
	if err := ts.ready.check(context.Background(), ts.Server); err == nil {
		t.Error("ready while shutting down")
	}
	close(release)
	r := <-done
	if r.err != nil || r.code != 200 || r.body != "finished" {
		t.Fatalf("the request in flight: %d %q %v", r.code, r.body, r.err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run returned %v after a clean stop", err)
	}
}

// A store section naming Redis: decisions go to a real redis-server,
// readiness follows it, store errors are counted by kind.
func TestRedisStore(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	ts := startServer(t, `
store: {redis: "redis://`+rs.Addr()+`/0", timeout: 200ms}
policies:
  - name: api
    key: "header:X-Id"
    limits: ["2/m"]
    on_store_error: closed
`, Options{Upstream: up.URL, Clock: realClock{}})
	status := func(id string) int {
		resp, _ := get(t, ts.Addrs().Proxy, "/", "X-Id", id)
		return resp.StatusCode
	}
	if got := []int{status("a"), status("a"), status("a")}; got[0] != 200 || got[1] != 200 || got[2] != 429 {
		t.Fatalf("through Redis: %v", got)
	}
	if keys := rs.MustDo("DBSIZE"); keys == "0" {
		t.Error("no key in Redis")
	}
	if resp, _ := get(t, ts.Addrs().Admin, "/readyz"); resp.StatusCode != 200 {
		t.Fatalf("/readyz with Redis up: %d", resp.StatusCode)
	}
	for _, name := range []string{"sluice_deny_cache_hits_total", "sluice_redis_script_calls_total", "sluice_redis_retries_total", "sluice_redis_tryagain_total",
		"sluice_redis_cross_slot_total", "sluice_redis_cross_slot_races_total", "sluice_redis_cross_slot_refunds_total", "sluice_redis_cross_slot_refund_errors_total"} {
		if ts.metric(name) == "" {
			t.Errorf("no %s", name)
		}
	}
	rs.Kill()
	ts.ready.forget()
	if resp, body := get(t, ts.Addrs().Admin, "/readyz"); resp.StatusCode != 503 || !strings.Contains(body, "Redis") {
		t.Errorf("/readyz with Redis down: %d %q", resp.StatusCode, body)
	}
	if got := status("a"); got != 429 {
		t.Errorf("a key Redis refused, with Redis down: %d, want 429 from the deny cache", got)
	}
	if got := status("b"); got != 503 {
		t.Errorf("fail-closed policy with Redis down: %d, want 503", got)
	}
	if ts.metric(`sluice_store_errors_total{kind="unavailable"}`) == "" && ts.metric(`sluice_store_errors_total{kind="timeout"}`) == "" {
		t.Error("store errors not counted")
	}
}

// A Redis that answers PING but runs no decision (out of memory, here;
// an ACL without the keys' pattern, or a replica, alike) makes a
// fail-closed server unready: readiness runs a decision, not a PING.
func TestReadyzRunsADecision(t *testing.T) {
	rs := redistest.Start(t)
	ts := startServer(t, `
store: {redis: "redis://`+rs.Addr()+`/0", timeout: 200ms}
policies:
  - {name: api, key: "header:X-Id", limits: ["2/m"], on_store_error: closed}
`, Options{Clock: realClock{}})
	if resp, body := get(t, ts.Addrs().Admin, "/readyz"); resp.StatusCode != 200 {
		t.Fatalf("/readyz with Redis up: %d %q", resp.StatusCode, body)
	}
	rs.MustDo("CONFIG", "SET", "maxmemory-policy", "noeviction")
	rs.MustDo("CONFIG", "SET", "maxmemory", "1")
	t.Cleanup(func() { rs.MustDo("CONFIG", "SET", "maxmemory", "0") })
	ts.ready.forget()
	if resp, body := get(t, ts.Addrs().Admin, "/readyz"); resp.StatusCode != 503 || !strings.Contains(body, "OOM") {
		t.Errorf("/readyz with Redis out of memory: %d %q, want 503 naming OOM", resp.StatusCode, body)
	}
	rs.MustDo("CONFIG", "SET", "maxmemory", "0")
	ts.ready.forget()
	if resp, body := get(t, ts.Addrs().Admin, "/readyz"); resp.StatusCode != 200 {
		t.Errorf("/readyz once Redis has memory again: %d %q, want 200", resp.StatusCode, body)
	}
}

// With Redis down, an instance whose policies all let requests through
// (on_store_error open or local) serves as configured: it stays ready, and
// says why.
func TestReadyWithoutRedisWhenNoPolicyNeedsIt(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	ts := startServer(t, `
store: {redis: "redis://`+rs.Addr()+`/0", timeout: 200ms}
policies:
  - name: api
    key: "header:X-Id"
    limits: ["2/m"]
  - name: login
    match: "POST /login"
    key: "header:X-Id"
    limits: ["5/m"]
    on_store_error: local
`, Options{Upstream: up.URL, Clock: realClock{}})
	if resp, body := get(t, ts.Addrs().Admin, "/readyz"); resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("/readyz with Redis up: %d %q", resp.StatusCode, body)
	}
	rs.Kill()
	ts.ready.forget()
	if resp, body := get(t, ts.Addrs().Admin, "/readyz"); resp.StatusCode != 200 || !strings.Contains(body, "Redis store does not answer") {
		t.Errorf("/readyz with Redis down and every policy open or local: %d %q, want 200 saying Redis does not answer", resp.StatusCode, body)
	}
	if resp, _ := get(t, ts.Addrs().Proxy, "/", "X-Id", "a"); resp.StatusCode != 200 {
		t.Errorf("fail-open policy with Redis down: %d, want 200", resp.StatusCode)
	}
}

// forget drops the cached answer of the store, so that the next check
// asks it again.
func (rd *readiness) forget() {
	rd.mu.Lock()
	rd.at = time.Time{}
	rd.mu.Unlock()
}

// realClock is the system clock: Redis decides on its own time.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// A configuration that does not load stops New with ErrConfig and every
// problem.
func TestNewBadConfig(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "bad.yaml", "policies:\n  - name: a\n    limts: [\"1/s\"]\n")
	_, err := New(Options{ConfigFile: p, AdminListen: Off, CheckListen: Off})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), p+":3:5: unknown field \"limts\"") {
		t.Fatalf("New: %v", err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
}

// The Server owns the listeners it is given: New closes them when it
// fails.
func TestNewFailsClosesGivenListeners(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "bad.yaml", "policies:\n  - name: a\n    limts: [\"1/s\"]\n")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := New(Options{ConfigFile: p, CheckListener: l, AdminListen: Off}); !errors.Is(err, ErrConfig) {
		t.Fatalf("New: %v, want ErrConfig", err)
	}
	// Open, the listener would wait for a connection: let it give up.
	l.(*net.TCPListener).SetDeadline(time.Now().Add(time.Second))
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept on the given listener after New failed: %v, want net.ErrClosed", err)
	}
}

// A Redis URL in the policy file that does not parse is a bad file, and
// the error names the problem without the URL, which may hold a password.
func TestBadRedisURLHidesPassword(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "sluice.yaml", `
store: {redis: "redis://u:secret@127.0.0.1:63x9/0"}
policies:
  - {name: api, limits: ["10/s"]}
`)
	_, err := New(Options{ConfigFile: p, AdminListen: Off, CheckListen: Off})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "store.redis") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("New: %v; want ErrConfig naming store.redis, without the password", err)
	}
}

// --redis is held to the checks a policy file's store.redis is: an addr=
// seed without a port, which rueidis would dial as the URL's own host on
// 6379, is refused.
func TestRedisURLAddrWithoutPort(t *testing.T) {
	_, err := New(Options{RedisURL: "redis://a:7000?addr=c", AdminListen: Off, CheckListen: Off})
	if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), `addr="c" needs a port`) {
		t.Fatalf("New: %v; want ErrOptions saying addr=c needs a port", err)
	}
}

func TestPprof(t *testing.T) {
	ts := startServer(t, "", Options{Pprof: true})
	if resp, body := get(t, ts.Addrs().Admin, "/debug/pprof/"); resp.StatusCode != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ with Options.Pprof: %d", resp.StatusCode)
	}
}

// The concurrency limit counts across a reload: requests still in flight
// on the old configuration count against the new one's limit.
func TestConcurrencyAcrossReload(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
	}))
	t.Cleanup(up.Close)
	const conf = `
concurrency:
  max_in_flight: 2
  shares: {low: 100%%, normal: 100%%, critical: 100%%}
policies:
  - {name: %s, limits: ["1000/s"]}
`
	ts := startServer(t, fmt.Sprintf(conf, "api"), Options{Upstream: up.URL})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { ts.status("/slow") })
		<-entered
	}
	if got := ts.status("/"); got != 503 {
		t.Fatalf("a third request with two in flight: %d, want 503", got)
	}
	writeFile(t, ts.dir, "sluice.yaml", fmt.Sprintf(conf, "api2"))
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := ts.status("/"); got != 503 {
		t.Errorf("after a reload, with two requests of the old configuration in flight: %d, want 503", got)
	}
	close(release)
	wg.Wait()
	if got := ts.status("/"); got != 200 {
		t.Errorf("with nothing in flight: %d, want 200", got)
	}
}

// The store section can name a Sentinel: the server keeps its counters in
// the master the sentinel names.
func TestSentinelStore(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "sluice-master")
	up := newUpstream(t)
	ts := startServer(t, `
store: {sentinel: {master: sluice-master, addrs: ["`+sentinel.Addr()+`"]}}
policies:
  - name: api
    limits: ["2/m"]
    on_store_error: closed
`, Options{Upstream: up.URL, Clock: realClock{}})
	if got := []int{ts.status("/"), ts.status("/"), ts.status("/")}; got[0] != 200 || got[1] != 200 || got[2] != 429 {
		t.Fatalf("through the sentinel's master: %v, want 200 200 429", got)
	}
	if keys := master.MustDo("DBSIZE"); keys == "0" {
		t.Error("no key in the master")
	}
}

// The dashboard's playground spends the server's CPU on anyone's
// simulation: off for a policy file unless Options.Playground, on for the
// built-in demo a newcomer runs.
func TestPlayground(t *testing.T) {
	sim := func(ts *testServer) int {
		t.Helper()
		resp, err := http.Post("http://"+ts.Addrs().Admin+"/api/sim", "application/json", strings.NewReader(`{"scenario":"boundary"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const file = "policies: [{name: api, key: ip, limits: [\"10/m\"]}]\n"
	if code := sim(startServer(t, file, Options{})); code != http.StatusForbidden {
		t.Errorf("a simulation on a server with a policy file: %d, want 403", code)
	}
	if code := sim(startServer(t, file, Options{Playground: true})); code != http.StatusOK {
		t.Errorf("a simulation with Playground: %d, want 200", code)
	}
	if code := sim(startServer(t, "", Options{})); code != http.StatusOK {
		t.Errorf("a simulation on the demo: %d, want 200", code)
	}
}

// heldUpstream starts an upstream whose one request closes entered as it
// arrives and answers "finished" once release is closed.
func heldUpstream(t *testing.T) (url string, entered, release chan struct{}) {
	t.Helper()
	entered, release = make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "finished")
	}))
	t.Cleanup(up.Close)
	return up.URL, entered, release
}
