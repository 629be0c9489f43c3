package memory

import (
	"testing"
	"time"
)

// TestSystemClockAnchors checks that the clock follows the wall clock
// through its readings: an offset gone wrong (as after a step of the
// wall clock) lasts only until the next reading.
func TestSystemClockAnchors(t *testing.T) {
	c := newSystemClock()
	within := func(got int64) bool {
		now := time.Now().UnixMicro()
		return got >= now-1000 && got <= now+1000
	}
	if got := c.micros(); !within(got) {
		t.Fatalf("micros() = %d, time.Now() = %d", got, time.Now().UnixMicro())
	}
	// The wall clock steps back an hour; the clock has not looked yet.
	c.offset.Add(-int64(time.Hour))
	if got := c.micros(); within(got) {
		t.Fatal("the offset should hold until the next reading")
	}
	c.next.Store(0) // the next reading is due
	if got := c.micros(); !within(got) {
		t.Errorf("after a reading, micros() = %d, time.Now() = %d", got, time.Now().UnixMicro())
	}
	if next := time.Duration(c.next.Load()) - time.Since(c.origin); next <= 0 || next > anchorEvery {
		t.Errorf("next reading in %v, want within %v", next, anchorEvery)
	}
}

// BenchmarkClock is the store's read of the system clock, one monotonic
// read, beside time.Now, which reads the wall clock and the monotonic one.
func BenchmarkClock(b *testing.B) {
	b.Run("store", func(b *testing.B) {
		c := newSystemClock()
		for b.Loop() {
			c.micros()
		}
	})
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			time.Now().UnixMicro()
		}
	})
}
