package rate

import (
	"math/big"
	"time"
)

// This file holds a reference model of every algorithm, written for
// clarity instead of speed: real-valued (math/big) arithmetic straight from
// each algorithm's textbook definition, and no knowledge of the pair and
// tick tricks the real steps use. Tests compare the steps against it.

type model interface {
	// allows reports whether a request of cost passes at now, without
	// changing anything.
	allows(now, cost int64) bool
	// admit records a request of cost admitted at now.
	admit(now, cost int64)
	// remaining returns how many unit requests would pass at now.
	remaining(now int64) int64
	// delay returns how long an admitted request at now waits (leaky
	// bucket only), in µs rounded up.
	delay(now int64) int64
}

func newModel(l Limit) model {
	t := l.periodMicros()
	switch l.Algorithm {
	case GCRA, TokenBucket, LeakyBucket:
		return &bucketModel{n: l.Count, t: t, b: l.burst(), tokens: new(big.Rat).SetInt64(l.burst()), last: -1 << 62}
	case FixedWindow:
		return &fixedModel{l: l, counts: map[int64]int64{}}
	case SlidingWindow:
		return &slidingModel{n: l.Count, t: t, counts: map[int64]int64{}}
	case SlidingLog:
		return &logModel{n: l.Count, t: t}
	}
	panic("no model for " + l.Algorithm.String())
}

func rat(a, b int64) *big.Rat { return big.NewRat(a, b) }

