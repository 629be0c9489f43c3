package redis

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/rate"
)

// Partitions. A Redis Cluster's masters fail apart: when one dies, the
// keys of the others are still decided. sluice.Fallback keeps a circuit
// breaker per partition of its primary, so that a dead master sends its
// own keys to the failure mode and no others. It learns the partitions
// from the Store's Partition, FailedPartition, PartitionName and
// PartitionHolds.
//
// A partition is a master's address. The Store keeps a map from cluster
// slot to partition, read from CLUSTER SLOTS: once in New, and again in
// the background after a script call fails (see refreshSlots), since a
// failure is what a failover or a dead master shows first, and when a
// call finds it maxSlotsAge old (see slotsAged). The map is
// immutable and swapped whole, so that Partition, on the path of every
// decision, takes no lock. A partition's number is given when its
// address is first seen holding slots, and is never given again: a
// replica promoted in a dead master's place is a new partition, with a
// new breaker, and so is an address that holds slots again after a
// reading in which it held none. A number never names two servers, nor
// two spells of one server in charge of slots.
//
// The store's map and the client's routing are read apart, from
// whichever nodes answer, so for a moment after a change they may
// disagree; each refresh that changes the map is followed by another (see
// refreshLoop), so that they agree again once the cluster does.

// Bounds of a reading of CLUSTER SLOTS.
const (
	// slotsTimeout bounds one reading, all its tries: New waits for it,
	// and a reading that ends by it changes nothing. The client has just
	// read the same from the cluster when New runs, and on loopback or a
	// LAN the reply takes a millisecond or so.
	slotsTimeout = time.Second
	// slotsTries is how many nodes a reading asks before it gives up:
	// the client sends CLUSTER SLOTS to any node it knows, which after a
	// failure may be the dead one. Each try has a slotsTries-th of
	// slotsTimeout, so that a hung node leaves time for another.
	slotsTries = 3
)

// minRefreshInterval is the least time between the starts of two
// readings of CLUSTER SLOTS. While a master is down, every decision on
// its keys fails: one reading per interval, not one per failure, is all a
// cluster should be asked, and half a second keeps the map within about
// a second of a failover (which takes the cluster's node timeout, seconds,
// in any case).
const minRefreshInterval = 500 * time.Millisecond

// maxSlotsAge is how old the map may grow while calls go on: a resharding
// fails no call (the client follows the slots that move), but leaves
// them under their old master's partition, and a later failure of their
// new master would be blamed on the old one until the reading it brings
// about. A call that finds the map older reads the slots again in the
// background; an idle store reads nothing, and keeps no goroutine.
const maxSlotsAge = 30 * time.Second

// maxPartition is the highest partition number: the map holds one per
// slot in 16 bits. A store that sees more addresses over its life (a
// cluster whose masters move to new addresses 65535 times) maps the slots
// of the ones after to 0, unknown, and Fallback treats them as one store.
const maxPartition = 1<<16 - 1

// slotMap is what one reading of CLUSTER SLOTS said. It never changes
// once stored.
type slotMap struct {
	// part is the partition of each slot, 0 where the reading named no
	// master with an address.
	part [16384]uint16
	// holds lists the partitions that hold slots, 0 if some slot has
	// none, in increasing order.
	holds []uint16
}

// partitions is the Store's part in partitioning a Redis Cluster. Unused
// (all zero) on a single server.
type partitions struct {
	slots atomic.Pointer[slotMap] // nil until a reading succeeds

	mu    sync.Mutex
	ids   map[string]uint16 // partition by address; requires mu
	names []string          // names[p-1] is partition p's address; requires mu

	// The refresh, all under mu. A refresh goroutine runs while running;
	// again asks it to read once more after the reading in progress.
	running bool
	again   bool
	started time.Time // when the last reading started
	// due is when a call should have the slots read again (UnixNano), as
	// the map is then maxSlotsAge old: read without mu on every call.
	due atomic.Int64
	// tries counts the CLUSTER SLOTS sent (tests only).
	tries  atomic.Int64
	closed bool // Close has run: no refresh starts

	ctx    context.Context // ends at Close, and with it a reading in flight
	cancel context.CancelFunc
	wg     sync.WaitGroup // the refresh goroutine
}

// initPartitions reads the cluster's slots once, if the client is a
// cluster client, ignoring failure: then Partition returns 0 until a
// refresh succeeds.
func (s *Store) initPartitions() {
	if !s.cluster {
		return
	}
	p := &s.parts
	p.ids = map[string]uint16{}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.started = time.Now()
	p.due.Store(p.started.Add(maxSlotsAge).UnixNano())
	s.loadSlots(p.ctx)
}

// closePartitions stops the refresh, cancelling a reading in flight, and
// waits for its goroutine to end. The client ends a call in progress at
// its deadline rather than when its context is cancelled, so that may
// take as long as one try of a reading (slotsTimeout/slotsTries), to a
// hung node; the cancelled reading tries no other.
func (s *Store) closePartitions() {
	p := &s.parts
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
}

