package grpclimit

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/ratefield"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
)

// Options configures a Limiter. The zero value is ready to use.
type Options struct {
	// Options configures the policy.Enforcer the Limiter decides with:
	// its clock, local store, observer, logger and count of requests in
	// flight (give every generation of a reloaded configuration the same
	// InFlight).
	policy.Options
	// Identify returns the authenticated user of a call, "" for an
	// anonymous one. If nil, the user is the one policy.WithUser put in
	// the call's context (by an interceptor that runs before this one).
	Identify func(ctx context.Context) string
	// Plan returns the plan of a call, "" to let the policy file decide.
	// If nil, the plan is the one policy.WithPlan put in the context.
	Plan func(ctx context.Context) string
	// Skip reports the calls that bypass the Limiter altogether: no
	// policy decides them, they take no slot in the concurrency limit and
	// get no rate limit metadata. fullMethod is the name as the client
	// wrote it, unclean if the server has an unknown service handler (see
	// the package doc): skip only exact names, as SkipServices does, or a
	// client could spell another method as a skipped one.
	//
	// If nil, no call is skipped, health checks included: a call is
	// decided by every policy that matches it, and the Limiter cannot
	// tell a catch-all policy from one written for the health service, so
	// skipping them by default would silently turn off a policy that
	// names them (one that stops a client polling Check in a loop); a
	// limiter that does not apply what its file says is the worse
	// surprise. A server whose file has a policy on every method and that
	// answers probes (Kubernetes' gRPC probes, a load balancer's health
	// checks) should skip the health service, or a busy client's probes,
	// or probes shed under load, may take the server out of service:
	//
	//	Skip: grpclimit.SkipServices("grpc.health.v1.Health")
	//
	// That skips every policy for health checks, those that name them
	// included. To limit them by a policy of their own, out of the
	// catch-all, chain two Limiters: one with the catch-all and this
	// Skip, one with the health policy and none.
	Skip func(ctx context.Context, fullMethod string) bool
	// NoHeaders turns off the ratelimit and ratelimit-policy response
	// metadata. retry-after and grpc-retry-pushback-ms are always sent
	// with a refusal.
	NoHeaders bool
	// MaxPushback is the longest wait a refusal asks gRPC's own retries
	// to sit out: past it, grpc-retry-pushback-ms is -1, which tells the
	// client not to retry (gRFC A6), and the client gets the refusal at
	// once; its RetryInfo still gives the true wait, for the client to
	// decide. A retrying client sleeps out the pushback whatever it is,
	// and a client with no deadline would otherwise be parked for the
	// whole wait: weeks, for a monthly quota. Zero means a minute, which
	// keeps gRPC's retries for the waits of per-second and per-minute
	// limits (a minute at most, as a rule), a pause a caller may well sit
	// out, and ends them for hourly, daily and monthly quotas, whose
	// waits no retry policy means to cover. Negative means no bound.
	// Whatever MaxPushback, a wait the call's deadline would end first is
	// -1 too: the retry could only fail with DEADLINE_EXCEEDED, the
	// refusal's details lost.
	MaxPushback time.Duration
}

// defaultMaxPushback is MaxPushback's zero value (see there).
const defaultMaxPushback = ratefield.DefaultMaxPushback

// Limiter applies a policy set to gRPC calls. Its Unary and Stream
// methods are server interceptors; both share one policy.Enforcer, and so
// one concurrency limit. Create one with [New].
type Limiter struct {
	e         *policy.Enforcer
	resolver  *clientip.Resolver
	fwdHeader string // the forwarding header, lower case, as metadata keys are
	// What some policy reads, so that calls skip finding what none does;
	// planHeader: a plans.header, believed from a trusted peer only.
	usesIP, usesUser, usesPlan, planHeader bool
	calls                                  sync.Pool     // of *call
	maxPushback                            time.Duration // negative: no bound
	o                                      Options
}

// call is the HTTP/2 request a call is matched as. It is pooled: the
// Enforcer keeps nothing of a request once it has decided it.
type call struct {
	req http.Request
	url url.URL
}

