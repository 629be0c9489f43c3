// Package ratetest provides a fake clock for tests of code that takes a
// [rate.Clock].
package ratetest

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/rate"
)

var _ rate.Clock = (*Clock)(nil)

// Clock is a fake [rate.Clock] that moves only when told to. Sleep does not
// block: it advances the clock by the duration and returns, so code that
// waits runs instantly and deterministically. It is safe for concurrent use.
//
// The zero value starts at the Unix epoch; most tests want [NewClock].
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	slept  time.Duration
	sleeps int
}

// NewClock returns a clock set to t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		c.now = time.Unix(0, 0)
	}
	return c.now
}

// Sleep advances the clock by d (if positive) and returns at once, unless
// ctx is already done, in which case it returns ctx's error and leaves the
// clock alone.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		c.now = time.Unix(0, 0)
	}
	if d > 0 {
		c.now = c.now.Add(d)
		c.slept += d
	}
	c.sleeps++
	return nil
}

// Advance moves the clock by d, which may be negative to test time going
// backwards.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		c.now = time.Unix(0, 0)
	}
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Slept returns the total duration and the number of Sleep calls so far.
func (c *Clock) Slept() (time.Duration, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slept, c.sleeps
}
