package memory

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
)

// resetStart is a Monday, midnight UTC, so that windows start on it.
var resetStart = time.Date(2030, 1, 7, 0, 0, 0, 0, time.UTC)

// spend decides cost-1 requests for key under lim until one is refused,
// and returns how many were admitted. It fails the test past 1000.
func spend(t *testing.T, s *Store, key string, lim rate.Limit) int {
	t.Helper()
	for n := 0; n <= 1000; n++ {
		d, err := s.Decide(context.Background(), rate.Request{Key: key, Limit: lim, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			return n
		}
	}
	t.Fatalf("%s: %v admitted more than 1000", key, lim)
	return 0
}

// A spent key that is reset passes its whole burst again at once, under
// every algorithm, while the keys not reset stay spent; keys the store
// does not hold are no error. The shards stay consistent (a sliding_log's
// timestamps are freed with its entry), and Len and Stats count the keys
// left, with no eviction or expiry for a reset.
func TestReset(t *testing.T) {
	ctx := context.Background()
	for _, ls := range []string{"gcra 5/h", "token_bucket 5/h", "leaky_bucket 5/h", "fixed_window 5/h", "sliding_window 5/h", "sliding_log 5/h"} {
		t.Run(ls, func(t *testing.T) {
			lim, err := rate.ParseLimit(ls)
			if err != nil {
				t.Fatal(err)
			}
			clock := ratetest.NewClock(resetStart.Add(time.Minute))
			s := New(Options{Clock: clock, Shards: 1})
			want := spend(t, s, "a", lim)
			if want == 0 {
				t.Fatalf("%v admitted nothing", lim)
			}
			for _, k := range []string{"b", "a long key that does not fit in its entry"} {
				if got := spend(t, s, k, lim); got != want {
					t.Fatalf("%s: admitted %d, want %d", k, got, want)
				}
			}
			if n := s.Len(); n != 3 {
				t.Fatalf("Len = %d before the reset, want 3", n)
			}
			clock.Advance(time.Second)
			if err := s.Reset(ctx, "a", "a long key that does not fit in its entry", "never seen"); err != nil {
				t.Fatal(err)
			}
			if n := s.Len(); n != 1 {
				t.Errorf("Len = %d after resetting two of three keys, want 1", n)
			}
			if st := s.Stats(); st.Keys != 1 || st.Evictions != 0 || st.Expired != 0 {
				t.Errorf("Stats = %+v after the reset, want 1 key, no eviction, nothing expired", st)
			}
			s.shards[0].check(t)
			if len(s.shards[0].logs)-len(s.shards[0].freeLogs) > 1 {
				t.Errorf("%d sliding_log timestamps held for one key", len(s.shards[0].logs)-len(s.shards[0].freeLogs))
			}
			for _, k := range []string{"a", "a long key that does not fit in its entry"} {
				if got := spend(t, s, k, lim); got != want {
					t.Errorf("%s after its reset: admitted %d, want the whole %d again", k, got, want)
				}
			}
			if got := spend(t, s, "b", lim); got != 0 {
				t.Errorf("b, not reset: admitted %d, want 0", got)
			}
			s.shards[0].check(t)
		})
	}
}

// Resetting every key of a shard of sliding_log keys gives its side
// tables back, as deciding them fresh would.
func TestResetFreesLogs(t *testing.T) {
	lim := rate.Limit{Algorithm: rate.SlidingLog, Count: 3, Period: time.Hour}
	s := New(Options{Clock: ratetest.NewClock(resetStart), Shards: 1})
	var keys []string
	for i := range 100 {
		keys = append(keys, fmt.Sprint("k", i))
		spend(t, s, keys[i], lim)
	}
	if err := s.Reset(context.Background(), keys...); err != nil {
		t.Fatal(err)
	}
	sh := &s.shards[0]
	sh.check(t)
	if sh.n != 0 || sh.logs != nil || len(sh.table) > minSlots || sh.arena != nil {
		t.Errorf("after resetting every key: %d keys, %d logs, %d slots, %d bytes of arena", sh.n, len(sh.logs), len(sh.table), len(sh.arena))
	}
}

// Resets concurrent with decisions on the same key, under -race: a reset
// takes the shard's lock as decisions do, so the shard stays consistent,
// and the key's state after the last reset is fresh.
func TestResetConcurrent(t *testing.T) {
	ctx := context.Background()
	lim := rate.Limit{Algorithm: rate.SlidingLog, Count: 2, Period: time.Hour}
	s := New(Options{Clock: ratetest.NewClock(resetStart), Shards: 1})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 300 {
				if _, err := s.Decide(ctx, rate.Request{Key: "k", Limit: lim, Cost: 1}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 300 {
			if err := s.Reset(ctx, "k", "other"); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	s.shards[0].check(t)
	if err := s.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if got := spend(t, s, "k", lim); got != 2 {
		t.Errorf("after the last reset: admitted %d, want 2", got)
	}
}