// New returns a Limiter that decides set's policies against store (a
// memory store with its defaults if nil). Each policy's on_store_error decides
// what a failure of store does: a sluice.Fallback in front of a Redis
// store, for its breaker, must be in FailError mode, as one in another
// mode decides for every policy first. Its decisions are answered as
// Limit answers them: a FailClosed refusal, which no limit made, is
// UNAVAILABLE with the Fallback's RetryAfter, no QuotaFailure and no rate
// limit metadata; a FailOpen pass has no rate limit metadata either; a
// FailLocal decision, its local store's, is answered as the primary's
// would be. The Observer counts the first two as store failures
// (Event.StoreErr wraps sluice.ErrStoreDown).
func New(set *policy.Set, store sluice.Store, o Options) *Limiter {
	l := &Limiter{
		e:         policy.NewEnforcer(set, store, o.Options),
		resolver:  set.ClientIP(),
		fwdHeader: strings.ToLower(set.ClientIP().Header()),
		usesIP:    set.UsesClientIP(),
		usesUser:  set.UsesUser(),
		usesPlan:  set.UsesPlan(),
		// A plan header is believed from a trusted peer only
		// (policy.Set.PlanHeaderOf).
		planHeader:  set.UsesPlan() && set.PlanHeader() != "",
		maxPushback: o.MaxPushback,
		o:           o,
	}
	if l.maxPushback == 0 {
		l.maxPushback = defaultMaxPushback
	}
	l.calls.New = func() any { return new(call) }
	return l
}

// SkipServices returns an Options.Skip that skips the calls to the
// methods of the named services, each as its grpc.ServiceDesc names it
// (healthpb.Health_ServiceDesc.ServiceName is "grpc.health.v1.Health";
// server reflection is "grpc.reflection.v1.ServerReflection" and
// "grpc.reflection.v1alpha.ServerReflection"). A call is skipped only
// when its name is /SERVICE/METHOD exactly, the method a protobuf
// identifier, as generated clients send it: a server with an unknown
// service handler (a proxy) also sees names such as
// /grpc.health.v1.Health/../pkg.Svc/M, which a hop that cleans paths
// routes to /pkg.Svc/M, and which the policies decide as that method.
// It panics if a name is no protobuf full name (pkg.Service), as a
// name written as a path (/grpc.health.v1.Health/) would never match.
func SkipServices(services ...string) func(ctx context.Context, fullMethod string) bool {
	for _, s := range services {
		if !fullName(s) {
			panic("grpclimit: SkipServices: " + strconv.Quote(s) + " is no service name, such as grpc.health.v1.Health")
		}
	}
	services = slices.Clone(services)
	return func(_ context.Context, fullMethod string) bool {
		rest, ok := strings.CutPrefix(fullMethod, "/")
		if !ok {
			return false
		}
		service, method, ok := strings.Cut(rest, "/")
		return ok && identifier(method) && slices.Contains(services, service)
	}
}

// fullName reports whether s is a protobuf full name: identifiers
// joined by dots.
func fullName(s string) bool {
	for part := range strings.SplitSeq(s, ".") {
		if !identifier(part) {
			return false
		}
	}
	return true
}

// identifier reports whether s is a non-empty run of ASCII letters,
// digits and underscores, as protobuf names are made of (a leading digit
// is let through: it is no spelling of another name either).
func identifier(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return s != ""
}

// Unary is a grpc.UnaryServerInterceptor: install it with
// grpc.ChainUnaryInterceptor(l.Unary).
func (l *Limiter) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if l.o.Skip != nil && l.o.Skip(ctx, info.FullMethod) {
		return handler(ctx, req)
	}
	out := l.enforce(ctx, info.FullMethod)
	defer out.Done()
	return serveUnary(ctx, req, handler, refusal(ctx, &out), l.responseMD(ctx, &out))
}

// serveUnary serves a unary call that a limiter decided: it fails with
// err, or calls handler if err is nil, and sends md with the response.
func serveUnary(ctx context.Context, req any, handler grpc.UnaryHandler, err error, md metadata.MD) (any, error) {
	var resp any
	if err == nil {
		resp, err = handler(ctx, req)
	}
	if md != nil {
		// A failed call's metadata goes in the trailers (see responseMD).
		// A served call's goes with the headers, which leave with the
		// response, after this returns; in the trailers if the handler,
		// or an interceptor that ran before this one, sent them already.
		if err != nil || grpc.SetHeader(ctx, md) != nil {
			_ = grpc.SetTrailer(ctx, md) // fails only with no gRPC call in ctx
		}
	}
	return resp, err
}

// Stream is a grpc.StreamServerInterceptor: install it with
// grpc.ChainStreamInterceptor(l.Stream). A stream is decided once, when
// it opens.
func (l *Limiter) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if l.o.Skip != nil && l.o.Skip(ss.Context(), info.FullMethod) {
		return handler(srv, ss)
	}
	out := l.enforce(ss.Context(), info.FullMethod)
	defer out.Done()
	return serveStream(srv, ss, handler, refusal(ss.Context(), &out), l.responseMD(ss.Context(), &out))
}

