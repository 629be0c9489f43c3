package httplimit

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/ratefield"
)

// KeyFunc returns the key under which a request is limited: its client's
// address, its API key, its account. Requests given one key share one
// state; "" is a key like any other, shared by every request given it.
type KeyFunc func(*http.Request) string

// ByClientIP returns a KeyFunc that keys each request by its client's
// address as res finds it (see package clientip): the peer, or the client
// a trusted proxy names, an IPv6 client by its /64 unless res groups it
// otherwise. With a nil res the client is always the peer: no forwarding
// header is believed. The key is the address as clientip.AppendPrefix
// writes it: "203.0.113.7", or "2001:db8:1:2::/64" for an IPv6 group,
// the key l.Allow takes for the same client. Requests with no IP address
// at all (a Unix socket peer) share the key "".
func ByClientIP(res *clientip.Resolver) KeyFunc {
	if res == nil {
		var err error
		if res, err = clientip.New(clientip.Options{}); err != nil {
			panic("httplimit: " + err.Error()) // the zero Options are valid
		}
	}
	return func(r *http.Request) string { return string(clientip.AppendPrefix(nil, res.FromRequest(r))) }
}

// LimitOptions configures the middleware that Limit returns. The zero
// value sends both header vocabularies.
type LimitOptions struct {
	// NoDraftHeaders turns off the RateLimit and RateLimit-Policy fields.
	NoDraftHeaders bool
	// NoLegacyHeaders turns off X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset.
	NoLegacyHeaders bool
	// ProblemType is the "type" member of the bodies of 429 responses, as
	// in Options.
	ProblemType string
	// Skip, if set, reports the requests that bypass the limiter: they go
	// to the handler undecided, uncounted and without headers (health
	// checks, say, or requests a KeyFunc has no key for, which would
	// otherwise share the key "").
	Skip func(*http.Request) bool
	// MaxDelay is the longest a leaky_bucket's request waits for its
	// turn: one whose turn is further away is refused, and takes no place
	// in the queue. Zero means no bound but the queue's capacity; a
	// request's context deadline bounds the wait as well. Under a gcra or
	// token_bucket limit, a positive MaxDelay holds a request past the
	// burst for its unit, reserved, when it refills within MaxDelay and
	// the deadline, rather than refuse it (see rate.Request.MaxDelay);
	// zero refuses it.
	MaxDelay time.Duration
}

// Limit returns a middleware that decides every request with l, at a cost
// of one, under the key that key gives it: the middleware for a program
// that sets its limits in Go (a policy file goes to Middleware). It
// answers as Middleware does. An allowed request goes to the handler with
// the rate limit headers of the most restrictive of l's limits; a
// leaky_bucket's request first waits for its turn (the decision's Delay),
// on l's Clock, as does a gcra or token_bucket's request past the burst
// for its unit under a MaxDelay (see LimitOptions.MaxDelay). A refused request gets 429 Too Many Requests, the same
// headers, Retry-After and a problem body. The headers and the body name a
// limit by l's Name ("limit" if it has none), followed by .N, its place
// among l's limits from 1, when l has several.
//
// The requests share l's state with l's own methods: a program may call
// l.Allow for work that comes another way, under the same keys.
//
// A store that cannot decide gets the request 503 Service Unavailable,
// with Retry-After and a problem body, as does a request that ends while
// it waits for its turn or unit. Neither is given back (as NGINX's
// limit_req keeps the excess of a delayed request whose client left):
// those queued behind it wait as if it had gone through. To choose what happens while a remote store is
// down, and have its outages logged, build l over a sluice.Fallback: its
// FailClosed answers 503 as above (the client exceeded nothing), its
// FailOpen lets requests through with no rate limit headers (no limit
// decided them), and its FailLocal decides in the local store, with
// headers and body that describe the instance's share of each limit
// (rate.Limit.Share), the quota whose remaining they report.
//
// Limit panics if l or key is nil.
func Limit(l *sluice.Limiter, key KeyFunc, o LimitOptions) func(http.Handler) http.Handler {
	if l == nil || key == nil {
		panic("httplimit: Limit needs a Limiter and a KeyFunc")
	}
	k := &limitHandler{
		answer:   newAnswer(o.NoDraftHeaders, o.NoLegacyHeaders, o.ProblemType),
		l:        keyed.New(l),
		key:      key,
		skip:     o.Skip,
		maxDelay: o.MaxDelay,
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { k.serve(w, r, next) })
	}
}

type limitHandler struct {
	answer
	l        *keyed.Limiter
	key      KeyFunc
	skip     func(*http.Request) bool
	maxDelay time.Duration
}

func (k *limitHandler) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if k.skip != nil && k.skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	ctx := r.Context()
	out, err := k.l.Decide(ctx, k.key(r), k.maxDelay)
	d := out.Decision
	switch {
	case err != nil && ctx.Err() != nil:
		k.problem(w, r, http.StatusServiceUnavailable, 0, ratefield.Refusal{Ended: true}.Detail(), nil)
		return
	case err != nil || out.Source == sluice.SourceFailClosed:
		// The store could not decide: no limit refused the client.
		k.problem(w, r, http.StatusServiceUnavailable, d.RetryAfter, ratefield.Refusal{RetryAfter: d.RetryAfter}.Detail(), nil)
		return
	case out.Source == sluice.SourceFailOpen:
		// Let through undecided: no quota to report.
		next.ServeHTTP(w, r)
		return
	}
	q := out.Quotas[out.Most]
	if d.Allowed {
		if err := k.l.Hold(ctx, &d); err != nil {
			k.problem(w, r, http.StatusServiceUnavailable, 0, ratefield.Refusal{Ended: true}.Detail(), nil)
			return
		}
		k.setHeaders(w.Header(), q, d, false, 0)
		next.ServeHTTP(w, r)
		return
	}
	k.setHeaders(w.Header(), q, d, true, d.RetryAfter)
	names := make([]string, len(out.Refused))
	for i, j := range out.Refused {
		names[i] = out.Quotas[j].Name
	}
	refusal := ratefield.Refusal{Refused: true, Name: q.Name, Limit: q.Limit.String(), RetryAfter: d.RetryAfter}
	k.problem(w, r, http.StatusTooManyRequests, d.RetryAfter, refusal.Detail(), names)
}
