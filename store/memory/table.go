package memory

import (
	"encoding/binary"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/rate"
)

// entry is one key's state, and one slot of its shard's table: a cache
// line (tables are 64-byte aligned: the allocator puts a pointer-free
// slice of 64-byte elements on a 64-byte boundary). A lookup in a store
// far larger than the CPU's caches costs one miss, the line of the key's
// home slot, and when the key sits past its home the next lines, which
// are adjacent. Nothing else is touched for a key of up to inlineKey
// bytes: its bytes, its hash and its state are all in the line. A longer
// key's bytes live in the shard's arena, one more miss to compare them.
//
// An entry holds no pointer, so the garbage collector never scans a table,
// however many keys it holds; the shard keeps what needs pointers (the
// timestamps of a sliding_log) in side tables that entries index.
type entry struct {
	a, b, c int64
	// hash is the low 32 bits of the key's hash, with the lowest bit set
	// so that 0 marks an empty slot. Its high bits pick the key's home
	// slot, and a probe compares it before looking at the key.
	hash uint32
	// expires is when the state is back to fresh, in ticks, rounded up:
	// from then on the entry says nothing a fresh state would not, and may
	// be reclaimed.
	expires uint32
	// log is 1 + the index of the key's sliding_log timestamps in the
	// shard's logs, or 0 when it has none.
	log uint32
	// klen is the key's length when it is at most inlineKey bytes, and key
	// holds its bytes. For a longer key klen is longKey, and key holds the
	// offset (8 bytes) and length (4 bytes) of its bytes in the arena.
	klen uint8
	// used is how much of its limit the key had used at its last
	// decision (see usedOf): of the entries eviction compares, it forgets
	// the one that had used the least.
	used uint8
	key  [inlineKey]byte
}

const (
	// inlineKey is the longest key an entry holds in its own line.
	inlineKey = 26
	// longKey is the klen of a key kept in the arena.
	longKey = math.MaxUint8
)

// Expiry times are kept in ticks of 2^tickShift µs (about a second) since
// the Unix epoch, so that they fit in 32 bits (until September 2112) and
// convert with a shift. Rounding them up only delays reclaiming a key that
// is already fresh; it never forgets a state that is not. An expiry past
// the last tick is kept as the last tick, which never comes (see
// tickOf): such a key is deleted when a decision leaves it fresh, or
// evicted, never reclaimed.
const tickShift = 20

// ticksUp returns the first tick at or after us, within what 32 bits hold.
func ticksUp(us int64) uint32 {
	t := (us + 1<<tickShift - 1) >> tickShift
	return uint32(min(max(t, 0), math.MaxUint32))
}

// tickOf returns the tick that now (µs) is in, as expiries are compared
// with it: an entry whose expires is at most tickOf(now) is fresh at now.
// It stays below the last tick, where ticksUp puts every expiry it cannot
// hold.
func tickOf(now int64) int64 {
	return min(now>>tickShift, math.MaxUint32-1)
}

// shard holds a part of the keys under one mutex.
//
// Its table is open addressing with linear probing, in Robin Hood order:
// entries sit in the order of their home slots, so a probe for a missing
// key stops as soon as it meets an entry closer to its own home than the
// probe has come, and long runs are rare even at three quarters full.
// Deletion shifts the following entries back rather than leaving
// tombstones. The table's length is not a power of two: the home slot of
// hash h is h·len/2^32, so the table can grow by a quarter at a time and
// stay between 60% and 75% full while keys come, which is what keeps an
// idle key at about 100 bytes with its 64-byte line. When keys go it
// shrinks, to two thirds full, only once it is under a quarter full, so
// that a shard near either threshold does not resize back and forth.
type shard struct {
	// lines tells where table is, apart from the fields mu guards: those
	// lines move between cores with every decision, this one only when
	// the table is resized.
	lines lines
	_     [128 - unsafe.Sizeof(lines{})]byte
	shardState
	// Round the shard up to whole cache lines, with at least one line of
	// padding at its end, so that no two shards' fields share a line
	// wherever the array starts.
	_ [128 - unsafe.Sizeof(shardState{})%64]byte
}

