package server

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/rls"
)

// heldPolicy lets a request wait up to 2s for gcra's 1/s: the second
// request of a second waits for the first's.
const heldPolicy = `
policies:
  - name: held
    key: ip
    limits: ["gcra 1/s"]
    max_delay: 2s
`

// A request max_delay holds back under gcra is counted throttled,
// admitted after a wait, as a leaky_bucket's turn is: the decision after
// the wait, which admitted it, has no Delay to tell.
func TestThrottledAfterMaxDelay(t *testing.T) {
	up := newUpstream(t)
	ts := startServer(t, heldPolicy, Options{Upstream: up.URL})
	for i := range 2 {
		if got := ts.status("/"); got != 200 {
			t.Fatalf("request %d: %d, want 200", i+1, got)
		}
	}
	if slept, _ := ts.clock.Slept(); slept != time.Second {
		t.Fatalf("the requests waited %v, want the second one a second", slept)
	}
	ts.wantMetrics("after a request waited",
		`sluice_decisions_total{policy="held",result="allowed"} 1`,
		`sluice_decisions_total{policy="held",result="throttled"} 1`,
	)
}

// heldClock is a fake clock whose Sleep waits for the test: it sends the
// duration on waiting and returns once release is closed, so that a test
// can act while a request is held back.
type heldClock struct {
	*ratetest.Clock
	waiting chan time.Duration
	release chan struct{}
}

func (c *heldClock) Sleep(ctx context.Context, d time.Duration) error {
	c.waiting <- d
	select {
	case <-c.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return c.Clock.Sleep(ctx, d)
}

// A request held back across a reload that keeps its policy is counted:
// only the series of a policy the reload removed stay gone.
func TestWaitAcrossReloadCounted(t *testing.T) {
	clock := &heldClock{Clock: ratetest.NewClock(start), waiting: make(chan time.Duration, 1), release: make(chan struct{})}
	up := newUpstream(t)
	ts := startServer(t, heldPolicy, Options{Upstream: up.URL, Clock: clock})
	if got := ts.status("/"); got != 200 {
		t.Fatalf("first request: %d, want 200", got)
	}
	second := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + ts.Addrs().Proxy + "/")
		if err != nil {
			second <- 0
			return
		}
		resp.Body.Close()
		second <- resp.StatusCode
	}()
	select {
	case <-clock.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the second request was not held back")
	}
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(clock.release)
	select {
	case code := <-second:
		if code != 200 {
			t.Fatalf("second request: %d, want 200", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second request was not answered")
	}
	ts.wantMetrics("a request held back across a reload",
		`sluice_decisions_total{policy="held",result="allowed"} 1`,
		`sluice_decisions_total{policy="held",result="throttled"} 1`,
	)
}

// A reload that turns a policy from shadow to enforcing, or back, drops
// the results the policy can no longer have, which would stay flat beside
// the new ones, and starts those it now has at 0. A request of the old
// generation, decided after the reload, brings none back.
func TestReloadSwitchesShadowSeries(t *testing.T) {
	const enforcing = "policies:\n  - {name: api, key: ip, limits: [\"1/m\"]}\n"
	const shadow = "policies:\n  - {name: api, key: ip, limits: [\"1/m\"], shadow: true}\n"
	up := newUpstream(t)
	ts := startServer(t, shadow, Options{Upstream: up.URL})
	for range 2 {
		ts.status("/")
	}
	ts.wantMetrics("shadow",
		`sluice_decisions_total{policy="api",result="allowed"} 1`,
		`sluice_decisions_total{policy="api",result="shadow_refused"} 1`,
	)
	reload := func(config string) *generation {
		t.Helper()
		old := ts.gen.Load()
		writeFile(t, ts.dir, "sluice.yaml", config)
		if err := ts.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		return old
	}
	gone := func(when string, results ...string) {
		t.Helper()
		for _, r := range results {
			if got := ts.metric(`sluice_decisions_total{policy="api",result="` + r + `"}`); got != "" {
				t.Errorf("%s: %q stays", when, got)
			}
		}
	}

	old := reload(enforcing)
	ts.wantMetrics("shadow, then enforcing",
		`sluice_decisions_total{policy="api",result="allowed"} 1`,
		`sluice_decisions_total{policy="api",result="refused"} 0`,
		`sluice_decisions_total{policy="api",result="throttled"} 0`,
		`sluice_decisions_total{policy="api",result="unavailable"} 0`,
	)
	gone("shadow, then enforcing", "shadow_refused")
	// The shadow policy's refusal of a request still in flight.
	observer{ts.Server, old}.Observe(context.Background(), policy.Event{Policy: old.set.Policies()[0], Shadow: true})
	gone("a shadow refusal decided after the reload", "shadow_refused")

	old = reload(shadow)
	ts.wantMetrics("enforcing, then shadow",
		`sluice_decisions_total{policy="api",result="allowed"} 1`,
		`sluice_decisions_total{policy="api",result="shadow_refused"} 0`,
	)
	gone("enforcing, then shadow", "refused", "throttled", "unavailable")
	observer{ts.Server, old}.Observe(context.Background(), policy.Event{Policy: old.set.Policies()[0], Decision: rate.Decision{RetryAfter: time.Second}})
	gone("a refusal decided after the reload", "refused")
	// What still applies is counted.
	observer{ts.Server, old}.Observe(context.Background(), policy.Event{Policy: old.set.Policies()[0], Decision: rate.Decision{Allowed: true}})
	ts.wantMetrics("an admission decided after the reload",
		`sluice_decisions_total{policy="api",result="allowed"} 2`,
	)
}

// A call of Envoy's service decided under a domain that a reload removed
// while it was in flight brings back none of the domain's series; one of
// a domain still served is counted.
func TestRLSDecisionAcrossReload(t *testing.T) {
	dir := t.TempDir()
	domain := func(name string) string {
		return "domain: " + name + "\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	}
	writeFile(t, dir, "edge.yaml", domain("edge"))
	writeFile(t, dir, "gone.yaml", domain("gone"))
	ts := startServer(t, "", Options{EnvoyConfigs: []string{dir}})
	if err := os.Remove(filepath.Join(dir, "gone.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	// What the service reports of calls begun before the reload.
	ts.observeRLS(rls.Event{Domain: "gone", Over: true})
	ts.observeRLS(rls.Event{Domain: "edge", Over: true})
	if got := ts.metric(`sluice_decisions_total{policy="rls:gone"`); got != "" {
		t.Errorf("a call of a removed domain brought its series back: %q", got)
	}
	ts.wantMetrics("a call of a domain still served",
		`sluice_decisions_total{policy="rls:edge",result="refused"} 1`,
	)
}
