package memory

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/sluicehq/sluice/rate"
)

// TestEntryIsALine: an entry fills one 64-byte cache line, no more, so a
// table of them never has an entry straddling two lines.
func TestEntryIsALine(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 64 {
		t.Errorf("an entry is %d bytes, want 64", n)
	}
	// Tables start on a line, whatever their size, so that no entry
	// straddles two lines.
	s := &shard{}
	s.max = -1
	for i := range 5000 {
		s.commit(fmt.Sprint(i), fnv(fmt.Sprint(i)), rate.State{A: 1}, 1e15, 0, 0, nil)
		if p := uintptr(unsafe.Pointer(&s.table[0])); p%64 != 0 {
			t.Fatalf("a table of %d slots starts at %#x, not on a cache line", len(s.table), p)
		}
	}
	// And it holds no pointer, so that the garbage collector has nothing
	// to scan in a table.
	typ := reflect.TypeFor[entry]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		switch k := f.Type.Kind(); {
		case k >= reflect.Int && k <= reflect.Uint64:
		case k == reflect.Array && f.Type.Elem().Kind() == reflect.Uint8:
		default:
			t.Errorf("entry.%s is a %v: entries must hold no pointers", f.Name, f.Type)
		}
	}
}

// check verifies a shard's invariants: every entry is found from its home
// slot, the entries are in Robin Hood order, the table is within its load
// bound, and the side tables account for every sliding_log and every byte
// of the arena.
func (s *shard) check(t *testing.T) {
	t.Helper()
	used, logs, long := 0, 0, 0
	for i := range s.table {
		e := &s.table[i]
		if e.hash == 0 {
			if *e != (entry{}) {
				t.Fatalf("slot %d is empty but not zero: %+v", i, *e)
			}
			continue
		}
		used++
		if e.hash&1 == 0 {
			t.Fatalf("slot %d: hash %x without its lowest bit", i, e.hash)
		}
		// In Robin Hood order an entry is at most one slot further from
		// its home than the entry before it, and at home after a gap.
		prev := i - 1
		if prev < 0 {
			prev = len(s.table) - 1
		}
		if d := s.dist(i, e.hash); s.table[prev].hash == 0 && d != 0 ||
			s.table[prev].hash != 0 && d > s.dist(prev, s.table[prev].hash)+1 {
			t.Fatalf("slot %d: %d from home, out of Robin Hood order", i, d)
		}
		if idx := s.find(s.keyOf(e), e.hash); idx != i {
			t.Fatalf("slot %d (%q) found at %d", i, s.keyOf(e), idx)
		}
		if e.log != 0 {
			logs++
		}
		if e.klen == longKey {
			long += len(s.long(e))
		}
		if e.expires < s.soonest {
			t.Fatalf("slot %d expires at %d, before the sweeper's bound %d", i, e.expires, s.soonest)
		}
	}
	if used != s.n {
		t.Fatalf("%d slots used, n = %d", used, s.n)
	}
	if len(s.table) > 0 && 4*s.n > 3*len(s.table) {
		t.Fatalf("%d entries in %d slots: over the load bound", s.n, len(s.table))
	}
	if logs != len(s.logs)-len(s.freeLogs) {
		t.Fatalf("%d entries hold logs, side table has %d of which %d free", logs, len(s.logs), len(s.freeLogs))
	}
	if long+s.garbage != len(s.arena) {
		t.Fatalf("arena of %d bytes: %d in use, %d garbage", len(s.arena), long, s.garbage)
	}
}

// fnv is a hash for tests that set a shard's hashes by hand.
func fnv(k string) uint32 {
	var h uint32 = 2166136261
	for i := 0; i < len(k); i++ {
		h = (h ^ uint32(k[i])) * 16777619
	}
	return h | 1
}

