package rate

import "math/bits"

// The bucket algorithms (gcra, leaky_bucket, token_bucket) share one policy:
// a bucket of B = Burst units refilled at N = Count units per T = Period.
// One unit refills every emission interval I = T/N microseconds. I is
// rarely a whole number of microseconds (3 per 7s gives 2333333⅓ µs), so
// times are kept exactly as a pair (µs, rem) meaning µs + rem/N, with
// 0 ≤ rem < N. Durations that are multiples of I are counted in ticks of
// 1/N µs, where I is exactly T ticks: k units take k·T ticks. Validate keeps
// B·T at most 2^52, so no product here leaves the exact integers of a float64.

// pt is an instant µs + rem/N.
type pt struct{ us, rem int64 }

func (a pt) less(b pt) bool { return a.us < b.us || a.us == b.us && a.rem < b.rem }

// addTicks returns a + t/N for t ≥ 0.
func (a pt) addTicks(t, n int64) pt {
	// Unsigned, as t and n are not negative: a signed division first
	// tests its divisor for -1.
	q, m := uint64(t)/uint64(n), uint64(t)%uint64(n)
	r := a.rem + int64(m)
	us := a.us + int64(q)
	if r >= n {
		r -= n
		us++
	}
	return pt{us, r}
}

// ceilSub returns ⌈a − b⌉ in microseconds.
func (a pt) ceilSub(b pt) int64 {
	d := a.us - b.us
	if a.rem > b.rem {
		d++
	}
	return d
}

// ticksSince returns (a − b) in ticks, for b ≤ a ≤ b + B·I.
func (a pt) ticksSince(b pt, n int64) int64 { return (a.us-b.us)*n + a.rem - b.rem }

// gcra is the generic cell rate algorithm, which is also the leaky bucket
// as a queue. The state is one instant, the theoretical arrival time TAT:
// when the bucket would be full again. A request of cost c at now would
// move it to max(TAT, now) + c·I; it passes if that is no later than
// now + B·I, the most debt the bucket tolerates.
//
// As a leaky bucket the same instant is when the queue drains: an admitted
// request starts its turn at max(TAT, now), so its Delay is that minus now.
// A caller who waits at most maxDelay is refused a later turn, and is told
// as Remaining only the turns that come within it.
//
// As gcra, a caller who waits (maxDelay ≥ 0) may go past the B·I of debt
// by what refills while it waits: a request that would conform within
// maxDelay is admitted with the Delay until it does, its TAT moved on as
// for any admission, so that the next waiter's unit comes after it
// (NGINX's limit_req with delay=). Since the whole debt still refills at
// the rate, what proceeds, at now + Delay, conforms to the limit.
//
// The state also keeps the latest time it has seen. A step at an earlier
// time (a clock stepped back) is taken at that latest time, so it can
// never spend tokens that the later time has already refilled; its
// durations are still measured from the caller's now.
func (l *Limit) gcra(s *State, now, cost, maxDelay int64, next *State, out *Decision) {
	n, t, b := l.Count, l.periodMicros(), l.burst()
	at := max(now, s.C)
	// base = max(TAT, at), and debt = base − at in ticks: how far the
	// bucket is below full, 0 ≤ debt ≤ B·T for a state this limit wrote.
	// An admitted request is decided from debt alone, with no division
	// but its own time's. A debt beyond any this limit writes (a state
	// left by another limit) is refused.
	base, debt := pt{at, 0}, int64(0)
	if tat := tatOf(s, n); base.less(tat) {
		hi, lo := bits.Mul64(uint64(tat.us-at), uint64(n))
		if hi != 0 || lo > 1<<61 {
			l.gcraRefuse(s, now, at, cost, maxDelay, next, out)
			return
		}
		base, debt = tat, int64(lo)+tat.rem
	}
	need := cost * t
	var delay int64
	if l.Algorithm == LeakyBucket {
		delay = base.ceilSub(pt{now, 0})
		if maxDelay >= 0 && delay > maxDelay {
			l.gcraRefuse(s, now, at, cost, maxDelay, next, out)
			return
		}
	}
	if debt+need > b*t {
		if maxDelay >= 0 && l.Algorithm == GCRA {
			l.gcraQueue(s, now, at, base, debt, cost, maxDelay, next, out)
			return
		}
		l.gcraRefuse(s, now, at, cost, maxDelay, next, out)
		return
	}
	nt := base.addTicks(need, n)
	// Of the B units, the request takes cost and debt holds ⌈debt/T⌉.
	remaining := b - cost
	if debt > 0 {
		remaining -= int64(uint64(debt+t-1) / uint64(t))
	}
	if maxDelay >= 0 && l.Algorithm == LeakyBucket {
		remaining = turnsBy(nt, now+maxDelay, n, t, remaining)
	}
	out.set(true, b, remaining, dur(max(0, nt.ceilSub(pt{now, 0}))), 0, dur(delay))
	if debt+need == 0 {
		put(next, 0, 0, 0) // the bucket is full: nothing to remember
		return
	}
	put(next, nt.us, nt.rem, at)
}

