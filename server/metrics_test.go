package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
)

// gathered returns the value of the series of reg named name whose labels
// include labels (name=value pairs), and whether there is one. A
// histogram's value is its count.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels ...string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// observedServer is the part of a Server the observer counts in.
func observedServer(t *testing.T) (*Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	clock := ratetest.NewClock(start)
	s := &Server{m: NewMetrics(reg, clock.Now), dash: dashboard.New(dashboard.Options{Clock: clock}), top: NewTopK(10)}
	registerRefusedRatio(reg, s.dash)
	return s, reg
}

// Each policy decision is counted under its result, what the client got,
// and in sluice_refused_ratio as the client saw it: a shadow policy
// refuses nothing, when the store failed under it too, so a Redis outage
// under a shadow policy does not read as refusals (and fire the
// refused-ratio alert) while every client is served. On a store error,
// on_store_error's decision is counted as any other (the local store's
// refusal as refused, and in /debug/top; closed's 503 as unavailable),
// and in sluice_fallback_decisions_total too.
func TestObserverCountsWhatClientsSaw(t *testing.T) {
	s, reg := observedServer(t)
	down := errors.New("redis store: connection refused")
	enforcing := &policy.Policy{Name: "api"}
	closed := &policy.Policy{Name: "api_closed", OnStoreError: sluice.FailClosed}
	local := &policy.Policy{Name: "api_local", OnStoreError: sluice.FailLocal}
	shadow := &policy.Policy{Name: "api_next", Shadow: true}
	for _, tt := range []struct {
		what     string
		e        policy.Event
		result   string
		refused  bool
		fallback bool
	}{
		{"allowed", policy.Event{Policy: enforcing, Decision: rate.Decision{Allowed: true}}, ResultAllowed, false, false},
		{"refused", policy.Event{Policy: enforcing, Key: "k1"}, ResultRefused, true, false},
		// Admitted after a max_delay wait: the decision after it has no Delay.
		{"throttled", policy.Event{Policy: enforcing, Decision: rate.Decision{Allowed: true}, Waited: time.Second}, ResultThrottled, false, false},
		{"open on a store error", policy.Event{Policy: enforcing, Decision: rate.Decision{Allowed: true}, StoreErr: down}, ResultAllowed, false, true},
		{"closed on a store error", policy.Event{Policy: closed, Decision: rate.Decision{RetryAfter: time.Second}, StoreErr: down}, ResultUnavailable, true, true},
		{"local refusing on a store error", policy.Event{Policy: local, Key: "k3", Decision: rate.Decision{RetryAfter: time.Second}, StoreErr: down}, ResultRefused, true, true},
		{"local throttling on a store error", policy.Event{Policy: local, Decision: rate.Decision{Allowed: true, Delay: time.Second}, Waited: time.Second, StoreErr: down}, ResultThrottled, false, true},
		{"shadow refused", policy.Event{Policy: shadow, Shadow: true, Key: "k2"}, ResultShadowRefused, false, false},
		// The store's error comes with an empty Decision, which refuses.
		{"shadow on a store error", policy.Event{Policy: shadow, Shadow: true, StoreErr: down}, ResultAllowed, false, true},
	} {
		before, _ := gathered(t, reg, "sluice_decisions_total", "policy", tt.e.Policy.Name, "result", tt.result)
		fellBack, _ := gathered(t, reg, "sluice_fallback_decisions_total", "policy", tt.e.Policy.Name)
		live := s.dash.Live(60).Policies
		observer{s, &generation{}}.Observe(context.Background(), tt.e)
		if after, _ := gathered(t, reg, "sluice_decisions_total", "policy", tt.e.Policy.Name, "result", tt.result); after != before+1 {
			t.Errorf("%s: sluice_decisions_total{result=%q} went from %v to %v, want one more", tt.what, tt.result, before, after)
		}
		if after, _ := gathered(t, reg, "sluice_fallback_decisions_total", "policy", tt.e.Policy.Name); (after == fellBack+1) != tt.fallback {
			t.Errorf("%s: sluice_fallback_decisions_total went from %v to %v, want one more: %v", tt.what, fellBack, after, tt.fallback)
		}
		var passed, refused int64
		for _, p := range s.dash.Live(60).Policies {
			passed, refused = passed+p.Passed, refused+p.Refused
		}
		for _, p := range live {
			passed, refused = passed-p.Passed, refused-p.Refused
		}
		if got := refused == 1 && passed == 0; got != tt.refused || passed+refused != 1 {
			t.Errorf("%s: counted %d passed, %d refused; want refused %v", tt.what, passed, refused, tt.refused)
		}
	}
	if ratio, _ := gathered(t, reg, "sluice_refused_ratio"); ratio != 3.0/9 {
		t.Errorf("sluice_refused_ratio %v, want 3/9: two refusals and a store error failing closed, of 9", ratio)
	}
	keys, total := s.top.Top(-1)
	got := []string{}
	for _, k := range keys {
		got = append(got, k.Key)
	}
	slices.Sort(got)
	if total != 2 || !slices.Equal(got, []string{"k1", "k3"}) {
		t.Errorf("/debug/top holds %v of %d refusals, want k1's and k3's", keys, total)
	}
}