// TestShardAgainstMap runs random inserts, updates and deletes on one shard
// and on a map, with hashes squeezed into a few bits so that probe runs are
// long and wrap around the table, and compares them after every step. A
// third of the keys are too long to keep inline.
func TestShardAgainstMap(t *testing.T) {
	for _, hashBits := range []uint{3, 8, 32} {
		t.Run(fmt.Sprint(hashBits, "bits"), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(hashBits), 9))
			s := &shard{}
			s.max = -1
			ref := map[string]rate.State{}
			hash := func(k string) uint32 {
				// Keep the high bits, which pick the home slot.
				return fnv(k)&^(math.MaxUint32>>hashBits) | 1
			}
			for step := range 20000 {
				n := rng.IntN(300)
				key := fmt.Sprint("k", n)
				if n%3 == 0 {
					key = strings.Repeat("long-", 6+n%5) + key
				}
				h := hash(key)
				var st rate.State
				switch rng.IntN(4) {
				case 0: // back to fresh
				case 1:
					st = rate.State{Log: []int64{int64(step)}}
				default:
					st = rate.State{A: int64(step) + 1, B: 2, C: 3}
				}
				s.commit(key, h, st, 1e15, 0, int64(step), nil) // never expires here
				if fresh(&st) {
					delete(ref, key)
				} else {
					ref[key] = st
				}
				if step%97 == 0 {
					s.check(t)
					if s.n != len(ref) {
						t.Fatalf("step %d: %d entries, want %d", step, s.n, len(ref))
					}
					for k, want := range ref {
						idx := s.find(k, hash(k))
						if idx < 0 {
							t.Fatalf("step %d: %q lost", step, k)
						}
						got := s.state(&s.table[idx])
						if got.A != want.A || got.B != want.B || got.C != want.C || fmt.Sprint(got.Log) != fmt.Sprint(want.Log) {
							t.Fatalf("step %d: %q = %+v, want %+v", step, k, got, want)
						}
					}
				}
			}
			// Delete everything: the shard gives its memory back.
			for k := range ref {
				s.commit(k, hash(k), rate.State{}, 0, 0, 0, nil)
			}
			s.check(t)
			if s.n != 0 || len(s.table) > minSlots || s.arena != nil || s.logs != nil {
				t.Errorf("empty shard keeps %d slots, %d bytes of arena, %d logs", len(s.table), len(s.arena), len(s.logs))
			}
		})
	}
}

// TestSweepWraps checks that the sweeper's cursor comes round to every
// entry: steps of one slot each reclaim every expired key within two
// rounds of the table, and no step does more than it is asked.
func TestSweepWraps(t *testing.T) {
	s := &shard{}
	s.max = -1
	for i := range 100 {
		key := fmt.Sprint(i)
		s.commit(key, uint32(i)*2654435761|1, rate.State{A: 1}, int64(i)<<tickShift, 0, 0, nil)
	}
	s.cursor = 37
	rounds := 2 * len(s.table)
	for range rounds {
		before := s.n
		s.sweep(50<<tickShift, 1) // keys 0..50 have expired
		if before-s.n > 1 {
			t.Fatalf("a sweep of 1 removed %d entries", before-s.n)
		}
	}
	s.check(t)
	if s.n != 49 || s.expired != 51 {
		t.Errorf("after sweeping at 50: %d entries, %d expired; want 49 and 51", s.n, s.expired)
	}
	for i := range s.table {
		if e := &s.table[i]; e.hash != 0 && e.expires <= 50 {
			t.Errorf("entry %q expires at %d, should be gone", s.keyOf(e), e.expires)
		}
	}
}

// TestLogsFollowKeys: the side table of sliding_log timestamps is sized by
// the keys that hold some, not by their peak. Once a burst of sliding_log
// keys has been reclaimed but for one, the shard keeps a few slots of it.
func TestLogsFollowKeys(t *testing.T) {
	s := &shard{}
	s.max = -1
	st := rate.State{Log: []int64{1}}
	s.commit("stays", fnv("stays"), st, 1e15, 0, 0, nil) // never expires here
	const burst = 5000
	for i := range burst {
		key := fmt.Sprint("burst-", i)
		s.commit(key, fnv(key), st, 10<<tickShift, 0, 0, nil)
	}
	for i := 0; s.n > 1; i++ {
		if i > 3*burst {
			t.Fatalf("%d entries left after %d sweeps past their expiry", s.n, i)
		}
		s.sweep(20<<tickShift, 1)
	}
	s.check(t)
	if n := cap(s.logs) + cap(s.freeLogs); n > 2*len(s.table) {
		t.Errorf("one sliding_log key left of %d, in %d slots: the side tables keep room for %d (%d free)", burst+1, len(s.table), n, len(s.freeLogs))
	}
}

// TestTicksUp: an expiry kept in ticks is never earlier than the exact
// one, and at most a tick later, so a key is never reclaimed before its
// state is fresh.
func TestTicksUp(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 100000 {
		us := rng.Int64N(4e15) - 1e15 // 1938 to 2096
		if rng.IntN(4) == 0 {
			us = us >> tickShift << tickShift // exactly on a tick
		}
		tk := ticksUp(us)
		if us > 0 && (int64(tk)<<tickShift < us || int64(tk)<<tickShift >= us+1<<tickShift) {
			t.Fatalf("ticksUp(%d) = %d: not the first tick at or after it", us, tk)
		}
		// Reclaimed at now exactly when the tick has come.
		for _, now := range []int64{us - 1, us, int64(tk) << tickShift, int64(tk)<<tickShift - 1} {
			if reclaimed := int64(tk) <= now>>tickShift; reclaimed && now < us {
				t.Fatalf("expiry %d (tick %d) reclaimed at %d, before it", us, tk, now)
			}
		}
	}
	if got := ticksUp(math.MaxInt64 - 1<<tickShift); got != math.MaxUint32 {
		t.Errorf("far future: ticksUp = %d, want the largest tick", got)
	}
}