// gcraQueue decides a gcra request past the bucket's capacity for a
// caller who waits at most maxDelay (≥ 0): it is admitted if it conforms
// within maxDelay, with the Delay until it does, its unit reserved, and
// refused otherwise (gcraRefuse). base and debt are as gcra found them.
func (l *Limit) gcraQueue(s *State, now, at int64, base pt, debt, cost, maxDelay int64, next *State, out *Decision) {
	n, t, b := l.Count, l.periodMicros(), l.burst()
	bt, need := b*t, cost*t
	extra := queueTicks(maxDelay, at-now, n, bt)
	if debt+need > bt+extra {
		l.gcraRefuse(s, now, at, cost, maxDelay, next, out)
		return
	}
	// It conforms once the bucket has refilled debt + need − B·T ticks,
	// counted from at.
	// Nothing more passes at once: Remaining is 0.
	nt := base.addTicks(need, n)
	delay := ceilDiv(debt+need-bt, n) + at - now
	out.set(true, b, 0, dur(nt.ceilSub(pt{now, 0})), 0, dur(delay))
	put(next, nt.us, nt.rem, at)
}

// queueTicks returns how far past a full bucket's debt, B·T ticks (bt), a
// gcra or token_bucket request may be admitted with a Delay, for a caller
// who waits at most maxDelay µs (≥ 0), shift µs being how far the state's
// latest time is ahead of now: (maxDelay − shift)·N, none if that is not
// positive. maxDelay is first cut to what keeps the debt within MaxExact
// (see queueWait), so that every number stays exact in the Redis
// script's floats too.
func queueTicks(maxDelay, shift, n, bt int64) int64 {
	return max(0, queueWait(maxDelay, n, bt)-shift) * n
}

// queueWait returns maxDelay (≥ 0) cut to (MaxExact − bt)/N µs, the
// longest wait whose debt, bt plus the wait's ticks, stays within
// MaxExact.
func queueWait(maxDelay, n, bt int64) int64 {
	return min(maxDelay, (MaxExact-bt)/n)
}

// gcraRefuse is gcra's refusal, out of line so that the admitted path
// keeps its values in registers. at is max(now, latest time seen).
func (l *Limit) gcraRefuse(s *State, now, at, cost, maxDelay int64, next *State, out *Decision) {
	n, t, b := l.Count, l.periodMicros(), l.burst()
	tat := tatOf(s, n)
	base := pt{at, 0}
	if base.less(tat) {
		base = tat
	}
	queue := maxDelay >= 0 && l.Algorithm == GCRA
	// A leaky_bucket's turn longer than the caller waits is refused until
	// it is short enough.
	var wait int64
	if maxDelay >= 0 && !queue {
		wait = max(0, base.ceilSub(pt{now, 0})-maxDelay)
	}
	nt := base.addTicks(cost*t, n)
	full := pt{at, 0}.addTicks(b*t, n) // at + B·I
	remaining := remainingTicks(full, base, n, t)
	if maxDelay >= 0 && !queue {
		remaining = turnsBy(base, now+maxDelay, n, t, remaining)
	}
	// A request beyond the capacity passes once the latest time seen has
	// moved on by ⌈next − full⌉. One within it waits only for its turn: a
	// step before the latest time seen is taken at that time, so waiting
	// until then adds no room. A gcra request whose caller waits passes
	// that much earlier, its unit reserved.
	if full.less(nt) {
		w := nt.ceilSub(full) + at - now
		if queue {
			w -= queueWait(maxDelay, n, b*t)
		}
		wait = max(wait, w)
	}
	out.set(false, b, remaining, dur(max(0, tat.ceilSub(pt{now, 0}))), dur(wait), 0)
	keep(s, next)
}

