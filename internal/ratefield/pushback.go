package ratefield

import (
	"strconv"
	"time"
)

// DefaultMaxPushback is the longest wait a refused gRPC call is told to
// sit out by default (grpclimit's MaxPushback, and sluice serve's proxy):
// not an hourly or monthly window's, which would hold a retrying call
// that long.
const DefaultMaxPushback = time.Minute

// Pushback returns the grpc-retry-pushback-ms of a refusal that says
// wait: the wait in milliseconds, rounded up, or -1 (do not retry) when
// it is longer than maxPushback (negative: no bound) or, for a call with
// a deadline (bounded), not shorter than the time left before it. gRPC's
// retries sleep out a pushback, however long, and end only with the
// call's context: a client would otherwise sleep until its deadline and
// fail with DEADLINE_EXCEEDED, the refusal's details lost, or, with no
// deadline, sleep for the whole wait.
func Pushback(wait, maxPushback, left time.Duration, bounded bool) string {
	d := (max(wait, time.Millisecond) + time.Millisecond - 1).Truncate(time.Millisecond)
	if maxPushback >= 0 && d > maxPushback || bounded && d >= left {
		return "-1"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}
