package httplimit

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/ratefield"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
)

// Options configures the middleware. The zero value is ready to use: it
// sends both header vocabularies, reads the user from the request context
// (see WithUser) and runs on the system clock.
type Options struct {
	// Options configures the policy.Enforcer the middleware decides with:
	// its clock, local store, observer, logger and count of requests in
	// flight (give every generation of a reloaded configuration the same
	// InFlight).
	policy.Options
	// Identify returns the authenticated user of a request, "" for an
	// anonymous one. If nil, the user is the one WithUser put in the
	// request's context.
	Identify func(*http.Request) string
	// Plan returns the plan of a request, "" to let the policy file decide.
	// If nil, the plan is the one WithPlan put in the request's context.
	Plan func(*http.Request) string
	// NoDraftHeaders turns off the RateLimit and RateLimit-Policy fields
	// (draft-ietf-httpapi-ratelimit-headers-10).
	NoDraftHeaders bool
	// NoLegacyHeaders turns off X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset.
	NoLegacyHeaders bool
	// ProblemType is the "type" member of the bodies of 429 responses
	// (RFC 9457). Empty means "about:blank", whose title is the status
	// phrase. 503 bodies (a request shed, a store down) are always
	// "about:blank": they are no problem of the client's quota.
	ProblemType string
}

// WithUser returns a context naming the authenticated user of a request;
// it is policy.WithUser. An authentication middleware in front of this
// one calls it, as in r = r.WithContext(httplimit.WithUser(r.Context(),
// id)).
func WithUser(ctx context.Context, id string) context.Context { return policy.WithUser(ctx, id) }

// WithPlan returns a context naming the plan of a request; it is
// policy.WithPlan.
func WithPlan(ctx context.Context, plan string) context.Context { return policy.WithPlan(ctx, plan) }

// Middleware returns a middleware that applies set's policies to every
// request, deciding them against store (a memory store with its defaults
// if nil). Every handler it wraps shares one policy.Enforcer, and so one
// concurrency limit.
//
// Each policy's on_store_error decides what a failure of store does. To
// give a Redis store a breaker, wrap it in a sluice.Fallback with Mode
// sluice.FailError: a Fallback in another mode decides for every policy
// first (its FailOpen, the zero value, lets a login whose policy says
// on_store_error: closed through). Its decisions are answered as Limit
// answers them: a FailClosed refusal, which no limit made, is a 503 with
// the Fallback's RetryAfter and no rate limit headers; a FailOpen pass
// has no headers either; a FailLocal decision, its local store's, is
// answered as the primary's would be. The Observer counts the first two
// as store failures (Event.StoreErr wraps sluice.ErrStoreDown).
func Middleware(set *policy.Set, store sluice.Store, o Options) func(http.Handler) http.Handler {
	l := &limiter{
		answer:   newAnswer(o.NoDraftHeaders, o.NoLegacyHeaders, o.ProblemType),
		e:        policy.NewEnforcer(set, store, o.Options),
		resolver: set.ClientIP(),
		usesIP:   set.UsesClientIP(),
		usesUser: set.UsesUser(),
		usesPlan: set.UsesPlan(),
		identify: o.Identify,
		plan:     o.Plan,
	}
	return func(next http.Handler) http.Handler {
		return &handler{l: l, next: next}
	}
}

type limiter struct {
	answer
	e        *policy.Enforcer
	resolver *clientip.Resolver
	usesIP   bool
	usesUser bool
	usesPlan bool
	identify func(*http.Request) string
	plan     func(*http.Request) string
}

// answer writes the headers and problem bodies of both middlewares.
type answer struct {
	draft, legacy bool
	ptype         string
}

func newAnswer(noDraft, noLegacy bool, ptype string) answer {
	if ptype == "" {
		ptype = "about:blank"
	}
	return answer{draft: !noDraft, legacy: !noLegacy, ptype: ptype}
}

