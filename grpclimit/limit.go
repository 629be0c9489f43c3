package grpclimit

import (
	"context"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/ratefield"
)

// KeyFunc returns the key under which a call is limited: its client's
// address, an API key from its metadata, its account. Calls given one key
// share one state; "" is a key like any other, shared by every call given
// it.
type KeyFunc func(ctx context.Context, fullMethod string) string

// ByPeer returns a KeyFunc that keys each call by its client's address as
// res finds it (see package clientip): the peer, or, from a trusted proxy,
// the client its forwarding header (in metadata, lower case) names; an
// IPv6 client by its /64 unless res groups it otherwise. With a nil res
// the client is always the peer. The key is the address as
// clientip.AppendPrefix writes it ("203.0.113.7", or "2001:db8:1:2::/64"
// for an IPv6 group), the key the limiter's Allow takes for the same
// client. Calls with no IP address at all (over a Unix socket) share the
// key "".
func ByPeer(res *clientip.Resolver) KeyFunc {
	if res == nil {
		var err error
		if res, err = clientip.New(clientip.Options{}); err != nil {
			panic("grpclimit: " + err.Error()) // the zero Options are valid
		}
	}
	header := strings.ToLower(res.Header())
	return func(ctx context.Context, _ string) string {
		var fwd []string
		if res.TrustsAny() {
			md, _ := metadata.FromIncomingContext(ctx)
			fwd = md[header]
		}
		return string(clientip.AppendPrefix(nil, res.Resolve(peerAddr(ctx), fwd)))
	}
}

// LimitOptions configures the interceptors of a Keyed. The zero value is
// ready to use.
type LimitOptions struct {
	// Skip reports the calls that bypass the limiter, as in Options.
	Skip func(ctx context.Context, fullMethod string) bool
	// NoHeaders turns off the ratelimit and ratelimit-policy response
	// metadata, as in Options.
	NoHeaders bool
	// MaxPushback is the longest wait a refusal asks gRPC's own retries
	// to sit out, as in Options: zero means a minute, negative no bound.
	MaxPushback time.Duration
	// MaxDelay is the longest a leaky_bucket's call waits for its turn:
	// one whose turn is further away is refused, and takes no place in
	// the queue. Zero means no bound but the queue's capacity; the call's
	// deadline bounds the wait as well. Under a gcra or token_bucket
	// limit, a positive MaxDelay holds a call past the burst for its
	// unit, reserved, when it refills within MaxDelay and the deadline,
	// rather than refuse it (see rate.Request.MaxDelay); zero refuses it.
	MaxDelay time.Duration
}

// Keyed applies a sluice.Limiter to gRPC calls, each under the key its
// KeyFunc gives it: the interceptors for a program that sets its limits
// in Go (a policy file goes to New). Its Unary and Stream methods are
// server interceptors that answer as a Limiter's do: an allowed call is
// served with the ratelimit fields of the most restrictive of the
// limiter's limits; a leaky_bucket's call first waits for its turn (the
// decision's Delay) on the limiter's Clock, as does a gcra or
// token_bucket's call past the burst for its unit under a MaxDelay (see
// LimitOptions.MaxDelay). A refused call fails with
// RESOURCE_EXHAUSTED, a RetryInfo and a QuotaFailure, and retry-after and
// grpc-retry-pushback-ms in its trailers. The metadata and the
// QuotaFailure name a limit by the limiter's Name ("limit" if it has
// none), followed by .N, its place among the limiter's limits from 1,
// when it has several. A store that cannot decide fails the call with
// UNAVAILABLE. To choose what happens while a remote store is down, and
// have its outages logged, build the limiter over a sluice.Fallback: its
// FailClosed fails calls with UNAVAILABLE (the client exceeded nothing),
// its FailOpen serves them with no ratelimit metadata (no limit decided
// them), and its FailLocal decides in the local store, with metadata and
// refusals that describe the instance's share of each limit
// (rate.Limit.Share), the quota whose remaining they report.
//
// A stream is decided once, when it opens. Create a Keyed with [Limit].
type Keyed struct {
	l           *keyed.Limiter
	key         KeyFunc
	o           LimitOptions
	maxPushback time.Duration
}

// Limit returns a Keyed that decides every call with l, at a cost of one,
// under the key that key gives it. The calls share l's state with l's
// own methods. It panics if l or key is nil.
func Limit(l *sluice.Limiter, key KeyFunc, o LimitOptions) *Keyed {
	if l == nil || key == nil {
		panic("grpclimit: Limit needs a Limiter and a KeyFunc")
	}
	k := &Keyed{l: keyed.New(l), key: key, o: o, maxPushback: o.MaxPushback}
	if k.maxPushback == 0 {
		k.maxPushback = defaultMaxPushback
	}
	return k
}

// Unary is a grpc.UnaryServerInterceptor: install it with
// grpc.ChainUnaryInterceptor(k.Unary).
func (k *Keyed) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if k.o.Skip != nil && k.o.Skip(ctx, info.FullMethod) {
		return handler(ctx, req)
	}
	md, err := k.decide(ctx, info.FullMethod)
	return serveUnary(ctx, req, handler, err, md)
}

// Stream is a grpc.StreamServerInterceptor: install it with
// grpc.ChainStreamInterceptor(k.Stream).
func (k *Keyed) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if k.o.Skip != nil && k.o.Skip(ss.Context(), info.FullMethod) {
		return handler(srv, ss)
	}
	md, err := k.decide(ss.Context(), info.FullMethod)
	return serveStream(srv, ss, handler, err, md)
}

// decide decides a call to fullMethod, and returns the metadata to answer
// with and the status to fail the call with (nil to serve it).
func (k *Keyed) decide(ctx context.Context, fullMethod string) (metadata.MD, error) {
	out, err := k.l.Decide(ctx, k.key(ctx, fullMethod), k.o.MaxDelay)
	d := out.Decision
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case err != nil || out.Source == sluice.SourceFailClosed:
		// The store could not decide: no limit refused the client.
		wait := d.RetryAfter // the Fallback's
		if err != nil {
			wait = time.Second
		}
		msg := ratefield.Refusal{Call: true, RetryAfter: wait}.Detail()
		return answerMD(ctx, false, wait, k.maxPushback, nil, d), statusError(codes.Unavailable, msg, wait, nil)
	case out.Source == sluice.SourceFailOpen:
		return nil, nil // let through undecided: no quota to report
	}
	q := out.Quotas[out.Most]
	var mq quota
	if !k.o.NoHeaders {
		mq = q
	}
	if d.Allowed {
		if err := k.l.Hold(ctx, &d); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		return answerMD(ctx, true, 0, k.maxPushback, mq, d), nil
	}
	qf := &errdetails.QuotaFailure{}
	for _, i := range out.Refused {
		rq := out.Quotas[i]
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject:     "policy:" + rq.Name,
			Description: ratefield.Refusal{Name: rq.Name, Limit: rq.Limit.String()}.LimitedBy(),
		})
	}
	msg := ratefield.Refusal{Refused: true, Name: q.Name, Limit: q.Limit.String(), Call: true, RetryAfter: d.RetryAfter}.Detail()
	return answerMD(ctx, false, d.RetryAfter, k.maxPushback, mq, d), statusError(codes.ResourceExhausted, msg, d.RetryAfter, qf)
}
