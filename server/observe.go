package server

import (
	"context"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rls"
)

// observer counts every policy decision of generation g in the metrics,
// the dashboard and the top refused keys.
type observer struct {
	s *Server
	g *generation
}

// Observe implements policy.Observer.
func (o observer) Observe(_ context.Context, e policy.Event) {
	result := ResultAllowed
	switch {
	case e.StoreErr != nil:
		result = ResultError
	case !e.Decision.Allowed && e.Shadow:
		result = ResultShadowRefused
	case !e.Decision.Allowed:
		result = ResultRefused
	case e.Decision.Delay > 0:
		result = ResultThrottled
	}
	if !o.g.retired.Load() {
		o.s.m.Decision(e.Policy.Name, result)
	}
	// What the client saw: throttled requests passed, and so did every
	// request a shadow policy decided, on a store error too (its Decision
	// is then whatever the store returned with its error). On an enforcing
	// policy's store error the Decision is on_store_error's.
	o.s.dash.Record(e.Policy.Name, e.Decision.Allowed || e.Shadow)
	if result == ResultRefused {
		o.s.top.Add(e.Key)
	}
}

// Shed implements policy.Observer.
func (o observer) Shed(_ context.Context, p policy.Priority) { o.s.m.Shed(p.String()) }

// rlsName is the policy label of Envoy's domain.
func rlsName(domain string) string { return "rls:" + domain }

// observeRLS counts a decision of Envoy's rate limit service. Its policy
// label is rls:DOMAIN: the domain is bounded by the configuration, while
// the descriptor's stat key may hold request values (detailed_metric).
// A refusal counts in /debug/top under its store key, one per client
// value, as a policy's do: the stat key would put every client of a limit
// in one entry.
func (s *Server) observeRLS(e rls.Event) {
	name := rlsName(e.Domain)
	result := ResultAllowed
	switch {
	case e.Over && e.Shadow:
		result = ResultShadowRefused
	case e.Over:
		result = ResultRefused
	}
	s.m.Decision(name, result)
	s.dash.Record(name, result != ResultRefused)
	if result == ResultRefused {
		s.top.Add(e.StoreKey)
	}
}
