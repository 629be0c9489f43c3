package retry

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock for single-goroutine tests: Sleep records the
// requested duration and, unless frozen, moves Now forward by it at once.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	frozen bool            // if set, Sleep records but does not advance
	sleeps []time.Duration // every d passed to Sleep, in order
}

func newFakeClock(start time.Time) *fakeClock { return &fakeClock{now: start} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	if !c.frozen && d > 0 {
		c.now = c.now.Add(d)
	}
	return nil
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// simClock is a discrete-event Clock for tests with several goroutines,
// the workers. Time stands still while any worker is busy; when all are
// asleep (or done), it jumps to the earliest wake-up and wakes that one
// sleeper. A sleeper therefore wakes at exactly its start plus d, never
// earlier and never pushed later by the others, and no goroutine waits for
// real time. A worker must call Done when it finishes.
type simClock struct {
	mu       sync.Mutex
	now      time.Time
	busy     int
	sleepers []*simSleeper
}

type simSleeper struct {
	wake time.Time
	ch   chan struct{}
}

func newSimClock(start time.Time, workers int) *simClock {
	return &simClock{now: start, busy: workers}
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *simClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	c.mu.Lock()
	s := &simSleeper{wake: c.now.Add(d), ch: make(chan struct{})}
	c.sleepers = append(c.sleepers, s)
	c.busy--
	c.step()
	c.mu.Unlock()

	select {
	case <-s.ch:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		defer c.mu.Unlock()
		select {
		case <-s.ch:
			return nil // woken meanwhile; step already counted it busy
		default:
		}
		for i, o := range c.sleepers {
			if o == s {
				c.sleepers = append(c.sleepers[:i], c.sleepers[i+1:]...)
				break
			}
		}
		c.busy++
		return ctx.Err()
	}
}

// Done marks one worker as finished.
func (c *simClock) Done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy--
	c.step()
}

// step wakes the earliest sleeper if no worker is busy. Requires that
// c.mu is held.
func (c *simClock) step() {
	if c.busy > 0 || len(c.sleepers) == 0 {
		return
	}
	first := 0
	for i, s := range c.sleepers {
		if s.wake.Before(c.sleepers[first].wake) {
			first = i
		}
	}
	s := c.sleepers[first]
	c.sleepers = append(c.sleepers[:first], c.sleepers[first+1:]...)
	if s.wake.After(c.now) {
		c.now = s.wake
	}
	c.busy++
	close(s.ch)
}

func TestSimClockWakesInOrder(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newSimClock(start, 3)
	woke := make(chan time.Duration, 3)
	var wg sync.WaitGroup
	for _, d := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second} {
		wg.Go(func() {
			if err := c.Sleep(context.Background(), d); err != nil {
				t.Error(err)
			}
			woke <- c.Now().Sub(start)
			c.Done()
		})
	}
	wg.Wait()
	close(woke)
	var got []time.Duration
	for d := range woke {
		got = append(got, d)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
	if len(got) != len(want) {
		t.Fatalf("woke %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("woke at %v, want %v", got, want)
		}
	}
}

// TestDefaultClockSleepHonoursContext checks the clock a Transport uses
// when Options.Clock is nil.
func TestDefaultClockSleepHonoursContext(t *testing.T) {
	c := Options{}.withDefaults().Clock
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A cancelled context must win over an hour-long sleep at once.
	if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(cancelled, 1h) = %v, want context.Canceled", err)
	}
	if err := c.Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep(0) = %v, want nil", err)
	}
	if err := c.Sleep(context.Background(), -time.Second); err != nil {
		t.Fatalf("Sleep(-1s) = %v, want nil", err)
	}
}
