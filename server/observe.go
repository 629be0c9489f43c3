package server

import (
	"context"
	"net/http"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/logpace"
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
	result := e.Result()
	o.s.m.decided(o.g, &o.s.gen, e.Policy.Name, result, e.StoreErr != nil)
	// Throttled requests passed, and so did every request a shadow
	// policy decided: its would-be refusals are shown apart, as what it is
	// tried for, but only those the store decided (Result), not a store
	// error's, whose Decision is whatever the store returned with it. On
	// an enforcing policy's store error the Decision is on_store_error's.
	// The Event does not say whether another policy refused the request,
	// so a row counts what its policy decided (see dashboard.Live).
	if e.Shadow {
		o.s.dash.RecordShadow(e.Policy.Name, result != ResultShadowRefused)
	} else {
		o.s.dash.Record(e.Policy.Name, e.Decision.Allowed)
	}
	// A refusal of the local store (on_store_error: local) is one too:
	// while Redis is down, the keys it refuses are still the ones to see.
	if result == ResultRefused {
		o.s.top.Add(e.Key)
	}
}

// Shed implements policy.Observer.
func (o observer) Shed(_ context.Context, p policy.Priority) { o.s.m.Shed(p.String()) }

// rlsName is the policy label of Envoy's domain.
func rlsName(domain string) string { return "rls:" + domain }

// isRLSName reports whether name is an Envoy domain's label: a policy's
// name has no colon.
func isRLSName(name string) bool { return strings.HasPrefix(name, rlsName("")) }

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
	s.m.decidedRLS(&s.gen, name, result)
	if e.Shadow {
		s.dash.RecordShadow(name, result != ResultShadowRefused)
	} else {
		s.dash.Record(name, result != ResultRefused)
	}
	if result == ResultRefused {
		s.top.Add(e.StoreKey)
	}
}

// answer records what sluice answered a request of the proxy or check
// listeners, for sluice_requests_total: it is the ResponseWriter the
// policies answer through. Once they pass the request on to the proxy's
// upstream (see passed), what is written through it is the upstream's
// answer, and goes by unread; but for what the proxy writes itself when
// the upstream cannot answer, which it writes through ownAnswer (see
// reverseProxy's ErrorHandler). Reading only the codes sluice answers keeps the label
// bounded, whatever the upstream sends.
type answer struct {
	http.ResponseWriter
	status int
	// passed is set while the upstream is to answer the request: the
	// policies let it through, and the proxy has not answered it itself.
	passed bool
}

func (a *answer) WriteHeader(code int) {
	if !a.passed && a.status == 0 && code >= 200 {
		a.status = code
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *answer) Write(p []byte) (int, error) {
	if !a.passed && a.status == 0 {
		a.status = http.StatusOK
	}
	return a.ResponseWriter.Write(p)
}

// Unwrap returns the ResponseWriter underneath, for
// http.ResponseController: the upstream's flushes and upgrades go to it.
func (a *answer) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// code returns the code of sluice_requests_total for the request. A
// request passed on whose upstream broke its response off (ReverseProxy
// then aborts the handler) is allowed: the client got the upstream's
// status, or, if it had not gone out yet, a closed connection, never an
// answer of sluice's. So is one whose client went away meanwhile.
func (a *answer) code() string {
	if a.passed {
		return codeAllowed
	}
	return httpCode(a.status)
}

// passed returns next, the proxy's upstream, behind the policies: it
// marks the request's answer as the upstream's.
func passed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a, ok := w.(*answer); ok {
			a.passed = true
		}
		next.ServeHTTP(w, r)
	})
}

// ownAnswer is an answer the proxy writes itself, the upstream having
// failed to: it is counted under its status.
type ownAnswer struct{ *answer }

func (o ownAnswer) WriteHeader(code int) {
	if code >= 200 {
		o.passed = false
	}
	o.answer.WriteHeader(code)
}

func (o ownAnswer) Write(p []byte) (int, error) {
	o.passed = false
	return o.answer.Write(p)
}

// undecodedRLS is the gRPC listener's stats handler: it counts, in
// sluice_requests_total{listener="grpc",code="400"}, and logs, once a
// second, the calls gRPC refuses before Envoy's service sees them: a
// message over the listener's bound (RESOURCE_EXHAUSTED) or one that does
// not decode, as a value that is not UTF-8, which a proto3 string may not
// hold (INTERNAL). countedRLS never sees them, and Envoy lets such a
// request through unlimited, or refuses it, as its failure_mode_deny
// says: without this, nothing would tell. The service itself answers
// neither code, so no call is counted twice.
type undecodedRLS struct {
	s    *Server
	pace logpace.Pacer
}

func (*undecodedRLS) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (u *undecodedRLS) HandleRPC(_ context.Context, rs stats.RPCStats) {
	end, ok := rs.(*stats.End)
	if !ok || end.Error == nil {
		return
	}
	if c := status.Code(end.Error); c != codes.Internal && c != codes.ResourceExhausted {
		return
	}
	u.s.m.request(listenerGRPC, codeBadRequest)
	if held, ok := u.pace.Take(u.s.clock.Now()); ok {
		u.s.log.Warn("grpc: a call refused before it was decided; Envoy lets its request through unlimited, or refuses it, as its failure_mode_deny says",
			"error", status.Convert(end.Error).Message(), "not_logged", held)
	}
}

func (*undecodedRLS) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (*undecodedRLS) HandleConn(context.Context, stats.ConnStats) {}

// countedRLS is Envoy's rate limit service with each call counted in
// sluice_requests_total{listener="grpc"}, under the HTTP kin of its
// answer: OK allowed, OVER_LIMIT the 429 Envoy answers, INVALID_ARGUMENT
// 400, and any other error (the store could not decide, the call ended
// first) 503, where Envoy's failure_mode_deny decides.
type countedRLS struct {
	*rls.Service
	m *Metrics
}

func (c countedRLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := c.Service.ShouldRateLimit(ctx, req)
	code := codeAllowed
	switch {
	case status.Code(err) == codes.InvalidArgument:
		code = codeBadRequest
	case err != nil:
		code = codeUnavail
	case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
		code = codeRefused
	}
	c.m.request(listenerGRPC, code)
	return resp, err
}
