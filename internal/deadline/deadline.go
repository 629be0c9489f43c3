// Package deadline holds sluice's one rule for telling a caller's own
// deadline from a store's failure: the Fallback (whether a call counts
// against its primary) and the rls service (DEADLINE_EXCEEDED or
// UNAVAILABLE) must agree on it, or a call the Fallback leaves to its
// caller is answered, and logged, as a store that failed.
package deadline

import (
	"context"
	"errors"
	"time"
)

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
