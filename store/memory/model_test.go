package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
)

// modelLimits are small limits of every algorithm, some with a burst or a
// rate that is no whole number of µs per unit, so that a few steps reach
// every state.
var modelLimits = []rate.Limit{
	{Algorithm: rate.GCRA, Count: 3, Period: 2 * time.Second},
	{Algorithm: rate.GCRA, Count: 2, Period: 3 * time.Second, Burst: 5},
	{Algorithm: rate.TokenBucket, Count: 3, Period: 2 * time.Second, Burst: 4},
	{Algorithm: rate.LeakyBucket, Count: 2, Period: 2 * time.Second, Burst: 3},
	{Algorithm: rate.FixedWindow, Count: 3, Period: 2 * time.Second},
	{Algorithm: rate.SlidingWindow, Count: 4, Period: 2 * time.Second},
	{Algorithm: rate.SlidingLog, Count: 4, Period: 3 * time.Second},
	{Algorithm: rate.GCRA, Count: 5, Period: 1500 * time.Millisecond},
}

// modelKeys returns n distinct keys of every length the store tells apart:
// under 8 bytes, 8 to 16 (hashed inline), up to 26 (held in the line) and
// longer (held in the shard's arena).
func modelKeys(r *rand.Rand, n int) []string {
	lens := []int{0, 1, 3, 7, 8, 12, 16, 17, 20, 26, 27, 33, 64, 200}
	seen := map[string]bool{}
	var keys []string
	for len(keys) < n {
		l := lens[r.IntN(len(lens))]
		b := make([]byte, l)
		for i := range b {
			b[i] = "abcdef"[r.IntN(6)]
		}
		if !seen[string(b)] {
			seen[string(b)] = true
			keys = append(keys, string(b))
		}
	}
	return keys
}

// contents returns every key the store holds, with its state.
func contents(s *Store) map[string]rate.State {
	m := map[string]rate.State{}
	for i := range s.shards {
		sh := &s.shards[i]
		for j := range sh.table {
			e := &sh.table[j]
			if e.hash == 0 {
				continue
			}
			st := sh.state(e)
			st.Log = slices.Clone(st.Log)
			m[sh.keyOf(e)] = st
		}
	}
	return m
}

// sameState reports whether a and b are the same state.
func sameState(a, b rate.State) bool {
	return a.A == b.A && a.B == b.B && a.C == b.C && slices.Equal(a.Log, b.Log)
}

// isFresh reports whether st is the zero, fresh state.
func isFresh(st rate.State) bool { return st.A == 0 && st.B == 0 && st.C == 0 && len(st.Log) == 0 }

// cloneState returns st with a Log of its own.
func cloneState(st rate.State) rate.State { st.Log = slices.Clone(st.Log); return st }

