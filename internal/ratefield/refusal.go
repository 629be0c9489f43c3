package ratefield

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// Why is why a request was not served, each told to its client in words
// of its own (see Refusal.Detail).
type Why uint8

const (
	// Unavailable: the limiter could not decide, as its store failed.
	Unavailable Why = iota
	// Refused: a limit refused the request.
	Refused
	// Shed: too many requests of its priority were in flight.
	Shed
	// Drained: the server's drain ended the request's wait.
	Drained
	// Ended: the request's own context ended before it was decided, or
	// while it was held back.
	Ended
)

// Refusal is what a transport knows of a request it does not serve, for
// the sentence that tells the client why: an RFC 9457 problem's detail
// (httplimit), a status message (grpclimit). Both transports and the
// middlewares of both (a policy file's, a Limiter's) word it here, so
// that one cause reads alike wherever it is told, and so that they weigh
// causes that hold together in one order (see Why).
type Refusal struct {
	// Refused: a limit refused the request. Shed: it was shed.
	Refused, Shed bool
	// Drained is policy.ErrDrained when a Drain ended the request's wait
	// (Outcome.Err wraps it), else nil. Its text is said as it is.
	Drained error
	// Ended: the request's own context has ended; not a store's error
	// that wraps context.DeadlineExceeded, which is a failed store.
	Ended bool
	// Policy is the name of the policy whose limit refused the request,
	// for a policy file's middleware; Name the limit's name, as
	// RateLimit-Policy names it, for a Limiter's. Limit is the limit, as
	// rate.Limit.String writes it. All are "" for a refusal that names
	// no limit.
	Policy, Name, Limit string
	// Call says "call", gRPC's word, where the sentence speaks of the
	// request.
	Call bool
	// RetryAfter is the wait the client is told, in whole seconds
	// rounded up (rate.RetryAfterSeconds), as Retry-After says it.
	RetryAfter time.Duration
}

// Why returns why the request was not served. A refusal or a shed is a
// verdict, whatever became of the request since. Of a request not
// decided, the drain comes before the end of its context: the Enforcer
// reports ErrDrained only when the drain ended a wait while the context
// was still alive, so a context that has ended since (its client gone,
// or the server cutting it at the drain's end) is a later event, and a
// client still there is best told the drain, with its wait, to try
// again elsewhere. The end of the context comes before a store's
// failure, as a store whose call the request's end cut short did not
// fail.
func (r Refusal) Why() Why {
	switch {
	case r.Refused:
		return Refused
	case r.Shed:
		return Shed
	case r.Drained != nil:
		return Drained
	case r.Ended:
		return Ended
	}
	return Unavailable
}

// Detail returns the sentence that tells the client why the request was
// not served, with the wait after which to try again but for an ended
// request, whose client is likely gone:
//
//	rate limited by policy "api" (limit gcra 2/m burst 2); retry in 30s
//	the server is at capacity for requests of this priority; retry in 3s
//	the request ended before it could be served
func (r Refusal) Detail() string {
	noun := "request"
	if r.Call {
		noun = "call"
	}
	wait := "; retry in " + strconv.FormatInt(rate.RetryAfterSeconds(r.RetryAfter), 10) + "s"
	switch r.Why() {
	case Refused:
		return r.LimitedBy() + wait
	case Shed:
		return "the server is at capacity for " + noun + "s of this priority" + wait
	case Drained:
		return r.Drained.Error() + wait
	case Ended:
		return "the " + noun + " ended before it could be served"
	}
	return "the rate limiter is unavailable" + wait
}

// LimitedBy returns what a refusal says of the limit that refused, with
// no wait, as a gRPC QuotaFailure's violation says it too: `rate limited
// by policy "api" (limit gcra 2/m)`, or `rate limited by "api.2" (limit
// gcra 2/m)` for a Limiter's. A Limit of "" is left out (a violated
// policy whose limit the answer does not report); with neither a name
// nor a limit, it is `rate limited`.
func (r Refusal) LimitedBy() string {
	s := "rate limited"
	switch {
	case r.Policy != "":
		s += " by policy " + strconv.Quote(r.Policy)
	case r.Name != "":
		s += " by " + strconv.Quote(r.Name)
	}
	if r.Limit != "" {
		s += " (limit " + r.Limit + ")"
	}
	return s
}
