package memory

import (
	"strings"
	"sync"

	"github.com/sluicehq/sluice/rate"
)

// entry is one key's state. Entries live in a dense per-shard slice so that
// the sweeper can walk them with a cursor and eviction can sample them at
// random; the shard's slot table maps a key to its position.
//
// 56 bytes: the common states (every algorithm but sliding_log) fit in
// a, b and c; a sliding_log's timestamps live in the shard's side table.
type entry struct {
	key     string
	a, b, c int64
	// expires is when the state is back to fresh, in µs: from then on the
	// entry says nothing a fresh state would not, and may be reclaimed.
	expires int64
	// hash is the low 32 bits of the key's hash, kept so that the slot
	// table can find and move an entry's slot without hashing again.
	hash uint32
	// log is 1 + the index of the key's sliding_log timestamps in the
	// shard's logs, or 0 when it has none.
	log uint32
}

// shard holds a part of the keys under one mutex.
//
// The slot table is open addressing with linear probing. A slot is 0 when
// empty, otherwise hash<<32 | (1 + index into entries). Deletion shifts the
// following slots back rather than leaving tombstones, so a lookup never
// walks over dead slots and the table needs no periodic cleanup.
type shard struct {
	mu sync.Mutex
	// The fields below are guarded by mu.
	slots    []uint64
	entries  []entry
	logs     [][]int64
	freeLogs []uint32
	// cursor is where the sweeper looks next.
	cursor int
	// max is the most entries the shard holds; negative for no bound.
	max int
	// decisions counts decisions, to sweep every sweepEvery-th.
	decisions uint32
	// rng is the state of the generator that picks eviction samples.
	rng       uint64
	evictions uint64
	expired   uint64
	// Keep neighbouring shards' mutexes off this cache line.
	_ [64]byte
}

const (
	// minSlots is the smallest slot table a shard allocates.
	minSlots = 8
	// minEntries is the capacity below which the entries slice is not
	// shrunk.
	minEntries = 64
	// evictSamples is how many entries eviction compares.
	evictSamples = 5
)

// find returns the index of key's entry, or -1, and the slot where the
// search ended: the key's slot, or the empty slot where it would go. The
// table must not be empty.
func (s *shard) find(key string, h uint32) (slot, idx int) {
	mask := len(s.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		v := s.slots[i]
		if v == 0 {
			return i, -1
		}
		if uint32(v>>32) == h {
			j := int(uint32(v)) - 1
			if s.entries[j].key == key {
				return i, j
			}
		}
	}
}

// lookup returns the index of key's entry, or -1.
func (s *shard) lookup(key string, h uint32) int {
	if len(s.slots) == 0 {
		return -1
	}
	_, idx := s.find(key, h)
	return idx
}

// slotOf returns the slot that points at entries[idx].
func (s *shard) slotOf(idx int) int {
	mask := len(s.slots) - 1
	want := uint64(uint32(idx + 1))
	for i := int(s.entries[idx].hash) & mask; ; i = (i + 1) & mask {
		if s.slots[i]&0xffffffff == want {
			return i
		}
	}
}

// state returns the state stored in e.
func (s *shard) state(e *entry) rate.State {
	st := rate.State{A: e.a, B: e.b, C: e.c}
	if e.log != 0 {
		st.Log = s.logs[e.log-1]
	}
	return st
}

// load reads e's state into st, field by field: building a State and
// copying it costs a store-forwarding stall on the hot path.
func (s *shard) load(st *rate.State, e *entry) {
	st.A, st.B, st.C = e.a, e.b, e.c
	if e.log != 0 {
		st.Log = s.logs[e.log-1]
	}
}

// set stores st in e, which is about to expire at expires.
func (s *shard) set(e *entry, st *rate.State, expires int64) {
	e.a, e.b, e.c, e.expires = st.A, st.B, st.C, expires
	switch {
	case len(st.Log) > 0 && e.log != 0:
		s.logs[e.log-1] = st.Log
	case len(st.Log) > 0:
		if n := len(s.freeLogs); n > 0 {
			e.log = s.freeLogs[n-1]
			s.freeLogs = s.freeLogs[:n-1]
			s.logs[e.log-1] = st.Log
		} else {
			s.logs = append(s.logs, st.Log)
			e.log = uint32(len(s.logs))
		}
	case e.log != 0:
		s.freeLog(e)
	}
}

// freeLog releases e's timestamps.
func (s *shard) freeLog(e *entry) {
	s.logs[e.log-1] = nil
	s.freeLogs = append(s.freeLogs, e.log)
	e.log = 0
	if len(s.freeLogs) == len(s.logs) {
		// No sliding_log key is left in this shard: give the side table back.
		s.logs, s.freeLogs = nil, nil
	}
}

// fresh reports whether st is the zero State, which a step returns when the
// key is back to fresh.
func fresh(st rate.State) bool {
	return st.A == 0 && st.B == 0 && st.C == 0 && len(st.Log) == 0
}