// lines is where a shard's table is, for decide to prefetch a key's line
// while it reads the clock, before it takes the lock. They are read
// without the lock, and may disagree for a moment while the table is
// resized: that costs a prefetch of the wrong line, nothing more.
type lines struct {
	first atomic.Pointer[entry]
	n     atomic.Uint64
}

// line returns the address of the home slot of hash h.
func (l *lines) line(h uint32) uintptr {
	return uintptr(unsafe.Pointer(l.first.Load())) + uintptr(uint64(h)*l.n.Load()>>32)*unsafe.Sizeof(entry{})
}

// shardState is what a shard holds.
type shardState struct {
	mu sync.Mutex
	// The fields below are guarded by mu.
	table []entry
	// n is the number of entries in table.
	n int
	// decisions counts decisions, to sweep every sweepEvery-th.
	decisions uint32
	// cursor is the slot the sweeper looks at next.
	cursor int
	// soonest is a lower bound on every entry's expires: until that tick
	// nothing can be reclaimed, and the sweeper has nothing to look at.
	// Each round of the cursor over the table measures it again, in
	// roundSoonest, as the least expiry it passes, or that is set, or
	// that moves back past the cursor, while roundLeft slots are left.
	soonest, roundSoonest uint32
	roundLeft             int
	// arena holds the bytes of keys longer than inlineKey, of which
	// garbage bytes belong to keys that are gone.
	arena   []byte
	garbage int
	// logs holds the sliding_log timestamps that entries index.
	logs     [][]int64
	freeLogs []uint32
	// max is the most entries the shard holds; negative for no bound.
	max int
	// rng is the state of the generator that picks eviction samples.
	rng       uint64
	evictions uint64
	expired   uint64
}

const (
	// minSlots is the smallest table a shard allocates.
	minSlots = 8
	// evictSamples is how many entries eviction compares.
	evictSamples = 5
)

// home returns the slot where a key with hash h belongs.
func (s *shard) home(h uint32) int {
	return int(uint64(h) * uint64(len(s.table)) >> 32)
}

// dist returns how far slot i is from the home of hash h.
func (s *shard) dist(i int, h uint32) int {
	d := i - s.home(h)
	if d < 0 {
		d += len(s.table)
	}
	return d
}

// find returns the slot of key, whose hash is h, or -1.
func (s *shard) find(key string, h uint32) int {
	if len(s.table) == 0 {
		return -1
	}
	// Many keys are in their home slot: look there before the loop.
	i := s.home(h)
	if e := &s.table[i]; e.hash == h && s.is(e, key) {
		return i
	}
	return s.probe(key, h, i)
}

// probe is find's loop, from the home slot i.
func (s *shard) probe(key string, h uint32, i int) int {
	t := s.table
	for d := 0; ; d++ {
		e := &t[i]
		if e.hash == h && s.is(e, key) {
			return i
		}
		if e.hash == 0 || s.dist(i, e.hash) < d {
			// Robin Hood order: key would have been placed before this.
			return -1
		}
		if i++; i == len(t) {
			i = 0
		}
	}
}

// is reports whether e holds key.
func (s *shard) is(e *entry, key string) bool {
	n := len(key)
	if n < 8 || n > 16 || int(e.klen) != n {
		return s.isOther(e, key)
	}
	// Two loads from each side rather than a call.
	return le64(key) == binary.LittleEndian.Uint64(e.key[:8]) &&
		le64(key[n-8:]) == binary.LittleEndian.Uint64(e.key[n-8:n])
}

// isOther is is for keys shorter than 8 or longer than 16 bytes.
func (s *shard) isOther(e *entry, key string) bool {
	if len(key) > inlineKey {
		return e.klen == longKey && string(s.long(e)) == key
	}
	return int(e.klen) == len(key) && string(e.key[:len(key)]) == key
}

