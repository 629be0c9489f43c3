package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
)

// NewStore makes a fresh, empty store for one test and returns with it the
// function that sets the time the store decides at. The suite calls it
// once per subtest and never runs subtests in parallel.
type NewStore func(t *testing.T) (store sluice.Store, setNow func(now time.Time))

// Run runs the whole suite against the stores newStore makes.
func Run(t *testing.T, newStore NewStore) {
	t.Run("TokenBucketSeed", func(t *testing.T) { testBucketSeed(t, newStore, rate.TokenBucket) })
	t.Run("GCRASeed", func(t *testing.T) { testBucketSeed(t, newStore, rate.GCRA) })
	t.Run("MinuteEdge", func(t *testing.T) { testMinuteEdge(t, newStore) })
	t.Run("AwkwardRate", func(t *testing.T) { testAwkwardRate(t, newStore) })
	t.Run("CalendarMonth", func(t *testing.T) { testCalendarMonth(t, newStore) })
	t.Run("TimeBackwards", func(t *testing.T) { testTimeBackwards(t, newStore) })
	t.Run("Cost", func(t *testing.T) { testCost(t, newStore) })
	t.Run("LeakyBucketDelay", func(t *testing.T) { testLeakyBucketDelay(t, newStore) })
	t.Run("LimitChanged", func(t *testing.T) { testLimitChanged(t, newStore) })
	t.Run("AllOrNothing", func(t *testing.T) { testAllOrNothing(t, newStore) })
	t.Run("InvalidRequests", func(t *testing.T) { testInvalidRequests(t, newStore) })
	t.Run("KeyTwice", func(t *testing.T) { testKeyTwice(t, newStore) })
	t.Run("Random", func(t *testing.T) { testRandom(t, newStore, false) })
	t.Run("RandomLimitChanges", func(t *testing.T) { testRandom(t, newStore, true) })
}

// epoch is a start time aligned to every window the seed cases use (a
// minute, 7 seconds, a day): 2023-11-14 00:00:00 UTC.
var epoch = time.Date(2023, 11, 14, 0, 0, 0, 0, time.UTC)

// harness feeds requests to a store and to the reference model and fails
// the test when their decisions differ.
type harness struct {
	t      testing.TB
	store  sluice.Store
	setNow func(time.Time)
	now    time.Time
	model  map[string]rate.State
	// expires holds when each key's state is fresh again, by the last
	// committed decision's ResetAfter; latest is the latest time seen.
	expires map[string]time.Time
	latest  time.Time
}

func newHarness(t *testing.T, newStore NewStore) *harness {
	s, setNow := newStore(t)
	h := &harness{t: t, store: s, setNow: setNow, model: map[string]rate.State{}, expires: map[string]time.Time{}}
	h.at(epoch)
	return h
}

// at sets the time of the next decisions.
func (h *harness) at(now time.Time) {
	h.now = now
	if now.After(h.latest) {
		h.latest = now
	}
	h.setNow(now)
}

// back returns t, or a later time if going back to t could meet a state
// that a store was free to forget. A store may drop a key once its state
// is fresh again at the latest time it has seen; that state is fresh at
// every later time, but not at earlier ones, so the suite never steps back
// to before such a key's expiry.
func (h *harness) back(t time.Time) time.Time {
	for _, e := range h.expires {
		if !e.After(h.latest) && t.Before(e) {
			t = e
		}
	}
	return t
}

