package memory

import (
	"context"
	"fmt"
	"math/bits"
	"runtime"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/rate"
)

// DefaultMaxKeys is the number of keys a Store holds when Options.MaxKeys
// is zero.
const DefaultMaxKeys = 1 << 20

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Clock tells the time of every decision. If nil, the store uses
	// rate.SystemClock{}. Tests pass a fake clock (ratetest.NewClock) to
	// pin it.
	//
	// With the system clock, a decision reads the monotonic clock and adds
	// the wall-clock offset read at most a second before, which costs half
	// of time.Now and is as precise: a step of the wall clock reaches
	// decisions within a second.
	Clock rate.Clock
	// MaxKeys bounds how many keys the store holds: keys come from clients,
	// so an unbounded store is a memory leak an attacker can drive. When
	// full, inserting a key evicts another (see Store). It bounds keys,
	// not bytes: a sliding_log key also holds its timestamps (see the
	// package doc). Zero means DefaultMaxKeys; a negative value means no
	// bound.
	MaxKeys int
	// Shards is how many independently locked parts the keys are spread
	// over; it is rounded up to a power of two, and halved while it is
	// more than MaxKeys. Zero means the larger of 64 and four times
	// GOMAXPROCS, fewer if MaxKeys is small (each shard holds at least 64
	// keys when MaxKeys allows it).
	Shards int
}

// Store is a sluice.Store that keeps every key's state in this process.
// It is safe for concurrent use; create it with [New].
//
// The keys are spread over shards by a hash seeded per store, each shard
// under its own mutex. A key's state, its hash and (up to 26 bytes) the
// key itself share one 64-byte cache line, so that deciding for one of
// millions of keys costs about one miss. Deciding a request for a key the
// store already holds does not allocate. Callers that hold their limit
// and decide on every request can call [Store.DecideKey] rather than
// build a Request each time, or [Store.DecideKeyInto] to have the
// decision written into a variable of their own (as sluice.Limiter does).
//
// A key costs memory only while its state differs from fresh. A decision
// that leaves a key fresh (a token bucket back to full, an empty window)
// deletes it, and a key whose state has become fresh with time is found
// and reclaimed a little at a time: decisions move a per-shard cursor
// over the keys, one slot per decision on average and a few more for each
// new key, and not at all while no key of the shard can have expired.
// There is no background goroutine and no pass over all keys at once; a
// shard that sees no decisions keeps its keys until it does, or until
// [Store.Sweep].
//
// When MaxKeys keys are held, a new key evicts an old one, of a few picked
// at random. Evicting a key forgets its state, so its next requests are
// decided as if the key were fresh: the store evicts the one whose loss
// lets the least through again, one already fresh, else the one that had
// used the least of its limit at its last decision, else the one that
// will be fresh the soonest. So keys that clients make up by the
// thousand, each decided once or twice under a large limit, are evicted
// before a key that has spent its limit, however much longer their states
// last; to push out a spent key, a flood must spend as large a share of
// its own limit on each key it makes up. Each
// shard holds at most MaxKeys divided by the number of shards, so the
// store may start evicting a little before it holds MaxKeys keys in all.
// A DecideAll never evicts a key it decides: one with more new keys in a
// shard than the shard has room for takes it past its share (Stats.Keys
// may then exceed Stats.MaxKeys), and the next new keys bring it back.
// [Store.Stats] counts evictions: if they are frequent, raise MaxKeys.
type Store struct {
	clock rate.Clock
	// system is set when clock is rate.SystemClock: decisions then read
	// it as one monotonic read (see systemClock).
	system *systemClock
	hasher hasher
	// A key's shard is hash>>32 & mask: the high half of its hash picks
	// the shard, the low half its slot, so the two stay independent.
	mask   uint64
	shards []shard
	// maxKeys is the most keys the shards hold in all, or -1.
	maxKeys int
}

