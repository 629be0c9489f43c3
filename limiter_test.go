package sluice_test

import (
	"context"
	"errors"
	"fmt"
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

// start is midnight UTC, far enough ahead that a real context deadline
// set relative to the fake clock never fires during a test.
var start = time.Date(2100, 1, 4, 0, 0, 0, 0, time.UTC)

func limits(t testing.TB, ss ...string) []rate.Limit {
	t.Helper()
	var ls []rate.Limit
	for _, s := range ss {
		l, err := rate.ParseLimit(s)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	return ls
}

func newLimiter(t testing.TB, clock rate.Clock, ls ...string) *sluice.Limiter {
	t.Helper()
	lim, err := sluice.NewLimiter(sluice.LimiterOptions{Limits: limits(t, ls...), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// withDeadline returns a context whose deadline is d after the fake
// clock's now.
func withDeadline(t *testing.T, clock *ratetest.Clock, d time.Duration) context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(d))
	t.Cleanup(cancel)
	return ctx
}

func TestNewLimiterValidates(t *testing.T) {
	tests := []struct {
		name string
		opts sluice.LimiterOptions
		want string
	}{
		{"no limit", sluice.LimiterOptions{}, "at least one limit"},
		{"invalid limit", sluice.LimiterOptions{Limits: []rate.Limit{{Count: 0, Period: time.Second}}}, "count must be at least 1"},
		{"second invalid", sluice.LimiterOptions{Limits: []rate.Limit{{Count: 1, Period: time.Second}, {Count: 1}}}, "limit 2"},
		{"same limit twice", sluice.LimiterOptions{Limits: limits(t, "10/s", "1000/d", "10/s")}, "limits 1 and 3 are both gcra 10/s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sluice.NewLimiter(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestNewLimiterNames: a name the rate limit headers could not write as
// it is (RFC 9651 strings hold printable ASCII) is refused, so that the
// headers and a problem body always name a limit the same way; any
// printable ASCII name is kept, escapes and all.
func TestNewLimiterNames(t *testing.T) {
	for _, name := range []string{"é", "café", "a\tb", "a\nb", "\x00", "a\x7f", "\xff"} {
		_, err := sluice.NewLimiter(sluice.LimiterOptions{Name: name, Limits: limits(t, "10/s")})
		if err == nil || !strings.Contains(err.Error(), "printable ASCII") || !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Errorf("name %q: err = %v, want one naming it and the rule (printable ASCII)", name, err)
		}
	}
	for _, name := range []string{"", "api", "a b", `we"ird\`, "a:b{c}%", "~!"} {
		if _, err := sluice.NewLimiter(sluice.LimiterOptions{Name: name, Limits: limits(t, "10/s")}); err != nil {
			t.Errorf("name %q: %v, want accepted", name, err)
		}
	}
}

func TestAllow(t *testing.T) {
	ctx := context.Background()
	clock := ratetest.NewClock(start)
	lim := newLimiter(t, clock, "2/s burst 3")
	steps := []struct {
		advance   time.Duration
		cost      int64
		allowed   bool
		remaining int64
		retry     time.Duration
	}{
		{0, 1, true, 2, 0},
		{0, 2, true, 0, 0},
		{0, 1, false, 0, 500 * time.Millisecond},
		{500 * time.Millisecond, 1, true, 0, 0},
		{0, 2, false, 0, time.Second},
		{time.Second, 2, true, 0, 0},
		{2 * time.Second, 0, true, 3, 0},
	}
	for i, st := range steps {
		clock.Advance(st.advance)
		var d rate.Decision
		var err error
		if st.cost == 1 {
			d, err = lim.Allow(ctx, "alice")
		} else {
			d, err = lim.AllowN(ctx, "alice", st.cost)
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Allowed != st.allowed || d.Remaining != st.remaining || d.RetryAfter != st.retry || d.Limit != 3 {
			t.Errorf("step %d: got %v, want allowed %t remaining %d retry %v", i, d, st.allowed, st.remaining, st.retry)
		}
	}
	// Other keys have their own state.
	if d, _ := lim.AllowN(ctx, "bob", 3); !d.Allowed {
		t.Errorf("bob: %v, want allowed", d)
	}
}

func TestAllowNInvalidCost(t *testing.T) {
	ctx := context.Background()
	for _, ls := range [][]string{{"10/s burst 20"}, {"10/s burst 20", "100/h"}} {
		lim := newLimiter(t, ratetest.NewClock(start), ls...)
		if _, err := lim.AllowN(ctx, "k", 21); !errors.Is(err, rate.ErrCostExceedsCapacity) {
			t.Errorf("%v: cost 21: err = %v, want ErrCostExceedsCapacity", ls, err)
		}
		if _, err := lim.AllowN(ctx, "k", -1); !errors.Is(err, rate.ErrNegativeCost) {
			t.Errorf("%v: cost -1: err = %v, want ErrNegativeCost", ls, err)
		}
		if err := lim.WaitN(ctx, "k", 21); !errors.Is(err, rate.ErrCostExceedsCapacity) {
			t.Errorf("%v: WaitN(21): err = %v, want ErrCostExceedsCapacity", ls, err)
		}
	}
}

func TestAllowDoesNotAllocate(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters allocate")
	}
	ctx := context.Background()
	lim := newLimiter(t, nil, "1000000000/s")
	if _, err := lim.Allow(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = lim.Allow(ctx, "alice") }); n != 0 {
		t.Errorf("Allow on a held key: %v allocations, want 0", n)
	}
}

func TestWaitRefusesWhatTheDeadlineCannotCover(t *testing.T) {
	clock := ratetest.NewClock(start)
	lim := newLimiter(t, clock, "1/s")
	if d, _ := lim.Allow(context.Background(), "alice"); !d.Allowed {
		t.Fatalf("first request refused: %v", d)
	}
	err := lim.Wait(withDeadline(t, clock, 500*time.Millisecond), "alice")
	if !errors.Is(err, sluice.ErrWouldExceedDeadline) {
		t.Fatalf("Wait = %v, want ErrWouldExceedDeadline", err)
	}
	if !strings.Contains(err.Error(), "wait 1s, 500ms left") {
		t.Errorf("error %q does not say how long it would have waited", err)
	}
	if slept, n := clock.Slept(); slept != 0 || n != 0 {
		t.Errorf("Wait slept %v in %d calls before refusing; it should refuse at once", slept, n)
	}
	if !clock.Now().Equal(start) {
		t.Errorf("the clock moved to %v", clock.Now())
	}
	// Nothing was consumed: a second later the request passes.
	clock.Advance(time.Second)
	if d, _ := lim.Allow(context.Background(), "alice"); !d.Allowed {
		t.Errorf("after 1s: %v, want allowed", d)
	}
}

func TestWaitSleepsRetryAfter(t *testing.T) {
	clock := ratetest.NewClock(start)
	lim := newLimiter(t, clock, "1/s")
	ctx := withDeadline(t, clock, 2*time.Second)
	for i := range 3 {
		if err := lim.Wait(ctx, "alice"); err != nil && i < 2 {
			t.Fatalf("Wait %d: %v", i, err)
		} else if i == 2 && !errors.Is(err, sluice.ErrWouldExceedDeadline) {
			// Requests at 0s and 1s; the next at 2s is at the deadline.
			t.Fatalf("Wait %d: %v, want ErrWouldExceedDeadline", i, err)
		}
	}
	if slept, n := clock.Slept(); slept != time.Second || n != 1 {
		t.Errorf("slept %v in %d calls, want exactly 1s in 1", slept, n)
	}
	// Without a deadline it waits as long as it takes.
	if err := lim.WaitN(context.Background(), "alice", 1); err != nil {
		t.Fatal(err)
	}
	if got := clock.Now().Sub(start); got != 2*time.Second {
		t.Errorf("third request passed at +%v, want +2s", got)
	}
}

func TestWaitLeakyBucket(t *testing.T) {
	t.Run("sleeps until its turn", func(t *testing.T) {
		clock := ratetest.NewClock(start)
		lim := newLimiter(t, clock, "leaky_bucket 1/s burst 3")
		for i := range 3 {
			if err := lim.Wait(context.Background(), "q"); err != nil {
				t.Fatal(err)
			}
			if got := clock.Now().Sub(start); got != time.Duration(i)*time.Second {
				t.Errorf("request %d went ahead at +%v, want +%ds", i, got, i)
			}
		}
	})
	// Two requests are queued, then Wait has until the deadline to go
	// ahead: it takes a place only if its turn comes before then.
	for _, tt := range []struct {
		name     string
		limit    string
		deadline time.Duration
		// turn is when Wait's request goes ahead, or, if it cannot before
		// the deadline, how long it would have to wait.
		turn     time.Duration
		passes   bool
		leftOver int64 // places left in the queue afterwards
	}{
		// The next turn is 2s away, after the deadline: no place is taken.
		{"turn after the deadline", "leaky_bucket 1/s burst 3", 1500 * time.Millisecond, 2 * time.Second, false, 1},
		// The queue is full for 1s; then a place frees and its turn comes
		// 1s later, at +2s: within the 2.5s left. Then only Wait's own
		// request is in the queue.
		{"queue full, turn before the deadline", "leaky_bucket 1/s burst 2", 2500 * time.Millisecond, 2 * time.Second, true, 1},
		// A place frees in 1s, within the 1.5s left, but the turn would
		// come at +2s: waiting for the place would be in vain.
		{"queue full, turn after the deadline", "leaky_bucket 1/s burst 2", 1500 * time.Millisecond, 2 * time.Second, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := ratetest.NewClock(start)
			lim := newLimiter(t, clock, tt.limit)
			for range 2 {
				if d, _ := lim.Allow(context.Background(), "q"); !d.Allowed {
					t.Fatal(d)
				}
			}
			err := lim.Wait(withDeadline(t, clock, tt.deadline), "q")
			if tt.passes {
				if err != nil {
					t.Fatal(err)
				}
				if got := clock.Now().Sub(start); got != tt.turn {
					t.Errorf("went ahead at +%v, want +%v", got, tt.turn)
				}
			} else {
				if want := fmt.Sprintf("wait %v", tt.turn); !errors.Is(err, sluice.ErrWouldExceedDeadline) || !strings.Contains(err.Error(), want) {
					t.Errorf("Wait = %v, want ErrWouldExceedDeadline saying %q", err, want)
				}
				if slept, _ := clock.Slept(); slept != 0 {
					t.Errorf("slept %v, want 0", slept)
				}
			}
			if d, _ := lim.AllowN(context.Background(), "q", 0); d.Remaining != tt.leftOver {
				t.Errorf("queue has %d places left, want %d", d.Remaining, tt.leftOver)
			}
		})
	}
}

func TestWaitContext(t *testing.T) {
	clock := ratetest.NewClock(start)
	lim := newLimiter(t, clock, "1/s")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := lim.Wait(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
	if err := lim.Wait(withDeadline(t, clock, -time.Second), "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline passed on the clock: %v, want context.DeadlineExceeded", err)
	}
	if d, _ := lim.AllowN(context.Background(), "a", 0); d.Remaining != 1 {
		t.Errorf("a Wait that did not start consumed %d", 1-d.Remaining)
	}
}

// TestMultiLimitAllOrNothing: a request refused by the daily limit
// consumes nothing from the per-second one.
func TestMultiLimitAllOrNothing(t *testing.T) {
	ctx := context.Background()
	clock := ratetest.NewClock(start)
	lim := newLimiter(t, clock, "10/s", "fixed_window 3/d")
	for i := range 3 {
		d, err := lim.Allow(ctx, "alice")
		if err != nil || !d.Allowed || d.Remaining != int64(2-i) || d.Limit != 3 {
			t.Fatalf("request %d: %v, %v; want allowed, %d left of the daily 3", i, d, err, 2-i)
		}
	}
	d, err := lim.Allow(ctx, "alice")
	if err != nil || d.Allowed || d.RetryAfter != 24*time.Hour {
		t.Fatalf("4th request: %v, %v; want refused until midnight", d, err)
	}
	perSecond := lim.Requests("alice", 0)[0]
	got, err := lim.Store().Decide(ctx, perSecond)
	if err != nil || got.Remaining != 7 {
		t.Errorf("per-second limit: %v, %v; want 7 left (3 taken, none by the refused request)", got, err)
	}
	if n := lim.Store().(*memory.Store).Len(); n != 2 {
		t.Errorf("store holds %d keys, want 2 (one per limit)", n)
	}
}

func TestRequestsKeys(t *testing.T) {
	tests := []struct {
		name   string
		limits []string
		want   []string
	}{
		{"", []string{"10/s"}, []string{"alice"}},
		{"api", []string{"10/s"}, []string{"api:alice"}},
		{"", []string{"10/s", "1000/d"}, []string{"{alice}|gcra 10/s", "{alice}|fixed_window per 1d"}},
		{"api", []string{"10/s", "fixed_window 1000/d"}, []string{"api:{alice}|gcra 10/s", "api:{alice}|fixed_window per 1d"}},
	}
	for _, tt := range tests {
		lim, err := sluice.NewLimiter(sluice.LimiterOptions{Name: tt.name, Limits: limits(t, tt.limits...)})
		if err != nil {
			t.Fatal(err)
		}
		reqs := lim.Requests("alice", 2)
		if len(reqs) != len(tt.want) {
			t.Fatalf("%q %v: %d requests, want %d", tt.name, tt.limits, len(reqs), len(tt.want))
		}
		for i, r := range reqs {
			if r.Key != tt.want[i] || r.Cost != 2 || r.Limit != lim.Limits()[i] {
				t.Errorf("%q %v: request %d = %+v, want key %q cost 2", tt.name, tt.limits, i, r, tt.want[i])
			}
		}
	}
}

// TestAllowAllLogin limits logins per account and per IP: both must pass,
// and a refused attempt counts against neither.
func TestAllowAllLogin(t *testing.T) {
	ctx := context.Background()
	clock := ratetest.NewClock(start)
	store := memory.New(memory.Options{Clock: clock})
	account, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "account", Limits: limits(t, "sliding_log 3 per 15m"), Store: store, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ip, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "ip", Limits: limits(t, "5 per 15m"), Store: store, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	login := func(user, addr string) bool {
		t.Helper()
		d, err := sluice.AllowAll(ctx, store, append(account.Requests(user, 1), ip.Requests(addr, 1)...)...)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	steps := []struct {
		user, addr string
		want       bool
	}{
		{"alice", "10.0.0.1", true},
		{"alice", "10.0.0.1", true},
		{"alice", "10.0.0.1", true},
		{"alice", "10.0.0.1", false}, // alice's 3 are spent
		{"alice", "10.0.0.2", false}, // from anywhere
		{"bob", "10.0.0.1", true},    // the IP has 2 left: alice's refusals took none
		{"carol", "10.0.0.1", true},
		{"dave", "10.0.0.1", false}, // the IP's 5 are spent
		{"dave", "10.0.0.3", true},  // dave's refusal took nothing from dave
	}
	for i, st := range steps {
		if got := login(st.user, st.addr); got != st.want {
			t.Errorf("step %d: %s from %s: allowed %t, want %t", i, st.user, st.addr, got, st.want)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	clock := ratetest.NewClock(start)
	lim := newLimiter(t, clock, "100/h", "fixed_window 50/h")
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				d, err := lim.Allow(ctx, "shared")
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
	if n := admitted.Load(); n != 50 {
		t.Errorf("admitted %d of 160, want exactly 50", n)
	}

	// Waiters share the fake clock, whose sleeps move time for all: 40
	// requests at 1/s cannot all pass in less than 39s.
	waiter := newLimiter(t, clock, "1/s")
	before := clock.Now()
	for range 4 {
		wg.Go(func() {
			for range 10 {
				if err := waiter.Wait(ctx, "w"); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := clock.Now().Sub(before); got < 39*time.Second {
		t.Errorf("40 requests at 1/s passed within %v", got)
	}
}

// TestNamesKeepLimitersApart: a name and a key can never make up another
// limiter's key, whatever ':' or '%' the names hold.
func TestNamesKeepLimitersApart(t *testing.T) {
	ctx := context.Background()
	for _, ls := range [][]string{{"1/h"}, {"1/h", "fixed_window 5/d"}} {
		clock := ratetest.NewClock(start)
		store := memory.New(memory.Options{Clock: clock})
		// Each name with a key that, written after it, reads the same.
		pairs := []struct{ name, key string }{{"a", "b:c"}, {"a:b", "c"}, {"a%3Ab", "c"}, {"a%253Ab", "c"}}
		seen := map[string]int{}
		for i, p := range pairs {
			lim, err := sluice.NewLimiter(sluice.LimiterOptions{Name: p.name, Limits: limits(t, ls...), Store: store, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range lim.Requests(p.key, 1) {
				if j, ok := seen[r.Key]; ok {
					t.Errorf("%v: limiter %q with key %q and limiter %q with key %q are both stored under %q",
						ls, p.name, p.key, pairs[j].name, pairs[j].key, r.Key)
				}
				seen[r.Key] = i
			}
			if d, err := lim.Allow(ctx, p.key); err != nil || !d.Allowed {
				t.Errorf("%v: limiter %q, key %q: %v, %v; want allowed, the first request of its own 1/h", ls, p.name, p.key, d, err)
			}
		}
	}
}

// clusterTag returns the part of key that Redis Cluster hashes to pick its
// slot: the content of the first {…} if not empty, else the whole key.
// It and redisName restate Redis Cluster's rule and the Redis store's
// documented naming rather than call into store/redis: the test checks
// the limiter's keys against them, and an oracle shared with the store
// would agree with the store's mistakes.
func clusterTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// redisName returns the Redis key (less its prefix) under which the Redis
// store keeps request key k: k if it has a hash tag, else k in braces, so
// that its slot depends on k alone.
func redisName(k string) string {
	if clusterTag(k) != k {
		return k
	}
	return "{" + k + "}"
}

// shared is a store the limiter cannot tell from a Redis store: a memory
// store behind another type.
type shared struct{ sluice.Store }

// TestLimiterKeysWithBraces: keys holding braces or '|' are users' keys
// like any other. Each is kept apart from every other user's, in Redis
// too, where with several limits a user's limits share a Cluster slot of
// its own, whatever braces the limiter's Name holds; the memory store
// takes them as they are.
func TestLimiterKeysWithBraces(t *testing.T) {
	ctx := context.Background()
	users := []string{"", "a", "{a}", "a}|gcra 10/s", "a}", "}a", "{a", "}", "{", "{}", "a{b}c", "a|b", "{(", "{)", "a{(b{)c"}
	for _, tt := range []struct {
		name   string
		limits []string
	}{
		{"", []string{"10/s"}},
		{"api", []string{"10/s"}},
		{"", []string{"10/s", "1000/d"}},
		{"api", []string{"10/s", "fixed_window 1000/d"}},
		{"{api}", []string{"10/s"}},
		{"a{pi}", []string{"10/s", "1000/d"}},
		{"}{", []string{"10/s"}},
	} {
		for _, redis := range []bool{false, true} {
			clock := ratetest.NewClock(start)
			var store sluice.Store = memory.New(memory.Options{Clock: clock})
			if redis {
				store = shared{store}
			}
			lim, err := sluice.NewLimiter(sluice.LimiterOptions{Name: tt.name, Limits: limits(t, tt.limits...), Store: store, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			where := fmt.Sprintf("%q %v on %T", tt.name, tt.limits, store)
			owner := map[string]string{}    // store key → user
			tagOwner := map[string]string{} // Redis hash tag → user
			for _, u := range users {
				reqs := lim.Requests(u, 1)
				for _, r := range reqs {
					k := r.Key
					if redis {
						k = redisName(k)
					}
					if v, ok := owner[k]; ok {
						t.Errorf("%s: users %q and %q are both stored under %q", where, v, u, k)
					}
					owner[k] = u
				}
				if !redis && tt.name == "" && len(tt.limits) == 1 && reqs[0].Key != u {
					t.Errorf("%s: key %q is stored as %q, want it as it is", where, u, reqs[0].Key)
				}
				if redis {
					tag := clusterTag(redisName(reqs[0].Key))
					for _, r := range reqs[1:] {
						if other := clusterTag(redisName(r.Key)); other != tag {
							t.Errorf("%s: user %q's limits are in different slots: hash tags %q and %q", where, u, tag, other)
						}
					}
					if v, ok := tagOwner[tag]; ok {
						t.Errorf("%s: users %q and %q share the hash tag %q", where, v, u, tag)
					}
					tagOwner[tag] = u
				}

				// Allow and the requests name the same states.
				if d, err := lim.Allow(ctx, u); err != nil || !d.Allowed {
					t.Fatalf("%s: user %q: %v, %v", where, u, d, err)
				}
				if d, err := sluice.AllowAll(ctx, store, lim.Requests(u, 0)...); err != nil || d.Remaining != 9 {
					t.Errorf("%s: user %q after one request: %v, %v; want 9 left", where, u, d, err)
				}
			}
		}
	}
}

// TestWaitLookAtAQueue: a request of cost 0 takes no place in a
// leaky_bucket's queue, so WaitN has no turn to wait for.
func TestWaitLookAtAQueue(t *testing.T) {
	clock := ratetest.NewClock(start)
	lim := newLimiter(t, clock, "leaky_bucket 1/s burst 3")
	for range 2 {
		if d, _ := lim.Allow(context.Background(), "q"); !d.Allowed {
			t.Fatal(d)
		}
	}
	if err := lim.WaitN(context.Background(), "q", 0); err != nil {
		t.Fatal(err)
	}
	if slept, n := clock.Slept(); n != 0 {
		t.Errorf("WaitN(0) slept %v in %d calls, want it to return at once", slept, n)
	}
	if d, _ := lim.AllowN(context.Background(), "q", 0); d.Remaining != 1 {
		t.Errorf("queue has %d places left, want 1 as before WaitN(0)", d.Remaining)
	}
}

// unreachable is a store whose server is gone: it fails every call that
// has something to send, and answers one with no request at once, as the
// Redis store does.
type unreachable struct{}

func (unreachable) Decide(context.Context, rate.Request) (rate.Decision, error) {
	return rate.Decision{}, errDown
}

func (unreachable) DecideAll(_ context.Context, reqs []rate.Request, _ []rate.Decision) (rate.Decision, error) {
	if len(reqs) == 0 {
		return rate.Combine(nil), nil
	}
	return rate.Decision{}, errDown
}

// TestAllowAllNoRequests: with nothing to decide, AllowAll allows at once
// without asking the store, here a Fallback whose primary is down: it
// neither fails nor passes for a probe that brings the primary back.
func TestAllowAllNoRequests(t *testing.T) {
	ctx := context.Background()
	clock := ratetest.NewClock(start)
	f := sluice.NewFallback(unreachable{}, sluice.FallbackOptions{Mode: sluice.FailError, Clock: clock})
	if _, err := sluice.AllowAll(ctx, f, rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}); err == nil {
		t.Fatal("the primary is down, yet AllowAll decided")
	}
	for range 2 {
		if d, err := sluice.AllowAll(ctx, f); err != nil || !d.Allowed {
			t.Errorf("AllowAll with no request: %v, %v; want allowed", d, err)
		}
		clock.Advance(time.Second) // past the first probe's backoff
	}
	if st := f.Stats(); !st.Down || st.Primary+st.Fallback != 1 {
		t.Errorf("stats %+v; want the primary still down, and one decision counted", st)
	}
}

// rivalClock is a fake clock on which a rival spends, each time a sleep
// ends, what the sleeper waited for.
type rivalClock struct {
	*ratetest.Clock
	rival func()
}

func (c *rivalClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := c.Clock.Sleep(ctx, d); err != nil {
		return err
	}
	c.rival()
	return nil
}

// TestWaitUnderContention: a Wait that keeps losing its token to a rival
// waits again each time, and gives up once the deadline is too close.
func TestWaitUnderContention(t *testing.T) {
	clock := &rivalClock{Clock: ratetest.NewClock(start)}
	lim := newLimiter(t, clock, "1/s")
	clock.rival = func() {
		if d, _ := lim.Allow(context.Background(), "k"); !d.Allowed {
			t.Errorf("the rival was refused: %v", d)
		}
	}
	clock.rival()
	err := lim.Wait(withDeadline(t, clock.Clock, 3500*time.Millisecond), "k")
	if !errors.Is(err, sluice.ErrWouldExceedDeadline) {
		t.Errorf("Wait = %v, want ErrWouldExceedDeadline", err)
	}
	if slept, n := clock.Slept(); slept != 3*time.Second || n != 3 {
		t.Errorf("slept %v in %d calls, want 3s in 3: one wait per token lost", slept, n)
	}
}

// TestWaitTurnJustBeforeTheDeadline: Wait never sleeps for a turn that
// comes too close to the deadline for the request to be asked again
// (within 2µs of it): it refuses at once, as it does for a turn after
// the deadline, rather than sleep and then fail.
func TestWaitTurnJustBeforeTheDeadline(t *testing.T) {
	for _, tt := range []struct {
		extra  time.Duration // the deadline is 1s (the turn) + extra away
		passes bool
	}{
		{0, false},
		{time.Microsecond, false},
		{1500 * time.Nanosecond, false},
		{2 * time.Microsecond, true},
	} {
		clock := ratetest.NewClock(start)
		lim := newLimiter(t, clock, "1/s")
		if d, _ := lim.Allow(context.Background(), "a"); !d.Allowed {
			t.Fatalf("first request refused: %v", d)
		}
		err := lim.Wait(withDeadline(t, clock, time.Second+tt.extra), "a")
		slept, _ := clock.Slept()
		switch {
		case tt.passes && (err != nil || slept != time.Second):
			t.Errorf("deadline 1s+%v: Wait = %v after sleeping %v, want nil after 1s", tt.extra, err, slept)
		case !tt.passes && (!errors.Is(err, sluice.ErrWouldExceedDeadline) || slept != 0):
			t.Errorf("deadline 1s+%v: Wait = %v after sleeping %v, want ErrWouldExceedDeadline at once", tt.extra, err, slept)
		}
	}
}

// A deadline less than 2µs away leaves no time to ask: Wait refuses at
// once with ErrWouldExceedDeadline, as its doc says, even for a request
// that would pass now.
func TestWaitDeadlineTooClose(t *testing.T) {
	for _, left := range []time.Duration{time.Microsecond, 1999 * time.Nanosecond} {
		clock := ratetest.NewClock(start)
		lim := newLimiter(t, clock, "1/s")
		err := lim.Wait(withDeadline(t, clock, left), "fresh")
		if !errors.Is(err, sluice.ErrWouldExceedDeadline) {
			t.Errorf("deadline %v away: Wait = %v, want ErrWouldExceedDeadline", left, err)
		}
	}
}

// AllowAll refuses, as the caller's error, requests of one key under one
// limit that could never pass together, rather than a refusal with a
// wait that only leads to another.
func TestAllowAllGroupPastCapacity(t *testing.T) {
	one := rate.Limit{Algorithm: rate.GCRA, Count: 1, Period: time.Second}
	r := rate.Request{Key: "k", Limit: one, Cost: 1}
	_, err := sluice.AllowAll(context.Background(), memory.New(memory.Options{}), r, r)
	if !errors.Is(err, rate.ErrCostExceedsCapacity) {
		t.Errorf("1 + 1 of 1: %v, want ErrCostExceedsCapacity", err)
	}
}

// slowAnswer is a store whose answers reach the caller late: it decides
// at once, then the clock moves on by lag before the caller hears of it,
// as a remote store's answer crosses the network.
type slowAnswer struct {
	sluice.Store
	clock *ratetest.Clock
	lag   time.Duration
}

func (s slowAnswer) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	d, err := s.Store.DecideAll(ctx, reqs, out)
	s.clock.Advance(s.lag)
	return d, err
}

// TestWaitDeadlineAfterASlowAnswer: the time left before the deadline is
// measured again once the store has answered, so that Wait never starts a
// sleep that the time the answer took has made too long.
func TestWaitDeadlineAfterASlowAnswer(t *testing.T) {
	for _, tt := range []struct {
		name  string
		limit string
		// The first request passes at once; Wait asks for the second with
		// the deadline this far away, and the answer takes 300ms.
		deadline time.Duration
		passes   bool
	}{
		// Refused for 1s from when the store decided: the request could
		// pass at +1s, but Wait hears of it at +300ms, and a sleep of 1s
		// would end at +1.3s.
		{"refusal", "1/s", 1100 * time.Millisecond, false},
		// Then at +1.3s it asks again, and hears at +1.6s.
		{"refusal, deadline far enough", "1/s", 1700 * time.Millisecond, true},
		// Admitted with a turn 1s after the store decided: Wait would
		// sleep until +1.3s.
		{"turn in a queue", "leaky_bucket 1/s burst 2", 1100 * time.Millisecond, false},
		{"turn in a queue, deadline far enough", "leaky_bucket 1/s burst 2", 1400 * time.Millisecond, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := ratetest.NewClock(start)
			mem := memory.New(memory.Options{Clock: clock})
			lim, err := sluice.NewLimiter(sluice.LimiterOptions{
				Limits: limits(t, tt.limit),
				Store:  slowAnswer{Store: mem, clock: clock, lag: 300 * time.Millisecond},
				Clock:  clock,
			})
			if err != nil {
				t.Fatal(err)
			}
			if d, _ := mem.Decide(context.Background(), lim.Requests("a", 1)[0]); !d.Allowed {
				t.Fatalf("first request refused: %v", d)
			}
			deadline := clock.Now().Add(tt.deadline)
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			defer cancel()
			err = lim.Wait(ctx, "a")
			slept, _ := clock.Slept()
			switch {
			case tt.passes && err != nil:
				t.Errorf("Wait = %v, want nil", err)
			case tt.passes && clock.Now().After(deadline):
				t.Errorf("Wait went ahead at +%v, after the deadline at +%v", clock.Now().Sub(start), tt.deadline)
			case !tt.passes && (!errors.Is(err, sluice.ErrWouldExceedDeadline) || slept != 0):
				t.Errorf("Wait = %v after sleeping %v (until +%v, deadline +%v); want ErrWouldExceedDeadline at once",
					err, slept, clock.Now().Sub(start), tt.deadline)
			}
		})
	}
}

// TestCostErrorsNameTheCallersKey: a cost no limit could pass is refused
// with an error that names the caller's key, not the key the store keeps.
func TestCostErrorsNameTheCallersKey(t *testing.T) {
	l, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "api", Limits: limits(t, "10/s", "100/h")})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		n    int64
		want error
	}{{11, rate.ErrCostExceedsCapacity}, {-1, rate.ErrNegativeCost}} {
		_, err := l.AllowN(context.Background(), "fresh", c.n)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), `"fresh"`) || strings.Contains(err.Error(), "api:") {
			t.Errorf("AllowN(fresh, %d) = %v, want %v naming \"fresh\" alone", c.n, err, c.want)
		}
		if err := l.WaitN(context.Background(), "fresh", c.n); !errors.Is(err, c.want) {
			t.Errorf("WaitN(fresh, %d) = %v, want %v", c.n, err, c.want)
		}
	}
}

// TestSameLimitWrittenTwoWays: a bucket's burst of 0 is its count, so
// "10/s" and "10/s burst 10" are one limit, which a limiter refuses twice.
func TestSameLimitWrittenTwoWays(t *testing.T) {
	if _, err := sluice.NewLimiter(sluice.LimiterOptions{Limits: limits(t, "10/s", "10/s burst 10")}); err == nil {
		t.Error("NewLimiter took 10/s and 10/s burst 10 as two limits")
	}
}

// Two limiters without names on one store key a request the same way,
// so their requests for one key would step one state under two limits:
// AllowAll refuses them, where it decided them, wrongly, before. Named
// apart, they decide as two limits.
func TestAllowAllOneKeyTwoLimits(t *testing.T) {
	ctx := context.Background()
	store := memory.New(memory.Options{Clock: ratetest.NewClock(start)})
	limiter := func(name, limit string) *sluice.Limiter {
		l, err := sluice.NewLimiter(sluice.LimiterOptions{Name: name, Limits: []rate.Limit{rate.MustParseLimit(limit)}, Store: store})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := limiter("", "10/s"), limiter("", "2/s")
	if _, err := sluice.AllowAll(ctx, store, append(a.Requests("x", 1), b.Requests("x", 1)...)...); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("two unnamed limiters on one key: %v, want an error naming the key", err)
	}
	a, b = limiter("a", "10/s"), limiter("b", "2/s")
	for i, want := range []int64{1, 0} {
		d, err := sluice.AllowAll(ctx, store, append(a.Requests("x", 1), b.Requests("x", 1)...)...)
		if err != nil || !d.Allowed || d.Remaining != want {
			t.Errorf("named apart, request %d: %+v, %v; want allowed with %d left of 2/s", i+1, d, err, want)
		}
	}
}

// Over a FailClosed Fallback whose primary cannot decide, WaitN does not
// wait out the Fallback's refusal as if a limit had made it: it returns
// at once an error wrapping ErrStoreDown.
func TestWaitOverFailClosedIsNoRateLimit(t *testing.T) {
	clock := ratetest.NewClock(start)
	f := sluice.NewFallback(unreachable{}, sluice.FallbackOptions{Mode: sluice.FailClosed, Clock: clock})
	l, err := sluice.NewLimiter(sluice.LimiterOptions{Limits: []rate.Limit{tenPerMinute}, Store: f, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	before := clock.Now()
	err = l.Wait(context.Background(), "u")
	if !errors.Is(err, sluice.ErrStoreDown) {
		t.Errorf("Wait over a FailClosed Fallback whose store is gone: %v, want an error wrapping ErrStoreDown", err)
	}
	if slept := clock.Now().Sub(before); slept != 0 {
		t.Errorf("Wait slept %v for a store that could not decide", slept)
	}
}