// long returns the bytes of e's key, which is in the arena.
func (s *shard) long(e *entry) []byte {
	off := binary.LittleEndian.Uint64(e.key[0:8])
	n := binary.LittleEndian.Uint32(e.key[8:12])
	return s.arena[off : off+uint64(n)]
}

// setKey stores key in e, in the line or, if it is too long, in the arena.
// The caller's string may be a slice of a larger buffer, or bytes it will
// reuse: the shard keeps a copy of its own.
func (s *shard) setKey(e *entry, key string) {
	if len(key) <= inlineKey {
		e.klen = uint8(len(key))
		copy(e.key[:], key)
		return
	}
	e.klen = longKey
	binary.LittleEndian.PutUint64(e.key[0:8], uint64(len(s.arena)))
	binary.LittleEndian.PutUint32(e.key[8:12], uint32(len(key)))
	s.arena = append(s.arena, key...)
}

// freeKey accounts for the arena bytes of e's key, which is going away.
func (s *shard) freeKey(e *entry) {
	if e.klen != longKey {
		return
	}
	s.garbage += int(binary.LittleEndian.Uint32(e.key[8:12]))
}

// compact gives back the arena's garbage once it is more than half of the
// arena, and at least a byte per slot of the table, which compacting
// walks: the work is paid for by what was freed since the last time. An
// arena that no key uses any more is dropped at once.
func (s *shard) compact() {
	live := len(s.arena) - s.garbage
	if s.garbage > 0 && live == 0 {
		s.arena, s.garbage = nil, 0
		return
	}
	if s.garbage == 0 || 2*s.garbage < len(s.arena) || s.garbage < len(s.table) {
		return
	}
	arena := make([]byte, 0, live+live/4)
	for i := range s.table {
		e := &s.table[i]
		if e.hash == 0 || e.klen != longKey {
			continue
		}
		key := s.long(e)
		binary.LittleEndian.PutUint64(e.key[0:8], uint64(len(arena)))
		arena = append(arena, key...)
	}
	s.arena, s.garbage = arena, 0
}

// state returns the state stored in e.
func (s *shard) state(e *entry) rate.State {
	st := rate.State{A: e.a, B: e.b, C: e.c}
	if e.log != 0 {
		st.Log = s.logs[e.log-1]
	}
	return st
}

// expire records that e expires at tick t.
func (s *shard) expire(e *entry, t uint32) {
	e.expires = t
	s.soonest = min(s.soonest, t)
	s.roundSoonest = min(s.roundSoonest, t)
}