// Stats are counters for metrics.
type Stats struct {
	// Keys is the number of keys held.
	Keys int
	// MaxKeys is the most keys the store holds before a new one evicts
	// an old one: Options.MaxKeys (DefaultMaxKeys for 0) rounded down to
	// a multiple of the shards, each holding its share; -1 for no bound.
	MaxKeys int
	// Evictions counts keys removed to make room while their state was
	// not yet fresh: each one forgot a state.
	Evictions uint64
	// Expired counts keys reclaimed because their state had become fresh.
	Expired uint64
}

// Work the sweeper does: every sweepEvery-th decision on a shard looks at
// sweepBatch slots (one a decision on average, in one sequential run of
// cache lines rather than a miss each time), and a decision that adds a
// key looks at sweepInsert more, so reclaiming outpaces a flood of new
// keys.
const (
	sweepEvery  = 16
	sweepBatch  = 16
	sweepInsert = 4
)

// New returns a store configured by opts.
func New(opts Options) *Store {
	s := &Store{clock: opts.Clock, hasher: newHasher()}
	if s.clock == nil {
		s.clock = rate.SystemClock{}
	}
	switch s.clock.(type) {
	case rate.SystemClock, *rate.SystemClock:
		s.system = newSystemClock()
	}
	maxKeys := opts.MaxKeys
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	n := opts.Shards
	if n <= 0 {
		// A power of two before halving, so that rounding up below
		// cannot take a shard under 64 keys.
		n = 1 << bits.Len(uint(max(64, 4*runtime.GOMAXPROCS(0))-1))
		for maxKeys > 0 && n > 1 && maxKeys/n < 64 {
			n /= 2
		}
	}
	n = 1 << bits.Len(uint(n-1)) // a power of two
	for maxKeys > 0 && n > maxKeys {
		n /= 2 // every shard holds a key, and all of them MaxKeys at most
	}
	s.shards = make([]shard, n)
	s.mask = uint64(n - 1)
	perShard := -1
	if maxKeys > 0 {
		perShard = max(1, maxKeys/n)
	}
	s.maxKeys = -1
	if perShard > 0 {
		s.maxKeys = perShard * n
	}
	for i := range s.shards {
		s.shards[i].max = perShard
		s.shards[i].rng = s.hasher.k0 ^ uint64(i)
	}
	return s
}

// now returns the time of a decision in µs.
func (s *Store) now() int64 {
	if s.system != nil {
		return s.system.micros()
	}
	return rate.Micros(s.clock.Now())
}

// locate returns the index of key's shard and the hash its table files it
// under: the low 32 bits of its hash, with the lowest bit set (see entry).
func (s *Store) locate(key string) (int, uint32) {
	h := s.hasher.hash(key)
	// The high bits pick the shard and the low bits the slot, so the two
	// stay independent.
	return int(h >> 32 & s.mask), uint32(h) | 1
}

// valid is a quick test, on the hot path, that a request of cost under
// lim passes [rate.Request.Check], so that it is refused with the same
// errors as in the Redis store: its cost is within the capacity, and lim
// names a known algorithm, a burst only where the algorithm has one and a
// positive whole number of microseconds. Its callers test
// [rate.Limit.InBounds] beside it: in valid it would keep valid from
// being inlined (go build -gcflags=-m) on the hot path. It is false for some
// valid requests too (a monthly limit), which check then decides.
func valid(lim *rate.Limit, cost int64) bool {
	// lim.Capacity(), read in place: the method takes a copy of the Limit.
	capacity := lim.Count
	if lim.Burst != 0 {
		if !lim.Algorithm.HasBurst() {
			return false
		}
		capacity = lim.Burst
	}
	return cost >= 0 && cost <= capacity && lim.Algorithm.Valid() &&
		lim.Count >= 1 && lim.Period >= time.Microsecond && lim.Period%time.Microsecond == 0 &&
		lim.Calendar == rate.NoCalendar
}

// check returns why a request of cost for key under lim cannot be decided,
// or nil: decide's slow path, out of line.
func check(key string, lim *rate.Limit, cost int64) error {
	return prefixed(rate.Request{Key: key, Limit: *lim, Cost: cost}.Check())
}

// prefixed returns err, a request's or a call's, under the store's prefix,
// as the Redis store prefixes its own: a caller that moves from one store
// to the other, or reads the logs of both, finds one mistake in one
// wording. It keeps err's sentinels (rate.ErrNegativeCost and the like)
// for errors.Is.
func prefixed(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("memory store: %w", err)
}

