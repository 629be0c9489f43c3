package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// The examples run on a fake clock so that their output does not depend on
// how fast they run; a program leaves LimiterOptions.Clock nil.
func exampleClock() *ratetest.Clock {
	return ratetest.NewClock(time.Date(2100, 1, 4, 12, 0, 0, 0, time.UTC))
}

func ExampleLimiter_Allow() {
	clock := exampleClock()
	limit, err := rate.ParseLimit("3/s")
	if err != nil {
		panic(err)
	}
	lim, err := sluice.NewLimiter(sluice.LimiterOptions{Limits: []rate.Limit{limit}, Clock: clock})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		d, err := lim.Allow(ctx, "alice")
		if err != nil {
			panic(err) // the store could not decide
		}
		if d.Allowed {
			fmt.Printf("allowed, %d left\n", d.Remaining)
		} else {
			fmt.Printf("refused, retry in %v\n", d.RetryAfter)
		}
	}
	// Output:
	// allowed, 2 left
	// allowed, 1 left
	// allowed, 0 left
	// refused, retry in 333.334ms
}

func ExampleLimiter_Wait() {
	clock := exampleClock()
	lim, err := sluice.NewLimiter(sluice.LimiterOptions{
		Limits: []rate.Limit{{Count: 1, Period: time.Second}},
		Clock:  clock,
	})
	if err != nil {
		panic(err)
	}
	begin := clock.Now()
	for i := range 3 {
		if err := lim.Wait(context.Background(), "worker"); err != nil {
			panic(err)
		}
		fmt.Printf("job %d at +%v\n", i, clock.Now().Sub(begin))
	}

	// With a deadline, Wait gives up at once if it could not pass in time.
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(500*time.Millisecond))
	defer cancel()
	err = lim.Wait(ctx, "worker")
	fmt.Println(errors.Is(err, sluice.ErrWouldExceedDeadline), err)
	fmt.Printf("still at +%v\n", clock.Now().Sub(begin))
	// Output:
	// job 0 at +0s
	// job 1 at +1s
	// job 2 at +2s
	// true sluice: "worker" would have to wait 1s, 500ms left: rate limit wait would exceed the context deadline
	// still at +2s
}

// A limiter with several limits admits a request only if every limit
// does, and a refused request counts against none of them.
func ExampleNewLimiter_multipleLimits() {
	lim, err := sluice.NewLimiter(sluice.LimiterOptions{
		Limits: []rate.Limit{
			{Count: 10, Period: time.Second},                                   // 10/s
			{Algorithm: rate.FixedWindow, Count: 1000, Period: 24 * time.Hour}, // 1000 per UTC day
		},
		Clock: exampleClock(),
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	d, _ := lim.AllowN(ctx, "alice", 10)
	fmt.Println("10 at once:", d.Allowed)
	d, _ = lim.Allow(ctx, "alice")
	fmt.Println("one more:", d.Allowed, "retry in", d.RetryAfter)
	d, _ = lim.AllowN(ctx, "bob", 0) // cost 0 only looks
	fmt.Println("bob may send", d.Remaining, "now")
	// Output:
	// 10 at once: true
	// one more: false retry in 100ms
	// bob may send 10 now
}

// Logins are limited per account and per IP. AllowAll decides both as one:
// an attempt passes only if both limits admit it, and a refused attempt
// counts against neither.
func ExampleAllowAll() {
	clock := exampleClock()
	store := memory.New(memory.Options{Clock: clock}) // the limiters share it
	perAccount, _ := rate.ParseLimit("sliding_log 3 per 15m")
	perIP, _ := rate.ParseLimit("100/h")
	accounts, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "account", Limits: []rate.Limit{perAccount}, Store: store, Clock: clock})
	if err != nil {
		panic(err)
	}
	ips, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "ip", Limits: []rate.Limit{perIP}, Store: store, Clock: clock})
	if err != nil {
		panic(err)
	}

	login := func(user, ip string) {
		reqs := append(accounts.Requests(user, 1), ips.Requests(ip, 1)...)
		d, err := sluice.AllowAll(context.Background(), store, reqs...)
		if err != nil {
			panic(err)
		}
		if d.Allowed {
			fmt.Printf("%s from %s: try the password\n", user, ip)
		} else {
			fmt.Printf("%s from %s: too many attempts, retry in %v\n", user, ip, d.RetryAfter)
		}
	}
	for range 4 {
		login("alice", "192.0.2.1")
	}
	clock.Advance(5 * time.Minute)
	login("alice", "198.51.100.7")
	// Output:
	// alice from 192.0.2.1: try the password
	// alice from 192.0.2.1: try the password
	// alice from 192.0.2.1: try the password
	// alice from 192.0.2.1: too many attempts, retry in 15m0s
	// alice from 198.51.100.7: too many attempts, retry in 10m0s
}
