package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// flood sends perCaller requests from each of callers goroutines to each
// store at once and returns how many were admitted. It fails the test on
// any error.
func flood(t *testing.T, stores []sluice.Store, callers, perCaller int, r rate.Request) int {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for _, s := range stores {
		for range callers {
			wg.Go(func() {
				for range perCaller {
					d, err := s.Decide(context.Background(), r)
					if err != nil {
						select {
						case errs <- err:
						default:
						}
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	return int(admitted.Load())
}

// Three instances share one limit through Redis: 3 × 50 goroutines flooding
// one key with a limit of 10 per 10s admit exactly 10, for every algorithm.
// The same instances each counting in memory admit 30, three times the
// limit: the reason a shared store exists.
//
// Time is frozen (pinned in the script, and on the local clocks) so that
// "exactly 10" holds however long the flood takes and wherever a window
// boundary falls; TestClockSkew floods with Redis's own TIME.
func TestSharedLimitAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	algorithms := []rate.Algorithm{rate.FixedWindow, rate.SlidingWindow, rate.SlidingLog, rate.TokenBucket, rate.GCRA}
	const instances, callers, perCaller = 3, 50, 4
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 5, 0, time.UTC))
			r := rate.Request{Key: "shared:" + alg.String(), Limit: rate.Limit{Algorithm: alg, Count: 10, Period: 10 * time.Second}, Cost: 1}

			// With the defaults, without the deny cache (every request of the
			// flood reaches Redis), and without coalescing either.
			for i, o := range []redis.Options{{}, {DisableDenyCache: true}, {DisableDenyCache: true, DisableCoalescing: true}} {
				var shared []sluice.Store
				for range instances {
					o.Clock, o.Prefix = clk, fmt.Sprintf("config%d:", i)
					redis.PinNow(&o, clk)
					shared = append(shared, redis.New(newClient(t, srv.Addr()), o))
				}
				if got := flood(t, shared, callers, perCaller, r); got != 10 {
					t.Errorf("Redis (no deny cache: %t, no coalescing: %t): %d instances × %d callers admitted %d, want exactly 10",
						o.DisableDenyCache, o.DisableCoalescing, instances, callers, got)
				}
			}
			var local []sluice.Store
			for range instances {
				local = append(local, memory.New(memory.Options{Clock: clk}))
			}
			if got := flood(t, local, callers, perCaller, r); got != 30 {
				t.Errorf("memory: %d instances × %d callers admitted %d, want 30 (10 each)", instances, callers, got)
			}
		})
	}
}

// Instances whose local clocks are minutes apart still share one limit:
// decisions take Redis's TIME, and the deny cache only ever compares an
// instance's clock with itself. Moving a local clock forward (ending its
// cached refusals early) or back (making them look as if from the future)
// sends requests back to Redis, which still refuses them.
func TestClockSkew(t *testing.T) {
	srv := redistest.Start(t)
	base := time.Now()
	skews := []time.Duration{-5 * time.Minute, 0, 7 * time.Minute}
	for _, alg := range []rate.Algorithm{rate.GCRA, rate.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			r := rate.Request{Key: "skew:" + alg.String(), Limit: rate.Limit{Algorithm: alg, Count: 10, Period: time.Hour}, Cost: 1}
			var stores []sluice.Store
			var clocks []*ratetest.Clock
			for _, skew := range skews {
				clk := ratetest.NewClock(base.Add(skew))
				clocks = append(clocks, clk)
				stores = append(stores, redis.New(newClient(t, srv.Addr()), redis.Options{Clock: clk}))
			}
			if got := flood(t, stores, 20, 5, r); got != 10 {
				t.Fatalf("instances with skewed clocks admitted %d, want exactly 10", got)
			}
			for i, s := range stores {
				if n := redis.DenyCacheLen(s.(*redis.Store)); n != 1 {
					t.Fatalf("instance %d: deny cache holds %d entries, want 1", i, n)
				}
			}
			// One instance's clock jumps an hour ahead, another's an hour back.
			clocks[0].Advance(time.Hour)
			clocks[2].Advance(-time.Hour)
			for i, s := range stores {
				d, err := s.Decide(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				// Refused by Redis, whose TIME has not moved: the next unit
				// is about 6 minutes (gcra) or an hour (sliding_log) away.
				if d.Allowed || d.RetryAfter < 5*time.Minute {
					t.Errorf("instance %d (clock %v): %v, want refused for minutes", i, clocks[i].Now().Sub(base), d)
				}
			}
		})
	}
}