// want computes the reference decisions of a group and commits the
// model's states if all allow.
func (h *harness) want(reqs []rate.Request) (rate.Decision, []rate.Decision) {
	now := rate.Micros(h.now)
	outs := make([]rate.Decision, len(reqs))
	// A key given twice: each of its requests is decided on the state the
	// ones before it left, as if they had been admitted.
	states := map[string]rate.State{}
	state := func(key string) rate.State {
		if s, ok := states[key]; ok {
			return s
		}
		return h.model[key]
	}
	all := true
	for i, r := range reqs {
		next, out := r.Limit.StepWithin(state(r.Key), now, r.Cost, r.MaxDelay)
		outs[i] = out
		if out.Allowed {
			states[r.Key] = next
		}
		all = all && out.Allowed
	}
	if all {
		for i, r := range reqs {
			h.model[r.Key] = states[r.Key]
			h.expires[r.Key] = h.now.Add(outs[i].ResetAfter)
		}
	} else {
		// Nothing was consumed: a request that would have passed alone
		// reports what is left without it, from its key's state before
		// the call (not as the group's earlier requests of the key would
		// have left it, since none was admitted).
		for i, r := range reqs {
			if outs[i].Allowed {
				_, peek := r.Limit.StepWithin(h.model[r.Key], now, 0, r.MaxDelay)
				outs[i].Remaining, outs[i].ResetAfter = peek.Remaining, peek.ResetAfter
			}
		}
	}
	return rate.Combine(outs), outs
}

// decide sends a group to the store (Decide for one request, DecideAll for
// several), checks every decision against the model and returns the
// combined one.
func (h *harness) decide(reqs ...rate.Request) rate.Decision {
	h.t.Helper()
	want, wantOuts := h.want(reqs)
	var got rate.Decision
	gotOuts := make([]rate.Decision, len(reqs))
	var err error
	if len(reqs) == 1 {
		got, err = h.store.Decide(context.Background(), reqs[0])
		gotOuts[0] = got
	} else {
		got, err = h.store.DecideAll(context.Background(), reqs, gotOuts)
	}
	if err != nil {
		h.t.Fatalf("at %v: %v: %v", h.elapsed(), describe(reqs), err)
	}
	for i := range reqs {
		if gotOuts[i] != wantOuts[i] {
			h.t.Fatalf("at %v: %v: decision %d\n got  %v\n want %v", h.elapsed(), describe(reqs), i, gotOuts[i], wantOuts[i])
		}
	}
	if got != want {
		h.t.Fatalf("at %v: %v: combined decision\n got  %v\n want %v", h.elapsed(), describe(reqs), got, want)
	}
	return got
}

// burst sends n single requests and returns how many were allowed.
func (h *harness) burst(n int, r rate.Request) int {
	h.t.Helper()
	allowed := 0
	for range n {
		if h.decide(r).Allowed {
			allowed++
		}
	}
	return allowed
}

func (h *harness) elapsed() string {
	return fmt.Sprintf("%v (epoch%+v)", h.now.UTC().Format(time.RFC3339Nano), h.now.Sub(epoch))
}

func describe(reqs []rate.Request) string {
	s := ""
	for i, r := range reqs {
		if i > 0 {
			s += " + "
		}
		s += fmt.Sprintf("%q %v cost %d", r.Key, r.Limit, r.Cost)
		if r.MaxDelay > 0 {
			s += fmt.Sprintf(" max delay %v", r.MaxDelay)
		}
	}
	return s
}

// testBucketSeed: a bucket of 5 refilled at 1 per second. A burst of 7 at
// t=0 passes 5; at t=2s two units have refilled, so 2 of 3 pass; by t=10s
// the bucket is full again, so 5 of 10 pass.
func testBucketSeed(t *testing.T, newStore NewStore, alg rate.Algorithm) {
	h := newHarness(t, newStore)
	r := rate.Request{Key: "bucket", Limit: rate.Limit{Algorithm: alg, Count: 1, Period: time.Second, Burst: 5}, Cost: 1}
	for _, step := range []struct {
		at       time.Duration
		n, allow int
	}{{0, 7, 5}, {2 * time.Second, 3, 2}, {10 * time.Second, 10, 5}} {
		h.at(epoch.Add(step.at))
		if got := h.burst(step.n, r); got != step.allow {
			t.Errorf("%v at t=%v: %d of %d allowed, want %d", alg, step.at, got, step.n, step.allow)
		}
	}
	// After the last burst the bucket is empty: the next unit is 1s away.
	if d := h.decide(r); d.Allowed || d.RetryAfter != time.Second || d.ResetAfter != 5*time.Second {
		t.Errorf("%v after the bursts: %v, want refused, retry 1s, reset 5s", alg, d)
	}
}

