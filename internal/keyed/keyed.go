// Package keyed decides a request with a sluice.Limiter for the
// middlewares that key requests by a function (httplimit.Limit,
// grpclimit.Limit): each limit's decision, which of them the headers
// report, which refused, and who decided when the store is a
// sluice.Fallback.
package keyed

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
)

// Outcome is what a Limiter decided for one request.
type Outcome struct {
	// Decision combines the limits' decisions (rate.Combine).
	Decision rate.Decision
	// Source says who decided: the store, or a Fallback's failure mode.
	// SourceFailClosed is a refusal of no limit's: the store is down.
	Source sluice.Source
	// Most is the index of the most restrictive limit, whose decision
	// the headers report (rate.MostRestrictive).
	Most int
	// Refused lists the indices of the limits that refused, the longest
	// wait first; empty if the request was allowed.
	Refused []int
}

// Names returns the names the headers and bodies give l's limits: l's
// Name ("limit" if it has none), followed by .N, a limit's place from 1,
// when l has several, as a policy file's limits are named.
func Names(l *sluice.Limiter) []string {
	name := l.Name()
	if name == "" {
		name = "limit"
	}
	n := len(l.Limits())
	names := make([]string, n)
	for i := range names {
		names[i] = name
		if n > 1 {
			names[i] += "." + strconv.Itoa(i+1)
		}
	}
	return names
}

// sourcer is a store that says who decided, as sluice.Fallback does.
type sourcer interface {
	DecideAllSource(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, sluice.Source, error)
}

// Decide decides a request of cost one for key with l. A leaky_bucket's
// request is refused when its turn is further away than maxDelay
// (positive; zero for no bound) or than ctx's deadline leaves, so that a
// request is never held for a wait it cannot finish. An error means the
// store could not decide.
func Decide(ctx context.Context, l *sluice.Limiter, key string, maxDelay time.Duration) (Outcome, error) {
	limits := l.Limits()
	bound := maxDelay
	if deadline, ok := ctx.Deadline(); ok && slices.ContainsFunc(limits, func(lim rate.Limit) bool { return lim.Algorithm == rate.LeakyBucket }) {
		// What is admitted must go ahead strictly before the deadline;
		// a MaxDelay of 1µs is the least the steps can tell from none.
		left := max(deadline.Sub(l.Clock().Now())-time.Microsecond, time.Microsecond)
		if bound <= 0 || left < bound {
			bound = left
		}
	}
	src, isSourcer := l.Store().(sourcer)
	if len(limits) == 1 && !isSourcer && bound <= 0 {
		d, err := l.Allow(ctx, key)
		out := Outcome{Decision: d}
		if !d.Allowed {
			out.Refused = []int{0}
		}
		return out, err
	}
	reqs := l.Requests(key, 1)
	for i := range reqs {
		reqs[i].MaxDelay = bound
	}
	each := make([]rate.Decision, len(reqs))
	var out Outcome
	var err error
	if isSourcer {
		out.Decision, out.Source, err = src.DecideAllSource(ctx, reqs, each)
	} else {
		out.Decision, err = l.Store().DecideAll(ctx, reqs, each)
	}
	if err != nil || out.Source == sluice.SourceFailClosed || out.Source == sluice.SourceFailOpen {
		// No limit decided: there is nothing to report of any.
		return out, err
	}
	out.Most = max(0, rate.MostRestrictive(each))
	for i := range each {
		if !each[i].Allowed {
			out.Refused = append(out.Refused, i)
		}
	}
	slices.SortStableFunc(out.Refused, func(a, b int) int { return cmp.Compare(each[b].RetryAfter, each[a].RetryAfter) })
	return out, nil
}
