// Package decisionmetrics defines the Prometheus counters of policy
// decisions, once, for the two that export them: sluice serve (package
// server) and the library's package metrics, so that one dashboard reads
// both and their names, labels and help cannot drift apart.
package decisionmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/policy"
)

// Counters are the decision counters. Labels hold policy names (for
// Envoy's service, rls:DOMAIN), results and priorities, which the
// configuration bounds, never a request's key.
type Counters struct {
	// Decisions counts decisions by policy and result (policy.Event.Result).
	Decisions *prometheus.CounterVec
	// Fallbacks counts the decisions the store could not make.
	Fallbacks *prometheus.CounterVec
	// Shed counts requests the concurrency limit shed, by priority.
	Shed *prometheus.CounterVec
}

// New returns the counters, unregistered, each priority's shed series at
// 0: an alert on increase() sees the first shed request only if its
// series was there before it.
func New() Counters {
	c := Counters{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "decisions_total",
			Help: "Decisions by policy (for Envoy's service, rls:DOMAIN) and result, what the policy did to the request: allowed, refused (429), shadow_refused, throttled (admitted after being held: a window's max_delay wait, a gcra or token_bucket's unit reserved under max_delay, a leaky_bucket's turn; a request whose client left while held counts here too, its unit spent), unavailable (503: the store failed under on_store_error: closed, or a sluice.Fallback refused in its FailClosed mode). One per policy a request met.",
		}, []string{"policy", "result"}),
		Fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "fallback_decisions_total",
			Help: "Decisions of a policy the store could not make, made by its on_store_error or a sluice.Fallback's failure mode instead (a shadow policy's let the request through); each is in sluice_decisions_total too, under its result.",
		}, []string{"policy"}),
		Shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "shed_total",
			Help: "Requests shed with 503 by the concurrency limit, by priority class.",
		}, []string{"priority"}),
	}
	for _, p := range []policy.Priority{policy.Low, policy.Normal, policy.Critical} {
		c.Shed.WithLabelValues(p.String())
	}
	return c
}

// Declare creates, at 0, the series p can count in: each result its kind
// of policy has (Policy.Results), and its fallback decisions. A series
// born with the first refusal is one increase() reads as no refusal.
func (c Counters) Declare(p *policy.Policy) {
	for _, r := range p.Results() {
		c.Decisions.WithLabelValues(p.Name, r)
	}
	c.Fallbacks.WithLabelValues(p.Name)
}

// Observe counts e under its policy and e.Result, and as a fallback
// decision if the store failed.
func (c Counters) Observe(e policy.Event) {
	c.Decisions.WithLabelValues(e.Policy.Name, e.Result()).Inc()
	if e.StoreErr != nil {
		c.Fallbacks.WithLabelValues(e.Policy.Name).Inc()
	}
}