// sluice_store_latency_seconds tells apart what its stores take: a
// decision in memory (about 100ns, with the clock read around it), a
// Redis call on the local network (a fraction of a millisecond), and a
// call that waits for Redis up to about twice the store's timeout (50ms by
// default, more where Redis is far). Each lands in a bucket at most 2.5
// times its value, not in the first one or in +Inf, where a quantile
// would read the bucket's bound whatever the latency.
func TestStoreLatencyBuckets(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, nil)
	latencies := []time.Duration{
		150 * time.Nanosecond, // in memory
		400 * time.Nanosecond, // in memory, on a busy core
		3 * time.Microsecond,  // in memory, evicting a key
		300 * time.Microsecond,
		4 * time.Millisecond,
		2*DefaultStoreTimeout + 10*time.Millisecond,  // a hung Redis, the default timeout
		2*400*time.Millisecond + 50*time.Millisecond, // a hung Redis, a timeout of 400ms
	}
	m.storeLatency.WithLabelValues("redis").Observe(0)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var bounds []float64
	for _, mf := range mfs {
		if mf.GetName() == "sluice_store_latency_seconds" {
			for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
				bounds = append(bounds, b.GetUpperBound())
			}
		}
	}
	if len(bounds) == 0 {
		t.Fatal("no sluice_store_latency_seconds buckets")
	}
	for _, d := range latencies {
		v := d.Seconds()
		i := 0
		for i < len(bounds) && bounds[i] < v {
			i++
		}
		switch {
		case i == len(bounds):
			t.Errorf("%v lands in +Inf (the largest bucket is %gs)", d, bounds[len(bounds)-1])
		case i == 0:
			t.Errorf("%v lands in the first bucket, %gs", d, bounds[0])
		case bounds[i] > 2.5*v:
			t.Errorf("%v lands in the bucket of %gs, over 2.5 times it", d, bounds[i])
		}
	}
}

// A reload that fails is counted once, as the watcher reads a file once
// per change: sluice_config_last_reload_successful says for as long as it
// lasts that the files on disk are not the ones serving, where an alert
// on the failures' counter would resolve while the bad file stays.
func TestConfigLastReloadSuccessful(t *testing.T) {
	ts := startServer(t, checkPolicy, Options{})
	want := func(when, v string) {
		t.Helper()
		if got := ts.metric("sluice_config_last_reload_successful "); got != "sluice_config_last_reload_successful "+v {
			t.Errorf("%s: %q, want %s", when, got, v)
		}
	}
	want("at start", "1")
	writeFile(t, ts.dir, "sluice.yaml", "policies: [")
	if err := ts.Reload(context.Background()); err == nil {
		t.Fatal("a file cut short reloaded")
	}
	want("after a failed reload", "0")
	want("still, at the next scrape", "0")
	writeFile(t, ts.dir, "sluice.yaml", checkPolicy)
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	want("after the file is fixed", "1")
}

// Every store error kind and shed priority has a series, at 0, before the
// first: an alert on increase() would otherwise miss the first burst,
// which only creates the series.
func TestMetricsSeriesFromTheStart(t *testing.T) {
	ts := startServer(t, checkPolicy, Options{})
	for _, series := range []string{
		`sluice_store_errors_total{kind="down"} 0`, `sluice_store_errors_total{kind="timeout"} 0`,
		`sluice_store_errors_total{kind="canceled"} 0`, `sluice_store_errors_total{kind="invalid"} 0`,
		`sluice_store_errors_total{kind="unavailable"} 0`,
		`sluice_shed_total{priority="low"} 0`, `sluice_shed_total{priority="normal"} 0`, `sluice_shed_total{priority="critical"} 0`,
	} {
		name, _, _ := strings.Cut(series, " ")
		if got := ts.metric(name); got != series {
			t.Errorf("%s: %q, want %q", name, got, series)
		}
	}
}

// A reload that removes a policy drops its decision series, which would
// otherwise stay, flat, for the life of the process; the policies it
// keeps keep theirs.
func TestReloadForgetsRemovedPolicies(t *testing.T) {
	two := "policies:\n  - {name: keep, match: /a, key: ip, limits: [\"10/m\"]}\n  - {name: gone, match: /b, key: ip, limits: [\"10/m\"]}\n"
	up := newUpstream(t)
	ts := startServer(t, two, Options{Upstream: up.URL})
	get(t, ts.Addrs().Proxy, "/a")
	get(t, ts.Addrs().Proxy, "/b")
	for _, name := range []string{"keep", "gone"} {
		if got := ts.metric(`sluice_decisions_total{policy="` + name + `",result="allowed"}`); !strings.HasSuffix(got, " 1") {
			t.Fatalf("before the reload, %s: %q, want 1", name, got)
		}
	}
	old := ts.gen.Load()
	writeFile(t, ts.dir, "sluice.yaml", "policies:\n  - {name: keep, match: /a, key: ip, limits: [\"10/m\"]}\n")
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := ts.metric(`sluice_decisions_total{policy="gone"`); got != "" {
		t.Errorf("after the reload, the removed policy's series stays: %q", got)
	}
	// A request of the old generation, still in flight, decided after the
	// reload: its decision does not bring the series back.
	gone := old.set.Policies()[1]
	observer{ts.Server, old}.Observe(context.Background(), policy.Event{Policy: gone, Decision: rate.Decision{Allowed: true}})
	if got := ts.metric(`sluice_decisions_total{policy="gone"`); got != "" {
		t.Errorf("a request in flight across the reload brought the removed policy's series back: %q", got)
	}
	if got := ts.metric(`sluice_decisions_total{policy="keep",result="allowed"}`); !strings.HasSuffix(got, " 1") {
		t.Errorf("after the reload, keep: %q, want its count kept", got)
	}
}