// Partition returns the partition of the cluster master that holds
// request key key, as the store last read the cluster: the number
// sluice.Fallback keeps a circuit breaker for, so that one dead master
// sends only its own keys to the failure mode. It returns 0 on a single
// server, before the store has read the cluster, and for a slot the
// cluster reported no master for. It takes no lock and allocates nothing
// (unless Options.Prefix holds a '{', or key is empty or begins with '}'):
// Fallback calls it for every key it decides.
func (s *Store) Partition(key string) int {
	if !s.cluster {
		return 0
	}
	m := s.parts.slots.Load()
	if m == nil {
		return 0
	}
	return int(m.part[keySlot(s.prefix, key)])
}

// FailedPartition returns the partition that err, returned by DecideAll
// or Decide, reports a failure of: the partition of the slot whose script
// call failed, as it was when the call was sent. sluice.Fallback trips
// that partition's breaker alone, not those of the other keys in the
// request. It returns 0 for an error that names no partition (a single
// server, an invalid request, a slot of no known master).
func (s *Store) FailedPartition(err error) int {
	var pe *partitionError
	if errors.As(err, &pe) {
		return pe.partition
	}
	return 0
}

// PartitionName returns partition p's name, the address (ip:port) of the
// master it numbers, so that logs of a breaker say which server failed.
// It returns "" for a number the store has not given.
func (s *Store) PartitionName(p int) string {
	s.parts.mu.Lock()
	defer s.parts.mu.Unlock()
	if p < 1 || p > len(s.parts.names) {
		return ""
	}
	return s.parts.names[p-1]
}

// PartitionHolds reports whether partition p held any slot when the store
// last read the cluster: a master replaced by its replica holds none, and
// sluice.Fallback then stops counting its breaker as the primary being
// down. Partition 0 holds keys while the store has not read the cluster,
// or if a slot had no known master; on a single server it holds them all.
func (s *Store) PartitionHolds(p int) bool {
	m := s.parts.slots.Load()
	if m == nil {
		return p == 0
	}
	for _, h := range m.holds {
		if int(h) == p {
			return true
		}
	}
	return false
}

// partitionOf returns slot sl's partition, 0 if unknown or on a single
// server.
func (s *Store) partitionOf(sl uint16) int {
	if !s.cluster {
		return 0
	}
	if m := s.parts.slots.Load(); m != nil {
		return int(m.part[sl&16383])
	}
	return 0
}

// partitionError is an error of a script call, with the partition its
// slot mapped to when the call was sent. Its text is the error's own, so
// that wrapping it changes no message.
type partitionError struct {
	err       error
	partition int
}

func (e *partitionError) Error() string { return e.err.Error() }
func (e *partitionError) Unwrap() error { return e.err }

// inPartition returns err carrying partition p, or err itself if p is 0.
func inPartition(p int, err error) error {
	if p == 0 || err == nil {
		return err
	}
	return &partitionError{err: err, partition: p}
}

// callFailed is told of every script call of a group that failed with
// err under its caller's ctx. Unless the caller went away (cancelled it)
// or the client is closed, the failure may be a master's death or a
// failover: the slots are read again, soon. A deadline counts, the
// caller's or a sluice.Fallback's Timeout: that is how a hung master
// shows when callers' deadlines come before CallTimeout (Envoy's do).
func (s *Store) callFailed(ctx context.Context, err error) {
	if !s.cluster || errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, rueidis.ErrClosing) {
		return
	}
	s.refreshSlots()
}

// slotsAged is told of every decision on a cluster, with the time it was
// asked (UnixNano): once the map is maxSlotsAge old, the first decision to
// see it has the slots read again.
func (s *Store) slotsAged(now int64) {
	p := &s.parts
	if due := p.due.Load(); now >= due && p.due.CompareAndSwap(due, now+int64(maxSlotsAge)) {
		s.refreshSlots()
	}
}

// refreshSlots has the cluster's slots read again in the background: at
// once, or minRefreshInterval after the last reading started. At most one
// reading is in flight, and a call while one is leads to one more after
// it, so the last failure is always followed by a reading that started
// after it. None starts after Close.
func (s *Store) refreshSlots() {
	p := &s.parts
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
	case p.running:
		p.again = true
	default:
		p.running = true
		p.wg.Add(1)
		go s.refreshLoop()
	}
}