// insert adds key with state st at the empty slot that find returned,
// evicting an entry first if the shard is full. It returns the new entry's
// index. protect lists keys that eviction must not pick (those of the
// DecideAll call in progress); when it leaves nothing to evict, the shard
// goes over its bound rather than forget a state it has just committed.
func (s *shard) insert(slot int, key string, h uint32, st rate.State, expires, now int64, protect []rate.Request) int {
	if s.max >= 0 && len(s.entries) >= s.max && s.evict(now, protect) {
		// The table changed under the slot find returned.
		slot, _ = s.find(key, h)
	}
	if 4*(len(s.entries)+1) > 3*len(s.slots) {
		s.resize(max(minSlots, 2*len(s.slots)))
		slot, _ = s.find(key, h)
	}
	if len(s.entries) == cap(s.entries) {
		// Grow by an eighth rather than append's quarter: idle keys are
		// the bulk of the memory, and copying 56-byte entries is cheap.
		grown := make([]entry, len(s.entries), max(minEntries, cap(s.entries)+cap(s.entries)/8))
		copy(grown, s.entries)
		s.entries = grown
	}
	// The caller's string may be a slice of a larger buffer, or bytes it
	// will reuse: keep a copy of its own.
	s.entries = append(s.entries, entry{key: strings.Clone(key), hash: h})
	idx := len(s.entries) - 1
	s.slots[slot] = uint64(h)<<32 | uint64(uint32(idx+1))
	s.set(&s.entries[idx], &st, expires)
	return idx
}

// remove deletes entries[idx]: it moves the last entry into its place.
func (s *shard) remove(idx int) {
	s.clearSlot(s.slotOf(idx))
	if s.entries[idx].log != 0 {
		s.freeLog(&s.entries[idx])
	}
	last := len(s.entries) - 1
	if idx != last {
		s.slots[s.slotOf(last)] = uint64(s.entries[last].hash)<<32 | uint64(uint32(idx+1))
		s.entries[idx] = s.entries[last]
	}
	s.entries[last] = entry{} // drop the key string
	s.entries = s.entries[:last]
	s.shrink()
}

// clearSlot empties slot i and shifts back the slots that follow it in its
// probe run, so that every key stays reachable from its home slot.
func (s *shard) clearSlot(i int) {
	mask := len(s.slots) - 1
	for j := (i + 1) & mask; s.slots[j] != 0; j = (j + 1) & mask {
		home := int(uint32(s.slots[j]>>32)) & mask
		// The slot at j may move to i unless its home lies cyclically
		// in (i, j]: then i is before its home and a lookup would miss it.
		var stays bool
		if i <= j {
			stays = i < home && home <= j
		} else {
			stays = i < home || home <= j
		}
		if !stays {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = 0
}

// resize rebuilds the slot table with n slots, a power of two. It reads
// only the slots, which carry their hashes.
func (s *shard) resize(n int) {
	old := s.slots
	s.slots = make([]uint64, n)
	mask := n - 1
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := int(uint32(v>>32)) & mask
		for s.slots[i] != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = v
	}
}

// shrink gives memory back once the shard holds far fewer keys than it has
// room for, so that a burst of keys does not pin its peak forever.
func (s *shard) shrink() {
	n := len(s.entries)
	if c := cap(s.entries); c > minEntries && n < c/4 {
		s.entries = append(make([]entry, 0, c/2), s.entries...)
	}
	if len(s.slots) > minSlots && n < len(s.slots)/8 {
		s.resize(len(s.slots) / 2)
	}
	if n == 0 {
		s.cursor = 0
	}
}

// sweepDue counts a decision and returns how many entries it should sweep.
func (s *shard) sweepDue() int {
	s.decisions++
	if s.decisions%sweepEvery == 0 {
		return sweepBatch
	}
	return 0
}

// sweep looks at up to n entries from the cursor and reclaims those whose
// state is fresh again at now. Each operation calls it with a small n, so
// the work is spread out: there is never a pass over the whole shard.
func (s *shard) sweep(now int64, n int) {
	for ; n > 0 && len(s.entries) > 0; n-- {
		if s.cursor >= len(s.entries) {
			s.cursor = 0
		}
		if s.entries[s.cursor].expires <= now {
			// The last entry moves to the cursor: look at it next.
			s.remove(s.cursor)
			s.expired++
		} else {
			s.cursor++
		}
	}
}

// evict makes room for one key in a full shard. Among a few entries picked
// at random it removes the one closest to fresh, whose loss forgets the
// least. It reports whether it removed anything.
func (s *shard) evict(now int64, protect []rate.Request) bool {
	best := -1
	for range evictSamples {
		i := int(s.next() % uint64(len(s.entries)))
		if protected(s.entries[i].key, protect) {
			continue
		}
		if best < 0 || s.entries[i].expires < s.entries[best].expires {
			best = i
		}
	}
	if best < 0 {
		// Only possible with a shard smaller than one DecideAll call.
		for i := range s.entries {
			if !protected(s.entries[i].key, protect) {
				best = i
				break
			}
		}
		if best < 0 {
			return false
		}
	}
	if s.entries[best].expires <= now {
		s.expired++
	} else {
		s.evictions++
	}
	s.remove(best)
	return true
}

func protected(key string, reqs []rate.Request) bool {
	for i := range reqs {
		if reqs[i].Key == key {
			return true
		}
	}
	return false
}

// next returns a pseudo-random number (splitmix64). Eviction samples need
// to be spread, not unpredictable.
func (s *shard) next() uint64 {
	s.rng += 0x9e3779b97f4a7c15
	z := s.rng
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
