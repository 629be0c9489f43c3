package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

func ExampleNew() {
	clock := ratetest.NewClock(time.Date(2030, 1, 7, 0, 0, 0, 0, time.UTC))
	s := memory.New(memory.Options{Clock: clock})
	lim, _ := rate.ParseLimit("2/s")
	for range 3 {
		d, _ := s.Decide(context.Background(), rate.Request{Key: "alice", Limit: lim, Cost: 1})
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 500ms
}

// DecideKey is Decide for a caller that keeps its limit: it takes the
// limit by pointer rather than a Request to copy.
func ExampleStore_DecideKey() {
	clock := ratetest.NewClock(time.Date(2030, 1, 7, 0, 0, 0, 0, time.UTC))
	s := memory.New(memory.Options{Clock: clock})
	lim, _ := rate.ParseLimit("token_bucket 10/m burst 3")
	for _, key := range []string{"10.0.0.1", "10.0.0.1", "10.0.0.2"} {
		d, _ := s.DecideKey(context.Background(), key, &lim, 2)
		fmt.Println(key, d.Allowed, d.Remaining)
	}
	// Output:
	// 10.0.0.1 true 1
	// 10.0.0.1 false 1
	// 10.0.0.2 true 1
}