// quota is what the headers say of the limit that decided a request: a
// policy's compiled limit, or one of a Limiter's (see Limit).
type quota interface {
	// AppendHeader appends the RateLimit item for the decision d.
	AppendHeader(dst []byte, d rate.Decision) []byte
	// HeaderPolicy returns the RateLimit-Policy item.
	HeaderPolicy() string
	// HeaderLimit returns the X-RateLimit-Limit value.
	HeaderLimit() string
	// HeaderRemaining returns the X-RateLimit-Remaining value of d.
	HeaderRemaining(d rate.Decision) int64
}

type handler struct {
	l    *limiter
	next http.Handler
}

// ServeHTTP decides the request, then serves it or refuses it.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l := h.l
	in := policy.Request{HTTP: r, Header: r.Header}
	if l.usesIP {
		in.Client = l.resolver.FromRequest(r)
	}
	switch {
	case !l.usesUser:
	case l.identify != nil:
		in.User = l.identify(r)
	default:
		in.User = policy.UserFrom(r.Context())
	}
	switch {
	case !l.usesPlan:
	case l.plan != nil:
		in.Plan = l.plan(r)
	default:
		in.Plan = policy.PlanFrom(r.Context())
	}
	out := l.e.Enforce(r.Context(), &in)
	defer out.Done()
	switch out.Verdict {
	case policy.Allow:
		if out.Limit != nil {
			l.setHeaders(w.Header(), out.Limit, out.Decision, false, 0)
		}
		h.next.ServeHTTP(w, r)
	case policy.Refuse:
		if out.Limit != nil {
			l.setHeaders(w.Header(), out.Limit, out.Decision, true, out.RetryAfter)
		}
		// The names of the refusing limits, as RateLimit-Policy names
		// them: a policy of several limits names the one that refused.
		names := make([]string, len(out.Refused))
		for i, lim := range out.Refused {
			names[i] = lim.Name
		}
		l.problem(w, r, http.StatusTooManyRequests, out.RetryAfter, detail(r.Context(), &out), names)
	default:
		l.problem(w, r, http.StatusServiceUnavailable, out.RetryAfter, detail(r.Context(), &out), nil)
	}
}

// Canonical header names, so that setting them skips canonicalization and
// Header.Get finds them.
const (
	hRateLimitPolicy = "Ratelimit-Policy"
	hRateLimit       = "Ratelimit"
	hLimit           = "X-Ratelimit-Limit"
	hRemaining       = "X-Ratelimit-Remaining"
	hReset           = "X-Ratelimit-Reset"
	hRetryAfter      = "Retry-After"
)

// headerBlock holds, in one allocation, the header values of a response
// and the slices that carry them: the computed values, and the Limit's
// precomputed strings. The slices are the response's own, so that a
// handler that edits a value in place (h[k][0] = v) changes no other
// response. Each computed value is appended to the text and then never
// written again, and the strings point into it: that is what keeps them
// immutable, as strings must be. The text fits the values of policy
// names up to about 48 bytes; longer ones spill into a second
// allocation. The block is 192 bytes, a size class of its own.
type headerBlock struct {
	vals [6][1]string
	text [96]byte
}

// addItems returns the values of a RateLimit or RateLimit-Policy field
// with this middleware's item added: a field is a list of quota policies,
// and a middleware stacked in front of this one (one for the whole API,
// one for a route) has written its own, which the client must see too.
// Alone, the field is the item, with no copy.
func addItems(prior, item []string) []string {
	if len(prior) == 0 {
		return item
	}
	return append(prior[:len(prior):len(prior)], item...)
}

