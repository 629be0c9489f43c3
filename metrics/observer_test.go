package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// series returns every sluice_ series reg holds, as "name{label=value,...}
// value" lines, sorted.
func series(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "sluice_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", mf.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue()))
		}
	}
	sort.Strings(out)
	return out
}

// wantSeries checks that reg holds exactly want, in any order.
func wantSeries(t *testing.T, when string, reg *prometheus.Registry, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := series(t, reg); !slices.Equal(got, want) {
		t.Errorf("%s: series\n\t%s\nwant\n\t%s", when, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// downStore is a store whose every call fails, as Redis unreachable does.
type downStore struct{}

func (downStore) Decide(context.Context, rate.Request) (rate.Decision, error) {
	return rate.Decision{}, errors.New("store down")
}

func (downStore) DecideAll(context.Context, []rate.Request, []rate.Decision) (rate.Decision, error) {
	return rate.Decision{}, errors.New("store down")
}

// send decides one request to path from 192.0.2.1 and returns its
// Outcome, which the caller must call Done on.
func send(e *policy.Enforcer, path string) policy.Outcome {
	r := httptest.NewRequest("GET", path, nil)
	return e.Enforce(context.Background(), &policy.Request{HTTP: r, Header: r.Header, Client: netip.MustParsePrefix("192.0.2.1/32")})
}

const testPolicies = `
concurrency: {max_in_flight: 1}
policies:
  - {name: api, match: /api/, key: ip, limits: ["1/m"], on_store_error: open}
  - {name: held, match: /held/, key: ip, limits: ["gcra 1/s"], max_delay: 2s}
  - {name: trial, match: /trial/, shadow: true, key: ip, limits: ["1/m"]}
`

// Each decision is counted once under its policy and result, as sluice
// serve counts it; a store failure is counted as a fallback decision too;
// a shed request under its priority. Declare starts every series a set
// can count in at 0, and no series holds a request's key.
func TestObserverCountsDecisions(t *testing.T) {
	set, err := policy.Load("sluice.yaml", []byte(testPolicies))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	obs, err := metrics.NewObserver(reg)
	if err != nil {
		t.Fatal(err)
	}
	obs.Declare(set)
	wantSeries(t, "declared", reg,
		`sluice_decisions_total{policy=api,result=allowed} 0`,
		`sluice_decisions_total{policy=api,result=refused} 0`,
		`sluice_decisions_total{policy=api,result=throttled} 0`,
		`sluice_decisions_total{policy=api,result=unavailable} 0`,
		`sluice_decisions_total{policy=held,result=allowed} 0`,
		`sluice_decisions_total{policy=held,result=refused} 0`,
		`sluice_decisions_total{policy=held,result=throttled} 0`,
		`sluice_decisions_total{policy=held,result=unavailable} 0`,
		`sluice_decisions_total{policy=trial,result=allowed} 0`,
		`sluice_decisions_total{policy=trial,result=shadow_refused} 0`,
		`sluice_fallback_decisions_total{policy=api} 0`,
		`sluice_fallback_decisions_total{policy=held} 0`,
		`sluice_fallback_decisions_total{policy=trial} 0`,
		`sluice_shed_total{priority=critical} 0`,
		`sluice_shed_total{priority=low} 0`,
		`sluice_shed_total{priority=normal} 0`,
	)

	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	o := policy.Options{Clock: clock, Observer: obs}
	e := policy.NewEnforcer(set, memory.New(memory.Options{Clock: clock}), o)
	for i, step := range []struct {
		path string
		want policy.Verdict
	}{
		{"/api/", policy.Allow}, {"/api/", policy.Refuse},
		{"/held/", policy.Allow}, {"/held/", policy.Allow}, // the second after a wait
		{"/trial/", policy.Allow}, {"/trial/", policy.Allow}, // the second one the shadow would refuse
	} {
		out := send(e, step.path)
		out.Done()
		if out.Verdict != step.want {
			t.Fatalf("step %d, %s: %v, want %v", i+1, step.path, out.Verdict, step.want)
		}
	}
	// One request in flight fills max_in_flight: the next is shed.
	first := send(e, "/api/x")
	if out := send(e, "/held/"); out.Verdict != policy.Shed {
		t.Errorf("with one request in flight: %v, want shed", out.Verdict)
	}
	first.Done()

	// The store down: on_store_error: open lets the request through; a
	// Fallback in its FailClosed mode refuses it whatever the policy says.
	down := send(policy.NewEnforcer(set, downStore{}, o), "/api/")
	down.Done()
	fb := sluice.NewFallback(downStore{}, sluice.FallbackOptions{Mode: sluice.FailClosed, Timeout: -1, Clock: clock})
	closed := send(policy.NewEnforcer(set, fb, o), "/api/")
	closed.Done()
	if closed.Verdict != policy.Unavailable {
		t.Errorf("over a FailClosed Fallback: %v, want unavailable", closed.Verdict)
	}

	wantSeries(t, "after the requests", reg,
		`sluice_decisions_total{policy=api,result=allowed} 2`,
		`sluice_decisions_total{policy=api,result=refused} 2`,
		`sluice_decisions_total{policy=api,result=throttled} 0`,
		`sluice_decisions_total{policy=api,result=unavailable} 1`,
		`sluice_decisions_total{policy=held,result=allowed} 1`,
		`sluice_decisions_total{policy=held,result=refused} 0`,
		`sluice_decisions_total{policy=held,result=throttled} 1`,
		`sluice_decisions_total{policy=held,result=unavailable} 0`,
		`sluice_decisions_total{policy=trial,result=allowed} 1`,
		`sluice_decisions_total{policy=trial,result=shadow_refused} 1`,
		`sluice_fallback_decisions_total{policy=api} 2`,
		`sluice_fallback_decisions_total{policy=held} 0`,
		`sluice_fallback_decisions_total{policy=trial} 0`,
		`sluice_shed_total{priority=critical} 0`,
		`sluice_shed_total{priority=low} 0`,
		`sluice_shed_total{priority=normal} 1`,
	)
}

// NewObserver on a registry that already has an Observer's counters
// returns one counting in them: two middlewares of one program share a
// registry. It refuses a nil registry, and one whose sluice_ series are
// another collector's, registering none of its own.
func TestNewObserverRegistry(t *testing.T) {
	set, err := policy.Load("sluice.yaml", []byte(`policies: [{name: api, key: ip, limits: ["1/m"]}]`))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	var obs [2]*metrics.Observer
	for i := range obs {
		if obs[i], err = metrics.NewObserver(reg); err != nil {
			t.Fatalf("NewObserver %d: %v", i+1, err)
		}
	}
	for _, o := range obs {
		e := policy.NewEnforcer(set, memory.New(memory.Options{}), policy.Options{Observer: o})
		out := send(e, "/")
		out.Done()
	}
	if got := series(t, reg); !slices.Contains(got, `sluice_decisions_total{policy=api,result=allowed} 2`) {
		t.Errorf("two Observers on one registry: %q, want 2 allowed decisions in one series", got)
	}

	if _, err := metrics.NewObserver(nil); err == nil {
		t.Error("NewObserver(nil): no error")
	}

	reg = prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_shed_total", Help: "Someone else's."}))
	if _, err := metrics.NewObserver(reg); err == nil {
		t.Error("NewObserver over another sluice_shed_total: no error")
	}
	if got := series(t, reg); !slices.Equal(got, []string{"sluice_shed_total{} 0"}) {
		t.Errorf("after a failed NewObserver, the registry holds %q, want only the other collector's series", got)
	}
}