// The deny cache spares Redis a flood of refused requests: once a key is
// refused, each instance refuses it locally until its RetryAfter, so Redis
// sees about one command per caller in flight at the first refusal, not
// one per request.
func TestDenyCacheSparesRedis(t *testing.T) {
	srv := redistest.Start(t)
	s := redis.New(newClient(t, srv.Addr()), redis.Options{})
	r := rate.Request{Key: "hot", Limit: rate.Limit{Algorithm: rate.GCRA, Count: 1, Period: time.Hour}, Cost: 1}
	if d, err := s.Decide(context.Background(), r); err != nil || !d.Allowed {
		t.Fatalf("first request: %v, %v", d, err)
	}
	before := scriptCalls(srv)
	const callers, perCaller = 50, 200
	if got := flood(t, []sluice.Store{s}, callers, perCaller, r); got != 0 {
		t.Fatalf("%d admitted after the only unit was spent", got)
	}
	calls := scriptCalls(srv) - before
	perRequest := float64(calls) / (callers * perCaller)
	t.Logf("%d script calls for %d refused requests: %.4f each", calls, callers*perCaller, perRequest)
	if perRequest > 0.01 {
		t.Errorf("%.4f Redis commands per refused request, want ≤ 0.01", perRequest)
	}

	// Without the cache, every request is a script call.
	s2 := redis.New(newClient(t, srv.Addr()), redis.Options{DisableDenyCache: true, DisableCoalescing: true})
	before = scriptCalls(srv)
	flood(t, []sluice.Store{s2}, 10, 10, r)
	if calls := scriptCalls(srv) - before; calls != 100 {
		t.Errorf("without the deny cache: %d script calls for 100 requests, want 100", calls)
	}
}

// scriptCalls returns how many script calls srv has run.
func scriptCalls(srv *redistest.Server) int {
	calls, _ := srv.ScriptStats()
	return int(calls)
}

