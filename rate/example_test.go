package rate_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/rate"
)

func ExampleParseLimit() {
	for _, s := range []string{"10/s", "20/s burst 40", "10 per 10s", "10000/month", "sliding_log 5/m"} {
		l, err := rate.ParseLimit(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%-16q → %v (capacity %d)\n", s, l, l.Capacity())
	}
	_, err := rate.ParseLimit("10/fortnight")
	fmt.Println(err)
	// Output:
	// "10/s"           → gcra 10/s (capacity 10)
	// "20/s burst 40"  → gcra 20/s burst 40 (capacity 40)
	// "10 per 10s"     → gcra 10 per 10s (capacity 10)
	// "10000/month"    → fixed_window 10000/month (capacity 10000)
	// "sliding_log 5/m" → sliding_log 5/m (capacity 5)
	// invalid limit "10/fortnight": unknown unit "fortnight" (want s, m, h, d, month or a duration like 10s)
}

// Step is a pure function: a store keeps the state between calls.
func ExampleLimit_Step() {
	l := rate.Limit{Algorithm: rate.TokenBucket, Count: 1, Period: time.Second, Burst: 3}
	var s rate.State
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, at := range []time.Duration{0, 0, 0, 0, 1500 * time.Millisecond} {
		next, d := l.Step(s, rate.Micros(start.Add(at)), 1)
		if d.Allowed {
			s = next
		}
		fmt.Printf("request %d at %v: allowed=%t remaining=%d retry after %v\n", i+1, at, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// request 1 at 0s: allowed=true remaining=2 retry after 0s
	// request 2 at 0s: allowed=true remaining=1 retry after 0s
	// request 3 at 0s: allowed=true remaining=0 retry after 0s
	// request 4 at 0s: allowed=false remaining=0 retry after 1s
	// request 5 at 1.5s: allowed=true remaining=0 retry after 0s
}

// A leaky bucket shapes: it admits a burst into its queue and tells each
// request how long to wait for its turn.
func ExampleLimit_Step_leakyBucket() {
	l, _ := rate.ParseLimit("leaky_bucket 2/s burst 3")
	var s rate.State
	for i := range 4 {
		next, d := l.Step(s, 0, 1)
		if d.Allowed {
			s = next
			fmt.Printf("request %d: wait %v\n", i+1, d.Delay)
		} else {
			fmt.Printf("request %d: queue full, retry after %v\n", i+1, d.RetryAfter)
		}
	}
	// Output:
	// request 1: wait 0s
	// request 2: wait 500ms
	// request 3: wait 1s
	// request 4: queue full, retry after 500ms
}

// A gcra caller who waits up to 400ms (Request.MaxDelay, a policy's
// max_delay) is let through at once while the burst lasts, then held for
// its unit, reserved, while it comes within the wait: NGINX's limit_req
// burst=12 delay=8 at 10r/s.
func ExampleLimit_StepWithin() {
	l, _ := rate.ParseLimit("gcra 10/s burst 9")
	var s rate.State
	for i := range 14 {
		next, d := l.StepWithin(s, 0, 1, 400*time.Millisecond)
		switch {
		case !d.Allowed:
			fmt.Printf("request %d: refused, retry after %v\n", i+1, d.RetryAfter)
		case d.Delay > 0:
			s = next
			fmt.Printf("request %d: held %v\n", i+1, d.Delay)
		default:
			s = next
			if i == 8 {
				fmt.Println("requests 1-9: at once")
			}
		}
	}
	// Output:
	// requests 1-9: at once
	// request 10: held 100ms
	// request 11: held 200ms
	// request 12: held 300ms
	// request 13: held 400ms
	// request 14: refused, retry after 100ms
}
