package metrics

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/decisionmetrics"
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

// collectors are an Observer's counters, sluice serve's own definitions
// (package decisionmetrics), registered as one collector so that a
// registration either takes all three or none.
type collectors struct{ decisionmetrics.Counters }

// Describe implements prometheus.Collector.
func (c *collectors) Describe(ch chan<- *prometheus.Desc) {
	c.Decisions.Describe(ch)
	c.Fallbacks.Describe(ch)
	c.Shed.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *collectors) Collect(ch chan<- prometheus.Metric) {
	c.Decisions.Collect(ch)
	c.Fallbacks.Collect(ch)
	c.Shed.Collect(ch)
}

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
	c := &collectors{decisionmetrics.New()}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*collectors); ok {
				return &Observer{c: existing}, nil
			}
		}
		return nil, fmt.Errorf("metrics: registering sluice's counters: %w", err)
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
		o.c.Declare(p)
	}
}

// Observe implements policy.Observer: it counts e under its policy and
// e.Result, and as a fallback decision if the store failed. e.Key is not
// read: it is the client's to choose.
func (o *Observer) Observe(_ context.Context, e policy.Event) { o.c.Observe(e) }

// Shed implements policy.Observer: it counts a request the concurrency
// limit shed, under its priority.
func (o *Observer) Shed(_ context.Context, p policy.Priority) {
	o.c.Shed.WithLabelValues(p.String()).Inc()
}
