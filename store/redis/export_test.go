package redis

import (
	"context"

	"github.com/sluicehq/sluice/rate"
)

// PinNow makes the store's script take "now" from c instead of Redis's
// TIME, and turns off expiry, for tests that drive time.
func PinNow(o *Options, c rate.Clock) { o.pinned = c }

// DenyCacheLen returns the number of entries in s's deny cache.
func DenyCacheLen(s *Store) int {
	if s.deny == nil {
		return 0
	}
	return s.deny.len()
}

// Slot returns key's Redis Cluster slot.
func Slot(key string) uint16 { return slot(key) }

// AfterCheck makes s call f between the check and the commit of every
// request whose keys span several cluster slots.
func AfterCheck(s *Store, f func()) { s.afterCheck = f }

// Queued returns how many callers wait in the coalescer that request key
// k goes through.
func Queued(s *Store, k string) int {
	c := coalescerOf(s, k)
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// coalescerOf returns the coalescer that request key k goes through.
func coalescerOf(s *Store, k string) *coalescer {
	var sl uint16
	if s.cluster {
		sl = slot(s.Key(k))
	}
	return s.co.get(sl)
}

// Retryable reports whether a script call that failed with err under ctx
// is sent again.
func Retryable(ctx context.Context, err error) bool { return retryable(ctx, err) }

// InFlight returns how many calls are on the wire from the coalescer that
// request key k goes through.
func InFlight(s *Store, k string) int {
	c := coalescerOf(s, k)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight
}