// testMinuteEdge: 10 per 60s, 10 requests at 59.9s and 10 at 60.0s. A fixed
// window starts afresh at 60s and lets all 20 through; the sliding log and
// the sliding window still count the first 10 and let none of the second.
func testMinuteEdge(t *testing.T, newStore NewStore) {
	for _, c := range []struct {
		alg  rate.Algorithm
		want int
	}{{rate.FixedWindow, 20}, {rate.SlidingLog, 10}, {rate.SlidingWindow, 10}} {
		t.Run(c.alg.String(), func(t *testing.T) {
			h := newHarness(t, newStore)
			r := rate.Request{Key: "edge", Limit: rate.Limit{Algorithm: c.alg, Count: 10, Period: time.Minute}, Cost: 1}
			h.at(epoch.Add(59900 * time.Millisecond))
			n := h.burst(10, r)
			h.at(epoch.Add(time.Minute))
			n += h.burst(10, r)
			if n != c.want {
				t.Errorf("%v: %d of 20 allowed, want %d", c.alg, n, c.want)
			}
		})
	}
}

// testAwkwardRate: 3 per 7s, whose emission interval 2333333⅓µs is not a
// whole number of microseconds, probed each algorithm around the instants
// where a unit comes back.
func testAwkwardRate(t *testing.T, newStore NewStore) {
	for _, alg := range rate.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			h := newHarness(t, newStore)
			r := rate.Request{Key: "awkward", Limit: rate.Limit{Algorithm: alg, Count: 3, Period: 7 * time.Second}, Cost: 1}
			allowed := h.burst(4, r)
			if allowed != 3 {
				t.Errorf("%d of 4 allowed at once, want 3", allowed)
			}
			// Step through the next 15s around multiples of 7s/3.
			for k := int64(1); k <= 6; k++ {
				at := k * 7_000_000 / 3 // µs, rounded down
				for _, off := range []int64{-1, 0, 1} {
					h.at(epoch.Add(time.Duration(at+off) * time.Microsecond))
					h.decide(r)
				}
			}
		})
	}
}

// testCalendarMonth: monthly windows end at UTC month boundaries, whatever
// the month's length, including a leap February and a new year.
func testCalendarMonth(t *testing.T, newStore NewStore) {
	l := rate.Limit{Algorithm: rate.FixedWindow, Count: 3, Calendar: rate.Month}
	for _, end := range []time.Time{
		time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC), // after 29 February
		time.Date(2023, 3, 1, 0, 0, 0, 0, time.UTC), // after 28 February
		time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), // new year
		time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC), // after a 30-day month
	} {
		t.Run(end.Format("2006-01"), func(t *testing.T) {
			h := newHarness(t, newStore)
			r := rate.Request{Key: "month", Limit: l, Cost: 1}
			h.at(end.Add(-time.Microsecond))
			if n := h.burst(3, r); n != 3 {
				t.Fatalf("%d of 3 allowed in the month's last microsecond", n)
			}
			if d := h.decide(r); d.Allowed || d.RetryAfter != time.Microsecond {
				t.Fatalf("4th in the month's last microsecond: %v, want refused, retry 1µs", d)
			}
			h.at(end)
			if n := h.burst(4, r); n != 3 {
				t.Fatalf("%d of 4 allowed at the next month's start, want 3", n)
			}
			start := end.AddDate(0, -1, 0)
			h.at(start.Add(-time.Microsecond)) // back into the month before
			h.decide(r)
			// Halfway through the next month, the window still ends at its end.
			next := end.AddDate(0, 1, 0)
			h.at(end.Add(next.Sub(end) / 2))
			if d := h.decide(r); d.Allowed || d.RetryAfter != next.Sub(end)/2 {
				t.Fatalf("mid-month: %v, want refused until %v", d, next)
			}
		})
	}
}