// serveStream serves a stream that a limiter decided: it fails with err,
// or calls handler if err is nil, and sends md with the response (a
// refusal always has metadata).
func serveStream(srv any, ss grpc.ServerStream, handler grpc.StreamHandler, err error, md metadata.MD) error {
	if err != nil {
		ss.SetTrailer(md)
		return err
	}
	if md == nil {
		return handler(srv, ss)
	}
	// The metadata goes with the headers when the handler first sends
	// (see stream), and in the trailers if it returns before that, as a
	// stream that fails at once then stays trailers-only.
	s := &stream{ServerStream: ss, md: md}
	err = handler(srv, s)
	if s.md != nil {
		ss.SetTrailer(s.md)
	}
	return err
}

// stream is a server stream that adds the rate limit metadata of its
// call to the headers just before they are sent: setting them when the
// stream opens would make gRPC send them before the status of a stream
// that fails without sending anything, and so commit it (see
// responseMD). A handler sends on a stream from one goroutine at a time
// (grpc.ServerStream; grpc-go's own stream keeps state across SendHeader
// and SendMsg unlocked too), so md needs no lock.
type stream struct {
	grpc.ServerStream
	md metadata.MD // nil once set
}

// setMD sets the metadata, with the headers, or with the trailers if an
// interceptor that ran before Stream sent the headers already.
func (s *stream) setMD() {
	if s.md == nil {
		return
	}
	if s.ServerStream.SetHeader(s.md) != nil {
		s.ServerStream.SetTrailer(s.md)
	}
	s.md = nil
}

func (s *stream) SendHeader(md metadata.MD) error {
	s.setMD()
	return s.ServerStream.SendHeader(md)
}

func (s *stream) SendMsg(m any) error {
	s.setMD()
	return s.ServerStream.SendMsg(m)
}

// enforce decides a call to fullMethod.
func (l *Limiter) enforce(ctx context.Context, fullMethod string) policy.Outcome {
	md, _ := metadata.FromIncomingContext(ctx)
	authority := ""
	if vs := md[":authority"]; len(vs) > 0 {
		authority = vs[0]
	}
	// Policies match calls as HTTP/2 requests: POST to the full method.
	c := l.calls.Get().(*call)
	c.url = url.URL{Path: fullMethod}
	c.req = http.Request{Method: http.MethodPost, Host: authority, URL: &c.url}
	in := policy.Request{HTTP: &c.req, Metadata: md}
	if l.usesIP || l.planHeader {
		pa := peerAddr(ctx)
		if l.usesIP {
			in.Client = l.resolver.Resolve(pa, md[l.fwdHeader])
		}
		if l.planHeader && pa.IsValid() {
			// The request's peer, as net/http names it, for the plan
			// header's trust.
			c.req.RemoteAddr = netip.AddrPortFrom(pa, 0).String()
		}
	}
	switch {
	case !l.usesUser:
	case l.o.Identify != nil:
		in.User = l.o.Identify(ctx)
	default:
		in.User = policy.UserFrom(ctx)
	}
	switch {
	case !l.usesPlan:
	case l.o.Plan != nil:
		in.Plan = l.o.Plan(ctx)
	default:
		in.Plan = policy.PlanFrom(ctx)
	}
	out := l.e.Enforce(ctx, &in)
	*c = call{} // pin neither the call's strings nor its metadata
	l.calls.Put(c)
	return out
}

// peerAddr returns the address of the call's peer, or the invalid Addr.
// Resolve normalizes it. A Unix socket peer has no address: its name is
// whatever path the peer bound its end to, which may read as an IP
// address ("10.0.0.1") and must not pass for one.
func peerAddr(ctx context.Context) netip.Addr {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}
	}
	if t, ok := p.Addr.(*net.TCPAddr); ok {
		return t.AddrPort().Addr()
	}
	if strings.HasPrefix(p.Addr.Network(), "unix") { // unix, unixgram, unixpacket
		return netip.Addr{}
	}
	return clientip.ParsePeer(p.Addr.String())
}

// responseMD returns the metadata to send with the response: the rate
// limit fields of the most restrictive limit, and with a refusal
// retry-after (whole seconds) and grpc-retry-pushback-ms. The metadata
// of a call that fails, refused or failed by its handler, goes in the
// trailers, a trailers-only response as gRPC errors usually are: gRPC
// sends headers that were set before a failure's status in a frame of
// their own, a call is committed once its client has headers, and
// gRPC's own retries (gRFC A6) never retry a committed call. (So does
// any metadata that an interceptor running before this one sets in the
// headers: the Limiter cannot keep that call's failures retryable.) A
// client whose retry policy lists RESOURCE_EXHAUSTED or UNAVAILABLE then
// waits grpc-retry-pushback-ms, the refusal's exact wait in milliseconds
// rounded up, rather than its own backoff, which would come back too
// early and be refused again; or is told not to retry (see pushback); a
// call whose own context ended gets no pushback. gRPC copies the values
// it is given (metadata.Join), so the Limit's shared ratelimit-policy
// list can go as it is, and no handler can change it for other calls.
func (l *Limiter) responseMD(ctx context.Context, out *policy.Outcome) metadata.MD {
	var q quota
	if !l.o.NoHeaders && out.Limit != nil {
		q = out.Limit
	}
	return answerMD(ctx, out.Verdict == policy.Allow, out.RetryAfter, l.maxPushback, q, out.Decision)
}