// expiry returns when a state decided at now with decision d is fresh.
func expiry(now int64, d *rate.Decision) int64 {
	return now + int64(d.ResetAfter/time.Microsecond)
}

// usedOf scores how much of its limit an admitted decision leaves used,
// from 0 (nothing) to 255: the units used, over the capacity rounded up
// to a power of two, in 256ths. So a limit spent whole scores 128 to 255,
// within a factor of two of its exact share, for a shift rather than a
// division on every decision.
func usedOf(d *rate.Decision) uint8 {
	used := uint64(max(d.Limit-d.Remaining, 0))
	return uint8(min(used<<8>>bits.Len64(uint64(d.Limit)), 255))
}

// Decide decides one request (see sluice.Store). It does no I/O and never
// waits for anything but a shard's mutex, so it ignores ctx. A request that
// fails [rate.Request.Check] returns its error.
func (s *Store) Decide(_ context.Context, r rate.Request) (rate.Decision, error) {
	var d rate.Decision
	err := s.decide(r.Key, &r.Limit, r.Cost, r.MaxDelay, &d)
	return d, err
}

// DecideKey decides a request of cost for key under lim: it is
// Decide(ctx, rate.Request{Key: key, Limit: *lim, Cost: cost}), for callers
// that keep their limit and decide with it on every request, as
// sluice.Limiter does (with DecideKeyInto). It reads *lim only during the
// call. A Request is
// nine words, too many to travel in registers: building one and copying it
// into every call costs a tenth of a decision or more.
func (s *Store) DecideKey(_ context.Context, key string, lim *rate.Limit, cost int64) (d rate.Decision, err error) {
	// The named result is what decide writes: a local copied out would be
	// read back 16 bytes at a time from 8-byte stores, which the CPU
	// cannot forward.
	err = s.decide(key, lim, cost, 0, &d)
	return d, err
}

// DecideKeyInto is DecideKey writing the decision to *d, which it does not
// keep. A caller that decides into its own variable spares the copy of a
// Decision returned by value, which costs a hot key a tenth of its
// decision (see sluice.Limiter, which calls it).
func (s *Store) DecideKeyInto(_ context.Context, key string, lim *rate.Limit, cost int64, d *rate.Decision) error {
	return s.decide(key, lim, cost, 0, d)
}

// decide is Decide, DecideKey and DecideKeyInto: it writes the decision
// to *d, where the step writes it, rather than return a copy.
func (s *Store) decide(key string, lim *rate.Limit, cost int64, maxDelay time.Duration, d *rate.Decision) error {
	if !valid(lim, cost) || !lim.InBounds() {
		if err := check(key, lim, cost); err != nil {
			return err
		}
	}
	// The hot path is written out here, as the compiler would not inline
	// it: locate, with the hash of a key of 8 to 16 bytes, and find, with
	// the test of the key's home slot.
	var hh uint64
	if n := len(key); n >= 8 && n <= 16 {
		hh = mix(m5^uint64(n), mix(le64(key)^s.hasher.k1, le64(key[n-8:])^s.hasher.k0))
	} else {
		hh = s.hasher.other(key)
	}
	sh := &s.shards[hh>>32&s.mask]
	h := uint32(hh) | 1
	// Among many keys, the key's line is rarely in cache, and the lock's
	// line was last written by another core: fetch both while the clock
	// is read, rather than wait for them one after the other under the
	// lock.
	prefetch(sh.lines.line(h), uintptr(unsafe.Pointer(&sh.mu)))
	// The time is read outside the lock. Two callers may then commit out
	// of time order; the steps take time going backwards into account and
	// never admit more for it. This is s.now written out, as the compiler
	// does not inline it.
	var now int64
	if c := s.system; c != nil {
		now = c.micros()
	} else {
		now = rate.Micros(s.clock.Now())
	}
	sh.mu.Lock()
	var st rate.State
	slot := -1
	if t := sh.table; len(t) > 0 {
		slot = sh.home(h)
		if e := &t[slot]; e.hash != h || !sh.is(e, key) {
			slot = sh.probe(key, h, slot)
		}
	}
	if slot >= 0 {
		e := &sh.table[slot]
		st.A, st.B, st.C = e.a, e.b, e.c
		if e.log != 0 {
			st.Log = sh.logs[e.log-1]
		}
	}
	// The step writes the next state over st: a refusal leaves it as it
	// was, and there is nothing to write back.
	lim.Apply(&st, now, cost, maxDelay, &st, d)
	sweep := sh.sweepDue()
	if d.Allowed {
		switch {
		case slot >= 0 && fresh(&st):
			sh.remove(slot)
		case slot >= 0 && st.Log == nil && sh.table[slot].log == 0:
			// set, without the timestamps of a sliding_log.
			e := &sh.table[slot]
			e.a, e.b, e.c, e.used = st.A, st.B, st.C, usedOf(d)
			sh.expire(e, ticksUp(expiry(now, d)))
		case slot >= 0:
			sh.set(&sh.table[slot], &st, expiry(now, d), usedOf(d))
		case !fresh(&st):
			sh.insert(key, h, &st, expiry(now, d), usedOf(d), now, nil)
			sweep += sweepInsert
		}
	}
	if sweep > 0 {
		sh.sweep(now, sweep)
	}
	sh.mu.Unlock()
	return nil
}

