package httplimit

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/ratefield"
	"github.com/sluicehq/sluice/rate"
)

// KeyFunc returns the key under which a request is limited: its client's
// address, its API key, its account. Requests given one key share one
// state; "" is a key like any other, shared by every request given it.
type KeyFunc func(*http.Request) string

// ByClientIP returns a KeyFunc that keys each request by its client's
// address as res finds it (see package clientip): the peer, or the client
// a trusted proxy names, an IPv6 client by its /64 unless res groups it
// otherwise. With a nil res the client is always the peer: no forwarding
// header is believed. Requests with no IP address at all (a Unix socket
// peer) share one key.
func ByClientIP(res *clientip.Resolver) KeyFunc {
	if res == nil {
		var err error
		if res, err = clientip.New(clientip.Options{}); err != nil {
			panic("httplimit: " + err.Error()) // the zero Options are valid
		}
	}
	return func(r *http.Request) string { return res.FromRequest(r).String() }
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
}

// Limit returns a middleware that decides every request with l, at a cost
// of one, under the key that key gives it: the middleware for a program
// that sets its limits in Go (a policy file goes to Middleware). It
// answers as Middleware does. An allowed request goes to the handler with
// the rate limit headers of the most restrictive of l's limits; a
// leaky_bucket's request first waits for its turn (the decision's Delay),
// on l's Clock. A refused request gets 429 Too Many Requests, the same
// headers, Retry-After and a problem body. The headers and the body name a
// limit by l's Name ("limit" if it has none), followed by .N, its place
// among l's limits from 1, when l has several.
//
// The requests share l's state with l's own methods: a program may call
// l.Allow for work that comes another way, under the same keys.
//
// A store that cannot decide gets the request 503 Service Unavailable,
// with Retry-After and a problem body, as does a request that ends while
// it waits for its turn. To fail open instead, or decide locally while a
// remote store is down, and to have its outages logged, build l over a
// sluice.Fallback.
//
// Limit panics if l or key is nil.
func Limit(l *sluice.Limiter, key KeyFunc, o LimitOptions) func(http.Handler) http.Handler {
	if l == nil || key == nil {
		panic("httplimit: Limit needs a Limiter and a KeyFunc")
	}
	k := &keyed{
		answer: newAnswer(o.NoDraftHeaders, o.NoLegacyHeaders, o.ProblemType),
		l:      l,
		key:    key,
		clock:  l.Clock(),
	}
	name := l.Name()
	if name == "" {
		name = "limit"
	}
	limits := l.Limits()
	for i, lim := range limits {
		n := name
		if len(limits) > 1 {
			n += "." + strconv.Itoa(i+1)
		}
		k.quotas = append(k.quotas, newLimitQuota(n, lim))
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { k.serve(w, r, next) })
	}
}

// limitQuota is one of a Limiter's limits, with the header values that
// describe it precomputed (as policy.Limit holds them for a policy file).
type limitQuota struct {
	name         string // as RateLimit-Policy and the problem body name it
	limit        rate.Limit
	headerName   string // "name", the start of a RateLimit item
	headerPolicy string
	headerLimit  string
}

func newLimitQuota(name string, l rate.Limit) *limitQuota {
	return &limitQuota{
		name:         name,
		limit:        l,
		headerName:   string(ratefield.AppendString(nil, name)),
		headerPolicy: string(ratefield.AppendPolicy(nil, name, l)),
		headerLimit:  strconv.FormatInt(l.Capacity(), 10),
	}
}

func (q *limitQuota) AppendHeader(dst []byte, d rate.Decision) []byte {
	return ratefield.AppendDecision(append(dst, q.headerName...), d)
}
func (q *limitQuota) HeaderPolicy() string { return q.headerPolicy }
func (q *limitQuota) HeaderLimit() string  { return q.headerLimit }

type keyed struct {
	answer
	l      *sluice.Limiter
	key    KeyFunc
	clock  rate.Clock
	quotas []*limitQuota
}

func (k *keyed) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ctx := r.Context()
	key := k.key(r)
	var d rate.Decision
	var err error
	var ds []rate.Decision // one per limit, when there are several
	if len(k.quotas) == 1 {
		d, err = k.l.Allow(ctx, key)
	} else {
		reqs := k.l.Requests(key, 1)
		ds = make([]rate.Decision, len(reqs))
		d, err = k.l.Store().DecideAll(ctx, reqs, ds)
	}
	if err != nil {
		msg := "the rate limiter is unavailable; retry in 1s"
		if ctx.Err() != nil {
			msg = "the request ended before it could be served"
		}
		k.problem(w, r, http.StatusServiceUnavailable, 0, msg, nil)
		return
	}
	q := k.quotas[0]
	if ds != nil {
		q = k.quotas[max(0, rate.MostRestrictive(ds))]
	}
	if d.Allowed {
		if d.Delay > 0 {
			if err := k.clock.Sleep(ctx, d.Delay); err != nil {
				k.problem(w, r, http.StatusServiceUnavailable, 0, "the request ended before it could be served", nil)
				return
			}
		}
		k.setHeaders(w.Header(), q, d, false, 0)
		next.ServeHTTP(w, r)
		return
	}
	k.setHeaders(w.Header(), q, d, true, d.RetryAfter)
	// The limits that refused, the longest wait first.
	refused := []int{0}
	if ds != nil {
		refused = refused[:0]
		for i := range ds {
			if !ds[i].Allowed {
				refused = append(refused, i)
			}
		}
		slices.SortStableFunc(refused, func(a, b int) int { return cmp.Compare(ds[b].RetryAfter, ds[a].RetryAfter) })
	}
	names := make([]string, len(refused))
	for i, j := range refused {
		names[i] = k.quotas[j].name
	}
	retry := rate.RetryAfterSeconds(d.RetryAfter)
	detail := "rate limited by " + strconv.Quote(q.name) + " (limit " + q.limit.String() + "); retry in " + strconv.FormatInt(retry, 10) + "s"
	k.problem(w, r, http.StatusTooManyRequests, d.RetryAfter, detail, names)
}
