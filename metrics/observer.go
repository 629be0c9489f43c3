package metrics

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/policy"
)

// Observer is a policy.Observer that counts decisions and shed requests
// in Prometheus (see the package doc for the series). Create one with
// NewObserver; the zero value has no counters and must not be used. It is
// safe for concurrent use.
type Observer struct {
	c *collectors
}

var _ policy.Observer = (*Observer)(nil)

// collectors are an Observer's counters, registered as one collector so
// that a registration either takes all three or none.
type collectors struct {
	decisions *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	shed      *prometheus.CounterVec
}

// Describe implements prometheus.Collector.
func (c *collectors) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.fallbacks.Describe(ch)
	c.shed.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *collectors) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.fallbacks.Collect(ch)
	c.shed.Collect(ch)
}

// The results each kind of policy is counted under, as sluice serve
// declares them: a shadow policy refuses nothing, an enforcing one
// never would-refuse.
var (
	enforcingResults = []string{policy.ResultAllowed, policy.ResultRefused, policy.ResultThrottled, policy.ResultUnavailable}
	shadowResults    = []string{policy.ResultAllowed, policy.ResultShadowRefused}
)

// NewObserver returns an Observer whose counters are registered with reg,
// each priority's shed series at 0. An Observer already registered with
// reg is returned again, counting in the same series, so that every
// NewObserver of a program (one per middleware, say) may share reg.
//
// It returns an error, and registers nothing, when reg is nil or already
// holds other collectors of these names (sluice serve's Metrics, say):
// the program owns its registry and decides what a clash means. There is
// no Must variant, as a library that panics over a shared registry takes
// that choice away.
func NewObserver(reg prometheus.Registerer) (*Observer, error) {
	if reg == nil {
		return nil, errors.New("metrics: NewObserver needs a prometheus.Registerer")
	}
	c := &collectors{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "decisions_total",
			Help: "Decisions by policy and result, what the policy did to the request: allowed, refused (429), shadow_refused, throttled (admitted after a wait: max_delay's or a leaky_bucket's turn), unavailable (503: the store failed under on_store_error: closed, or a sluice.Fallback refused in its FailClosed mode). One per policy a request met.",
		}, []string{"policy", "result"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "fallback_decisions_total",
			Help: "Decisions of a policy the store could not make, made by its on_store_error or a sluice.Fallback's failure mode instead (a shadow policy's let the request through); each is in sluice_decisions_total too, under its result.",
		}, []string{"policy"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "shed_total",
			Help: "Requests shed with 503 by the concurrency limit, by priority class.",
		}, []string{"priority"}),
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*collectors); ok {
				return &Observer{c: existing}, nil
			}
		}
		return nil, fmt.Errorf("metrics: registering sluice's counters: %w", err)
	}
	// An alert on increase() sees the first shed request only if its
	// series was there before it.
	for _, p := range []policy.Priority{policy.Low, policy.Normal, policy.Critical} {
		c.shed.WithLabelValues(p.String())
	}
	return &Observer{c: c}, nil
}

// Declare creates, at 0, the series set's policies can count in: each
// result its kind of policy has, and its fallback decisions. A series
// born with the first refusal is one increase() reads as no refusal, so
// declare a set before it serves, as sluice serve does at start and at
// each reload. A nil set declares nothing.
func (o *Observer) Declare(set *policy.Set) {
	if set == nil {
		return
	}
	for _, p := range set.Policies() {
		results := enforcingResults
		if p.Shadow {
			results = shadowResults
		}
		for _, r := range results {
			o.c.decisions.WithLabelValues(p.Name, r)
		}
		o.c.fallbacks.WithLabelValues(p.Name)
	}
}

// Observe implements policy.Observer: it counts e under its policy and
// e.Result, and as a fallback decision if the store failed. e.Key is not
// read: it is the client's to choose.
func (o *Observer) Observe(_ context.Context, e policy.Event) {
	o.c.decisions.WithLabelValues(e.Policy.Name, e.Result()).Inc()
	if e.StoreErr != nil {
		o.c.fallbacks.WithLabelValues(e.Policy.Name).Inc()
	}
}

// Shed implements policy.Observer: it counts a request the concurrency
// limit shed, under its priority.
func (o *Observer) Shed(_ context.Context, p policy.Priority) {
	o.c.shed.WithLabelValues(p.String()).Inc()
}