// quota is what the metadata says of the limit that decided a call: a
// policy's compiled limit, or one of a sluice.Limiter's (see Limit).
type quota interface {
	// AppendHeader appends the ratelimit item for the decision d.
	AppendHeader(dst []byte, d rate.Decision) []byte
	// HeaderPolicyValues returns the ratelimit-policy item as a list of
	// one, shared by every call: gRPC copies it.
	HeaderPolicyValues() []string
}

// answerMD returns the metadata of a call's answer, as responseMD
// describes it: for one not allowed, retry-after and the pushback of a
// wait of retryAfter; with q, the rate limit fields of d.
func answerMD(ctx context.Context, allowed bool, retryAfter, maxPushback time.Duration, q quota, d rate.Decision) metadata.MD {
	if allowed && q == nil {
		return nil
	}
	md := make(metadata.MD, 4)
	if !allowed {
		md["retry-after"] = []string{strconv.FormatInt(rate.RetryAfterSeconds(retryAfter), 10)}
		if ctx.Err() == nil {
			md["grpc-retry-pushback-ms"] = []string{pushback(ctx, retryAfter, maxPushback)}
		}
	}
	if q != nil {
		var buf [64]byte
		md["ratelimit-policy"] = q.HeaderPolicyValues()
		md["ratelimit"] = []string{string(q.AppendHeader(buf[:0], d))}
	}
	return md
}

// pushback returns the grpc-retry-pushback-ms of a refusal that says
// wait, bounded by the call's deadline (see ratefield.Pushback). (grpc-go
// counts a -1 as a failure for the channel's retry throttling, when the
// client configures one, even with a code its retry policy does not
// list: as a refusal with a code it does list would.) The deadline is
// wall-clock time, whatever the Enforcer's Clock: gRPC sets it from the
// call's grpc-timeout when the call arrives.
func pushback(ctx context.Context, wait, maxPushback time.Duration) string {
	deadline, bounded := ctx.Deadline()
	return ratefield.Pushback(wait, maxPushback, time.Until(deadline), bounded)
}

// refusal returns the status error for an outcome that does not serve
// the call, or nil. A refusal is RESOURCE_EXHAUSTED; a shed call or a
// failed store is UNAVAILABLE. Both carry a RetryInfo; a refusal also
// carries a QuotaFailure naming each violated policy. A call whose own
// context ended (ctx) before its verdict gets the context's status, but
// for one whose wait a drain ended, which is told so (see
// ratefield.Refusal.Why); a store that failed with a deadline of its own
// (a Redis call timeout) is a failed store like any other, not the end
// of the call.
func refusal(ctx context.Context, out *policy.Outcome) error {
	if out.Verdict == policy.Allow {
		return nil
	}
	r := ratefield.Refusal{
		Refused:    out.Verdict == policy.Refuse,
		Shed:       out.Verdict == policy.Shed,
		Ended:      ctx.Err() != nil,
		Call:       true,
		RetryAfter: out.RetryAfter,
	}
	if errors.Is(out.Err, policy.ErrDrained) {
		r.Drained = policy.ErrDrained
	}
	if r.Refused && out.Limit != nil {
		r.Policy, r.Limit = out.Limit.Policy.Name, out.Limit.String()
	}
	code := codes.Unavailable
	switch r.Why() {
	case ratefield.Ended:
		return status.FromContextError(ctx.Err()).Err()
	case ratefield.Refused:
		code = codes.ResourceExhausted
	}
	var qf *errdetails.QuotaFailure
	if r.Refused {
		qf = &errdetails.QuotaFailure{}
		for _, p := range out.Violated {
			v := ratefield.Refusal{Policy: p.Name}
			if out.Limit != nil && out.Limit.Policy == p {
				v.Limit = out.Limit.String()
			}
			qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
				Subject:     "policy:" + p.Name,
				Description: v.LimitedBy(),
			})
		}
	}
	return statusError(code, r.Detail(), out.RetryAfter, qf)
}

// statusError returns a status error of code with msg, and as details a
// RetryInfo of retryAfter and qf, if not nil.
func statusError(code codes.Code, msg string, retryAfter time.Duration, qf *errdetails.QuotaFailure) error {
	st := status.New(code, msg)
	details := []protoadapt.MessageV1{&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)}}
	if qf != nil {
		details = append(details, qf)
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}
