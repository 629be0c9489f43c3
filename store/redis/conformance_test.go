package redis_test

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/redis"
	"github.com/sluicehq/sluice/store/storetest"
)

// pinnedStores returns a storetest factory of stores over client whose
// script time is pinned to a fake clock, each under its own key prefix.
// pinnedOptions returns o with its decisions (in place of Redis's TIME)
// and its deny cache on one fake clock, which it returns, set to noon on 1
// June 2024.
func pinnedOptions(o redis.Options) (redis.Options, *ratetest.Clock) {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	o.Clock = clk
	redis.PinNow(&o, clk)
	return o, clk
}

func pinnedStores(client rueidis.Client, opts redis.Options) storetest.NewStore {
	return func(t *testing.T) (sluice.Store, func(time.Time)) {
		clk := ratetest.NewClock(time.Unix(0, 0))
		o := opts
		o.Prefix = t.Name() + ":"
		o.Clock = clk
		redis.PinNow(&o, clk)
		return redis.New(client, o), clk.Set
	}
}

// The deny cache is off here: a local refusal reports the Remaining that
// Redis reported when it refused, which the suite, stepping time between
// requests, would rightly find stale. TestDenyCacheCountsDown checks what
// the cache does report.
func TestConformance(t *testing.T) {
	testConformanceOn(t, newClient(t, redistest.Start(t).Addr()))
}

func testConformanceOn(t *testing.T, client rueidis.Client) {
	storetest.Run(t, pinnedStores(client, redis.Options{DisableDenyCache: true}))
}

// Without the coalescer, each decision is a script call of its own. (The
// suite calls one at a time, so through the coalescer each batch holds one
// group; TestCoalescer has the shared batches.)
func TestConformanceUncoalesced(t *testing.T) {
	storetest.Run(t, pinnedStores(newClient(t, redistest.Start(t).Addr()), redis.Options{DisableDenyCache: true, DisableCoalescing: true}))
}

// newClient returns a rueidis client of the servers at addrs, closed when
// the test ends.
func newClient(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// bucketState returns the script's encoding of a gcra or leaky_bucket
// state: the algorithm's number, then A, B and C as big-endian float64s.
func bucketState(alg rate.Algorithm, s rate.State) string {
	b := []byte{byte(alg)}
	for _, v := range []int64{s.A, s.B, s.C} {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return string(b)
}

// A leaky_bucket decided with a MaxDelay at a time before the latest it
// has seen (a clock stepped back on the instance that pinned it): the
// queue has room at that latest time, so the request waits only for its
// turn to come within the MaxDelay, 865,382µs, not 2.46s as the script
// and rate both said. Comparing the script with rate cannot see a mistake
// they share, so the wait is checked against its known value too. (The
// suite's LeakyBucketDelay has such a case reached by decisions; this one
// is the state the mistake was first seen in.)
func TestConformanceLeakyBucketClockBehind(t *testing.T) {
	srv := redistest.Start(t)
	o, clk := pinnedOptions(redis.Options{DisableDenyCache: true})
	s := redis.New(newClient(t, srv.Addr()), o)
	l := rate.Limit{Algorithm: rate.LeakyBucket, Count: 3, Period: 7 * time.Second}
	st := rate.State{A: 1700000297126584, B: 0, C: 1700000294218001}
	r := rate.Request{Key: "behind", Limit: l, Cost: 1, MaxDelay: 6263683 * time.Microsecond}
	now := int64(1700000289997519)
	for _, c := range []struct {
		at      int64
		allowed bool
		retry   time.Duration
	}{
		{now, false, 865382 * time.Microsecond},
		{now + 865381, false, time.Microsecond},
		{now + 865382, true, 0},
	} {
		srv.MustDo("SET", s.Key(r.Key), bucketState(l.Algorithm, st))
		clk.Set(time.UnixMicro(c.at))
		got, err := s.Decide(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		_, want := l.StepWithin(st, c.at, r.Cost, r.MaxDelay)
		if got != want || got.Allowed != c.allowed || got.RetryAfter != c.retry {
			t.Errorf("at %+dµs: got %v, rate says %v; want allowed %t, retry after %v", c.at-now, got, want, c.allowed, c.retry)
		}
	}
}
