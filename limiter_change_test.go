package sluice_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// A program that changes a limiter's limit and starts again over the
// same shared store (as a deploy does, on Redis) finds the states the old
// limit left. A bucket's state means nothing under another rate, burst or
// algorithm, so the new limit starts afresh: it neither locks a client
// out for the old limit's wait nor reads one algorithm's state as
// another's.
func TestChangedBucketStartsAfresh(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct{ old, new string }{
		{"10/h", "100/s"},
		{"leaky_bucket 10/h", "100/s"},
		{"token_bucket 10/h", "100/s"},
		{"gcra 1/m", "leaky_bucket 1/m"},
		{"fixed_window 10/m", "gcra 10/m"},
		{"gcra 10/h", "sliding_window 10/m"},
	} {
		for _, name := range []string{"", "api"} {
			clock := ratetest.NewClock(start)
			store := shared{memory.New(memory.Options{Clock: clock})}
			old, err := sluice.NewLimiter(sluice.LimiterOptions{Name: name, Limits: limits(t, tt.old), Store: store, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			for {
				d, err := old.Allow(ctx, "alice")
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed {
					break
				}
			}
			changed, err := sluice.NewLimiter(sluice.LimiterOptions{Name: name, Limits: limits(t, tt.new), Store: store, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			d, err := changed.Allow(ctx, "alice")
			if err != nil || !d.Allowed || d.Remaining != changed.Limits()[0].Capacity()-1 {
				t.Errorf("name %q, %s changed to %s: first request %v, %v; want allowed from a fresh state", name, tt.old, tt.new, d, err)
			}
		}
	}
}

// A window counts units whatever its count: a quota lowered over a
// shared store keeps what its window has counted, as a policy file's
// does, rather than admitting the new count again.
func TestLoweredQuotaKeepsItsCount(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct{ old, new []string }{
		{[]string{"fixed_window 10000/month"}, []string{"fixed_window 5000/month"}},
		{[]string{"1000000/s", "fixed_window 10000/month"}, []string{"1000000/s", "fixed_window 5000/month"}},
		{[]string{"1000000/s", "sliding_window 10000/h"}, []string{"1000000/s", "sliding_window 5000/h"}},
	} {
		for _, remote := range []bool{false, true} {
			clock := ratetest.NewClock(start)
			var store sluice.Store = memory.New(memory.Options{Clock: clock})
			if remote {
				store = shared{store}
			}
			old, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "api", Limits: limits(t, tt.old...), Store: store, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			if d, err := old.AllowN(ctx, "alice", 9000); err != nil || !d.Allowed {
				t.Fatalf("%v: 9000 units: %v, %v", tt.old, d, err)
			}
			lowered, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "api", Limits: limits(t, tt.new...), Store: store, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			if d, err := lowered.Allow(ctx, "alice"); err != nil || d.Allowed {
				t.Errorf("%v lowered to %v on %T, 9000 units counted: %v, %v; want refused", tt.old, tt.new, store, d, err)
			}
		}
	}
}

// Two window limits of one algorithm over one window would keep one
// count: NewLimiter refuses them, naming the limits.
func TestTwoLimitsOverOneWindow(t *testing.T) {
	_, err := sluice.NewLimiter(sluice.LimiterOptions{Limits: limits(t, "fixed_window 10/d", "fixed_window 20/d")})
	if err == nil || !strings.Contains(err.Error(), "fixed_window 10/d") || !strings.Contains(err.Error(), "fixed_window 20/d") {
		t.Errorf("fixed_window 10/d and 20/d: %v; want an error naming both", err)
	}
	if _, err := sluice.NewLimiter(sluice.LimiterOptions{Limits: limits(t, "sliding_window 10/m", "fixed_window 20/m", "fixed_window 1000/d")}); err != nil {
		t.Errorf("windows of different algorithms or lengths: %v", err)
	}
}

// On a store other than the memory store, which outlives the program, a
// single limit's key names its state too.
func TestRequestsKeysOnASharedStore(t *testing.T) {
	for _, tt := range []struct {
		name, limit, want string
	}{
		{"", "10/s", "alice|gcra 10/s"},
		{"api", "10/s burst 10", "api:alice|gcra 10/s"},
		{"api", "leaky_bucket 10/s burst 3", "api:alice|leaky_bucket 10/s burst 3"},
		{"", "fixed_window 10000/month", "alice|fixed_window per month"},
		{"", "sliding_log 3 per 15m", "alice|sliding_log per 15m0s"},
	} {
		store := shared{memory.New(memory.Options{})}
		lim, err := sluice.NewLimiter(sluice.LimiterOptions{Name: tt.name, Limits: limits(t, tt.limit), Store: store})
		if err != nil {
			t.Fatal(err)
		}
		if got := lim.Requests("alice", 1)[0].Key; got != tt.want {
			t.Errorf("%q %s: key %q, want %q", tt.name, tt.limit, got, tt.want)
		}
	}
}
