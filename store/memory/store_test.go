package memory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

var _ sluice.Store = (*memory.Store)(nil)

// start is a Monday, midnight UTC: daily and fixed windows start here.
var start = time.Date(2030, 1, 7, 0, 0, 0, 0, time.UTC)

func mustLimit(t testing.TB, s string) rate.Limit {
	t.Helper()
	l, err := rate.ParseLimit(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestDecideSteps(t *testing.T) {
	ctx := context.Background()
	type step struct {
		advance   time.Duration
		key       string
		cost      int64
		allowed   bool
		remaining int64
		retry     time.Duration
		keys      int // Len after the step
	}
	tests := []struct {
		limit string
		steps []step
	}{
		{"gcra 2/s", []step{
			{0, "a", 1, true, 1, 0, 1},
			{0, "a", 1, true, 0, 0, 1},
			{0, "a", 1, false, 0, 500 * time.Millisecond, 1},
			{500 * time.Millisecond, "a", 1, true, 0, 0, 1},
			{time.Second, "a", 0, true, 2, 0, 0}, // a's bucket is full again: deleted
			{0, "b", 2, true, 0, 0, 1},
			{0, "c", 1, true, 1, 0, 2}, // each key has its own bucket
		}},
		{"token_bucket 2/s", []step{
			{0, "a", 2, true, 0, 0, 1},
			{250 * time.Millisecond, "a", 1, false, 0, 250 * time.Millisecond, 1},
			{250 * time.Millisecond, "a", 1, true, 0, 0, 1},
			{time.Second, "a", 0, true, 2, 0, 0},
		}},
		{"fixed_window 3 per 10s", []step{
			{0, "a", 3, true, 0, 0, 1},
			{9 * time.Second, "a", 1, false, 0, time.Second, 1},
			{time.Second, "a", 1, true, 2, 0, 1}, // a new window
		}},
		{"sliding_log 2 per 10s", []step{
			{0, "a", 1, true, 1, 0, 1},
			{4 * time.Second, "a", 1, true, 0, 0, 1},
			{time.Second, "a", 1, false, 0, 5 * time.Second, 1},
			{5 * time.Second, "a", 1, true, 0, 0, 1},
			{20 * time.Second, "a", 0, true, 2, 0, 0},
		}},
		{"leaky_bucket 1/s burst 2", []step{
			{0, "a", 1, true, 1, 0, 1},
			{0, "a", 1, true, 0, 0, 1},
			{0, "a", 1, false, 0, time.Second, 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.limit, func(t *testing.T) {
			clock := ratetest.NewClock(start)
			s := memory.New(memory.Options{Clock: clock})
			l := mustLimit(t, tt.limit)
			for i, st := range tt.steps {
				clock.Advance(st.advance)
				d, err := s.Decide(ctx, rate.Request{Key: st.key, Limit: l, Cost: st.cost})
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if d.Allowed != st.allowed || d.Remaining != st.remaining || d.RetryAfter != st.retry {
					t.Errorf("step %d: got %v, want allowed %t remaining %d retry %v", i, d, st.allowed, st.remaining, st.retry)
				}
				if n := s.Len(); n != st.keys {
					t.Errorf("step %d: Len() = %d, want %d", i, n, st.keys)
				}
			}
		})
	}
}

// TestMatchesSteps replays random traffic on a few keys, for every
// algorithm, against a reference that keeps every state forever in a map
// and calls the steps directly: deleting fresh keys, reclaiming expired ones
// and sharing shards must never change a decision.
func TestMatchesSteps(t *testing.T) {
	ctx := context.Background()
	limits := []string{
		"gcra 3 per 7s burst 5", "token_bucket 3 per 7s burst 5", "leaky_bucket 3 per 7s burst 2",
		"fixed_window 4 per 3s", "sliding_window 4 per 3s", "sliding_log 4 per 3s",
	}
	for _, ls := range limits {
		t.Run(ls, func(t *testing.T) {
			l := mustLimit(t, ls)
			rng := rand.New(rand.NewPCG(1, 2))
			clock := ratetest.NewClock(start)
			s := memory.New(memory.Options{Clock: clock, Shards: 2})
			ref := map[string]rate.State{}
			for i := range 20000 {
				clock.Advance(time.Duration(rng.IntN(700)) * time.Millisecond)
				key := fmt.Sprintf("k%d", rng.IntN(12))
				cost := rng.Int64N(l.Capacity() + 1)
				maxDelay := time.Duration(rng.IntN(3)) * time.Second
				r := rate.Request{Key: key, Limit: l, Cost: cost, MaxDelay: maxDelay}
				got, err := s.Decide(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				next, want := l.StepWithin(ref[key], rate.Micros(clock.Now()), cost, maxDelay)
				if want.Allowed {
					ref[key] = next
				}
				if got != want {
					t.Fatalf("request %d (%s cost %d): got %v, want %v", i, key, cost, got, want)
				}
			}
			if st := s.Stats(); st.Expired == 0 {
				t.Errorf("no key expired in 20000 requests: %+v", st)
			}
		})
	}
}

// TestMatchesStepsManyKeys is TestMatchesSteps on thousands of keys of
// every length in one shard, so that keys sit at their home slot, one
// past it and further, and the table grows and shrinks as keys come and
// go.
func TestMatchesStepsManyKeys(t *testing.T) {
	ctx := context.Background()
	l := mustLimit(t, "gcra 3 per 7s burst 5")
	rng := rand.New(rand.NewPCG(3, 4))
	clock := ratetest.NewClock(start)
	s := memory.New(memory.Options{Clock: clock, Shards: 1})
	ref := map[string]rate.State{}
	maxLen := 0
	for i := range 60000 {
		if i%1000 == 0 {
			clock.Advance(time.Duration(rng.IntN(20)) * time.Second)
		}
		n := rng.IntN(3000)
		key := fmt.Sprint(n)
		key += strings.Repeat("-", n%40) // lengths from 1 to 43
		cost := rng.Int64N(3)
		var got rate.Decision
		var err error
		if i%2 == 0 {
			got, err = s.DecideKey(ctx, key, &l, cost)
		} else {
			// DecideKeyInto writes every field, whatever was there.
			got = rate.Decision{Allowed: true, Limit: -1, Remaining: -1, ResetAfter: -1, RetryAfter: -1, Delay: -1}
			err = s.DecideKeyInto(ctx, key, &l, cost, &got)
		}
		if err != nil {
			t.Fatal(err)
		}
		next, want := l.Step(ref[key], rate.Micros(clock.Now()), cost)
		if want.Allowed {
			ref[key] = next
		}
		if got != want {
			t.Fatalf("request %d (%q cost %d): got %v, want %v", i, key, cost, got, want)
		}
		maxLen = max(maxLen, s.Len())
	}
	if maxLen < 1000 {
		t.Errorf("the store held at most %d keys: the test should fill a table", maxLen)
	}
}

func TestConcurrentOneKey(t *testing.T) {
	ctx := context.Background()
	for _, ls := range []string{"gcra 1000/h", "token_bucket 1000/h", "fixed_window 1000/h", "sliding_window 1000/h", "sliding_log 1000/h"} {
		t.Run(ls, func(t *testing.T) {
			clock := ratetest.NewClock(start.Add(time.Minute))
			s := memory.New(memory.Options{Clock: clock})
			l := mustLimit(t, ls)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 400 {
						d, err := s.Decide(ctx, rate.Request{Key: "k", Limit: l, Cost: 1})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if n := admitted.Load(); n != 1000 {
				t.Errorf("admitted %d of 3200, want exactly 1000", n)
			}
		})
	}
}

func TestConcurrentManyKeys(t *testing.T) {
	ctx := context.Background()
	clock := ratetest.NewClock(start)
	s := memory.New(memory.Options{Clock: clock, Shards: 4})
	l := mustLimit(t, "gcra 10/h")
	const keys = 200
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 0))
			for range 1000 {
				k := rng.IntN(keys)
				d, err := s.Decide(ctx, rate.Request{Key: fmt.Sprint("key-", k), Limit: l, Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	// 8000 requests over 200 keys: each key was asked about 40 times. Ask
	// every key 10 more times so that each has certainly been asked
	// enough, then count.
	for k := range keys {
		for range 10 {
			d, _ := s.Decide(ctx, rate.Request{Key: fmt.Sprint("key-", k), Limit: l, Cost: 1})
			if d.Allowed {
				admitted[k].Add(1)
			}
		}
		if n := admitted[k].Load(); n != 10 {
			t.Errorf("key-%d: admitted %d, want exactly 10", k, n)
		}
	}
	if n := s.Len(); n != keys {
		t.Errorf("Len() = %d, want %d", n, keys)
	}
}

// TestExpiryIsIncremental fills a store, lets every state become fresh,
// and checks that keys are reclaimed as requests arrive, a few at a time.
func TestExpiryIsIncremental(t *testing.T) {
	ctx := context.Background()
	clock := ratetest.NewClock(start)
	s := memory.New(memory.Options{Clock: clock, Shards: 4})
	l := mustLimit(t, "gcra 10/s")
	const n = 4000
	for i := range n {
		if _, err := s.Decide(ctx, rate.Request{Key: fmt.Sprint("k", i), Limit: l, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Len(); got != n {
		t.Fatalf("Len() = %d after %d keys, want %d", got, n, n)
	}
	clock.Advance(time.Hour) // every state is fresh again
	if got := s.Len(); got != n {
		t.Fatalf("Len() = %d before any request, want %d: nothing should run in the background", got, n)
	}
	// Requests that store nothing (cost 0 on keys never seen) still
	// reclaim expired keys in their shard, a few at a time.
	prev := n
	for i := 0; s.Len() > 0; i++ {
		if i > 3*n {
			t.Fatalf("after %d requests still %d keys", i, s.Len())
		}
		if _, err := s.Decide(ctx, rate.Request{Key: fmt.Sprint("probe-", i), Limit: l}); err != nil {
			t.Fatal(err)
		}
		got := s.Len()
		if prev-got > 32 {
			t.Fatalf("one request reclaimed %d keys; reclaiming should be incremental", prev-got)
		}
		prev = got
	}
	st := s.Stats()
	if st.Keys != 0 || st.Expired != n || st.Evictions != 0 {
		t.Errorf("Stats() = %+v, want 0 keys, %d expired, 0 evictions", st, n)
	}
}

// TestMaxKeys floods the store with random keys: it must never hold more
// than MaxKeys, and when it evicts it should pick, of keys that used as
// much of their limits, those whose state is closest to fresh.
func TestMaxKeys(t *testing.T) {
	ctx := context.Background()
	clock := ratetest.NewClock(start)
	const maxKeys = 1024
	s := memory.New(memory.Options{Clock: clock, MaxKeys: maxKeys})
	short := mustLimit(t, "gcra 10/s")       // fresh again in 100ms
	long := mustLimit(t, "fixed_window 5/d") // fresh again at midnight
	for i := range maxKeys / 2 {
		for _, r := range []rate.Request{
			{Key: fmt.Sprint("short-", i), Limit: short, Cost: 1},
			{Key: fmt.Sprint("long-", i), Limit: long, Cost: 1},
		} {
			if _, err := s.Decide(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Every shard is full: each new key evicts one.
	for i := range maxKeys / 4 {
		if _, err := s.Decide(ctx, rate.Request{Key: fmt.Sprint("new-", i), Limit: long, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		if n := s.Len(); n > maxKeys {
			t.Fatalf("Len() = %d > MaxKeys %d", n, maxKeys)
		}
	}
	held := func(prefix string, l rate.Limit) int {
		n := 0
		for i := range maxKeys / 2 {
			d, _ := s.Decide(ctx, rate.Request{Key: fmt.Sprint(prefix, i), Limit: l})
			if d.Remaining < l.Capacity() {
				n++
			}
		}
		return n
	}
	shortHeld, longHeld := held("short-", short), held("long-", long)
	st := s.Stats()
	t.Logf("held %d of %d short-lived and %d of %d long-lived keys; %+v", shortHeld, maxKeys/2, longHeld, maxKeys/2, st)
	if st.Evictions < maxKeys/4 {
		t.Errorf("Evictions = %d, want at least %d", st.Evictions, maxKeys/4)
	}
	// With 5 samples a long-lived key is picked only when all 5 are
	// long-lived: about 1 time in 10 here.
	if longHeld < maxKeys/2-maxKeys/16 || shortHeld > maxKeys/2-maxKeys/8 {
		t.Errorf("eviction did not prefer keys closest to fresh: %d short-lived, %d long-lived left", shortHeld, longHeld)
	}

	// A flood of random keys.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50000 {
		if _, err := s.Decide(ctx, rate.Request{Key: fmt.Sprint(rng.Uint64()), Limit: long, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n > maxKeys || n < maxKeys*3/4 {
		t.Errorf("Len() = %d after a flood, want at most MaxKeys %d and close to it", n, maxKeys)
	}
}

// Eviction forgets first the key that has used the least of its limit,
// whose loss lets the least through again: a flood of keys that each
// spent a little of a large daily limit (API keys a client makes up, say)
// does not push out a key that has spent all of a short one (a login's
// account), though the flood's states last longer.
func TestEvictionKeepsSpentKeys(t *testing.T) {
	ctx := context.Background()
	clock := ratetest.NewClock(start)
	s := memory.New(memory.Options{Clock: clock, MaxKeys: 64, Shards: 1})
	login := mustLimit(t, "gcra 5 per 15m")
	junk := mustLimit(t, "fixed_window 1000/d")
	victim := rate.Request{Key: "login:victim", Limit: login, Cost: 1}
	for range 5 {
		if d, err := s.Decide(ctx, victim); err != nil || !d.Allowed {
			t.Fatalf("%v, %v; want the first five allowed", d, err)
		}
	}
	for i := range 2000 {
		if _, err := s.Decide(ctx, rate.Request{Key: fmt.Sprint("key:", i), Limit: junk, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Evictions < 1900 {
		t.Fatalf("%+v: want the flood to evict", st)
	}
	if d, _ := s.Decide(ctx, victim); d.Allowed {
		t.Errorf("the spent key was evicted by a flood of barely used ones: %v", d)
	}
}

func TestUnbounded(t *testing.T) {
	ctx := context.Background()
	s := memory.New(memory.Options{Clock: ratetest.NewClock(start), MaxKeys: -1, Shards: 1})
	l := mustLimit(t, "gcra 1/h")
	for i := range 5000 {
		if _, err := s.Decide(ctx, rate.Request{Key: fmt.Sprint(i), Limit: l, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Keys != 5000 || st.Evictions != 0 {
		t.Errorf("Stats() = %+v, want 5000 keys and no eviction", st)
	}
}

// TestMaxKeysUnderShards: MaxKeys bounds the store even when it is smaller
// than the number of shards asked for.
func TestMaxKeysUnderShards(t *testing.T) {
	ctx := context.Background()
	l := mustLimit(t, "fixed_window 5/d")
	for _, maxKeys := range []int{1, 10, 63} {
		s := memory.New(memory.Options{Clock: ratetest.NewClock(start), Shards: 64, MaxKeys: maxKeys})
		for i := range 1000 {
			if _, err := s.Decide(ctx, rate.Request{Key: fmt.Sprint(i), Limit: l, Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if n := s.Len(); n > maxKeys || n == 0 {
			t.Errorf("MaxKeys %d over 64 shards: Len() = %d after 1000 keys, want at most %d", maxKeys, n, maxKeys)
		}
	}
}

// TestMaxKeysAfterDecideAll: a DecideAll over more new keys than a shard
// may hold takes the shard over its bound (it does not forget a state it
// has just written); the next new keys bring it back under.
func TestMaxKeysAfterDecideAll(t *testing.T) {
	ctx := context.Background()
	l := mustLimit(t, "fixed_window 5/d")
	const maxKeys = 3
	s := memory.New(memory.Options{Clock: ratetest.NewClock(start), Shards: 1, MaxKeys: maxKeys})
	reqs := make([]rate.Request, 6)
	for i := range reqs {
		reqs[i] = rate.Request{Key: fmt.Sprint("all-", i), Limit: l, Cost: 1}
	}
	if _, err := s.DecideAll(ctx, reqs, make([]rate.Decision, len(reqs))); err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n != len(reqs) {
		t.Fatalf("after a DecideAll over %d new keys: Len() = %d, want all %d kept", len(reqs), n, len(reqs))
	}
	for i := range 3 {
		if _, err := s.Decide(ctx, rate.Request{Key: fmt.Sprint("one-", i), Limit: l, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		if n := s.Len(); n > maxKeys {
			t.Errorf("after %d more new keys: Len() = %d, want at most MaxKeys %d", i+1, n, maxKeys)
		}
	}
}

// TestExpiryPastTicks: a state that is fresh again only after the last
// tick 32 bits hold (in September 2112) is never reclaimed before then.
func TestExpiryPastTicks(t *testing.T) {
	ctx := context.Background()
	// Noon, on the day of the last tick: the day's window ends past it.
	clock := ratetest.NewClock(time.Date(2112, 9, 17, 12, 0, 0, 0, time.UTC))
	s := memory.New(memory.Options{Clock: clock, Shards: 1})
	l := mustLimit(t, "fixed_window 5/d")
	if d, err := s.Decide(ctx, rate.Request{Key: "k", Limit: l, Cost: 5}); err != nil || !d.Allowed {
		t.Fatalf("first request: %v, %v; want allowed", d, err)
	}
	// Past the last tick, before midnight: decisions on other keys
	// (cost 0, they store nothing) move the sweeper over k many times.
	clock.Advance(11*time.Hour + 55*time.Minute)
	for i := range 200 {
		if _, err := s.Decide(ctx, rate.Request{Key: fmt.Sprint("other-", i), Limit: l}); err != nil {
			t.Fatal(err)
		}
	}
	if d, _ := s.Decide(ctx, rate.Request{Key: "k", Limit: l, Cost: 1}); d.Allowed {
		t.Errorf("at 23:55 a sixth request of a daily 5 was allowed (%v): the day's count was reclaimed before midnight", d)
	}
	if st := s.Stats(); st.Keys != 1 || st.Expired != 0 {
		t.Errorf("Stats() = %+v, want k held and nothing expired", st)
	}
}

func TestNoAllocsForExistingKey(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters allocate")
	}
	ctx := context.Background()
	for _, ls := range []string{"gcra 1000000000/s", "token_bucket 1000000/s", "leaky_bucket 1000000/s", "fixed_window 1000000000/h", "sliding_window 100000/s"} {
		for _, clock := range []rate.Clock{rate.SystemClock{}, ratetest.NewClock(start)} {
			t.Run(fmt.Sprintf("%s/%T", ls, clock), func(t *testing.T) {
				s := memory.New(memory.Options{Clock: clock})
				l := mustLimit(t, ls)
				r := rate.Request{Key: "user:12345", Limit: l, Cost: 1}
				for i := range 100 {
					// Other keys in the store, and the key itself.
					_, _ = s.Decide(ctx, rate.Request{Key: fmt.Sprint("other:", i), Limit: l, Cost: 1})
				}
				if _, err := s.Decide(ctx, r); err != nil {
					t.Fatal(err)
				}
				if n := testing.AllocsPerRun(1000, func() { _, _ = s.Decide(ctx, r) }); n != 0 {
					t.Errorf("Decide on an existing key: %v allocations, want 0", n)
				}
				var d rate.Decision
				if n := testing.AllocsPerRun(1000, func() { _ = s.DecideKeyInto(ctx, r.Key, &l, 1, &d) }); n != 0 {
					t.Errorf("DecideKeyInto on an existing key: %v allocations, want 0", n)
				}
				if n := testing.AllocsPerRun(1000, func() { _, _ = s.DecideKey(ctx, r.Key, &l, 1) }); n != 0 {
					t.Errorf("DecideKey on an existing key: %v allocations, want 0", n)
				}
				reqs := []rate.Request{r, {Key: "other:7", Limit: l, Cost: 1}}
				out := make([]rate.Decision, 2)
				if n := testing.AllocsPerRun(1000, func() { _, _ = s.DecideAll(ctx, reqs, out) }); n != 0 {
					t.Errorf("DecideAll on existing keys: %v allocations, want 0", n)
				}
			})
		}
	}
}

// TestDecideAllAllOrNothing: a request the daily limit refuses consumes
// nothing from the per-second one.
func TestDecideAllAllOrNothing(t *testing.T) {
	ctx := context.Background()
	clock := ratetest.NewClock(start)
	s := memory.New(memory.Options{Clock: clock})
	perSecond, daily := mustLimit(t, "gcra 10/s"), mustLimit(t, "fixed_window 3/d")
	reqs := []rate.Request{
		{Key: "alice|10/s", Limit: perSecond, Cost: 1},
		{Key: "alice|3/d", Limit: daily, Cost: 1},
	}
	out := make([]rate.Decision, 2)
	for i := range 3 {
		d, err := s.DecideAll(ctx, reqs, out)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("request %d: got %v, want allowed with %d remaining (the daily limit)", i, d, 2-i)
		}
	}
	peek := func() int64 {
		d, _ := s.Decide(ctx, rate.Request{Key: "alice|10/s", Limit: perSecond})
		return d.Remaining
	}
	before := peek()
	if before != 7 {
		t.Fatalf("per-second remaining %d after 3 requests, want 7", before)
	}
	d, err := s.DecideAll(ctx, reqs, out)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.RetryAfter != 24*time.Hour {
		t.Errorf("4th request: got %v, want refused until midnight", d)
	}
	if !out[0].Allowed || out[0].Remaining != 7 || out[1].Allowed {
		t.Errorf("4th request: out = %v, want the per-second limit to pass on its own with 7 remaining (nothing taken) and the daily one to refuse", out)
	}
	if after := peek(); after != before {
		t.Errorf("the refused request took from the per-second limit: remaining %d, was %d", after, before)
	}
}

func TestDecideAllSameKeyTwice(t *testing.T) {
	ctx := context.Background()
	clock := ratetest.NewClock(start)
	s := memory.New(memory.Options{Clock: clock})
	l := mustLimit(t, "fixed_window 3/h")
	remaining := func() int64 {
		d, _ := s.Decide(ctx, rate.Request{Key: "k", Limit: l})
		return d.Remaining
	}
	out := make([]rate.Decision, 2)
	twice := func(cost int64) rate.Decision {
		t.Helper()
		d, err := s.DecideAll(ctx, []rate.Request{{Key: "k", Limit: l, Cost: cost}, {Key: "k", Limit: l, Cost: cost}}, out)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// 2 + 2 > 3: the second sees the first's state and refuses, so the
	// whole takes nothing.
	if d := twice(2); d.Allowed {
		t.Errorf("2+2 of 3: got %v, want refused", d)
	}
	if !out[0].Allowed || out[1].Allowed {
		t.Errorf("2+2 of 3: out = %v, want the first alone to pass and the second to refuse", out)
	}
	if r := remaining(); r != 3 {
		t.Errorf("after a refused 2+2: remaining %d, want 3", r)
	}
	if d := twice(1); !d.Allowed || d.Remaining != 1 {
		t.Errorf("1+1 of 3: got %v, want allowed with 1 remaining", d)
	}
	if r := remaining(); r != 1 {
		t.Errorf("after 1+1: remaining %d, want 1", r)
	}
}

// TestDecideAllConcurrent has callers take pairs of keys in opposite
// orders, which deadlocks unless the shards are locked in one order, and
// counts what a shared key admitted.
func TestDecideAllConcurrent(t *testing.T) {
	ctx := context.Background()
	clock := ratetest.NewClock(start)
	s := memory.New(memory.Options{Clock: clock, Shards: 8})
	shared, own := mustLimit(t, "gcra 500/h"), mustLimit(t, "gcra 100/h")
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			mine := rate.Request{Key: fmt.Sprint("own-", g), Limit: own, Cost: 1}
			common := rate.Request{Key: "shared", Limit: shared, Cost: 1}
			reqs := []rate.Request{mine, common}
			if g%2 == 1 {
				reqs = []rate.Request{common, mine}
			}
			out := make([]rate.Decision, 2)
			for range 150 {
				d, err := s.DecideAll(ctx, reqs, out)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// Each of 8 callers can pass at most 100 times (its own limit) and all
	// together at most 500 times (the shared one); they ask 150 times each.
	if n := admitted.Load(); n != 500 {
		t.Errorf("admitted %d, want exactly 500", n)
	}
	// Refused calls took nothing from the callers' own limits either.
	var taken int64
	for g := range 8 {
		d, _ := s.Decide(ctx, rate.Request{Key: fmt.Sprint("own-", g), Limit: own})
		taken += 100 - d.Remaining
	}
	if taken != 500 {
		t.Errorf("the callers' own limits lost %d units in all, want 500", taken)
	}
}

func TestInvalidRequests(t *testing.T) {
	ctx := context.Background()
	s := memory.New(memory.Options{Clock: ratetest.NewClock(start)})
	l := mustLimit(t, "gcra 10/s burst 20")
	ok := rate.Request{Key: "a", Limit: l, Cost: 1}
	tests := []struct {
		name string
		r    rate.Request
		want error
	}{
		{"cost over burst", rate.Request{Key: "a", Limit: l, Cost: 21}, rate.ErrCostExceedsCapacity},
		{"negative cost", rate.Request{Key: "a", Limit: l, Cost: -1}, rate.ErrNegativeCost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Decide(ctx, tt.r); !errors.Is(err, tt.want) {
				t.Errorf("Decide: err = %v, want %v", err, tt.want)
			}
			out := make([]rate.Decision, 2)
			if _, err := s.DecideAll(ctx, []rate.Request{ok, tt.r}, out); !errors.Is(err, tt.want) {
				t.Errorf("DecideAll: err = %v, want %v", err, tt.want)
			}
			if s.Len() != 0 {
				t.Errorf("an invalid request stored %d keys", s.Len())
			}
		})
	}
	// The steps need a valid limit; the zero Limit would divide by zero.
	for _, bad := range []rate.Limit{{}, {Count: 1, Period: time.Nanosecond}, {Count: 5, Calendar: rate.Month}} {
		r := rate.Request{Key: "a", Limit: bad}
		if _, err := s.Decide(ctx, r); err == nil || !strings.Contains(err.Error(), "invalid limit") {
			t.Errorf("Decide with limit %+v: err = %v, want invalid limit", bad, err)
		}
		if _, err := s.DecideAll(ctx, []rate.Request{ok, r}, make([]rate.Decision, 2)); err == nil {
			t.Errorf("DecideAll with limit %+v: no error", bad)
		}
	}
	monthly := rate.Request{Key: "m", Limit: mustLimit(t, "10/month"), Cost: 1}
	if d, err := s.Decide(ctx, monthly); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Errorf("a monthly limit: %v, %v; want allowed with 9 left", d, err)
	}
	if _, err := s.DecideAll(ctx, []rate.Request{ok, ok}, make([]rate.Decision, 1)); err == nil {
		t.Error("DecideAll with a short out: no error")
	}
	if d, err := s.DecideAll(ctx, nil, nil); err != nil || !d.Allowed {
		t.Errorf("DecideAll of nothing = %v, %v; want allowed", d, err)
	}
}

func TestManyRequestsInOneCall(t *testing.T) {
	ctx := context.Background()
	s := memory.New(memory.Options{Clock: ratetest.NewClock(start), Shards: 4})
	l := mustLimit(t, "fixed_window 2/h")
	reqs := make([]rate.Request, 20) // more than fit on the stack
	for i := range reqs {
		reqs[i] = rate.Request{Key: fmt.Sprint("k", i%10), Limit: l, Cost: 1}
	}
	out := make([]rate.Decision, len(reqs))
	if d, err := s.DecideAll(ctx, reqs, out); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("first call = %v, %v; want allowed with 0 remaining", d, err)
	}
	if d, err := s.DecideAll(ctx, reqs, out); err != nil || d.Allowed {
		t.Fatalf("second call = %v, %v; want refused", d, err)
	}
	if n := s.Len(); n != 10 {
		t.Errorf("Len() = %d, want 10", n)
	}
}

func TestDefaults(t *testing.T) {
	s := memory.New(memory.Options{})
	d, err := s.Decide(context.Background(), rate.Request{Key: "a", Limit: mustLimit(t, "1/h"), Cost: 1})
	if err != nil || !d.Allowed || d.ResetAfter != time.Hour {
		t.Errorf("system clock, default options: %v, %v", d, err)
	}
}

// TestSystemClock checks the store's reading of the system clock against
// time.Now: the same microsecond, give or take the one that the gap
// between time.Now's two clock reads can tip over.
func TestSystemClock(t *testing.T) {
	s := memory.New(memory.Options{})
	l := mustLimit(t, "fixed_window 1/h")
	for i := range 200 {
		before := time.Now()
		// A fixed window's ResetAfter is the end of the hour minus now, so
		// it gives back the store's now to the microsecond.
		d, err := s.Decide(context.Background(), rate.Request{Key: fmt.Sprint(i), Limit: l, Cost: 1})
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		end := before.Truncate(time.Hour).Add(time.Hour)
		if after.After(end) {
			continue // the hour turned
		}
		now := end.Add(-d.ResetAfter)
		if now.Before(before.Add(-time.Microsecond)) || now.After(after.Add(time.Microsecond)) {
			t.Fatalf("the store's now is %v, outside [%v, %v]", now, before, after)
		}
	}
}

// TestKeyLengths decides keys of every length from 0 to 100 bytes, which
// take every path the store has: hashed inline or not, kept in the entry
// or in the arena. Decide, DecideKey and DecideAll must all find the state
// the others left.
func TestKeyLengths(t *testing.T) {
	ctx := context.Background()
	s := memory.New(memory.Options{Clock: ratetest.NewClock(start), Shards: 4})
	l := mustLimit(t, "fixed_window 10/h")
	out := make([]rate.Decision, 1)
	for n := range 101 {
		key := strings.Repeat("k", n)
		if n > 0 {
			key = key[:n-1] + string(rune('a'+n%26)) // keys of one length differ in their last byte
		}
		for i := range 3 {
			var d rate.Decision
			var err error
			switch i {
			case 0:
				d, err = s.Decide(ctx, rate.Request{Key: key, Limit: l, Cost: 1})
			case 1:
				d, err = s.DecideKey(ctx, key, &l, 1)
			case 2:
				d, err = s.DecideAll(ctx, []rate.Request{{Key: key, Limit: l, Cost: 1}}, out)
			}
			if err != nil || !d.Allowed || d.Remaining != int64(9-i) {
				t.Fatalf("key of %d bytes, request %d: %v, %v; want allowed with %d left", n, i, d, err, 9-i)
			}
		}
	}
	if got := s.Len(); got != 101 {
		t.Errorf("Len() = %d, want 101", got)
	}
}

func TestDecideKeyErrors(t *testing.T) {
	ctx := context.Background()
	s := memory.New(memory.Options{Clock: ratetest.NewClock(start)})
	l := mustLimit(t, "gcra 10/s burst 20")
	if _, err := s.DecideKey(ctx, "a", &l, 21); !errors.Is(err, rate.ErrCostExceedsCapacity) {
		t.Errorf("cost over burst: err = %v, want %v", err, rate.ErrCostExceedsCapacity)
	}
	var zero rate.Limit
	if _, err := s.DecideKey(ctx, "a", &zero, 1); err == nil || !strings.Contains(err.Error(), "invalid limit") {
		t.Errorf("zero limit: err = %v, want invalid limit", err)
	}
	if s.Len() != 0 {
		t.Errorf("invalid requests stored %d keys", s.Len())
	}
}

// TestBoundsOfLimits: a limit past the bounds of rate.Limit.Validate (a
// count times a period beyond exact arithmetic, a sliding_log that would
// keep millions of timestamps a key) is refused with Check's error by
// Decide, DecideKey and DecideAll alike, as the Redis store refuses it; a
// limit at those bounds is decided.
func TestBoundsOfLimits(t *testing.T) {
	ctx := context.Background()
	const us = time.Microsecond
	hour := int64(time.Hour / us)
	day := 24 * time.Hour
	tests := []struct {
		limit rate.Limit
		ok    bool
	}{
		{rate.Limit{Algorithm: rate.GCRA, Count: rate.MaxExact / hour, Period: time.Hour}, true},
		{rate.Limit{Algorithm: rate.GCRA, Count: rate.MaxExact/hour + 1, Period: time.Hour}, false},
		{rate.Limit{Algorithm: rate.GCRA, Count: 1 << 40, Period: 1 << 24 * us}, false}, // count × period wraps to 0
		{rate.Limit{Algorithm: rate.TokenBucket, Count: 10, Burst: rate.MaxExact/hour + 1, Period: time.Hour}, false},
		{rate.Limit{Algorithm: rate.LeakyBucket, Count: rate.MaxExact/hour + 1, Period: time.Hour}, false},
		{rate.Limit{Algorithm: rate.SlidingWindow, Count: rate.MaxExact / hour, Period: time.Hour}, true},
		{rate.Limit{Algorithm: rate.SlidingWindow, Count: rate.MaxExact/hour + 1, Period: time.Hour}, false},
		{rate.Limit{Algorithm: rate.FixedWindow, Count: rate.MaxExact, Period: day}, true},
		{rate.Limit{Algorithm: rate.FixedWindow, Count: rate.MaxExact + 1, Period: day}, false},
		{rate.Limit{Algorithm: rate.FixedWindow, Count: 1, Period: rate.MaxExact * us}, true},
		{rate.Limit{Algorithm: rate.FixedWindow, Count: 1, Period: (rate.MaxExact + 1) * us}, false},
		{rate.Limit{Algorithm: rate.SlidingLog, Count: rate.MaxLogCount, Period: day}, true},
		{rate.Limit{Algorithm: rate.SlidingLog, Count: rate.MaxLogCount + 1, Period: time.Second}, false},
		{rate.Limit{Algorithm: rate.SlidingLog, Count: rate.MaxLogCount + 1, Period: day}, false},
		{rate.Limit{Algorithm: rate.SlidingLog, Count: 2, Period: (rate.MaxExact + 1) * us}, false},
		{rate.Limit{Algorithm: rate.SlidingLog, Count: 1 << 40, Period: time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.limit.String(), func(t *testing.T) {
			s := memory.New(memory.Options{Clock: ratetest.NewClock(start)})
			r := rate.Request{Key: "k", Limit: tt.limit, Cost: 1}
			want := r.Check()
			if (want == nil) != tt.ok {
				t.Fatalf("Check() = %v: the test's limit is on the wrong side of the bound", want)
			}
			expect := func(name string, d rate.Decision, err error) {
				t.Helper()
				switch {
				case want == nil && (err != nil || !d.Allowed || d.Remaining != tt.limit.Capacity()-1):
					t.Errorf("%s: %v, %v; want allowed with %d left", name, d, err, tt.limit.Capacity()-1)
				case want != nil && (err == nil || err.Error() != "memory store: "+want.Error()):
					t.Errorf("%s: %v, %v; want the error %q", name, d, err, "memory store: "+want.Error())
				}
			}
			d, err := s.Decide(ctx, r)
			expect("Decide", d, err)
			s = memory.New(memory.Options{Clock: ratetest.NewClock(start)})
			d, err = s.DecideKey(ctx, r.Key, &r.Limit, r.Cost)
			expect("DecideKey", d, err)
			s = memory.New(memory.Options{Clock: ratetest.NewClock(start)})
			d, err = s.DecideAll(ctx, []rate.Request{r}, make([]rate.Decision, 1))
			expect("DecideAll", d, err)
			if want != nil && s.Len() != 0 {
				t.Errorf("an invalid request stored %d keys", s.Len())
			}
		})
	}
	// Stepping this one would ask for 2^61 timestamps and panic with the
	// shard's lock held, leaving every key of the shard stuck.
	huge := rate.Limit{Algorithm: rate.SlidingLog, Count: 1 << 60, Period: time.Second}
	s := memory.New(memory.Options{Clock: ratetest.NewClock(start)})
	if _, err := s.Decide(ctx, rate.Request{Key: "k", Limit: huge, Cost: huge.Count}); err == nil {
		t.Errorf("%v at full cost: no error", huge)
	}
}
