package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// step is one decision of a table: at this offset from noon on 1 June
// 2024, this request.
type step struct {
	at   time.Duration
	key  string
	l    rate.Limit
	cost int64
}

// checkSteps decides each step in Redis, with the script's time pinned,
// and compares every decision with package rate's.
func checkSteps(t *testing.T, steps []step) {
	t.Helper()
	o, clk := pinnedOptions(redis.Options{DisableDenyCache: true})
	o.Prefix = t.Name() + ":"
	s := redis.New(newClient(t, redistest.Start(t).Addr()), o)
	noon := clk.Now()
	model := map[string]rate.State{}
	for i, st := range steps {
		now := noon.Add(st.at)
		clk.Set(now)
		next, want := st.l.Step(model[st.key], rate.Micros(now), st.cost)
		if want.Allowed {
			model[st.key] = next
		}
		got, err := s.Decide(context.Background(), rate.Request{Key: st.key, Limit: st.l, Cost: st.cost})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got != want {
			t.Errorf("step %d at %v, %v cost %d:\n got  %v\n want %v", i, st.at, st.l, st.cost, got, want)
		}
	}
}

// A bucket whose capacity takes more than a century to refill (1 a day,
// burst 50,000: valid, since burst × period stays below 2^52): once full,
// the instant a refused request would have reached lies beyond 2^53 µs,
// where float64s are no longer integers. Its RetryAfter is still rate's,
// to the microsecond, at odd and even instants alike.
func TestSlowBucketRetryExact(t *testing.T) {
	for _, alg := range []rate.Algorithm{rate.GCRA, rate.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			l := rate.Limit{Algorithm: alg, Count: 1, Period: 24 * time.Hour, Burst: 50_000}
			steps := []step{{time.Microsecond, "slow", l, 50_000}} // a TAT at an odd µs
			for _, at := range []time.Duration{1, 2, 3, 1001, 86_400_000_001} {
				for _, cost := range []int64{1, 3, 49_999, 50_000} {
					steps = append(steps, step{at * time.Microsecond, "slow", l, cost})
				}
			}
			checkSteps(t, steps)
		})
	}
}

// A fixed window whose period is changed under a key with a count in its
// window (a policy reloaded from 5 an hour to 5 a day): the old window,
// later than the new one's start, still counts, until the end of the
// new-length window that holds it, as rate decides. The script ended it a
// period after the old window's start instead: its RetryAfter (and the
// deny cache's refusal) ran up to a day past the moment Redis admits.
func TestFixedWindowPeriodChanged(t *testing.T) {
	hourly := rate.Limit{Algorithm: rate.FixedWindow, Count: 5, Period: time.Hour}
	daily := rate.Limit{Algorithm: rate.FixedWindow, Count: 5, Period: 24 * time.Hour}
	checkSteps(t, []step{
		{0, "w", hourly, 5},
		{time.Minute, "w", daily, 1},
		{time.Minute, "w", daily, 0},
		{11*time.Hour + time.Minute, "w", daily, 1},
		{12 * time.Hour, "w", daily, 1},
	})
}

// A sliding window whose limit changed under a key to one with a far
// smaller count and a longer period (a billion a second, then 3 a day):
// the old counts times the new period pass 2^63, where Go's int64s wrap,
// and 2^53, where the script's doubles round. A count above the limit's
// is taken as the limit's, in both, so both decide alike, and exactly.
func TestSlidingWindowCountsFromAnotherLimit(t *testing.T) {
	fast := rate.Limit{Algorithm: rate.SlidingWindow, Count: 1_000_000_000, Period: time.Second}
	daily := rate.Limit{Algorithm: rate.SlidingWindow, Count: 3, Period: 24 * time.Hour}
	checkSteps(t, []step{
		{12*time.Hour - time.Second, "s", fast, 1_000_000_000},
		{12*time.Hour + 999_999*time.Microsecond, "s", fast, 999_999_000}, // (midnight, 999,999,000, 10⁹)
		{24 * time.Hour, "s", daily, 1},
		{24 * time.Hour, "s", daily, 0},
		{36*time.Hour + 7*time.Second, "s", daily, 1},
		{47 * time.Hour, "s", daily, 1},
	})
}

// A sliding window lowered under counts above its limit, looked at, then
// raised again: the look reads the counts as a full window, and writes
// them back as they were, as rate does; written down to the lower limit,
// the raised one admitted again what the first had counted.
func TestSlidingWindowLoweredThenRaised(t *testing.T) {
	l := func(n int64) rate.Limit {
		return rate.Limit{Algorithm: rate.SlidingWindow, Count: n, Period: time.Minute}
	}
	checkSteps(t, []step{
		{0, "s", l(20), 15},
		{time.Second, "s", l(10), 0},
		{2 * time.Second, "s", l(18), 3},
		{2 * time.Second, "s", l(18), 1},
		{61 * time.Second, "s", l(10), 0},
		// Halfway through the next window the previous 18 weigh 9:
		// written down to 10 they would weigh 5, and 4 more remain.
		{90 * time.Second, "s", l(10), 0},
		{90 * time.Second, "s", l(40), 18},
		{119*time.Second + 500*time.Millisecond, "s", l(10), 9},
		{119*time.Second + 500*time.Millisecond, "s", l(40), 20},
	})
}