// The store against a model, a map of states stepped with rate.Limit:
// random Decide, DecideAll (repeated keys, over the calls decided without
// allocating) and Reset calls, on a clock that jumps both ways, on stores
// small enough to evict, grow and shrink. After every call each decision
// is the model's, each key held has the model's state, and a key gone is
// counted: as expired if its state was fresh, else as evicted. Once every
// state is fresh, decisions reclaim every key.
func TestStoreAgainstModel(t *testing.T) {
	seeds := 200
	steps := 400
	for seed := 0; seed < seeds; seed++ {
		r := rand.New(rand.NewPCG(uint64(seed), 99))
		keys := modelKeys(r, 4+r.IntN([]int{20, 80}[seed%2]))
		limOf := map[string]rate.Limit{}
		for _, k := range keys {
			limOf[k] = modelLimits[r.IntN(len(modelLimits))]
			if seed%3 == 2 && r.IntN(10) > 0 {
				limOf[k] = modelLimits[6]
			}
		}
		maxKeys := []int{1, 2, 3, 5, 8, 13, -1}[r.IntN(7)]
		shards := []int{1, 2, 4}[r.IntN(3)]
		clk := ratetest.NewClock(time.Unix(1_700_000_000, 0))
		s := New(Options{Clock: clk, MaxKeys: maxKeys, Shards: shards})
		model := map[string]rate.State{}
		var log []string
		fail := func(format string, args ...any) {
			t.Helper()
			tail := log
			if len(tail) > 15 {
				tail = tail[len(tail)-15:]
			}
			t.Fatalf("seed %d maxKeys %d shards %d: %s\nlast ops:\n%s", seed, maxKeys, shards, fmt.Sprintf(format, args...), strings.Join(tail, "\n"))
		}
		ctx := context.Background()
		for step := 0; step < steps; step++ {
			// Time jumps forwards mostly, sometimes backwards.
			switch x := r.IntN(10); {
			case x < 5:
				clk.Advance(time.Duration(r.IntN(800)) * time.Millisecond)
			case x < 7:
				clk.Advance(time.Duration(r.IntN(6000)) * time.Millisecond)
			case x < 8:
				clk.Advance(-time.Duration(r.IntN(4000)) * time.Millisecond)
			}
			now := rate.Micros(clk.Now())
			before := s.Stats()
			beforeKeys := contents(s)
			touched := map[string]bool{}
			op := r.IntN(10)
			inserted, insShard := false, -1
			switch {
			case op < 5:
				k := keys[r.IntN(len(keys))]
				lim := limOf[k]
				cost := int64(r.IntN(int(lim.Capacity()) + 1))
				var md time.Duration
				if r.IntN(3) == 0 {
					md = time.Duration(r.IntN(3000)) * time.Millisecond
				}
				_, had := contents(s)[k]
				got, err := s.Decide(ctx, rate.Request{Key: k, Limit: lim, Cost: cost, MaxDelay: md})
				if err != nil {
					fail("Decide: %v", err)
				}
				next, want := lim.StepWithin(cloneState(model[k]), now, cost, md)
				log = append(log, fmt.Sprintf("t=%d Decide %q(%d) %v cost %d -> %v", now, k, len(k), lim.Algorithm, cost, got))
				if got != want {
					fail("Decide %q: got %v want %v (model %+v)", k, got, want, model[k])
				}
				touched[k] = true
				_, has := contents(s)[k]
				inserted = !had && has
				insShard, _ = s.locate(k)
				if want.Allowed {
					if isFresh(next) {
						delete(model, k)
					} else {
						model[k] = next
					}
				}
			case op < 8:
				n := 1 + r.IntN([]int{10, 24}[r.IntN(2)])
				reqs := make([]rate.Request, n)
				for i := range reqs {
					k := keys[r.IntN(len(keys))]
					if i > 0 && r.IntN(3) == 0 {
						k = reqs[r.IntN(i)].Key
					}
					lim := limOf[k]
					reqs[i] = rate.Request{Key: k, Limit: lim, Cost: int64(r.IntN(int(lim.Capacity())/2 + 1))}
					touched[k] = true
				}
				out := make([]rate.Decision, n)
				comb, err := s.DecideAll(ctx, reqs, out)
				if err != nil {
					fail("DecideAll: %v", err)
				}
				// reference
				want := make([]rate.Decision, n)
				states := make([]rate.State, n)
				all := true
				for i, q := range reqs {
					st := cloneState(model[q.Key])
					for j := i - 1; j >= 0; j-- {
						if reqs[j].Key == q.Key {
							st = cloneState(states[j])
							break
						}
					}
					states[i], want[i] = q.Limit.StepWithin(st, now, q.Cost, q.MaxDelay)
					all = all && want[i].Allowed
				}
				if all {
					for i, q := range reqs {
						if isFresh(states[i]) {
							delete(model, q.Key)
						} else {
							model[q.Key] = states[i]
						}
					}
				} else {
					for i, q := range reqs {
						if want[i].Allowed {
							_, p := q.Limit.StepWithin(cloneState(model[q.Key]), now, 0, q.MaxDelay)
							want[i].Remaining, want[i].ResetAfter = p.Remaining, p.ResetAfter
						}
					}
				}
				var ks []string
				for _, q := range reqs {
					ks = append(ks, fmt.Sprintf("%q/%v/%d", q.Key, q.Limit.Algorithm, q.Cost))
				}
				log = append(log, fmt.Sprintf("t=%d DecideAll %s -> %v", now, strings.Join(ks, " "), out))
				for i := range reqs {
					if out[i] != want[i] {
						fail("DecideAll req %d %q: got %v want %v", i, reqs[i].Key, out[i], want[i])
					}
				}
				if wc := rate.Combine(want); comb != wc {
					fail("DecideAll combined: got %v want %v", comb, wc)
				}
			case op < 9:
				var ks []string
				for range r.IntN(4) {
					ks = append(ks, keys[r.IntN(len(keys))])
				}
				if err := s.Reset(ctx, ks...); err != nil {
					fail("Reset: %v", err)
				}
				for _, k := range ks {
					delete(model, k)
					touched[k] = true
				}
				log = append(log, fmt.Sprintf("t=%d Reset %q", now, ks))
			default:
				log = append(log, fmt.Sprintf("t=%d Stats %+v", now, s.Stats()))
			}
			// Compare.
			after := s.Stats()
			for i := range s.shards {
				s.shards[i].check(t)
			}
			got := contents(s)
			if after.Keys != len(got) {
				fail("Stats.Keys %d, table holds %d", after.Keys, len(got))
			}
			if s.Len() != len(got) {
				fail("Len %d, table holds %d", s.Len(), len(got))
			}
			for k, st := range got {
				m, ok := model[k]
				if !ok {
					fail("store holds %q = %+v the model does not", k, st)
				}
				if !sameState(m, st) {
					fail("key %q: store %+v, model %+v", k, st, m)
				}
			}
			vanished, live := 0, 0
			for k, m := range model {
				if _, ok := got[k]; ok {
					continue
				}
				vanished++
				lim := limOf[k]
				if p, _ := lim.Step(cloneState(m), now, 0); !isFresh(p) {
					live++
					log = append(log, fmt.Sprintf("   %q not fresh at %d gone (state %+v)", k, now, m))
				}
				delete(model, k)
			}
			dEv := int(after.Evictions - before.Evictions)
			dEx := int(after.Expired - before.Expired)
			slack := 0
			for k := range touched {
				if _, ok := beforeKeys[k]; ok {
					slack++
				}
			}
			if vanished > dEv+dEx || dEv+dEx > vanished+slack {
				fail("%d keys vanished, %d evictions + %d expired counted", vanished, dEv, dEx)
			}
			if live > dEv {
				fail("%d keys with live state vanished, only %d evictions counted", live, dEv)
			}
			if maxKeys > 0 && op < 5 {
				for i := range s.shards {
					if i != insShard {
						continue
					}
					if s.shards[i].n > s.shards[i].max && inserted {
						fail("shard %d holds %d > max %d after an inserting Decide", i, s.shards[i].n, s.shards[i].max)
					}
				}
			}
		}
		// Liveness: once every state is fresh, decisions in a shard
		// reclaim all its keys.
		clk.Advance(time.Hour)
		probes := map[int]string{}
		for i := 0; len(probes) < len(s.shards); i++ {
			k := fmt.Sprintf("probe-%d", i)
			sh, _ := s.locate(k)
			if _, ok := probes[sh]; !ok {
				probes[sh] = k
			}
		}
		slots := 0
		for i := range s.shards {
			slots += len(s.shards[i].table)
		}
		for range 2*slots + 64 {
			for _, k := range probes {
				s.Decide(ctx, rate.Request{Key: k, Limit: modelLimits[0], Cost: 0})
			}
		}
		if st := s.Stats(); st.Keys != 0 {
			fail("after an hour and %d decisions per shard, %d keys still held", 2*slots+64, st.Keys)
		}
	}
}

