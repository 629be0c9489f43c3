package server

import (
	"context"
	"encoding/json"
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
