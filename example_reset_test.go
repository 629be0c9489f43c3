package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
)

// Failed logins are counted per account, three per 15 minutes, and a
// successful login forgets them, as OWASP advises: only failures lock an
// account out, however often its owner logs in. A look (cost 0) asks
// whether an attempt may go ahead without counting it; only a wrong
// password then spends one.
func ExampleLimiter_Reset() {
	clock := exampleClock() // a program leaves Clock nil
	limit, err := rate.ParseLimit("3 per 15m")
	if err != nil {
		panic(err)
	}
	failures, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "login-failures", Limits: []rate.Limit{limit}, Clock: clock})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	login := func(account, password string) {
		d, err := failures.AllowN(ctx, account, 0)
		if err != nil {
			panic(err) // the store could not decide
		}
		if d.Remaining == 0 {
			fmt.Printf("%s: locked out\n", account)
			return
		}
		if password != "correct horse" {
			d, err := failures.AllowN(ctx, account, 1)
			if err != nil {
				panic(err)
			}
			fmt.Printf("%s: wrong password; attempts left: %d\n", account, d.Remaining)
			return
		}
		if err := failures.Reset(ctx, account); err != nil {
			panic(err) // the failures are still counted
		}
		fmt.Printf("%s: logged in\n", account)
	}

	login("alice", "hunter2")
	login("alice", "hunter3")
	login("alice", "correct horse")
	for range 4 {
		login("alice", "hunter2")
	}
	login("alice", "correct horse")
	// A failure is forgotten every 5 minutes, as the bucket refills.
	clock.Advance(5 * time.Minute)
	login("alice", "correct horse")
	// Output:
	// alice: wrong password; attempts left: 2
	// alice: wrong password; attempts left: 1
	// alice: logged in
	// alice: wrong password; attempts left: 2
	// alice: wrong password; attempts left: 1
	// alice: wrong password; attempts left: 0
	// alice: locked out
	// alice: locked out
	// alice: logged in
}