// refreshLoop reads the slots, and again while refreshSlots asked for it
// meanwhile or a reading changed the map: a reading during a failover
// may come from a node that has not yet heard of it, and the one after a
// change shows whether the cluster has settled.
func (s *Store) refreshLoop() {
	p := &s.parts
	defer p.wg.Done()
	for {
		p.mu.Lock()
		wait := time.Until(p.started.Add(minRefreshInterval))
		p.mu.Unlock()
		if (rate.SystemClock{}).Sleep(p.ctx, wait) != nil {
			break
		}
		p.mu.Lock()
		p.started, p.again = time.Now(), false
		p.due.Store(p.started.Add(maxSlotsAge).UnixNano())
		p.mu.Unlock()
		changed := s.loadSlots(p.ctx)
		p.mu.Lock()
		if (!p.again && !changed) || p.ctx.Err() != nil {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.running = false
	p.mu.Unlock()
}

// loadSlots reads CLUSTER SLOTS, trying up to slotsTries nodes within
// slotsTimeout, and stores the map it gives. It reports whether the map
// changed. A reading that fails, or that names no master for any slot,
// leaves the map as it was.
func (s *Store) loadSlots(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, slotsTimeout)
	defer cancel()
	var ranges []slotRange
	for try := 0; try < slotsTries && ctx.Err() == nil; try++ {
		s.parts.tries.Add(1)
		tctx, tcancel := context.WithTimeout(ctx, slotsTimeout/slotsTries)
		reply, err := s.client.Do(tctx, s.client.B().ClusterSlots().Build()).ToArray()
		tcancel()
		if err == nil {
			ranges = parseSlots(reply)
			break
		}
	}
	if len(ranges) == 0 {
		return false
	}
	m := s.slotMapOf(ranges)
	old := s.parts.slots.Swap(m)
	return old == nil || old.part != m.part
}

// slotRange is a range of slots, lo to hi inclusive, and its master's
// address.
type slotRange struct {
	lo, hi int64
	addr   string
}

// parseSlots returns the ranges of a CLUSTER SLOTS reply whose master has
// an address. Each entry is [lo, hi, master, replicas...], each node
// [ip, port, id, ...] (Redis 6 and 7). A node may report its own ip as ""
// before it knows it (and "?" where it has no endpoint of the preferred
// type); the reply does not say which node answered, so such ranges are
// left out, their slots unknown.
func parseSlots(reply []rueidis.RedisMessage) []slotRange {
	var ranges []slotRange
	for _, e := range reply {
		v, err := e.ToArray()
		if err != nil || len(v) < 3 {
			continue
		}
		lo, err1 := v[0].AsInt64()
		hi, err2 := v[1].AsInt64()
		node, err3 := v[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || lo < 0 || lo > hi || hi > 16383 || len(node) < 2 {
			continue
		}
		ip, err1 := node[0].ToString()
		port, err2 := node[1].AsInt64()
		if err1 != nil || err2 != nil || ip == "" || ip == "?" || port <= 0 {
			continue
		}
		ranges = append(ranges, slotRange{lo, hi, net.JoinHostPort(ip, strconv.FormatInt(port, 10))})
	}
	return ranges
}

// slotMapOf returns the map of ranges, numbering addresses seen for the
// first time.
func (s *Store) slotMapOf(ranges []slotRange) *slotMap {
	p := &s.parts
	m := &slotMap{}
	p.mu.Lock()
	for _, r := range ranges {
		id, ok := p.ids[r.addr]
		if !ok && len(p.names) < maxPartition {
			p.names = append(p.names, r.addr)
			id = uint16(len(p.names))
			p.ids[r.addr] = id
		}
		for sl := r.lo; sl <= r.hi; sl++ {
			m.part[sl] = id
		}
	}
	for _, id := range m.part {
		if !slices.Contains(m.holds, id) {
			m.holds = append(m.holds, id)
		}
	}
	slices.Sort(m.holds)
	// A master that holds no slot now is forgotten: should its address
	// hold slots again (a dead master restarted, rejoined as a replica and
	// failed back to), it is a new partition, with a breaker of its own
	// rather than the one its outage left down.
	if old := p.slots.Load(); old != nil {
		for _, id := range old.holds {
			if id != 0 && !slices.Contains(m.holds, id) {
				delete(p.ids, p.names[id-1])
			}
		}
	}
	p.mu.Unlock()
	return m
}

// keySlot returns the slot of redisKey(prefix, k), without making the key
// when prefix holds no '{'. Then the key's first '{' is k's own, or the
// one redisKey adds: if k has a tag, the key's tag is k's; otherwise the
// key is prefix{k} and its tag runs from the added '{' to the first '}'
// after it, k's first or the added one. Either tag holds no '}', so slot
// hashes it whole.
func keySlot(prefix, k string) uint16 {
	if strings.IndexByte(prefix, '{') < 0 {
		if tag := hashTag(k); len(tag) < len(k) {
			return slot(tag)
		}
		j := strings.IndexByte(k, '}')
		if j < 0 {
			j = len(k)
		}
		if j > 0 {
			return slot(k[:j])
		}
		// An empty tag, "{}", hashes the whole key.
	}
	return slot(redisKey(prefix, k))
}