// TestShardLines: shards are whole cache lines with a line of padding at
// the end, so that two shards' mutexes and counters never share a line.
func TestShardLines(t *testing.T) {
	n, used := unsafe.Sizeof(shard{}), unsafe.Sizeof(shardState{})
	if n%64 != 0 || n-used < 64 {
		t.Errorf("a shard is %d bytes, %d of them used: want whole lines and at least 64 bytes of padding", n, used)
	}
}

// TestSweepBound runs random commits with random expiries, sweeps and the
// passing of time on one shard. The sweeper's bound must stay at or below
// every entry's expiry (check), and it must never stop the sweeper from
// reclaiming an expired entry: once time has passed every expiry, a few
// rounds of sweeping empty the shard.
func TestSweepBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	s := &shard{}
	s.max = -1
	now := int64(1000) << tickShift
	for step := range 30000 {
		key := fmt.Sprint("k", rng.IntN(500))
		var st rate.State
		if rng.IntN(5) > 0 {
			st.A = int64(step) + 1
		}
		expires := now + rng.Int64N(200)<<tickShift
		s.commit(key, fnv(key), st, expires, 0, now, nil)
		if rng.IntN(3) == 0 {
			s.sweep(now, 1+rng.IntN(4))
		}
		if rng.IntN(10) == 0 {
			now += rng.Int64N(20) << tickShift
		}
		if step%101 == 0 {
			s.check(t)
		}
	}
	s.check(t)
	now += 1000 << tickShift
	limit := 2*len(s.table) + s.n // two rounds, and a step per removal
	for i := 0; s.n > 0; i++ {
		if i > limit {
			t.Fatalf("%d entries left after %d sweeps past every expiry", s.n, i)
		}
		s.sweep(now, 1)
	}
}

// keyOf returns e's key.
func (s *shard) keyOf(e *entry) string {
	if e.klen == longKey {
		return string(s.long(e))
	}
	return string(e.key[:e.klen])
}

// TestDefaultShards: with Options.Shards zero, each shard holds at least
// 64 keys when MaxKeys allows it, whatever GOMAXPROCS is (four times it
// need not be a power of two), and MaxKeys is spread over as many shards
// as that allows.
func TestDefaultShards(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 5, 6, 20, 24, 100} {
		runtime.GOMAXPROCS(procs)
		for _, maxKeys := range []int{64, 100, 3000, 4000, 5000, 1 << 20} {
			s := New(Options{MaxKeys: maxKeys})
			n := len(s.shards)
			if per := s.shards[0].max; per < 64 {
				t.Errorf("GOMAXPROCS %d, MaxKeys %d: %d shards of %d keys, want at least 64 each", procs, maxKeys, n, per)
			}
			if n < max(64, 4*procs) && maxKeys/(2*n) >= 64 {
				t.Errorf("GOMAXPROCS %d, MaxKeys %d: %d shards, when %d could hold 64 keys each", procs, maxKeys, n, 2*n)
			}
		}
	}
}