// TestConcurrentMixedCalls: concurrent callers on a tiny store with every key
// algorithm, a clock moving both ways: -race finds no race, and the
// shards hold together.
func TestConcurrentMixedCalls(t *testing.T) {
	clk := ratetest.NewClock(time.Unix(1_700_000_000, 0))
	s := New(Options{Clock: clk, MaxKeys: 8, Shards: 4})
	keys := modelKeys(rand.New(rand.NewPCG(1, 2)), 40)
	var wg sync.WaitGroup
	ctx := context.Background()
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range 3000 {
				k := keys[r.IntN(len(keys))]
				lim := modelLimits[len(k)%len(modelLimits)]
				switch r.IntN(8) {
				case 0:
					clk.Advance(time.Duration(r.IntN(3000)-1000) * time.Millisecond)
				case 1, 2, 3:
					if _, err := s.Decide(ctx, rate.Request{Key: k, Limit: lim, Cost: 1}); err != nil {
						t.Error(err)
						return
					}
				case 4, 5:
					var reqs []rate.Request
					for range 1 + r.IntN(10) {
						k := keys[r.IntN(len(keys))]
						reqs = append(reqs, rate.Request{Key: k, Limit: modelLimits[len(k)%len(modelLimits)], Cost: 1})
					}
					if _, err := s.DecideAll(ctx, reqs, make([]rate.Decision, len(reqs))); err != nil {
						t.Error(err)
						return
					}
				case 6:
					s.Reset(ctx, k, keys[r.IntN(len(keys))])
				case 7:
					s.Stats()
				}
			}
		}()
	}
	wg.Wait()
	n := 0
	for i := range s.shards {
		s.shards[i].check(t)
		n += s.shards[i].n
	}
	if st := s.Stats(); st.Keys != n {
		t.Fatalf("Stats.Keys %d, held %d", st.Keys, n)
	}
}
