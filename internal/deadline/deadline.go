// Package deadline holds sluice's one rule for telling a caller's own
// deadline from a store's failure: the Fallback (whether a call counts
// against its primary) and the rls service (DEADLINE_EXCEEDED or
// UNAVAILABLE) must agree on it, or a call the Fallback leaves to its
// caller is answered, and logged, as a store that failed. It also holds
// the rule for how long a request may be held before its deadline (Wait).
package deadline

import (
	"context"
	"errors"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// Wait returns the longest a request may be held for its turn or unit
// (a rate.Request's MaxDelay) with left until its context's deadline:
// less than left, as what is admitted must go ahead strictly before the
// deadline, and at least 1ns (a MaxDelay of zero would bound nothing). It
// is left less 1µs rounded down to four significant bits, giving up at
// most an eighth of it, so that waits bounded by deadlines are a few
// values (eight an octave), not one per µs: the Redis store's deny cache
// keys a refusal by the wait it was asked with, and a flood of requests
// whose deadlines differ by µs would otherwise each be an entry of its
// own, never answered from, pushing out the others.
func Wait(left time.Duration) time.Duration {
	w := left - time.Microsecond
	if w <= 0 {
		return time.Nanosecond
	}
	if n := bits.Len64(uint64(w)); n > 4 {
		w &^= 1<<(n-4) - 1
	}
	return w
}

// Slack is how near its deadline a context that ended, or a call that
// reports a deadline, counts as ended by that deadline: well above the
// jitter of timers and of a network's latency, well below the deadlines
// callers set (Envoy's are about 20ms).
//
// The moment differs with who sees it. A store's client may report the
// deadline a moment before the context's timer fires, or before the
// deadline itself (the Redis client sets its connections' deadlines from
// the context's). And a gRPC client whose deadline passes resets the call
// (Envoy does), which cancels the server's context about when the
// server's own copy of the deadline, started as the call arrived, would
// pass: most often just before.
const Slack = 2 * time.Millisecond

// Near reports whether ctx's deadline has passed or is within Slack:
// whether a call made with ctx that ended ended by its deadline rather
// than because its caller went away, even where ctx's timer has yet to
// say so, or ctx was cancelled by a client's reset at its deadline.
func Near(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) <= Slack
}

// Ended reports whether err, the failure of a call made with ctx, is
// ctx's own deadline: err is context.DeadlineExceeded and ctx's deadline
// is Near. The caller's time ran out, and the store did not fail; a
// deadline further off was a bound of the store's own, a store that was
// too slow.
func Ended(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && Near(ctx)
}

// Bound bounds the wait of each of reqs (its MaxDelay) by Wait(left), left
// being the time until the request's deadline, so that no turn or unit
// is given that the deadline cannot reach. A leaky_bucket's request is
// always bounded, as it waits for its turn however it is asked; a gcra or
// token_bucket's only if it has a MaxDelay already, as one is its leave
// to hold the request at all; a window's MaxDelay is read by no step.
func Bound(reqs []rate.Request, left time.Duration) {
	w := Wait(left)
	for i := range reqs {
		if reqs[i].MaxDelay <= 0 && reqs[i].Limit.Algorithm != rate.LeakyBucket {
			continue
		}
		if reqs[i].MaxDelay <= 0 || reqs[i].MaxDelay > w {
			reqs[i].MaxDelay = w
		}
	}
}