// tatOf returns the TAT that s holds, for a limit of n per period. Its
// fraction counts in 1/n µs, below n; a gcra limit with a larger count,
// since changed, may have left one of n or more, which is a fraction of a
// microsecond in its own units: the TAT is then rounded up to the next
// microsecond, never earlier than the instant the old limit meant.
func tatOf(s *State, n int64) pt {
	if uint64(s.B) >= uint64(n) {
		return pt{s.A + 1, 0}
	}
	return pt{s.A, s.B}
}

// remainingTicks returns how many whole units fit between at and full.
func remainingTicks(full, at pt, n, t int64) int64 {
	if !at.less(full) {
		return 0
	}
	return full.ticksSince(at, n) / t
}

// turnsBy returns how many of most unit requests queued from e on, whose
// turns come at e, e + I, e + 2I, ..., have theirs no later than by: what
// a leaky_bucket's caller who waits at most until by can still send.
func turnsBy(e pt, by, n, t, most int64) int64 {
	d := by - e.us
	if most <= 0 || d < 0 {
		return 0
	}
	// Past most·I + 1µs every turn comes in time; short of it, d·n stays
	// within B·T + N, exact.
	if d > most*t/n+1 {
		return most
	}
	ticks := d*n - e.rem // by − e
	if ticks < 0 {
		return 0
	}
	return min(most, ticks/t+1)
}

// tokenBucket keeps how far the bucket is below full (its debt) and when
// it was last refilled. The debt counts in ticks, 1/T of a unit, so
// refilling for e µs pays back exactly e·N and taking c units adds exactly
// c·T: no fraction is ever rounded away. A zero debt is a full bucket, so
// the zero State is fresh. It admits exactly what gcra admits while time
// runs forward; when time runs backwards it refills nothing until it
// catches up.
func (l *Limit) tokenBucket(s *State, now, cost, maxDelay int64, next *State, out *Decision) {
	n, t, b := l.Count, l.periodMicros(), l.burst()
	capacity := b * t
	debt, last := s.A, s.B
	shift := max(0, last-now) // a clock stepped back: no refill, waits measured from now
	if e := now - last; e > 0 {
		if e >= ceilDiv(debt, n) {
			debt = 0
		} else {
			debt -= e * n
		}
		last = now
	}
	level := capacity - debt
	need := cost * t
	var delay int64
	if level < need {
		var extra int64 // past the capacity, what a caller who waits may reserve
		if maxDelay >= 0 {
			extra = queueTicks(maxDelay, shift, n, capacity)
		}
		if need-level > extra {
			retry := ceilDiv(need-level, n) + shift
			if maxDelay >= 0 {
				retry -= queueWait(maxDelay, n, capacity)
			}
			out.set(false, b, level/t, dur(ceilDiv(debt, n)+shift), dur(retry), 0)
			keep(s, next)
			return
		}
		// Within what the caller waits: admitted, once the bucket has
		// refilled the rest.
		delay = ceilDiv(need-level, n) + shift
	}
	debt += need
	out.set(true, b, (capacity-debt)/t, dur(ceilDiv(debt, n)+shift), 0, dur(delay))
	if debt == 0 {
		put(next, 0, 0, 0)
		return
	}
	put(next, debt, last, 0)
}
