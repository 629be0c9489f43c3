package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A prober that hangs up while its /readyz waits for Redis's PING must
// not leave its own cancellation cached as Redis's answer: the probes of
// the next second would read 503 from a Redis that answers, and anyone
// who can reach the admin listener could keep an instance out of
// rotation by hanging up once a second.
func TestReadyzIgnoresACanceledProbe(t *testing.T) {
	rs := redistest.Start(t)
	ts := newServer(t, `
store: {redis: "redis://`+rs.Addr()+`/0"}
policies:
  - name: api
    key: ip
    limits: ["2/m"]
    on_store_error: closed
`, Options{Clock: realClock{}})
	admin := ts.adminMux()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	admin.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, "GET", "/readyz", nil))
	w := httptest.NewRecorder()
	admin.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	if w.Code != http.StatusOK || w.Body.String() != "ok\n" {
		t.Errorf("/readyz after a canceled probe, with Redis up: %d %q; want 200", w.Code, w.Body.String())
	}
}

// /debug/top counts Envoy's refusals per store key, one per client value,
// as it does a policy's: two clients of one limit are two entries, and a
// value of tens of kilobytes (a header Envoy passes) is kept short, so
// that the thousand keys stay small.
func TestDebugTopEnvoyKeys(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "edge.yaml", "domain: edge\ndescriptors:\n  - key: user\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	ts := startServer(t, "", Options{EnvoyConfigs: []string{dir}})
	c, _ := envoyClient(t, ts)
	long := strings.Repeat("u", 100_000)
	for _, user := range []string{long, "alice", "alice"} {
		ask(t, c, "edge", "user", user)
		if r := ask(t, c, "edge", "user", user); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("second request of %.10q: %v, want OVER_LIMIT", user, r.OverallCode)
		}
	}
	_, body := get(t, ts.Addrs().Admin, "/debug/top")
	var top TopReport
	if err := json.Unmarshal([]byte(body), &top); err != nil {
		t.Fatal(err)
	}
	if top.Refused != 4 || len(top.Keys) != 2 {
		t.Fatalf("/debug/top after 4 refusals of 2 users: %.300s", body)
	}
	if k := top.Keys[0]; k.Count != 3 || !strings.HasPrefix(k.Key, "rls:edge:") || !strings.Contains(k.Key, "alice") {
		t.Errorf("the most refused: %+v, want alice's store key, 3 times", k)
	}
	if k := top.Keys[1].Key; len(k) > 512 || !strings.HasPrefix(k, "rls:edge:") {
		t.Errorf("/debug/top holds a key of %d bytes, want at most 512: %.60q…", len(k), k)
	}
}

// The admin listener's dashboard, /debug/top and /debug/pprof/ answer
// only by an IP address, localhost or an allowed name: a web page that
// points its own name at 127.0.0.1 (DNS rebinding) makes the browser send
// that name as Host, and is refused. /metrics, /healthz and /readyz,
// which hold no client's key, answer by any name, as scrapers use.
func TestAdminHostGuard(t *testing.T) {
	ts := newServer(t, "", Options{Pprof: true, AdminHosts: []string{"Dash.Example.COM.", "ops.example:9090"}})
	admin := ts.adminMux()
	guarded := []string{"/debug/top", "/debug/pprof/", "/debug/pprof/cmdline", "/", "/api/live?seconds=60"}
	for _, tt := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:9090", 200},
		{"127.0.0.1", 200},
		{"[::1]:9090", 200},
		{"[::1]", 200},
		{"10.1.2.3:9090", 200}, // a pod's address
		{"localhost", 200},
		{"localhost:9090", 200},
		{"LOCALHOST.", 200},
		{"foo.localhost", 200},
		{"foo.localhost.:9090", 200},
		{"dash.example.com", 200},
		{"DASH.example.com:443", 200},
		{"dash.example.com.", 200},
		{"ops.example", 200},
		{"", 200}, // no browser sends an empty Host, or none
		{"evil.example", 421},
		{"evil.example:9090", 421},
		{"127.0.0.1.evil.example", 421},
		{"localhost.evil.example", 421},
		{"dash.example.com.evil.example", 421},
		{"localhost:9090:9090", 421},
		{"example.com", 421},
	} {
		for _, path := range guarded {
			req := httptest.NewRequest("GET", path, nil)
			req.Host = tt.host
			w := httptest.NewRecorder()
			admin.ServeHTTP(w, req)
			if w.Code != tt.want {
				t.Errorf("GET %s, Host %q: %d, want %d", path, tt.host, w.Code, tt.want)
			}
		}
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		for _, host := range []string{"evil.example", "sluice.monitoring.svc:9090", "127.0.0.1:9090"} {
			req := httptest.NewRequest("GET", path, nil)
			req.Host = host
			w := httptest.NewRecorder()
			admin.ServeHTTP(w, req)
			if w.Code != 200 {
				t.Errorf("GET %s, Host %q: %d, want 200", path, host, w.Code)
			}
		}
	}
	// The exemption is of those routes, not of their paths: POST
	// /metrics falls through to the dashboard, behind the guard.
	req := httptest.NewRequest("POST", "/metrics", nil)
	req.Host = "evil.example"
	w := httptest.NewRecorder()
	admin.ServeHTTP(w, req)
	if w.Code != http.StatusMisdirectedRequest {
		t.Errorf("POST /metrics, Host evil.example: %d, want 421", w.Code)
	}
}

