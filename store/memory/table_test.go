package memory

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/rate"
)

// check verifies a shard's invariants: every entry is reachable through its
// slot, every slot points at an entry with its hash, and the logs side
// table accounts for every sliding_log entry.
func (s *shard) check(t *testing.T) {
	t.Helper()
	used := 0
	for i, v := range s.slots {
		if v == 0 {
			continue
		}
		used++
		j := int(uint32(v)) - 1
		if j < 0 || j >= len(s.entries) {
			t.Fatalf("slot %d points at entry %d of %d", i, j, len(s.entries))
		}
		if uint32(v>>32) != s.entries[j].hash {
			t.Fatalf("slot %d: hash %x, entry %d has %x", i, uint32(v>>32), j, s.entries[j].hash)
		}
	}
	if used != len(s.entries) {
		t.Fatalf("%d slots used for %d entries", used, len(s.entries))
	}
	if len(s.slots) > 0 && 4*len(s.entries) > 3*len(s.slots) {
		t.Fatalf("%d entries in %d slots: over the load bound", len(s.entries), len(s.slots))
	}
	logs := 0
	for i := range s.entries {
		e := &s.entries[i]
		if idx := s.lookup(e.key, e.hash); idx != i {
			t.Fatalf("entry %d (%q) found at %d", i, e.key, idx)
		}
		if e.log != 0 {
			logs++
		}
	}
	if logs != len(s.logs)-len(s.freeLogs) {
		t.Fatalf("%d entries hold logs, side table has %d of which %d free", logs, len(s.logs), len(s.freeLogs))
	}
}

// TestShardAgainstMap runs random inserts, updates and deletes on one shard
// and on a map, with hashes squeezed into a few bits so that probe runs are
// long and wrap around the table, and compares them after every step.
func TestShardAgainstMap(t *testing.T) {
	for _, hashBits := range []uint{3, 8, 32} {
		t.Run(fmt.Sprint(hashBits, "bits"), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(hashBits), 9))
			s := &shard{max: -1}
			ref := map[string]rate.State{}
			hash := func(k string) uint32 {
				var h uint32 = 2166136261
				for i := 0; i < len(k); i++ {
					h = (h ^ uint32(k[i])) * 16777619
				}
				return h & (1<<hashBits - 1)
			}
			for step := range 20000 {
				key := fmt.Sprint("k", rng.IntN(300))
				h := hash(key)
				var st rate.State
				switch rng.IntN(4) {
				case 0: // back to fresh
				case 1:
					st = rate.State{Log: []int64{int64(step)}}
				default:
					st = rate.State{A: int64(step) + 1, B: 2, C: 3}
				}
				s.commit(key, h, st, int64(step)+1e9, int64(step), nil) // never expires here
				if fresh(st) {
					delete(ref, key)
				} else {
					ref[key] = st
				}
				if step%97 == 0 {
					s.check(t)
					if len(s.entries) != len(ref) {
						t.Fatalf("step %d: %d entries, want %d", step, len(s.entries), len(ref))
					}
					for k, want := range ref {
						idx := s.lookup(k, hash(k))
						if idx < 0 {
							t.Fatalf("step %d: %q lost", step, k)
						}
						got := s.state(&s.entries[idx])
						if got.A != want.A || got.B != want.B || got.C != want.C || fmt.Sprint(got.Log) != fmt.Sprint(want.Log) {
							t.Fatalf("step %d: %q = %+v, want %+v", step, k, got, want)
						}
					}
				}
			}
			// Delete everything: the shard gives its memory back.
			for k := range ref {
				s.commit(k, hash(k), rate.State{}, 0, 0, nil)
			}
			s.check(t)
			if len(s.entries) != 0 || len(s.slots) > minSlots || cap(s.entries) > minEntries || s.logs != nil {
				t.Errorf("empty shard keeps %d slots, %d entries of room, %d logs", len(s.slots), cap(s.entries), len(s.logs))
			}
		})
	}
}

// TestSweepWraps checks that the sweeper's cursor comes round to every
// entry: steps of one entry each reclaim every expired key within two
// rounds of the table, and no step does more than it is asked.
func TestSweepWraps(t *testing.T) {
	s := &shard{max: -1}
	for i := range 100 {
		key := fmt.Sprint(i)
		s.commit(key, uint32(i*2654435761), rate.State{A: 1}, int64(i), 0, nil)
	}
	s.cursor = 37
	for range 200 {
		before := len(s.entries)
		s.sweep(50, 1) // keys 0..50 have expired
		if before-len(s.entries) > 1 {
			t.Fatalf("a sweep of 1 removed %d entries", before-len(s.entries))
		}
	}
	s.check(t)
	if len(s.entries) != 49 || s.expired != 51 {
		t.Errorf("after sweeping at 50: %d entries, %d expired; want 49 and 51", len(s.entries), s.expired)
	}
	for i := range s.entries {
		if s.entries[i].expires <= 50 {
			t.Errorf("entry %q expires at %d, should be gone", s.entries[i].key, s.entries[i].expires)
		}
	}
}
