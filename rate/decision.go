package rate

import (
	"errors"
	"fmt"
	"time"
)

// Decision is what a limit says about one request.
//
// A refusal is a decision, not an error: Allowed is false and RetryAfter
// says how long to wait.
type Decision struct {
	// Allowed reports whether the request passes. When it does not, the
	// request consumed nothing.
	Allowed bool
	// Limit is the limit's capacity: the most units that can pass at once
	// (Count for the window algorithms, Burst for the bucket ones).
	Limit int64
	// Remaining is how many more units of cost would pass right now, after
	// this decision. It is never negative. For a leaky_bucket decided with a
	// MaxDelay, it counts only the places in the queue whose turn comes
	// within that delay: how many unit requests would still pass, one after
	// another. It is not the largest single cost that would: a request
	// waits only for its own turn, the first of its places, so one of a
	// larger cost can pass (a cost of 4 where Remaining is 2). For a gcra
	// or token_bucket decided with a MaxDelay it counts, as without one,
	// the units that would pass at once, not those it would delay: never
	// more than the burst.
	Remaining int64
	// ResetAfter is how long until the key's state is back to fresh (a full
	// bucket, an empty window) if nothing else arrives.
	ResetAfter time.Duration
	// RetryAfter is zero when Allowed. Otherwise it is the exact wait after
	// which the same request passes, if nobody else spends in between.
	RetryAfter time.Duration
	// Delay is how long an admitted request must wait for its turn before it
	// proceeds: non-zero only for leaky_bucket, which shapes traffic instead
	// of letting a burst through at once, and for a gcra or token_bucket
	// request whose caller waits (Request.MaxDelay) past the burst.
	Delay time.Duration
}

// String formats d for logs and test failures.
func (d Decision) String() string {
	return fmt.Sprintf("{allowed:%t limit:%d remaining:%d reset:%v retry:%v delay:%v}",
		d.Allowed, d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter, d.Delay)
}

// Request asks one limit to admit Cost units for Key.
type Request struct {
	// Key names whose state this is: a user, an API key, an IP, or a mix.
	// Stores keep one state per Key; callers make sure that two different
	// limits never share a Key. A limit changed under a Key reads what the
	// old one of the same algorithm left as well as it can: a gcra TAT's
	// fraction rounded up to the microsecond, a count over the new one
	// leaving nothing. A state of another algorithm the Redis store treats
	// as fresh; the memory store reads it as its own, which gives
	// well-formed decisions but not meaningful ones.
	Key string
	// Limit decides the request.
	Limit Limit
	// Cost is how many units the request takes; 0 only looks (it is always
	// allowed, consumes nothing and reports Remaining).
	Cost int64
	// MaxDelay, if positive, is the longest a caller will wait for a Delay:
	// a request that would be delayed longer is refused (a look, of cost 0,
	// never is). A leaky_bucket delays every request for its turn: zero or
	// less sets no bound beyond the queue's capacity. A gcra or
	// token_bucket lets the burst through at once, and with a positive
	// MaxDelay admits a request past it too, with the Delay until its units
	// refill, reserving them, so that those that wait go one after another
	// rather than all retry at once; zero or less admits none past the
	// burst, as without a wait (and the waits are cut to what keeps their
	// arithmetic exact, (2^52 − Burst·Period in µs)/Count µs). A positive
	// MaxDelay under 1µs (a Delay is whole microseconds) admits only a
	// request with no Delay. The window algorithms never delay and ignore
	// it.
	MaxDelay time.Duration
}

// ErrCostExceedsCapacity is returned for a request whose cost is larger
// than its limit's capacity: no amount of waiting would let it pass.
var ErrCostExceedsCapacity = errors.New("cost exceeds the limit's capacity")

// ErrNegativeCost is returned for a request with a negative cost.
var ErrNegativeCost = errors.New("negative cost")

// Check reports whether r can ever be decided: its limit is valid (see
// [Limit.Validate]) and its cost is between 0 and the limit's capacity.
// Stores call it before deciding, as the steps need both. The errors for a
// cost wrap ErrCostExceedsCapacity or ErrNegativeCost.
func (r Request) Check() error {
	if err := r.Limit.Validate(); err != nil {
		return fmt.Errorf("key %q: invalid limit %v: %w", r.Key, r.Limit, err)
	}
	switch {
	case r.Cost < 0:
		return fmt.Errorf("key %q: %w %d", r.Key, ErrNegativeCost, r.Cost)
	case r.Cost > r.Limit.Capacity():
		return fmt.Errorf("key %q: %w: cost %d, capacity %d (%v)", r.Key, ErrCostExceedsCapacity, r.Cost, r.Limit.Capacity(), r.Limit)
	}
	return nil
}