// testTimeBackwards: a store whose clock goes back (another instance, a
// clock step) never gives back what a later step took.
func testTimeBackwards(t *testing.T, newStore NewStore) {
	for _, alg := range rate.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			h := newHarness(t, newStore)
			r := rate.Request{Key: "back", Limit: rate.Limit{Algorithm: alg, Count: 4, Period: 10 * time.Second}, Cost: 1}
			for _, at := range []time.Duration{
				15 * time.Second, 15 * time.Second, 9 * time.Second, 9 * time.Second, 16 * time.Second,
				2 * time.Second, 19 * time.Second, 20 * time.Second, 12 * time.Second, 26 * time.Second,
				25 * time.Second, 31 * time.Second,
			} {
				h.at(epoch.Add(at))
				h.decide(r)
				h.decide(r)
			}
		})
	}
}

// testCost: costs above 1 take that many units; cost 0 only looks.
func testCost(t *testing.T, newStore NewStore) {
	for _, alg := range rate.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			h := newHarness(t, newStore)
			l := rate.Limit{Algorithm: alg, Count: 10, Period: time.Second}
			look := rate.Request{Key: "cost", Limit: l}
			if d := h.decide(look); !d.Allowed || d.Remaining != 10 {
				t.Fatalf("cost 0 on a fresh key: %v, want allowed, 10 remaining", d)
			}
			if d := h.decide(rate.Request{Key: "cost", Limit: l, Cost: 4}); !d.Allowed || d.Remaining != 6 {
				t.Fatalf("cost 4: %v, want allowed, 6 remaining", d)
			}
			if d := h.decide(rate.Request{Key: "cost", Limit: l, Cost: 7}); d.Allowed || d.Remaining != 6 {
				t.Fatalf("cost 7 with 6 left: %v, want refused, 6 remaining", d)
			}
			if d := h.decide(look); !d.Allowed || d.Remaining != 6 {
				t.Fatalf("cost 0 after a refusal: %v, want allowed, 6 remaining (a refusal consumes nothing)", d)
			}
			if d := h.decide(rate.Request{Key: "cost", Limit: l, Cost: 6}); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("cost 6 with 6 left: %v, want allowed, 0 remaining", d)
			}
			if d := h.decide(look); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("cost 0 when empty: %v, want allowed (cost 0 always is), 0 remaining", d)
			}
			h.at(epoch.Add(700 * time.Millisecond))
			h.decide(look)
			h.decide(rate.Request{Key: "cost", Limit: l, Cost: 10})
			h.decide(rate.Request{Key: "cost", Limit: l, Cost: 3})
			h.at(epoch.Add(1500 * time.Millisecond))
			h.decide(rate.Request{Key: "cost", Limit: l, Cost: 10})
			h.decide(look)
		})
	}
}

