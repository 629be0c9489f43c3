package ratetest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// A test gives the store a fake clock and moves it by hand: a refused
// request passes once the clock has been advanced by its RetryAfter, and
// the test waits for nothing.
func ExampleClock() {
	clock := ratetest.NewClock(time.Date(2100, 1, 4, 12, 0, 0, 0, time.UTC))
	store := memory.New(memory.Options{Clock: clock})
	limit, err := rate.ParseLimit("1/m")
	if err != nil {
		panic(err)
	}
	r := rate.Request{Key: "alice", Limit: limit, Cost: 1}
	decide := func() rate.Decision {
		d, err := store.Decide(context.Background(), r)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s allowed=%t retry after %v\n", clock.Now().Format(time.TimeOnly), d.Allowed, d.RetryAfter)
		return d
	}

	decide()
	d := decide()
	clock.Advance(d.RetryAfter - time.Second) // not quite
	decide()
	clock.Advance(time.Second)
	decide()

	// Sleep advances the clock at once, as code under test that waits
	// would; Slept tells the test how long it waited.
	_ = clock.Sleep(context.Background(), 90*time.Second)
	slept, n := clock.Slept()
	fmt.Println(clock.Now().Format(time.TimeOnly), "slept", slept, "in", n, "call")
	// Output:
	// 12:00:00 allowed=true retry after 0s
	// 12:00:00 allowed=false retry after 1m0s
	// 12:00:59 allowed=false retry after 1s
	// 12:01:00 allowed=true retry after 0s
	// 12:02:30 slept 1m30s in 1 call
}