// maxStack is how many requests DecideAll handles without allocating.
const maxStack = 8

// DecideAll decides several requests as one, all or nothing (see
// sluice.Store). Their keys may live in different shards: it locks every
// shard involved, always in the same order, so that concurrent calls
// cannot deadlock and no other decision sees a partial commit. A key may
// appear more than once: each step sees the state the previous ones left.
// Like Decide, it ignores ctx.
func (s *Store) DecideAll(_ context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	if err := rate.CheckOut(reqs, out); err != nil {
		return rate.Decision{}, prefixed(err)
	}
	for i := range reqs {
		if r := &reqs[i]; !valid(&r.Limit, r.Cost) || !r.Limit.InBounds() {
			if err := r.Check(); err != nil {
				return rate.Decision{}, prefixed(err)
			}
		}
	}
	if len(reqs) == 0 {
		return rate.Combine(nil), nil
	}
	now := s.now()

	var (
		shardBuf [maxStack]int
		hashBuf  [maxStack]uint32
		stateBuf [maxStack]rate.State
		lockBuf  [maxStack]int
	)
	shards, hashes, states, locked := shardBuf[:0], hashBuf[:0], stateBuf[:0], lockBuf[:0]
	if len(reqs) > maxStack {
		shards = make([]int, 0, len(reqs))
		hashes = make([]uint32, 0, len(reqs))
		states = make([]rate.State, 0, len(reqs))
		locked = make([]int, 0, len(reqs))
	}
	for i := range reqs {
		sh, h := s.locate(reqs[i].Key)
		shards = append(shards, sh)
		hashes = append(hashes, h)
		locked = insertSorted(locked, sh)
	}
	// Locking in ascending order means two calls can never each hold a
	// shard the other waits for.
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range locked {
			s.shards[i].mu.Unlock()
		}
	}()

	allowed := true
	for i := range reqs {
		r := &reqs[i]
		sh := &s.shards[shards[i]]
		var st rate.State
		if j := lastIndex(reqs[:i], r.Key); j >= 0 {
			st = states[j]
		} else if slot := sh.find(r.Key, hashes[i]); slot >= 0 {
			st = sh.state(&sh.table[slot])
		}
		states = append(states, rate.State{})
		r.Limit.Apply(&st, now, r.Cost, r.MaxDelay, &states[len(states)-1], &out[i])
		allowed = allowed && out[i].Allowed
	}

	if allowed {
		// Commit in order: where a key repeats, its last state wins, and
		// that state already counts the earlier steps.
		for i := range reqs {
			s.shards[shards[i]].commit(reqs[i].Key, hashes[i], states[i], expiry(now, &out[i]), usedOf(&out[i]), now, reqs)
		}
	} else {
		// Nothing is consumed: what a request that passed on its own
		// leaves is what is there now. A step of cost 0 reads it.
		for i := range reqs {
			if !out[i].Allowed {
				continue
			}
			sh := &s.shards[shards[i]]
			var st rate.State
			if slot := sh.find(reqs[i].Key, hashes[i]); slot >= 0 {
				st = sh.state(&sh.table[slot])
			}
			_, peek := reqs[i].Limit.StepWithin(st, now, 0, reqs[i].MaxDelay)
			out[i].Remaining, out[i].ResetAfter = peek.Remaining, peek.ResetAfter
		}
	}

	for _, i := range locked {
		if n := s.shards[i].sweepDue(); n > 0 {
			s.shards[i].sweep(now, n)
		}
	}
	return rate.Combine(out[:len(reqs)]), nil
}

