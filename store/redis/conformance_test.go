package redis_test

import (
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
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