// testLeakyBucketDelay: a leaky bucket queues requests and tells each its
// delay; a request that would wait longer than its MaxDelay is refused.
func testLeakyBucketDelay(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore)
	l := rate.Limit{Algorithm: rate.LeakyBucket, Count: 4, Period: time.Second, Burst: 3} // one every 250ms
	r := rate.Request{Key: "queue", Limit: l, Cost: 1}
	for i, want := range []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond} {
		if d := h.decide(r); !d.Allowed || d.Delay != want {
			t.Fatalf("request %d: %v, want allowed with delay %v", i, d, want)
		}
	}
	if d := h.decide(r); d.Allowed {
		t.Fatalf("4th request into a queue of 3: %v, want refused", d)
	}
	h.at(epoch.Add(100 * time.Millisecond))
	bounded := rate.Request{Key: "queue", Limit: l, Cost: 1, MaxDelay: 300 * time.Millisecond}
	if d := h.decide(bounded); d.Allowed || d.RetryAfter != 350*time.Millisecond {
		t.Fatalf("request with max delay 300ms when the queue drains in 650ms: %v, want refused, retry 350ms", d)
	}
	h.at(epoch.Add(260 * time.Millisecond))
	h.decide(bounded)
	h.decide(r)
	h.at(epoch.Add(2 * time.Second))
	h.decide(rate.Request{Key: "queue", Limit: l, Cost: 3})

	// A clock 2s behind the latest time the key has seen: its queue, of
	// turns at t and t + 7/3s, has room at that time, so a request that
	// waits at most 6s waits only until its turn at t + 14/3s is within
	// it, 2s + 14/3s − 6s, not also for the clock to catch up.
	slow := rate.Limit{Algorithm: rate.LeakyBucket, Count: 3, Period: 7 * time.Second}
	t0 := epoch.Add(10 * time.Second)
	h.at(t0)
	h.decide(rate.Request{Key: "behind", Limit: slow, Cost: 2})
	behind := rate.Request{Key: "behind", Limit: slow, Cost: 1, MaxDelay: 6 * time.Second}
	h.at(h.back(t0.Add(-2 * time.Second)))
	if d := h.decide(behind); d.Allowed || d.RetryAfter != 666667*time.Microsecond {
		t.Fatalf("2s behind, turn 6.67s away, max delay 6s: %v, want refused, retry 666.667ms", d)
	}
	h.at(h.now.Add(666666 * time.Microsecond))
	h.decide(behind)
	h.at(h.now.Add(time.Microsecond))
	if d := h.decide(behind); !d.Allowed {
		t.Fatalf("after RetryAfter: %v, want allowed", d)
	}

	// A positive MaxDelay under 1µs is a bound: only no delay passes.
	for _, md := range []time.Duration{time.Nanosecond, 999 * time.Nanosecond} {
		if d := h.decide(rate.Request{Key: "behind", Limit: slow, Cost: 0, MaxDelay: md}); d.Remaining != 0 {
			t.Fatalf("a look with max delay %v at a queue: %v, want nothing remaining", md, d)
		}
		if d := h.decide(rate.Request{Key: "behind", Limit: slow, Cost: 1, MaxDelay: md}); d.Allowed {
			t.Fatalf("max delay %v at a queue: %v, want refused", md, d)
		}
		if d := h.decide(rate.Request{Key: "fresh " + md.String(), Limit: slow, Cost: 1, MaxDelay: md}); !d.Allowed || d.Delay != 0 {
			t.Fatalf("max delay %v at an empty queue: %v, want allowed at once", md, d)
		}
	}
}

// testLimitChanged: a limit changed under a key that keeps its state (a
// Limiter with one limit and no Name, on a shared store) meets the state
// the old limit left. A gcra TAT's fraction of a microsecond counts in the
// old limit's units, and can be too large for the new one; a window's
// count can be over the new count. The stores read such states as the
// model does, never report less than nothing remaining, and never refuse
// a look (cost 0).
func testLimitChanged(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore)
	// 700 requests at once at 999999/s leave a TAT with a fraction of 700
	// in millionths less one; at 10/s, 700 tenths are not a fraction.
	old := rate.Limit{Algorithm: rate.GCRA, Count: 999_999, Period: time.Second, Burst: 1000}
	tenths := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Second}
	h.decide(rate.Request{Key: "gcra", Limit: old, Cost: 700})
	if d := h.decide(rate.Request{Key: "gcra", Limit: tenths, Cost: 1}); !d.Allowed || d.ResetAfter != 100_701*time.Microsecond {
		t.Fatalf("10/s after 700 at 999999/s: %v, want allowed, reset 100.701ms", d)
	}
	h.decide(rate.Request{Key: "gcra", Limit: tenths, Cost: 9})
	h.decide(rate.Request{Key: "gcra", Limit: tenths})
	h.at(epoch.Add(150 * time.Millisecond))
	h.decide(rate.Request{Key: "gcra", Limit: tenths, Cost: 1})

	h.at(epoch.Add(time.Minute))
	twenty := rate.Limit{Algorithm: rate.FixedWindow, Count: 20, Period: time.Minute}
	ten := rate.Limit{Algorithm: rate.FixedWindow, Count: 10, Period: time.Minute}
	if n := h.burst(15, rate.Request{Key: "window", Limit: twenty, Cost: 1}); n != 15 {
		t.Fatalf("15 requests at 20/m: %d allowed", n)
	}
	if d := h.decide(rate.Request{Key: "window", Limit: ten, Cost: 1}); d.Allowed || d.Remaining != 0 {
		t.Fatalf("10/m with 15 counted: %v, want refused, nothing remaining", d)
	}
	if d := h.decide(rate.Request{Key: "window", Limit: ten}); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("a look at 10/m with 15 counted: %v, want allowed, nothing remaining", d)
	}
	h.decide(rate.Request{Key: "window", Limit: ten, Cost: 1})

	queue := rate.Limit{Algorithm: rate.LeakyBucket, Count: 1, Period: time.Second, Burst: 5}
	h.burst(3, rate.Request{Key: "queue", Limit: queue, Cost: 1})
	look := rate.Request{Key: "queue", Limit: queue, MaxDelay: time.Second}
	if d := h.decide(look); !d.Allowed {
		t.Fatalf("a look with max delay 1s at a queue of 3s: %v, want allowed", d)
	}
	if d := h.decide(rate.Request{Key: "queue", Limit: queue, Cost: 1, MaxDelay: time.Second}); d.Allowed {
		t.Fatalf("a request with max delay 1s at a queue of 3s: %v, want refused", d)
	}
}

