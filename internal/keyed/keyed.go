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
	"github.com/sluicehq/sluice/internal/deadline"
	"github.com/sluicehq/sluice/internal/ratefield"
	"github.com/sluicehq/sluice/rate"
)

// Limiter is a sluice.Limiter prepared for the middlewares, once: its
// limits with their header values, and what deciding a request needs to
// know of it.
type Limiter struct {
	l *sluice.Limiter
	// Quotas are l's limits, in l's order, as the headers name them.
	Quotas []*Quota
	// local are the Quotas of the limits' shares that a FailLocal
	// Fallback decides with in its local store, so that a local decision's
	// headers describe the quota its remaining counts down from; nil when
	// the store divides no limit.
	local []*Quota
	leaky bool    // a limit is a leaky_bucket: a deadline bounds its wait
	src   sourcer // l's store, if it says who decided
}

// New prepares l. Its limits are named by l's Name ("limit" if it has
// none), followed by .N, a limit's place from 1, when l has several, as a
// policy file's limits are named. The shares of a Fallback's local
// decisions keep their limits' names, as a policy file's do. l's Name is
// printable ASCII (sluice.NewLimiter refuses any other), so the headers
// write a Quota's Name as it is, as the refusals name it.
func New(l *sluice.Limiter) *Limiter {
	k := &Limiter{l: l}
	k.src, _ = l.Store().(sourcer)
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
		k.Quotas = append(k.Quotas, newQuota(n, lim))
		k.leaky = k.leaky || lim.Algorithm == rate.LeakyBucket
	}
	// A Fallback does not tell its mode: one in another mode gets shares
	// it never reports, as only FailLocal decides locally.
	if fb, ok := l.Store().(*sluice.Fallback); ok && fb.Instances() > 1 {
		k.local = make([]*Quota, len(k.Quotas))
		for i, q := range k.Quotas {
			k.local[i] = q
			if share := q.Limit.Share(int64(fb.Instances())); share != q.Limit {
				k.local[i] = newQuota(q.Name, share)
			}
		}
	}
	return k
}

// newQuota returns the Quota of lim, named name.
func newQuota(name string, lim rate.Limit) *Quota {
	return &Quota{Name: name, Limit: lim, Header: ratefield.NewHeader(name, lim, 1)}
}

// Quota is one of a Limiter's limits with the header values that describe
// it precomputed, as policy.Limit holds them for a policy file; its
// methods are the Header's.
type Quota struct {
	Name  string // as RateLimit-Policy and refusals name it
	Limit rate.Limit
	ratefield.Header
}

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
	// Quotas are the limits as the decision applied them, for its headers
	// and refusals: the Limiter's Quotas, or, for a FailLocal Fallback's
	// local decision, the instance's shares of them, which its remaining
	// counts down from.
	Quotas []*Quota
}

// sourcer is a store that says who decided, as sluice.Fallback does.
type sourcer interface {
	DecideAllSource(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, sluice.Source, error)
}

// Hold holds an admitted request back for its Delay (a leaky_bucket's
// turn, a bucket's unit reserved under a MaxDelay), on the limiter's
// clock, and then counts d's reset from when it goes ahead. It returns
// ctx's error if ctx ends first.
func (k *Limiter) Hold(ctx context.Context, d *rate.Decision) error {
	if d.Delay <= 0 {
		return nil
	}
	if err := k.l.Clock().Sleep(ctx, d.Delay); err != nil {
		return err
	}
	d.ResetAfter = max(0, d.ResetAfter-d.Delay)
	return nil
}

// Decide decides a request of cost one for key. A leaky_bucket's request
// is refused when its turn is further away than maxDelay (positive; zero
// for no bound) or than ctx's deadline leaves, so that a request is never
// held for a wait it cannot finish. With a positive maxDelay, a gcra or
// token_bucket request past the burst is admitted with the Delay until
// its unit refills, within the same bounds (see rate.Request.MaxDelay);
// with none, it is refused. An error means the store could not decide.
func (k *Limiter) Decide(ctx context.Context, key string, maxDelay time.Duration) (Outcome, error) {
	l := k.l
	dl, bounded := ctx.Deadline()
	if len(k.Quotas) == 1 && k.src == nil && maxDelay <= 0 && !(bounded && k.leaky) {
		d, err := l.Allow(ctx, key)
		out := Outcome{Decision: d, Quotas: k.Quotas}
		if !d.Allowed {
			out.Refused = []int{0}
		}
		return out, err
	}
	reqs := l.Requests(key, 1)
	for i := range reqs {
		reqs[i].MaxDelay = maxDelay
	}
	if bounded {
		deadline.Bound(reqs, dl.Sub(l.Clock().Now()))
	}
	each := make([]rate.Decision, len(reqs))
	out := Outcome{Quotas: k.Quotas}
	var err error
	if k.src != nil {
		out.Decision, out.Source, err = k.src.DecideAllSource(ctx, reqs, each)
	} else {
		out.Decision, err = l.Store().DecideAll(ctx, reqs, each)
	}
	if err != nil || out.Source == sluice.SourceFailClosed || out.Source == sluice.SourceFailOpen {
		// No limit decided: there is nothing to report of any.
		return out, err
	}
	if out.Source == sluice.SourceLocal && k.local != nil {
		out.Quotas = k.local
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