// Local refusals count down on the local clock from when the refused call
// was sent, and agree with what Redis says when asked again.
func TestDenyCacheCountsDown(t *testing.T) {
	srv := redistest.Start(t)
	o, clk := pinnedOptions(redis.Options{})
	client := newClient(t, srv.Addr())
	s := redis.New(client, o)
	po := redis.Options{DisableDenyCache: true}
	redis.PinNow(&po, clk)
	plain := redis.New(client, po) // asks Redis every time, same keys

	for _, alg := range rate.Algorithms() {
		r := rate.Request{Key: "countdown:" + alg.String(), Limit: rate.Limit{Algorithm: alg, Count: 3, Period: 7 * time.Second}, Cost: 2}
		clk.Set(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
		if d, _ := s.Decide(context.Background(), r); !d.Allowed {
			t.Fatalf("%v: first request refused: %v", alg, d)
		}
		first, err := s.Decide(context.Background(), r)
		if err != nil || first.Allowed {
			t.Fatalf("%v: second request: %v, %v; want refused", alg, first, err)
		}
		before := scriptCalls(srv)
		// Repeated for a second at most (see TestDenyCacheForgetsWithinASecond).
		held := min(first.RetryAfter, redis.MaxDenyAge)
		for _, el := range []time.Duration{0, time.Microsecond, held / 3, held - time.Microsecond} {
			clk.Set(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC).Add(el))
			local, err := s.Decide(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			// Decisions are in whole microseconds.
			if want := first.RetryAfter - el.Truncate(time.Microsecond); local.Allowed || local.RetryAfter != want {
				t.Errorf("%v after %v: local %v, want refused with retry %v", alg, el, local, want)
			}
			remote, err := plain.Decide(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			if remote.Allowed || remote.RetryAfter != local.RetryAfter {
				t.Errorf("%v after %v: Redis says %v, the deny cache %v", alg, el, remote, local)
			}
		}
		// Four local refusals, and four asked of Redis through plain.
		if calls := scriptCalls(srv) - before; calls != 4 {
			t.Errorf("%v: %d script calls during the countdown, want 4 (plain's)", alg, calls)
		}
		clk.Set(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC).Add(first.RetryAfter))
		if d, _ := s.Decide(context.Background(), r); !d.Allowed {
			t.Errorf("%v: refused at RetryAfter: %v", alg, d)
		}
	}
}

// A refusal is repeated locally for a second at most, however long its
// RetryAfter: Redis may lose the count that refused (a restart without
// persistence, FLUSHALL, an operator's DEL, eviction), and the instances
// that cached the refusal would go on refusing, for a monthly quota for
// weeks, what the others admit.
func TestDenyCacheForgetsWithinASecond(t *testing.T) {
	srv := redistest.Start(t)
	o, clk := pinnedOptions(redis.Options{})
	s := redis.New(newClient(t, srv.Addr()), o)
	r := rate.Request{Key: "lost", Limit: rate.Limit{Algorithm: rate.FixedWindow, Count: 1, Period: time.Hour}, Cost: 1}
	if d, err := s.Decide(context.Background(), r); err != nil || !d.Allowed {
		t.Fatalf("first request: %v, %v", d, err)
	}
	if d, err := s.Decide(context.Background(), r); err != nil || d.Allowed || d.RetryAfter < time.Minute {
		t.Fatalf("second request: %v, %v; want refused for the rest of the hour", d, err)
	}
	srv.MustDo("FLUSHALL")
	// A second, as the package documentation promises (not the
	// constant itself, which a test taking it would follow anywhere).
	const age = time.Second
	start := clk.Now()
	clk.Set(start.Add(age - time.Microsecond))
	if d, _ := s.Decide(context.Background(), r); d.Allowed {
		t.Errorf("just under %v after the refusal: admitted, want the cached refusal", age)
	}
	clk.Set(start.Add(age))
	if d, err := s.Decide(context.Background(), r); err != nil || !d.Allowed {
		t.Errorf("%v after the refusal, the count lost: %v, %v; want Redis asked, and admitted", age, d, err)
	}
}

// While Redis is down, a sluice.Fallback asks DecideCached, and a refusal
// Redis gave still holds for its whole wait: Redis cannot be asked, and
// the client it refused is as far over its quota as it was. The second's
// cap is for decisions Redis can make again (it may have lost the count).
func TestDecideCachedHoldsThroughAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	o, clk := pinnedOptions(redis.Options{})
	s := redis.New(newClient(t, srv.Addr()), o)
	r := rate.Request{Key: "over", Limit: rate.Limit{Algorithm: rate.FixedWindow, Count: 1, Period: time.Hour}, Cost: 1}
	for i := range 2 {
		if d, err := s.Decide(context.Background(), r); err != nil || d.Allowed != (i == 0) {
			t.Fatalf("request %d: %v, %v", i+1, d, err)
		}
	}
	start := clk.Now()
	for _, el := range []time.Duration{0, redis.MaxDenyAge, time.Minute} {
		clk.Set(start.Add(el))
		out := make([]rate.Decision, 1)
		if d, ok := s.DecideCached([]rate.Request{r}, out); !ok || d.Allowed {
			t.Errorf("%v into an outage: DecideCached %v, %v; want the refusal Redis gave", el, d, ok)
		}
	}
}