// testAllOrNothing: two limits on one request. When one refuses, the other
// consumes nothing, and each decision still tells what it alone says.
func testAllOrNothing(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore)
	perSecond := rate.Request{Key: "{acct=7}:s", Limit: rate.Limit{Algorithm: rate.GCRA, Count: 2, Period: time.Second}, Cost: 1}
	perMinute := rate.Request{Key: "{acct=7}:m", Limit: rate.Limit{Algorithm: rate.FixedWindow, Count: 5, Period: time.Minute}, Cost: 1}
	passed := 0
	for i := range 20 {
		h.at(epoch.Add(time.Duration(i) * 100 * time.Millisecond))
		if h.decide(perSecond, perMinute).Allowed {
			passed++
		}
	}
	// The bucket of 2 passes t=0 and t=0.1s, then one every 500ms: t=0.5,
	// 1.0 and 1.5s make 5, where the minute limit stops them all.
	if passed != 5 {
		t.Errorf("%d of 20 passed both limits, want 5", passed)
	}
	// The second limit alone shows that refusals by the first cost it nothing.
	h.at(epoch.Add(30 * time.Second))
	if d := h.decide(perMinute); d.Allowed || d.Remaining != 0 {
		t.Errorf("minute limit after 5 passed: %v, want refused with 0 remaining", d)
	}
	// A three-limit request where only the middle one refuses.
	third := rate.Request{Key: "{acct=7}:log", Limit: rate.Limit{Algorithm: rate.SlidingLog, Count: 3, Period: time.Minute}, Cost: 2}
	for range 3 {
		h.decide(third, perMinute, perSecond)
	}
	h.at(epoch.Add(61 * time.Second))
	for range 3 {
		h.decide(third, perMinute, perSecond)
	}
}

// testKeyTwice: a key given twice in one DecideAll is decided on the state
// its first request left, and the whole stays all or nothing.
func testKeyTwice(t *testing.T, newStore NewStore) {
	h := newHarness(t, newStore)
	window := rate.Request{Key: "{k}:w", Limit: rate.Limit{Algorithm: rate.FixedWindow, Count: 3, Period: time.Minute}, Cost: 2}
	bucket := rate.Request{Key: "{k}:b", Limit: rate.Limit{Algorithm: rate.GCRA, Count: 4, Period: time.Second}, Cost: 1}
	tight := rate.Request{Key: "{k}:t", Limit: rate.Limit{Algorithm: rate.FixedWindow, Count: 1, Period: time.Minute}, Cost: 1}
	h.at(epoch)
	if d := h.decide(window, window); d.Allowed {
		t.Errorf("2 + 2 of 3 in one call: %v, want refused", d)
	}
	h.decide(bucket, bucket, bucket)
	h.decide(bucket, bucket, tight)
	h.decide(bucket, tight, bucket) // bucket has room for one: all refused
	h.decide(tight)                 // spends it
	// A fresh key asked twice would pass both times, and the tight limit
	// refuses: nothing is spent, and each of the two reports what is left
	// without it, from the key's state before the call.
	fresh := rate.Request{Key: "{k}:f", Limit: bucket.Limit, Cost: 1}
	h.decide(fresh, fresh, tight)
	h.at(epoch.Add(500 * time.Millisecond))
	h.decide(bucket, bucket)
	h.decide(window, bucket, window)
}