// insertSorted adds x to the ascending set xs unless it is there.
func insertSorted(xs []int, x int) []int {
	i := 0
	for i < len(xs) && xs[i] < x {
		i++
	}
	if i < len(xs) && xs[i] == x {
		return xs
	}
	xs = append(xs, 0)
	copy(xs[i+1:], xs[i:])
	xs[i] = x
	return xs
}

// lastIndex returns the index of the last request for key, or -1.
func lastIndex(reqs []rate.Request, key string) int {
	for j := len(reqs) - 1; j >= 0; j-- {
		if reqs[j].Key == key {
			return j
		}
	}
	return -1
}

// commit stores st for key, whose lock the caller holds.
func (sh *shard) commit(key string, h uint32, st rate.State, expires int64, used uint8, now int64, protect []rate.Request) {
	slot := sh.find(key, h)
	switch {
	case slot >= 0 && fresh(&st):
		sh.remove(slot)
	case slot >= 0:
		sh.set(&sh.table[slot], &st, expires, used)
	case !fresh(&st):
		sh.insert(key, h, &st, expires, used, now, protect)
		sh.sweep(now, sweepInsert)
	}
}

// Sweep reclaims every key whose state is fresh again, one shard at a
// time, each under its lock for one pass over its keys. Decisions reclaim
// keys a little at a time as they come, so a store that decides requests
// needs no Sweep; one that may see none for long keeps its keys until it
// does: a Fallback's local store (FailLocal), which decides only while
// the primary is down, holds what the last outage left. Call Sweep now
// and then on such a store.
func (s *Store) Sweep() {
	now := s.now()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		// A round from the cursor: each slot once, twice over for the
		// ones removals move back into the cursor's slot.
		sh.sweep(now, 2*len(sh.table))
		sh.mu.Unlock()
	}
}

// Len returns the number of keys the store holds.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := Stats{MaxKeys: s.maxKeys}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.n
		st.Evictions += sh.evictions
		st.Expired += sh.expired
		sh.mu.Unlock()
	}
	return st
}

// Reset forgets the state of each key, as if no request had come for it:
// the next request for it is decided as its first. A key the store does
// not hold is no error. The keys are forgotten at once, under the locks
// of all their shards (taken in DecideAll's order), so that a concurrent
// DecideAll over several of them sees all or none forgotten. Like Decide,
// it does no I/O and ignores ctx.
func (s *Store) Reset(_ context.Context, keys ...string) error {
	var (
		shardBuf [maxStack]int
		hashBuf  [maxStack]uint32
		lockBuf  [maxStack]int
	)
	shards, hashes, locked := shardBuf[:0], hashBuf[:0], lockBuf[:0]
	if len(keys) > maxStack {
		shards = make([]int, 0, len(keys))
		hashes = make([]uint32, 0, len(keys))
		locked = make([]int, 0, len(keys))
	}
	for _, k := range keys {
		sh, h := s.locate(k)
		shards, hashes = append(shards, sh), append(hashes, h)
		locked = insertSorted(locked, sh)
	}
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	for i, k := range keys {
		// remove frees the key's bytes and a sliding_log's timestamps,
		// and shrinks the table as a decision that leaves a key fresh.
		sh := &s.shards[shards[i]]
		if slot := sh.find(k, hashes[i]); slot >= 0 {
			sh.remove(slot)
		}
	}
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
	return nil
}
