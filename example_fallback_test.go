package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
)

// unreachableStore is a primary store whose server cannot be reached, as
// a Redis store's is while the network is down.
type unreachableStore struct{}

func (unreachableStore) Decide(context.Context, rate.Request) (rate.Decision, error) {
	return rate.Decision{}, errors.New("dial tcp 10.0.0.7:6379: connect: connection refused")
}

func (unreachableStore) DecideAll(context.Context, []rate.Request, []rate.Decision) (rate.Decision, error) {
	return rate.Decision{}, errors.New("dial tcp 10.0.0.7:6379: connect: connection refused")
}

// While the primary store cannot decide, a Fallback decides by its
// FailureMode. With FailLocal each instance decides in a store of its own,
// with its share of the limit: here three instances share 6 a minute, so
// this one admits 2 a minute, refilled one every 30s. The caller sees
// decisions, not errors; DecideAllSource also says who made them.
func ExampleNewFallback() {
	clock := ratetest.NewClock(time.Date(2100, 1, 4, 12, 0, 0, 0, time.UTC)) // a program leaves Clock nil
	store := sluice.NewFallback(unreachableStore{}, sluice.FallbackOptions{
		Mode:      sluice.FailLocal,
		Instances: 3,
		Clock:     clock,
	})
	limit, err := rate.ParseLimit("6/m")
	if err != nil {
		panic(err)
	}
	reqs := []rate.Request{{Key: "user:42", Limit: limit, Cost: 1}}
	out := make([]rate.Decision, 1)
	decide := func() {
		d, src, err := store.DecideAllSource(context.Background(), reqs, out)
		if err != nil {
			panic(err) // the local store too could not decide
		}
		if d.Allowed {
			fmt.Printf("%s: allowed, %d left\n", src, d.Remaining)
		} else {
			fmt.Printf("%s: refused, retry in %v\n", src, d.RetryAfter)
		}
	}
	for range 3 {
		decide()
	}
	clock.Advance(30 * time.Second)
	decide()

	// The primary was tried twice: by the first call, which found it
	// down, and by a probe once the backoff (100ms) had passed.
	st := store.Stats()
	fmt.Printf("down: %t, failed calls: %d (probes: %d), decided locally: %d\n", st.Down, st.Failures, st.Probes, st.Fallback)
	// Output:
	// local: allowed, 1 left
	// local: allowed, 0 left
	// local: refused, retry in 30s
	// local: allowed, 0 left
	// down: true, failed calls: 2 (probes: 1), decided locally: 4
}