// CheckGroup reports whether requests decided together, all or nothing
// (a store's DecideAll), can ever pass, given that each passes Check.
// Requests with the same Key and the same Limit are stepped each on the
// state the previous left, so together they take the sum of their costs
// from one capacity: a sum larger than the capacity would be refused
// forever, with a RetryAfter that only ever leads to another refusal, so
// it is an error that wraps ErrCostExceedsCapacity, as one such cost is.
// One Key under different Limits is checked limit by limit.
func CheckGroup(reqs []Request) error {
	for j := range reqs {
		if first(reqs, j) {
			if err := checkSum(reqs, j); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckOut reports whether out has a place for the decision of each of
// reqs, as a store's DecideAll needs: it writes the decision for reqs[i]
// to out[i]. A shorter out is the caller's mistake, not the store's, and
// every store reports it with this one text, under its own prefix, so
// that the same mistake reads the same whichever store met it.
func CheckOut(reqs []Request, out []Decision) error {
	if len(out) < len(reqs) {
		return errShortOut(len(out), len(reqs))
	}
	return nil
}

// errShortOut is CheckOut's error, out of line so that CheckOut, on every
// DecideAll's path, stays cheap enough to inline.
func errShortOut(out, reqs int) error {
	return fmt.Errorf("out is shorter than reqs (%d < %d)", out, reqs)
}

// first reports whether reqs[j] is the first request with its Key and
// Limit.
func first(reqs []Request, j int) bool {
	for k := range j {
		if reqs[k].Key == reqs[j].Key && reqs[k].Limit.Same(&reqs[j].Limit) {
			return false
		}
	}
	return true
}

// Same reports whether l and o are one limit, a Burst of zero and one of
// Count alike: whether a state one of them left means the same to the
// other.
func (l *Limit) Same(o *Limit) bool {
	return l.Algorithm == o.Algorithm && l.Count == o.Count && l.Period == o.Period &&
		l.Calendar == o.Calendar && l.Capacity() == o.Capacity()
}

// checkSum checks the costs of reqs[j] and of the requests after it with
// its Key and Limit against the limit's capacity. It stops as soon as the
// sum is over the capacity, so the sum cannot overflow.
func checkSum(reqs []Request, j int) error {
	r := &reqs[j]
	capacity := r.Limit.Capacity()
	sum, n := int64(0), 0
	for k := j; k < len(reqs); k++ {
		if reqs[k].Key != r.Key || !reqs[k].Limit.Same(&r.Limit) {
			continue
		}
		sum += reqs[k].Cost
		n++
		if sum > capacity {
			return fmt.Errorf("key %q: %w: %d requests whose costs add up to %d, capacity %d (%v)", r.Key, ErrCostExceedsCapacity, n, sum, capacity, r.Limit)
		}
	}
	return nil
}

// MostRestrictive returns the index of the decision a client most needs to
// hear about, for headers that can name only one: among refusals, the one
// with the longest RetryAfter; if all allow, the one with the least
// Remaining, and among those the longest ResetAfter. It returns -1 for an
// empty slice.
func MostRestrictive(ds []Decision) int {
	best := -1
	for i, d := range ds {
		if best < 0 {
			best = i
			continue
		}
		b := ds[best]
		switch {
		case d.Allowed != b.Allowed:
			if !d.Allowed {
				best = i
			}
		case !d.Allowed:
			if d.RetryAfter > b.RetryAfter {
				best = i
			}
		case d.Remaining < b.Remaining, d.Remaining == b.Remaining && d.ResetAfter > b.ResetAfter:
			best = i
		}
	}
	return best
}

// Combine folds the decisions of several limits applied to one request
// into one: Allowed only if all allow; RetryAfter and Delay the longest (the
// wait after which every limit lets the request pass); Remaining the least
// (a unit passes only if every limit lets it); Limit and ResetAfter from
// the most restrictive decision. Combining no decisions gives an allowed,
// empty Decision.
//
// When all allow, the most restrictive decision has the least Remaining.
// When some refuse, the most restrictive is the longest wait, and another
// limit (a shorter wait) may have less left: a window with 3 units left
// refuses a cost of 5 for a minute while a bucket, empty, lets nothing
// pass for a second. Remaining is then 0, not the window's 3.
func Combine(ds []Decision) Decision {
	i := MostRestrictive(ds)
	if i < 0 {
		return Decision{Allowed: true}
	}
	out := ds[i]
	for _, d := range ds {
		out.Allowed = out.Allowed && d.Allowed
		out.RetryAfter = max(out.RetryAfter, d.RetryAfter)
		out.Remaining = min(out.Remaining, d.Remaining)
		out.Delay = max(out.Delay, d.Delay)
	}
	if !out.Allowed {
		out.Delay = 0
	}
	return out
}

// CeilSeconds returns d in whole seconds, rounded up, as the RateLimit
// header fields and Envoy's durations carry it: 1ms is 1, 1s is 1, 1.001s
// is 2. Zero and negative durations give 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	// Rounded up after the division: d + 1s − 1 would wrap for the longest
	// durations.
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// RetryAfterSeconds returns the Retry-After value for a wait of d: whole
// seconds rounded up and never 0, so a client that waits that long never
// comes back early.
func RetryAfterSeconds(d time.Duration) int64 { return max(1, CeilSeconds(d)) }