// testInvalidRequests: a cost that can never pass or is negative is an
// error, not a refusal.
func testInvalidRequests(t *testing.T, newStore NewStore) {
	s, _ := newStore(t)
	l := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Second, Burst: 5}
	_, err := s.Decide(context.Background(), rate.Request{Key: "k", Limit: l, Cost: 6})
	if !errors.Is(err, rate.ErrCostExceedsCapacity) {
		t.Errorf("cost 6 for a burst of 5: err = %v, want ErrCostExceedsCapacity", err)
	}
	_, err = s.Decide(context.Background(), rate.Request{Key: "k", Limit: l, Cost: -1})
	if !errors.Is(err, rate.ErrNegativeCost) {
		t.Errorf("cost -1: err = %v, want ErrNegativeCost", err)
	}
	// Limits that Validate refuses are errors in every store, never a
	// silent refusal or a limit read some other way.
	for _, bad := range []rate.Limit{
		{Algorithm: 99, Count: 10, Period: time.Second},
		{Algorithm: rate.FixedWindow, Count: 10, Period: time.Second, Burst: 5},
		{Count: 10, Period: 1500 * time.Nanosecond},
		{Count: 10, Period: time.Second, Burst: -1},
		{Count: 0, Period: time.Second},
	} {
		if _, err := s.Decide(context.Background(), rate.Request{Key: "k", Limit: bad, Cost: 1}); err == nil {
			t.Errorf("invalid limit %#v: no error", bad)
		}
	}
	ok := rate.Request{Key: "{g}a", Limit: l, Cost: 1}
	bad := rate.Request{Key: "{g}b", Limit: l, Cost: 6}
	out := make([]rate.Decision, 2)
	if _, err := s.DecideAll(context.Background(), []rate.Request{ok, bad}, out); !errors.Is(err, rate.ErrCostExceedsCapacity) {
		t.Errorf("DecideAll with one impossible cost: err = %v, want ErrCostExceedsCapacity", err)
	}
}

// randomLimit returns a valid limit of alg with small, often awkward
// parameters.
func randomLimit(rng *rand.Rand, alg rate.Algorithm) rate.Limit {
	periods := []time.Duration{
		time.Second, 7 * time.Second, time.Minute, 1500 * time.Millisecond,
		333_333 * time.Microsecond, 10 * time.Microsecond, 86_400 * time.Second,
	}
	l := rate.Limit{Algorithm: alg, Count: 1 + rng.Int64N(12), Period: periods[rng.IntN(len(periods))]}
	if alg == rate.FixedWindow && rng.IntN(5) == 0 {
		l.Period, l.Calendar = 0, rate.Month
	}
	if alg.HasBurst() && rng.IntN(2) == 0 {
		l.Burst = 1 + rng.Int64N(20)
	}
	if rng.IntN(6) == 0 {
		// Near the largest exact limits, where a float64 division rounded
		// the wrong way would show.
		us := int64(l.Period / time.Microsecond)
		switch alg {
		case rate.SlidingLog:
			l.Count = rate.MaxLogCount - rng.Int64N(100)
		case rate.FixedWindow:
			l.Count = rate.MaxExact - rng.Int64N(1000)
		default:
			l.Count = rate.MaxExact/us - rng.Int64N(1+rate.MaxExact/us/1000)
			if l.Burst > 0 {
				l.Count, l.Burst = 1+rng.Int64N(l.Count), l.Count
			}
		}
	}
	return l
}