// A request's MaxDelay is part of its identity in the deny cache only
// where the step reads it, a leaky_bucket's and a gcra or token_bucket's
// (which reserve units within it), and only as the step reads it, in
// whole µs: a window's refusals differing in MaxDelay alone are one
// entry, rather than each an entry of its own, never answered from,
// pushing out the refusals the cache holds for others.
func TestDenyCacheIgnoresMaxDelayWhereUnread(t *testing.T) {
	srv := redistest.Start(t)
	s := redis.New(newClient(t, srv.Addr()), redis.Options{})
	for _, l := range []string{"fixed_window 1/h", "sliding_window 1/h", "sliding_log 1/h"} {
		r := rate.Request{Key: "wait:" + l, Limit: rate.MustParseLimit(l), Cost: 1}
		if d, err := s.Decide(context.Background(), r); err != nil || !d.Allowed {
			t.Fatalf("%s: first request: %v, %v", l, d, err)
		}
		before := redis.DenyCacheLen(s)
		for i := range 5 {
			r.MaxDelay = time.Duration(i+1)*time.Second - time.Duration(i)*time.Nanosecond
			if d, err := s.Decide(context.Background(), r); err != nil || d.Allowed {
				t.Fatalf("%s: request with MaxDelay %v: %v, %v; want refused", l, r.MaxDelay, d, err)
			}
		}
		if n := redis.DenyCacheLen(s) - before; n != 1 {
			t.Errorf("%s: 5 refusals differing in MaxDelay alone made %d deny cache entries, want 1", l, n)
		}
	}
	// The buckets read it, in whole µs.
	for _, l := range []string{"leaky_bucket 1/h burst 1", "gcra 1/h burst 1", "token_bucket 1/h burst 1"} {
		r := rate.Request{Key: "wait:" + l, Limit: rate.MustParseLimit(l), Cost: 1}
		for i := range 2 {
			if d, err := s.Decide(context.Background(), r); err != nil || d.Allowed != (i == 0) {
				t.Fatalf("%s: request %d: %v, %v", l, i+1, d, err)
			}
		}
		before := redis.DenyCacheLen(s)
		for _, md := range []time.Duration{time.Second, time.Second + time.Nanosecond, 2 * time.Second} {
			r.MaxDelay = md
			if d, err := s.Decide(context.Background(), r); err != nil || d.Allowed {
				t.Fatalf("%s: MaxDelay %v: %v, %v; want refused", l, md, d, err)
			}
		}
		if n := redis.DenyCacheLen(s) - before; n != 2 {
			t.Errorf("%s: refusals with MaxDelay 1s, 1s+1ns and 2s made %d entries, want 2 (1s and 1s+1ns are one bound)", l, n)
		}
	}
}

// The deny cache holds at most its size, however many keys are refused.
func TestDenyCacheBounded(t *testing.T) {
	s := redis.New(newClient(t, redistest.Start(t).Addr()), redis.Options{DenyCacheSize: 64})
	l := rate.Limit{Algorithm: rate.GCRA, Count: 1, Period: time.Hour}
	for i := range 500 {
		r := rate.Request{Key: "k" + strconv.Itoa(i), Limit: l, Cost: 1}
		if _, err := s.Decide(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if d, err := s.Decide(context.Background(), r); err != nil || d.Allowed {
			t.Fatalf("second request for %s: %v, %v", r.Key, d, err)
		}
	}
	if n := redis.DenyCacheLen(s); n > 64 || n < 32 {
		t.Errorf("deny cache of size 64 holds %d entries after 500 refused keys", n)
	}
}

// Through a Sentinel: the store finds the master the sentinel names and
// keeps its state there.
func TestSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "sluice-master")
	s, err := redis.Dial("redis://"+sentinel.Addr()+"?master_set=sluice-master", redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	limit := rate.Limit{Algorithm: rate.FixedWindow, Count: 2, Period: time.Hour}
	var got []bool
	for range 3 {
		d, err := s.Decide(context.Background(), rate.Request{Key: "via-sentinel", Limit: limit, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Allowed)
	}
	if !slices.Equal(got, []bool{true, true, false}) {
		t.Errorf("2 per hour through the sentinel: %v, want [true true false]", got)
	}
	if n := master.MustDo("EXISTS", s.Key("via-sentinel")); n != "1" {
		t.Errorf("the master holds %s keys named %q, want 1", n, s.Key("via-sentinel"))
	}
}