// ceilRat returns ⌈x⌉.
func ceilRat(x *big.Rat) int64 {
	q, m := new(big.Int).DivMod(x.Num(), x.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// floorRat returns ⌊x⌋.
func floorRat(x *big.Rat) int64 {
	q, _ := new(big.Int).DivMod(x.Num(), x.Denom(), new(big.Int))
	return q.Int64()
}

// bucketModel is a token bucket holding a real number of tokens, refilled
// continuously at n per t µs up to b.
type bucketModel struct {
	n, t, b int64
	tokens  *big.Rat
	last    int64
}

func (m *bucketModel) at(now int64) *big.Rat {
	x := new(big.Rat).Set(m.tokens)
	if now > m.last {
		x.Add(x, new(big.Rat).Mul(rat(now-m.last, 1), rat(m.n, m.t)))
	}
	if x.Cmp(rat(m.b, 1)) > 0 {
		x.SetInt64(m.b)
	}
	return x
}
func (m *bucketModel) allows(now, cost int64) bool { return m.at(now).Cmp(rat(cost, 1)) >= 0 }
func (m *bucketModel) admit(now, cost int64) {
	m.tokens = m.at(now).Sub(m.at(now), rat(cost, 1))
	m.last = max(m.last, now)
}
func (m *bucketModel) remaining(now int64) int64 { return floorRat(m.at(now)) }
func (m *bucketModel) delay(now int64) int64 {
	// The queue ahead is the missing tokens, drained one per t/n µs.
	missing := new(big.Rat).Sub(rat(m.b, 1), m.at(now))
	return ceilRat(missing.Mul(missing, rat(m.t, m.n)))
}

// fixedModel counts per window.
type fixedModel struct {
	l      Limit
	counts map[int64]int64
}

func (m *fixedModel) win(now int64) int64 {
	if m.l.Calendar == Month {
		t := time.UnixMicro(now).UTC()
		return int64(t.Year())*12 + int64(t.Month())
	}
	return floorDiv(now, m.l.periodMicros())
}
func (m *fixedModel) allows(now, cost int64) bool { return m.counts[m.win(now)]+cost <= m.l.Count }
func (m *fixedModel) admit(now, cost int64)       { m.counts[m.win(now)] += cost }
func (m *fixedModel) remaining(now int64) int64   { return m.l.Count - m.counts[m.win(now)] }
func (m *fixedModel) delay(int64) int64           { return 0 }

// slidingModel weighs the previous window's count by the part of it still
// inside the last period.
type slidingModel struct {
	n, t   int64
	counts map[int64]int64
}

func (m *slidingModel) estimate(now int64) *big.Rat {
	w := floorDiv(now, m.t)
	e := now - w*m.t
	x := new(big.Rat).Mul(rat(m.counts[w-1], 1), rat(m.t-e, m.t))
	return x.Add(x, rat(m.counts[w], 1))
}
func (m *slidingModel) allows(now, cost int64) bool {
	x := m.estimate(now)
	return x.Add(x, rat(cost, 1)).Cmp(rat(m.n, 1)) <= 0
}
func (m *slidingModel) admit(now, cost int64) { m.counts[floorDiv(now, m.t)] += cost }
func (m *slidingModel) remaining(now int64) int64 {
	return floorRat(new(big.Rat).Sub(rat(m.n, 1), m.estimate(now)))
}
func (m *slidingModel) delay(int64) int64 { return 0 }

// logModel keeps every admitted unit's time.
type logModel struct {
	n, t  int64
	times []int64
}

func (m *logModel) count(now int64) int64 {
	c := int64(0)
	for _, a := range m.times {
		if now-a < m.t {
			c++
		}
	}
	return c
}
func (m *logModel) allows(now, cost int64) bool { return m.count(now)+cost <= m.n }
func (m *logModel) admit(now, cost int64) {
	for range cost {
		m.times = append(m.times, now)
	}
}
func (m *logModel) remaining(now int64) int64 { return m.n - m.count(now) }
func (m *logModel) delay(int64) int64         { return 0 }

// searchWait returns the least w ≥ 0 with ok(now+w), assuming ok is
// monotone in time and true by now+limit.
func searchWait(now, limit int64, ok func(int64) bool) int64 {
	lo, hi := int64(0), limit
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(now + mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// expect returns the decision the model gives for a request of cost at
// now, and admits the request into the model if it passes.
func expect(l Limit, m model, now, cost int64) Decision {
	horizon := 2*l.periodMicros() + 1
	if l.Calendar == Month {
		horizon = 2 * 31 * 24 * int64(time.Hour/time.Microsecond)
	}
	if l.Algorithm.HasBurst() {
		horizon = ceilDiv(l.burst()*l.periodMicros(), l.Count) + 1
	}
	capacity := l.Capacity()
	d := Decision{Limit: capacity, Allowed: m.allows(now, cost)}
	if d.Allowed {
		if l.Algorithm == LeakyBucket {
			d.Delay = dur(m.delay(now))
		}
		m.admit(now, cost)
	} else {
		d.RetryAfter = dur(searchWait(now, horizon, func(t int64) bool { return m.allows(t, cost) }))
	}
	d.Remaining = max(0, m.remaining(now))
	d.ResetAfter = dur(searchWait(now, horizon, func(t int64) bool { return m.remaining(t) == capacity }))
	return d
}

// clockedBucket is the bucket algorithms (gcra, token_bucket, leaky_bucket)
// as a token bucket holding a real number of tokens, decided at
// max(now, latest time seen) and forgetting the latest time when full (as
// a fresh state does): unlike bucketModel, it follows a clock that goes
// back, and a leaky_bucket's MaxDelay.
type clockedBucket struct {
	leaky   bool
	n, t, b int64
	tokens  *big.Rat
	last    int64 // latest time seen; -1 when fresh
}

func newClockedBucket(l Limit) *clockedBucket {
	return &clockedBucket{leaky: l.Algorithm == LeakyBucket, n: l.Count, t: l.periodMicros(), b: l.burst(), tokens: big.NewRat(l.burst(), 1), last: -1}
}

func (m *clockedBucket) level(x int64) *big.Rat {
	v := new(big.Rat).Set(m.tokens)
	if m.last >= 0 && x > m.last {
		v.Add(v, big.NewRat((x-m.last)*m.n, m.t))
	}
	if v.Cmp(big.NewRat(m.b, 1)) > 0 {
		v.SetInt64(m.b)
	}
	return v
}

func (m *clockedBucket) atOf(now int64) int64 { return max(now, m.last) }

// tat returns when (real) the queue drains, seen at now: at + missing·I.
func (m *clockedBucket) tat(now int64) *big.Rat {
	at := m.atOf(now)
	miss := new(big.Rat).Sub(big.NewRat(m.b, 1), m.level(at))
	miss.Mul(miss, big.NewRat(m.t, m.n))
	return miss.Add(miss, big.NewRat(at, 1))
}

func (m *clockedBucket) delay(now int64) int64 {
	d := new(big.Rat).Sub(m.tat(now), big.NewRat(now, 1))
	return max(0, ceilRat(d))
}

func (m *clockedBucket) allows(now, cost, maxDelay int64) bool {
	if m.level(m.atOf(now)).Cmp(big.NewRat(cost, 1)) < 0 {
		return false
	}
	if m.leaky && maxDelay > 0 && m.delay(now) > maxDelay {
		return false
	}
	return true
}

func (m *clockedBucket) admit(now, cost int64) {
	at := m.atOf(now)
	lv := m.level(at)
	lv.Sub(lv, big.NewRat(cost, 1))
	if lv.Cmp(big.NewRat(m.b, 1)) == 0 {
		m.tokens, m.last = lv, -1
		return
	}
	m.tokens, m.last = lv, at
}

func (m *clockedBucket) remaining(now, maxDelay int64) int64 {
	r := floorRat(m.level(m.atOf(now)))
	if !m.leaky || maxDelay <= 0 {
		return r
	}
	// Unit j (j = 1..r) queued now starts at tat + (j−1)·I.
	k := int64(0)
	for j := int64(1); j <= r; j++ {
		turn := new(big.Rat).Add(m.tat(now), big.NewRat((j-1)*m.t, m.n))
		if turn.Cmp(big.NewRat(now+maxDelay, 1)) > 0 {
			break
		}
		k++
	}
	return k
}

func (m *clockedBucket) reset(now int64) int64 {
	if m.last < 0 {
		return 0
	}
	if m.level(m.atOf(now)).Cmp(big.NewRat(m.b, 1)) == 0 {
		return 0
	}
	return max(0, ceilRat(new(big.Rat).Sub(m.tat(now), big.NewRat(now, 1))))
}
