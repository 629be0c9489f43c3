package redis

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// PinNow makes the store's script take "now" from c instead of Redis's
// TIME, and turns off expiry, for tests that drive time.
func PinNow(o *Options, c rate.Clock) { o.pinned = c }

// MaxDenyAge is the longest the deny cache repeats a refusal.
const MaxDenyAge = maxDenyAge

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

// RedisKey returns the Redis key of request key k under prefix.
func RedisKey(prefix, k string) string { return redisKey(prefix, k) }

// KeySlot returns the slot of RedisKey(prefix, k) as Store.Partition
// finds it.
func KeySlot(prefix, k string) uint16 { return keySlot(prefix, k) }

// RefreshSlots has s read the cluster's slots again in the background, as
// a failed script call does.
func RefreshSlots(s *Store) { s.refreshSlots() }

// SlotsRefresh reports whether s's refresh goroutine runs, and when its
// last reading of the cluster's slots started.
func SlotsRefresh(s *Store) (running bool, started time.Time) {
	s.parts.mu.Lock()
	defer s.parts.mu.Unlock()
	return s.parts.running, s.parts.started
}

// LoadSlots has s take, as a reading of CLUSTER SLOTS, the slots split
// evenly between the masters at addrs, in order.
func LoadSlots(s *Store, addrs ...string) {
	var ranges []slotRange
	for i, a := range addrs {
		ranges = append(ranges, slotRange{int64(16384 * i / len(addrs)), int64(16384*(i+1)/len(addrs) - 1), a})
	}
	s.parts.slots.Store(s.slotMapOf(ranges))
}

// AgeSlots makes s's map of the slots as old as maxSlotsAge.
func AgeSlots(s *Store) { s.parts.due.Store(0) }

// SlotsTries returns how many CLUSTER SLOTS s has sent.
func SlotsTries(s *Store) int64 { return s.parts.tries.Load() }

// BeforeRefund makes s call f before it gives back what a request across
// slots, refused at a commit, took in the slots committed before.
func BeforeRefund(s *Store, f func()) { s.beforeRefund = f }

// Commit decides reqs, whose keys share a slot, as a request across slots
// commits one slot's group: it returns their decisions and receipts.
func Commit(ctx context.Context, s *Store, reqs []rate.Request) ([]rate.Decision, [][2]int64, error) {
	g := slotGroupOf(s, reqs)
	if err := g.commit(ctx, s); err != nil {
		return nil, nil, err
	}
	receipts := make([][2]int64, len(reqs))
	for i := range receipts {
		receipts[i] = [2]int64{g.receipts[2*i], g.receipts[2*i+1]}
	}
	return g.out, receipts, nil
}

// Refund gives back what the commit of reqs, whose keys share a slot,
// took, by their receipts, as after a race across slots: it returns what
// the check that follows the refund reports.
func Refund(ctx context.Context, s *Store, reqs []rate.Request, receipts [][2]int64) ([]rate.Decision, error) {
	g := slotGroupOf(s, reqs)
	for _, r := range receipts {
		g.receipts = append(g.receipts, r[0], r[1])
	}
	err := g.refund(ctx, s)
	return g.out, err
}

// slotGroupOf returns reqs, whose keys share a slot, as a request across
// slots holds that slot's part.
func slotGroupOf(s *Store, reqs []rate.Request) *slotGroup {
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = s.Key(r.Key)
	}
	sl, ok := s.sameSlot(keys)
	if !ok {
		panic("redis: keys in several slots")
	}
	return &slotGroup{slot: sl, reqs: reqs, keys: keys, args: groupArgs(reqs, markCheck), out: make([]rate.Decision, len(reqs))}
}