// TestShardChurnAgainstMap is TestShardAgainstMap with everything that
// removes keys behind a caller's back: a bound that evicts, a sweeper
// that reclaims, time that passes. Keys of every kind (empty, short,
// inline, in the arena) with states of every kind (three words, or
// sliding_log timestamps) come and go in a table small enough that the
// arena and the timestamps' side table are compacted again and again. A
// key may disappear only by eviction, or by reclaiming once its expiry
// has passed; every key left must read its own bytes and state.
func TestShardChurnAgainstMap(t *testing.T) {
	type held struct {
		st      rate.State
		expires int64
	}
	for _, hashBits := range []uint{2, 32} {
		for _, bound := range []int{-1, 7, 50} {
			t.Run(fmt.Sprint(hashBits, "bits/max", bound), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(hashBits), uint64(bound+1)))
				s := &shard{}
				s.max = bound
				hash := func(k string) uint32 { return fnv(k)&^(math.MaxUint32>>hashBits) | 1 }
				ref := map[string]held{}
				// forget drops from ref the keys the shard no longer holds,
				// which must have expired by now unless one was evicted.
				forget := func(step int, now int64, evicted bool) {
					t.Helper()
					for k, h := range ref {
						if s.find(k, hash(k)) >= 0 {
							continue
						}
						if !evicted && h.expires > now {
							t.Fatalf("step %d: %q, fresh only at %d, reclaimed at %d", step, k, h.expires, now)
						}
						delete(ref, k)
					}
				}
				now := int64(1000) << tickShift
				for step := range 8000 {
					n := rng.IntN(120)
					var key string
					switch n % 4 {
					case 0:
						key = strings.Repeat("L", 20+n%17) + fmt.Sprint(n) // 23 to 39 bytes
					case 1:
						key = fmt.Sprint(n)[:1]
					default:
						key = fmt.Sprint("key-", n)
					}
					if n == 3 {
						key = ""
					}
					var st rate.State
					switch rng.IntN(5) {
					case 0: // back to fresh
					case 1, 2:
						st.Log = make([]int64, 1+rng.IntN(3))
						for i := range st.Log {
							st.Log[i] = int64(10*step + i)
						}
					default:
						st = rate.State{A: int64(step) + 1, B: int64(n), C: 3}
					}
					expires := now + 1 + rng.Int64N(50<<tickShift)
					evictions := s.evictions
					s.commit(key, hash(key), st, expires, 0, now, nil)
					if fresh(&st) {
						delete(ref, key)
					} else {
						if s.find(key, hash(key)) < 0 {
							t.Fatalf("step %d: %q lost as it was committed", step, key)
						}
						ref[key] = held{st, expires}
					}
					forget(step, now, s.evictions != evictions)
					if rng.IntN(4) == 0 {
						s.sweep(now, 1+rng.IntN(6))
						forget(step, now, false)
					}
					if rng.IntN(8) == 0 {
						now += rng.Int64N(10 << tickShift)
					}
					if s.max >= 0 && s.n > s.max {
						t.Fatalf("step %d: %d entries, over the bound %d", step, s.n, s.max)
					}
					if step%7 != 0 {
						continue
					}
					s.check(t)
					if s.n != len(ref) {
						t.Fatalf("step %d: %d entries, want %d", step, s.n, len(ref))
					}
					for k, want := range ref {
						i := s.find(k, hash(k))
						got := s.state(&s.table[i])
						if s.keyOf(&s.table[i]) != k || got.A != want.st.A || got.B != want.st.B || got.C != want.st.C ||
							fmt.Sprint(got.Log) != fmt.Sprint(want.st.Log) {
							t.Fatalf("step %d: %q holds %q = %+v, want %+v", step, k, s.keyOf(&s.table[i]), got, want.st)
						}
					}
				}
				if bound < 0 && s.evictions != 0 || bound == 7 && s.evictions == 0 || s.expired == 0 {
					t.Errorf("%d evictions and %d expired: the test should exercise both where there is a bound", s.evictions, s.expired)
				}
			})
		}
	}
}

// usedOf scores the share of its limit a decision leaves used, within a
// factor of two, and never wraps.
func TestUsedOf(t *testing.T) {
	for _, c := range []struct {
		limit, remaining int64
		lo, hi           uint8
	}{
		{1, 1, 0, 0},
		{1, 0, 128, 255},
		{5, 0, 128, 255},
		{5, 4, 25, 51},
		{1000, 999, 0, 1},
		{1000, 0, 128, 255},
		{1000, 500, 64, 128},
		{1 << 52, 0, 128, 255},
		{1<<52 - 1, 0, 128, 255},
		{10, 20, 0, 0}, // more left than the limit (a limit since lowered)
	} {
		got := usedOf(&rate.Decision{Limit: c.limit, Remaining: c.remaining})
		if got < c.lo || got > c.hi {
			t.Errorf("usedOf(limit %d, remaining %d) = %d, want %d to %d", c.limit, c.remaining, got, c.lo, c.hi)
		}
	}
}

// TestEvictSamplesDistinctEntries: eviction compares distinct entries. A
// spent key sitting after a long run of empty slots is where most random
// positions land; compared only with itself, it would be the one evicted.
func TestEvictSamplesDistinctEntries(t *testing.T) {
	s := &shard{}
	s.max = -1
	st := rate.State{A: 1, B: 2, C: 3}
	low := func(i int) uint32 { return uint32(i)<<8 | 1 } // homes at the table's start
	// Grow the table, then empty most of it: a few entries at its start,
	// the spent key at its end.
	for i := range 40 {
		s.commit(fmt.Sprint("junk", i), low(i), st, 1e15, 0, 0, nil)
	}
	for i := 6; i < 40; i++ {
		s.commit(fmt.Sprint("junk", i), low(i), rate.State{}, 0, 0, 0, nil)
	}
	const spent = "spent"
	s.commit(spent, math.MaxUint32, st, 1e15, 200, 0, nil)
	s.max = s.n
	if len(s.table) < 3*s.n {
		t.Fatalf("%d slots for %d entries: the table did not stay sparse", len(s.table), s.n)
	}
	for i := 100; i < 1100; i++ {
		s.commit(fmt.Sprint("junk", i), low(i%40), st, 1e15, 0, 0, nil)
		if s.find(spent, math.MaxUint32) < 0 {
			t.Fatalf("the spent key was evicted at the %dth new key, before a barely used one", i-99)
		}
	}
	s.check(t)
}