// set stores st in e, which is about to expire at expires (µs), having
// used that much of its limit (usedOf).
func (s *shard) set(e *entry, st *rate.State, expires int64, used uint8) {
	e.a, e.b, e.c, e.used = st.A, st.B, st.C, used
	s.expire(e, ticksUp(expires))
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

// freeLog releases e's timestamps. Their slot in logs is reused by the
// next key that needs one; once there are at least as many free slots as
// the table has slots, which compacting walks, the side tables shrink to
// the keys that still use them, so that a burst of sliding_log keys does
// not pin its peak.
func (s *shard) freeLog(e *entry) {
	s.logs[e.log-1] = nil
	s.freeLogs = append(s.freeLogs, e.log)
	e.log = 0
	switch free := len(s.freeLogs); {
	case free == len(s.logs):
		// No sliding_log key is left in this shard: give the side table back.
		s.logs, s.freeLogs = nil, nil
	case free >= len(s.table):
		s.compactLogs()
	}
}

// compactLogs renumbers the timestamps of the entries that have some into
// a side table of their size, with no free slot.
func (s *shard) compactLogs() {
	live := len(s.logs) - len(s.freeLogs)
	logs := make([][]int64, 0, live+live/4)
	for i := range s.table {
		if e := &s.table[i]; e.log != 0 {
			logs = append(logs, s.logs[e.log-1])
			e.log = uint32(len(logs))
		}
	}
	s.logs, s.freeLogs = logs, nil
}

// fresh reports whether st is the zero State, which a step returns when the
// key is back to fresh.
func fresh(st *rate.State) bool {
	return st.A == 0 && st.B == 0 && st.C == 0 && len(st.Log) == 0
}

// insert adds key, which the shard does not hold, with state st, evicting
// an entry first if the shard is full. protect lists keys that eviction
// must not pick (those of the DecideAll call in progress); when it leaves
// nothing to evict, the shard goes over its bound rather than forget a
// state it has just committed, and the next inserts bring it back.
func (s *shard) insert(key string, h uint32, st *rate.State, expires int64, used uint8, now int64, protect []rate.Request) {
	for s.max >= 0 && s.n >= s.max {
		n := s.n
		if s.evict(now, protect); s.n == n {
			break // every entry is protected
		}
	}
	if 4*(s.n+1) > 3*len(s.table) {
		// Grow by a quarter: idle keys are the bulk of the memory.
		s.resize(max(minSlots, len(s.table)+len(s.table)/4, (4*(s.n+1)+2)/3))
	}
	e := entry{hash: h}
	s.setKey(&e, key)
	s.set(&e, st, expires, used)
	s.place(e)
	s.n++
}

// place puts e into the table, which has an empty slot, in Robin Hood
// order: going from e's home, e takes the place of the first entry that is
// closer to its own home than e would be, and that entry goes on.
func (s *shard) place(e entry) {
	t := s.table
	i := s.home(e.hash)
	for d := 0; ; d++ {
		r := &t[i]
		if r.hash == 0 {
			*r = e
			return
		}
		if rd := s.dist(i, r.hash); rd < d {
			e, *r = *r, e
			d = rd
			// The displaced entry may wrap round to behind the cursor.
			s.roundSoonest = min(s.roundSoonest, e.expires)
		}
		if i++; i == len(t) {
			i = 0
		}
	}
}

// remove deletes the entry in slot i: the entries after it that are not at
// home move back one slot.
func (s *shard) remove(i int) {
	t := s.table
	if t[i].log != 0 {
		s.freeLog(&t[i])
	}
	s.freeKey(&t[i])
	for {
		j := i + 1
		if j == len(t) {
			j = 0
		}
		if t[j].hash == 0 || s.dist(j, t[j].hash) == 0 {
			break
		}
		t[i] = t[j]
		// The entry may have moved back past the sweeper's cursor.
		s.roundSoonest = min(s.roundSoonest, t[i].expires)
		i = j
	}
	t[i] = entry{}
	s.n--
	s.compact()
	s.shrink()
}

// resize rebuilds the table with n slots. It reads only the entries, which
// carry their hashes.
func (s *shard) resize(n int) {
	old := s.table
	s.table = make([]entry, n)
	s.lines.first.Store(&s.table[0])
	s.lines.n.Store(uint64(n))
	// Every entry passes here: the sweeper's bound can start afresh, and
	// so can its round, wherever the cursor lands.
	s.soonest, s.roundSoonest, s.roundLeft = math.MaxUint32, math.MaxUint32, n
	for i := range old {
		if old[i].hash != 0 {
			s.place(old[i])
			s.soonest = min(s.soonest, old[i].expires)
		}
	}
	if len(old) > 0 {
		// Keep the sweeper at about the same place in the key space.
		s.cursor = int(uint64(s.cursor) * uint64(n) / uint64(len(old)))
	}
}

// shrink gives memory back once the shard holds far fewer keys than it has
// room for, so that a burst of keys does not pin its peak forever.
func (s *shard) shrink() {
	if len(s.table) > minSlots && s.n < len(s.table)/4 {
		// Two thirds full: as far from growing again as from shrinking.
		s.resize(max(minSlots, (3*s.n+1)/2))
	}
	if s.n == 0 {
		s.cursor = 0
	}
}

// sweepDue counts a decision and returns how many slots it should sweep.
func (s *shard) sweepDue() int {
	s.decisions++
	if s.decisions%sweepEvery == 0 {
		return sweepBatch
	}
	return 0
}

// sweep looks at up to n slots from the cursor and reclaims the entries
// whose state is fresh again at now (µs). Each operation calls it with a
// small n, so the work is spread out: there is never a pass over the whole
// shard. It returns at once while no entry can have expired.
func (s *shard) sweep(now int64, n int) {
	tick := tickOf(now)
	for ; n > 0 && s.n > 0 && int64(s.soonest) <= tick; n-- {
		if s.cursor >= len(s.table) {
			s.cursor = 0
		}
		e := &s.table[s.cursor]
		if e.hash != 0 && int64(e.expires) <= tick {
			// The next entry may move back into the cursor's slot: look
			// at it next.
			s.remove(s.cursor)
			s.expired++
			continue
		}
		if e.hash != 0 {
			s.roundSoonest = min(s.roundSoonest, e.expires)
		}
		s.cursor++
		if s.roundLeft--; s.roundLeft <= 0 {
			// A round is done: every entry was passed, or set, or moved
			// back behind the cursor since it started.
			s.soonest, s.roundSoonest, s.roundLeft = s.roundSoonest, math.MaxUint32, len(s.table)
		}
	}
}

// evict makes room for one key in a full shard. Among a few entries picked
// at random it removes the one whose loss forgets the least: one already
// fresh, else the one that had used the least of its limit (so that the
// key's next requests pass again for little), else the one that will be
// fresh the soonest. Keys a client makes up by the thousand, each
// decided once under a large limit, thus go before a key that has spent
// its limit, though their states last longer. It removes nothing when
// every entry is protected.
func (s *shard) evict(now int64, protect []rate.Request) {
	if s.n == 0 {
		return
	}
	tick := tickOf(now)
	// rank orders the entries to evict: lowest first.
	rank := func(e *entry) (bool, uint8, uint32) {
		if int64(e.expires) <= tick {
			return false, 0, 0
		}
		return true, e.used, e.expires
	}
	best := -1
	// The samples are distinct entries: a slot after a long run of empty
	// ones is where many random positions land, and it must not be
	// compared only with itself.
	var seen [evictSamples]int
	for k := range min(evictSamples, s.n) {
		i := s.occupied(int(s.next() % uint64(len(s.table))))
		for slices.Contains(seen[:k], i) {
			i = s.occupied((i + 1) % len(s.table))
		}
		seen[k] = i
		if s.protected(&s.table[i], protect) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		live, used, exp := rank(&s.table[i])
		bLive, bUsed, bExp := rank(&s.table[best])
		if !live && bLive || live == bLive && (used < bUsed || used == bUsed && exp < bExp) {
			best = i
		}
	}
	if best < 0 {
		// Every sample was a key the DecideAll in progress decides (in a
		// shard smaller than the call, always; in a larger one, by the
		// luck of the draw): the first other key goes.
		for i := range s.table {
			if s.table[i].hash != 0 && !s.protected(&s.table[i], protect) {
				best = i
				break
			}
		}
		if best < 0 {
			return
		}
	}
	if int64(s.table[best].expires) <= tickOf(now) {
		s.expired++
	} else {
		s.evictions++
	}
	s.remove(best)
}

// occupied returns the first slot from i on that holds an entry; the shard
// must hold one.
func (s *shard) occupied(i int) int {
	for s.table[i].hash == 0 {
		if i++; i == len(s.table) {
			i = 0
		}
	}
	return i
}

// protected reports whether e holds the key of one of reqs.
func (s *shard) protected(e *entry, reqs []rate.Request) bool {
	for i := range reqs {
		if s.is(e, reqs[i].Key) {
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