// changedLimit returns a random limit to replace l under a key that keeps
// its state: one of the same algorithm, with which the state stays fresh
// when it was (so that a store's forgetting a fresh key at the time the
// old limit said is never a difference): any gcra or leaky_bucket limit
// (a TAT means the same under any), the same rate with another burst for
// a token_bucket, the same period with another count for the others.
func changedLimit(rng *rand.Rand, l rate.Limit) rate.Limit {
	switch l.Algorithm {
	case rate.GCRA, rate.LeakyBucket:
		return randomLimit(rng, l.Algorithm)
	case rate.TokenBucket:
		l.Burst = 0
		if rng.IntN(2) == 0 {
			l.Burst = 1 + rng.Int64N(20)
		}
	default:
		l.Count = 1 + rng.Int64N(12)
	}
	return l
}

// testRandom drives every algorithm with seeded random sequences: a few
// keys with random limits, random groups of one to three of them, random
// costs (often 0 or the whole capacity), and time that mostly moves
// forward by small steps, sometimes jumps, and sometimes goes back. With
// changes, a key's limit is sometimes replaced by another (see
// changedLimit), whose steps read the state the old one left.
func testRandom(t *testing.T, newStore NewStore, changes bool) {
	const seeds, steps = 3, 500
	for _, alg := range rate.Algorithms() {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("%v/seed=%d", alg, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, uint64(alg)))
				h := newHarness(t, newStore)
				// Keys share a hash tag, so a cluster decides any group of
				// them in one slot; the mixed algorithms make groups mix.
				keys := []string{"{r}a", "{r}b", "{r}c", "{r}d"}
				limits := map[string]rate.Limit{}
				for i, k := range keys {
					a := alg
					if i == len(keys)-1 {
						a = rate.Algorithms()[rng.IntN(len(rate.Algorithms()))]
					}
					limits[k] = randomLimit(rng, a)
					if err := limits[k].Validate(); err != nil {
						t.Fatalf("random limit %v: %v", limits[k], err)
					}
				}
				now := epoch.Add(time.Duration(rng.Int64N(int64(time.Hour))))
				for range steps {
					switch p := rng.IntN(100); {
					case p < 60:
						now = now.Add(time.Duration(rng.Int64N(int64(limits[keys[0]].Period/4 + time.Millisecond))))
					case p < 75:
						// unchanged
					case p < 85:
						now = now.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
					case p < 90:
						now = now.Add(time.Duration(rng.Int64N(int64(40 * 24 * time.Hour))))
					default:
						now = h.back(now.Add(-time.Duration(rng.Int64N(int64(5 * time.Second)))))
					}
					now = now.Truncate(time.Microsecond)
					h.at(now)
					if changes && rng.IntN(10) == 0 {
						k := keys[rng.IntN(len(keys))]
						if l := changedLimit(rng, limits[k]); l.Validate() == nil {
							limits[k] = l
						}
					}
					n := 1 + rng.IntN(3)
					if rng.IntN(2) == 0 {
						n = 1
					}
					perm := rng.Perm(len(keys))[:n]
					reqs := make([]rate.Request, n)
					for i, j := range perm {
						l := limits[keys[j]]
						r := rate.Request{Key: keys[j], Limit: l}
						switch c := rng.IntN(10); {
						case c < 6:
							r.Cost = 1
						case c < 7:
							r.Cost = 0
						case c < 8:
							r.Cost = l.Capacity()
						default:
							r.Cost = rng.Int64N(l.Capacity() + 1)
						}
						// A caller who waits: a leaky_bucket's turn, or a
						// gcra or token_bucket's units reserved past its
						// burst.
						if l.Algorithm.HasBurst() && rng.IntN(3) == 0 {
							r.MaxDelay = time.Duration(rng.Int64N(int64(l.Period)))
						}
						reqs[i] = r
					}
					h.decide(reqs...)
				}
			})
		}
	}
}
