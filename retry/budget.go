package retry

import (
	"math"
	"sync"
	"time"
)

// budgetBuckets is the number of buckets the budget window is split into.
// Ten keeps memory fixed and makes the window slide in tenths.
const budgetBuckets = 10

// budget bounds retries to a share of requests over a sliding window, so
// that during an outage a fleet of clients adds at most that share to the
// load instead of multiplying it by MaxAttempts. Counts live in a ring of
// buckets, each covering window/budgetBuckets; a bucket is reset when time
// moves past it, so memory is fixed whatever the traffic.
//
// Time is measured from origin rather than the Unix epoch so that a fake
// clock starting at the zero time.Time works too.
type budget struct {
	ratio      float64
	minRetries int
	width      time.Duration
	origin     time.Time

	mu      sync.Mutex
	buckets [budgetBuckets]budgetBucket // guarded by mu
}

type budgetBucket struct {
	epoch    int64 // which width-long interval since origin this bucket counts
	requests int
	retries  int
}

func newBudget(ratio float64, minRetries int, window time.Duration, now time.Time) *budget {
	b := &budget{
		ratio:      ratio,
		minRetries: minRetries,
		width:      max(window/budgetBuckets, 1),
		origin:     now,
	}
	for i := range b.buckets {
		b.buckets[i].epoch = math.MinInt64 // matches no real epoch
	}
	return b
}

// epoch returns the index of the bucket interval now falls in. Floor
// division keeps times before origin (a clock stepping back) consistent.
func (b *budget) epoch(now time.Time) int64 {
	d := now.Sub(b.origin)
	e := int64(d / b.width)
	if d < 0 && d%b.width != 0 {
		e--
	}
	return e
}

// slot returns the bucket in which epoch e is counted, whichever epoch it
// holds now. Requires that b.mu is held.
func (b *budget) slot(e int64) *budgetBucket {
	i := e % budgetBuckets
	if i < 0 {
		i += budgetBuckets
	}
	return &b.buckets[i]
}

// bucket returns the bucket for epoch e, resetting it if it held an older
// or newer interval. Requires that b.mu is held.
func (b *budget) bucket(e int64) *budgetBucket {
	bk := b.slot(e)
	if bk.epoch != e {
		*bk = budgetBucket{epoch: e}
	}
	return bk
}

// request records one request (a first attempt) at now.
func (b *budget) request(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bucket(b.epoch(now)).requests++
}

// allowRetry reports whether one more retry fits the budget at now, and
// if so records it. A retry fits when the retries in the window, this one
// included, are at most max(minRetries, ratio·requests).
func (b *budget) allowRetry(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.epoch(now)
	requests, retries := 0, 0
	for i := range b.buckets {
		bk := &b.buckets[i]
		if bk.epoch <= e && bk.epoch > e-budgetBuckets {
			requests += bk.requests
			retries += bk.retries
		}
	}
	allowed := max(float64(b.minRetries), b.ratio*float64(requests))
	if float64(retries+1) > allowed {
		return false
	}
	b.bucket(e).retries++
	return true
}

// refund takes back a retry that allowRetry recorded at now but that was
// never sent: the caller gave up while it waited, say. A retry recorded in
// a bucket that has since been reused for a later interval has already
// left the window, so there is nothing left to take back.
func (b *budget) refund(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.epoch(now)
	if bk := b.slot(e); bk.epoch == e && bk.retries > 0 {
		bk.retries--
	}
}