// setHeaders sets the rate limit headers of the most restrictive limit,
// and Retry-After when the request is refused. It allocates once: every
// value lives in one headerBlock, the ones that do not vary as strings
// the Limit precomputed.
func (l *answer) setHeaders(h http.Header, lim quota, d rate.Decision, refused bool, retryAfter time.Duration) {
	if !l.draft && !l.legacy {
		return
	}
	blk := new(headerBlock)
	b := blk.text[:0]
	n := 0
	// value makes b[start:] the next value. Should b outgrow blk.text,
	// append moves it to a new array and the values made so far keep
	// pointing into the old one, which is never written again.
	value := func(start int) {
		if len(b) > start {
			blk.vals[n][0] = unsafe.String(&b[start], len(b)-start)
		}
		n++
	}
	if l.draft {
		start := len(b)
		b = lim.AppendHeader(b, d)
		value(start)
		h[hRateLimit] = addItems(h[hRateLimit], blk.vals[n-1][:])
		blk.vals[n][0] = lim.HeaderPolicy()
		n++
		h[hRateLimitPolicy] = addItems(h[hRateLimitPolicy], blk.vals[n-1][:])
	}
	if l.legacy {
		start := len(b)
		b = strconv.AppendInt(b, max(lim.HeaderRemaining(d), 0), 10)
		value(start)
		h[hRemaining] = blk.vals[n-1][:]
		start = len(b)
		b = strconv.AppendInt(b, rate.CeilSeconds(d.ResetAfter), 10)
		value(start)
		h[hReset] = blk.vals[n-1][:]
		blk.vals[n][0] = lim.HeaderLimit()
		n++
		h[hLimit] = blk.vals[n-1][:]
	}
	if refused {
		start := len(b)
		b = strconv.AppendInt(b, rate.RetryAfterSeconds(retryAfter), 10)
		value(start)
		h[hRetryAfter] = blk.vals[n-1][:]
	}
}

// problem writes an RFC 9457 problem body for a refused, shed or
// unavailable request; to a HEAD request, only its headers, with the
// Content-Length a GET would get. A 429's body names the limits that
// refused (violated, the longest wait first).
func (l *answer) problem(w http.ResponseWriter, r *http.Request, status int, retryAfter time.Duration, detail string, violated []string) {
	retry := rate.RetryAfterSeconds(retryAfter)
	ptype := l.ptype
	if status != http.StatusTooManyRequests {
		ptype = "about:blank" // an outage or shedding is not the client's quota
	}
	h := w.Header()
	// setHeaders wrote a refusal's Retry-After already, unless both header
	// vocabularies are off; a 503 never went through it.
	if _, ok := h[hRetryAfter]; !ok {
		h[hRetryAfter] = []string{strconv.FormatInt(retry, 10)}
	}
	h["Content-Type"] = []string{"application/problem+json"}
	h["Cache-Control"] = []string{"no-store"}

	b := make([]byte, 0, 256)
	b = append(b, `{"type":`...)
	b = appendJSONString(b, ptype)
	b = append(b, `,"title":`...)
	b = appendJSONString(b, http.StatusText(status))
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"detail":`...)
	b = appendJSONString(b, detail)
	b = append(b, `,"retry_after":`...)
	b = strconv.AppendInt(b, retry, 10)
	if status == http.StatusTooManyRequests {
		b = append(b, `,"violated-policies":[`...)
		for i, name := range violated {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, name)
		}
		b = append(b, ']')
	}
	b = append(b, "}\n"...)
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b) // the client may be gone; there is nothing to do
	}
}

// detail says in a sentence why the request was not served, in the
// words of ratefield.Refusal. The request's own context, not the store's
// error, says whether it ended: a store that times out on its own also
// fails with DeadlineExceeded.
func detail(ctx context.Context, out *policy.Outcome) string {
	r := ratefield.Refusal{
		Refused:    out.Verdict == policy.Refuse,
		Shed:       out.Verdict == policy.Shed,
		Ended:      ctx.Err() != nil,
		RetryAfter: out.RetryAfter,
	}
	if errors.Is(out.Err, policy.ErrDrained) {
		r.Drained = policy.ErrDrained
	}
	if r.Refused && out.Limit != nil {
		r.Policy, r.Limit = out.Limit.Policy.Name, out.Limit.String()
	}
	return r.Detail()
}

// appendJSONString appends s as a JSON string. Each byte of s that is
// not part of valid UTF-8 becomes \ufffd, as encoding/json writes it:
// JSON text is UTF-8 (RFC 8259), and Options.ProblemType may not be.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		case c < utf8.RuneSelf:
			b = append(b, c)
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		i++
	}
	return append(b, '"')
}