// A refusal says, in plain text, how to allow the name; it is logged,
// once a minute at most, so that a page trying in a loop does not flood
// the log.
func TestAdminHostRefusal(t *testing.T) {
	ts := startServer(t, "", Options{})
	for range 3 {
		req, err := http.NewRequest("GET", "http://"+ts.Addrs().Admin+"/debug/top", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "Evil.Example:9090"
		resp, body := do(t, req)
		if resp.StatusCode != http.StatusMisdirectedRequest || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
			!strings.Contains(body, "--admin-host evil.example\n") || strings.Contains(body, "refused") {
			t.Fatalf("/debug/top by evil.example: %d %q\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	if n := strings.Count(ts.logs.String(), "refused a request by a name not allowed"); n != 1 {
		t.Errorf("3 refusals in a row logged %d times, want once:\n%s", n, ts.logs.String())
	}
	// A Host that is no host name is not suggested to --admin-host.
	req, _ := http.NewRequest("GET", "http://"+ts.Addrs().Admin+"/", nil)
	req.Host = "evil+example"
	if resp, body := do(t, req); resp.StatusCode != http.StatusMisdirectedRequest || strings.Contains(body, "To reach it") {
		t.Errorf("/ by %q: %d\n%s", req.Host, resp.StatusCode, body)
	}
}

// Options.AdminHosts takes host names, in any case, with a trailing dot,
// a port or neither; what no Host header would match is ErrOptions,
// naming the flag.
func TestAdminHostsOptions(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"dash.example.com", true},
		{"Dash.Example.COM.", true},
		{"sluice_admin", true},
		{"http://dash.example.com", false},
		{"dash.example.com:9090", true}, // the port is not compared
		{"dash.example.com:x:y", false},
		{"*.example.com", false},
		{"dash.example.com/", false},
		{".", false},
		{"..", false},
		{"", false},
		{"[::1]", false},
		{"dash.example.com:", false},
	} {
		o := Options{ConfigFile: writeFile(t, dir, "sluice.yaml", checkPolicy), AdminHosts: []string{tt.name},
			Listen: Off, CheckListen: Off, GRPCListen: Off, AdminListen: Off}
		_, err := New(o)
		if tt.ok && err != nil || !tt.ok && (!errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "--admin-host")) {
			t.Errorf("AdminHosts %q: %v, want ok %v (else ErrOptions naming --admin-host)", tt.name, err, tt.ok)
		}
	}
}

func TestHostName(t *testing.T) {
	for host, want := range map[string]string{
		"127.0.0.1:9090":     "127.0.0.1",
		"[::1]:9090":         "::1",
		"[::1]":              "::1",
		"::1":                "::1",
		"LOCALHOST.":         "localhost",
		"Dash.Example.com.:": "dash.example.com",
		"":                   "",
	} {
		if got := hostName(host); got != want {
			t.Errorf("hostName(%q) = %q, want %q", host, got, want)
		}
	}
}

// A shadow policy refuses nothing, whatever its on_store_error says: with
// Redis down it does not keep an instance whose enforcing policies serve
// on without Redis out of rotation. Were it to, a shadow copy of a policy
// that kept on_store_error: closed would take every instance out at once.
func TestReadyzIgnoresAShadowPolicyFailingClosed(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	ts := startServer(t, `
store: {redis: "redis://`+rs.Addr()+`/0", timeout: 200ms}
policies:
  - name: api
    key: "header:X-Id"
    limits: ["2/m"]
  - name: api_next
    key: "header:X-Id"
    limits: ["1/m"]
    shadow: true
    on_store_error: closed
`, Options{Upstream: up.URL, Clock: realClock{}})
	rs.Kill()
	ts.ready.forget()
	if resp, _ := get(t, ts.Addrs().Proxy, "/", "X-Id", "a"); resp.StatusCode != 200 {
		t.Fatalf("with Redis down, a request the fail-open policy lets through: %d, want 200", resp.StatusCode)
	}
	if resp, body := get(t, ts.Addrs().Admin, "/readyz"); resp.StatusCode != 200 || !strings.Contains(body, "Redis store does not answer") {
		t.Errorf("/readyz with Redis down, the only fail-closed policy a shadow one: %d %q, want 200 saying Redis does not answer", resp.StatusCode, body)
	}
}
