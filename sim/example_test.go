package sim_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/sim"
)

// Replay a built-in scenario and read the totals.
func Example() {
	sc, err := sim.Builtin("boundary", sim.Params{})
	if err != nil {
		panic(err)
	}
	res, err := sim.Run(context.Background(), sc)
	if err != nil {
		panic(err)
	}
	for _, row := range res.Rows {
		fmt.Printf("%-14s passed %2d, refused %2d\n", row.Algorithm, row.Passed, row.Refused)
	}
	// Output:
	// fixed_window   passed 20, refused  0
	// sliding_log    passed 10, refused 10
	// sliding_window passed 10, refused 10
	// token_bucket   passed 10, refused 10
	// leaky_bucket   passed 10, refused 10
	// gcra           passed 10, refused 10
}

// Build traffic of your own, and compare three replicas with their own
// in-memory counters against replicas sharing one counter. Each replica
// sees a third of 20 requests per second: with its own fixed window it
// passes 5 of them per second, with its own bucket (5 at once, 5 more per
// second) nearly all for the first seconds. Sharing one counter passes 5
// per second, after the bucket's initial burst.
func ExampleRun() {
	traffic := sim.Steady("api-key-1", 0, 4*time.Second, 50*time.Millisecond) // 20 per second
	res, err := sim.Run(context.Background(), sim.Scenario{
		Name:       "replicas",
		Limit:      rate.Limit{Count: 5, Period: time.Second},
		Algorithms: []rate.Algorithm{rate.FixedWindow, rate.GCRA},
		Setups:     []sim.Setup{sim.OwnCounters, sim.SharedCounter},
		Instances:  3,
		Events:     traffic,
	})
	if err != nil {
		panic(err)
	}
	for _, row := range res.Rows {
		fmt.Printf("%s %s: %d of %d passed, per second:", row.Algorithm, row.Setup, row.Passed, row.Passed+row.Refused)
		for _, s := range row.PerSecond {
			fmt.Printf(" %d", s.Passed)
		}
		fmt.Println()
	}
	// Output:
	// fixed_window own-counters: 60 of 80 passed, per second: 15 15 15 15
	// fixed_window shared-counter: 20 of 80 passed, per second: 5 5 5 5
	// gcra own-counters: 71 of 80 passed, per second: 20 20 17 14
	// gcra shared-counter: 24 of 80 passed, per second: 9 5 5 5
}

// Read traffic from a file: seconds from the start (or RFC 3339
// instants), a key, and an optional cost.
func ExampleReadCSV() {
	events, start, err := sim.ReadCSV(strings.NewReader("time,key,cost\n0.5,alice\n0.5,alice,3\n2.25,bob\n"))
	if err != nil {
		panic(err)
	}
	fmt.Println(start.Unix(), len(events), events[1].Key, events[1].Cost, events[2].At)
	_, _, err = sim.ReadCSV(strings.NewReader("0,alice\nlater,bob\n"))
	fmt.Println(err)
	// Output:
	// 0 3 alice 3 2.25s
	// line 2: time "later": want seconds from the start (such as 9.9) or an RFC 3339 instant (such as 2025-06-01T12:00:09.9Z)
}
