package rate

import "time"

// State is what a limit remembers about one key between decisions. Its
// zero value is fresh: a key never seen, or one whose state has returned to
// fresh. Stores keep it opaque; what the fields mean depends on the
// algorithm:
//
//	gcra, leaky_bucket  A: theoretical arrival (drain) time, µs; B: its fraction, in 1/Count µs; C: latest time seen, µs
//	token_bucket        A: how far below full, in 1/Period(µs) units; B: last refill, µs
//	fixed_window        A: window start, µs; B: count in it
//	sliding_window      A: current window start, µs; B: its count; C: the previous window's count
//	sliding_log         Log: the time of every admitted unit in the last Period, µs, oldest first
//
// A step never modifies the elements of the Log it is given, so a caller
// may keep the old State until it decides to commit the new one. The new
// Log may extend the old one in place, though: two steps from one State
// can write the same spare element, so of the States stepped from one,
// keep at most one (or give each step its own copy of the Log).
type State struct {
	// A, B and C are an algorithm's numbers, and Log sliding_log's
	// times, as the table in State's doc says.
	A, B, C int64
	Log     []int64
}

// Step decides a request of cost units at now, in microseconds since the
// Unix epoch (see [Micros]), given the key's state s. It returns the state
// to store if the request is committed, and the decision. When the request
// is refused the returned state is s itself: a refusal changes nothing.
//
// Step is pure: the same (l, s, now, cost) always gives the same result,
// which is what lets the Redis store run the same definition in Lua. Cost
// must be between 0 and l.Capacity() (see [Request.Check]); l must be valid;
// now must not be negative (before 1970): the zero State's times read as
// the epoch, so gcra, token_bucket and sliding_window would take such a
// step as at the epoch, and a leaky_bucket would delay it until then.
// Time may go backwards: a step never gives back what an earlier step at a
// later time took, as it is decided at the latest time the state has seen
// (its waits still measured from now, so they include the gap).
func (l Limit) Step(s State, now, cost int64) (State, Decision) {
	return l.StepWithin(s, now, cost, 0)
}

// StepWithin is Step for a caller who waits at most maxDelay (see
// Request.MaxDelay): a leaky_bucket refuses a request whose Delay would be
// longer; a gcra or token_bucket admits one past its burst with the Delay
// until its units refill, when that is within maxDelay. The window
// algorithms never delay and ignore maxDelay.
func (l Limit) StepWithin(s State, now, cost int64, maxDelay time.Duration) (next State, d Decision) {
	l.Apply(&s, now, cost, maxDelay, &next, &d)
	return next, d
}

// Apply is StepWithin for stores that keep states in place and cannot
// afford to copy them through every call: it reads *s and writes the state
// to commit to *next and the decision to *d. next may point to s itself,
// for a caller that commits whatever the decision (a refusal writes back s
// unchanged); to decide several requests all or nothing, give each its own
// next.
func (l *Limit) Apply(s *State, now, cost int64, maxDelay time.Duration, next *State, d *Decision) {
	switch l.Algorithm {
	case GCRA, LeakyBucket:
		l.gcra(s, now, cost, MaxDelayMicros(maxDelay), next, d)
	case TokenBucket:
		l.tokenBucket(s, now, cost, MaxDelayMicros(maxDelay), next, d)
	case FixedWindow:
		l.fixedWindow(s, now, cost, next, d)
	case SlidingWindow:
		l.slidingWindow(s, now, cost, next, d)
	case SlidingLog:
		l.slidingLog(s, now, cost, next, d)
	default:
		*next, *d = *s, Decision{}
		return
	}
	if cost == 0 && !d.Allowed {
		// A look is never refused: it consumes nothing, whatever the
		// state (one left by a limit with a larger count can be over
		// this one's) and however long a leaky_bucket's queue.
		d.Allowed, d.RetryAfter = true, 0
	}
}

// The steps write their results through pointers, field by field (set,
// keep, put): a Decision built aside and copied out, as a composite literal
// assigned through a pointer is, or a State assigned whole, costs the
// in-memory store's hot path a tenth of its time.

// set writes the decision into *d field by field. A state left by a limit
// with a larger count may hold more than this one allows: remaining is
// then below zero, and nothing remains.
func (d *Decision) set(allowed bool, limit, remaining int64, resetAfter, retryAfter, delay time.Duration) {
	d.Allowed, d.Limit, d.Remaining = allowed, limit, max(0, remaining)
	d.ResetAfter, d.RetryAfter, d.Delay = resetAfter, retryAfter, delay
}

// keep makes *next the unchanged *s: what a refusal commits.
func keep(s, next *State) {
	if next != s {
		*next = *s
	}
}

// put makes *next the state (a, b, c) with no log.
func put(next *State, a, b, c int64) {
	next.A, next.B, next.C = a, b, c
	if next.Log != nil {
		next.Log = nil
	}
}

// micros converts d to whole microseconds, rounding down.
func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// MaxDelayMicros converts a caller's MaxDelay to the bound the steps take
// (and the Redis store's script, which must read it alike):
// -1 for none (zero or less), else whole microseconds, rounded down. A
// Delay is a whole number of microseconds, so it is within d exactly when
// it is within ⌊d⌋: a positive d under 1µs bounds the Delay to 0, it does
// not lift the bound.
func MaxDelayMicros(d time.Duration) int64 {
	if d <= 0 {
		return -1
	}
	return micros(d)
}

// dur converts microseconds to a Duration.
func dur(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// floorDiv returns ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// ceilDiv returns ⌈a/b⌉ for b > 0.
func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// burst returns the capacity of a bucket algorithm.
func (l *Limit) burst() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Count
}
