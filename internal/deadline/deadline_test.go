package deadline

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// inContext is a context whose deadline is always in from now, whose
// timer never fires, and that is cancelled if cancelled is set: each
// moment tested stays where it is however long the test takes.
type inContext struct {
	context.Context
	in        time.Duration
	cancelled bool
}

func (c inContext) Deadline() (time.Time, bool) { return time.Now().Add(c.in), true }

func (c inContext) Err() error {
	if c.cancelled {
		return context.Canceled
	}
	return nil
}

func TestNearAndEnded(t *testing.T) {
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	storeErr := fmt.Errorf("read: %w", context.DeadlineExceeded)
	bg := context.Background()
	for _, c := range []struct {
		name  string
		ctx   context.Context
		err   error
		near  bool
		ended bool
	}{
		{"timer fired", expired, storeErr, true, true},
		{"passed, timer yet to fire", inContext{bg, -time.Millisecond, false}, storeErr, true, true},
		{"1ms before", inContext{bg, time.Millisecond, false}, storeErr, true, true},
		{"within the slack", inContext{bg, Slack, false}, storeErr, true, true},
		{"an hour before: the store's own bound", inContext{bg, time.Hour, false}, storeErr, false, false},
		{"no deadline", bg, storeErr, false, false},
		{"cancelled at its deadline, as by a client's reset", inContext{bg, time.Millisecond, true}, context.Canceled, true, false},
		{"cancelled long before it", inContext{bg, time.Hour, true}, context.Canceled, false, false},
		{"another failure near the deadline", inContext{bg, time.Millisecond, false}, errors.New("connection refused"), true, false},
	} {
		if got := Near(c.ctx); got != c.near {
			t.Errorf("%s: Near %v, want %v", c.name, got, c.near)
		}
		if got := Ended(c.ctx, c.err); got != c.ended {
			t.Errorf("%s: Ended %v, want %v", c.name, got, c.ended)
		}
	}
}

// Wait is less than the time left, gives up at most an eighth of it,
// and is one value for deadlines a few µs apart.
func TestWait(t *testing.T) {
	seen := map[time.Duration]bool{}
	for i := range 1000 {
		left := 5*time.Second + time.Duration(i)*time.Microsecond
		w := Wait(left)
		if w >= left || w < (left-time.Microsecond)*7/8 {
			t.Fatalf("Wait(%v) = %v, want below it and at least 7/8 of it", left, w)
		}
		seen[w] = true
	}
	if len(seen) != 1 {
		t.Errorf("1000 deadlines a µs apart gave %d waits, want 1", len(seen))
	}
	// Four significant bits, by hand: 5s less 1µs is 4,999,999,000ns,
	// between 2^32 and 2^33; kept to its top four bits it is
	// ⌊4999999000/2^29⌋ = 9 times 2^29, 4,831,838,208ns.
	if w := Wait(5 * time.Second); w != 4_831_838_208 {
		t.Errorf("Wait(5s) = %dns, want 4831838208ns", w)
	}
	// So an octave of deadlines, 2^32ns to 2^33ns, gives eight waits.
	clear(seen)
	for left := time.Duration(1<<32) + time.Microsecond; left < 1<<33; left += time.Millisecond {
		seen[Wait(left)] = true
	}
	if len(seen) != 8 {
		t.Errorf("an octave of deadlines gave %d waits, want 8", len(seen))
	}
	// No time left to speak of: 1ns, which bounds a Delay to 0.
	for _, left := range []time.Duration{-time.Second, 0, time.Microsecond} {
		if w := Wait(left); w != time.Nanosecond {
			t.Errorf("Wait(%v) = %v, want 1ns", left, w)
		}
	}
	if w := Wait(1500 * time.Nanosecond); w <= 0 || w >= 500*time.Nanosecond+1 {
		t.Errorf("Wait(1.5µs) = %v, want in (0, 500ns]", w)
	}
}

// Bound gives every leaky_bucket request a wait within the deadline, and
// a bucket's only if it had one: a MaxDelay is a gcra's leave to hold.
func TestBound(t *testing.T) {
	gcra := rate.Limit{Algorithm: rate.GCRA, Count: 1, Period: time.Second}
	leaky := rate.Limit{Algorithm: rate.LeakyBucket, Count: 1, Period: time.Second}
	reqs := []rate.Request{
		{Limit: gcra},
		{Limit: gcra, MaxDelay: time.Minute},
		{Limit: gcra, MaxDelay: time.Millisecond},
		{Limit: leaky},
		{Limit: leaky, MaxDelay: time.Minute},
	}
	Bound(reqs, 5*time.Second)
	w := Wait(5 * time.Second)
	for i, want := range []time.Duration{0, w, time.Millisecond, w, w} {
		if reqs[i].MaxDelay != want {
			t.Errorf("request %d: MaxDelay %v, want %v", i, reqs[i].MaxDelay, want)
		}
	}
}
