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
	// read reads the clock between two readings of the wall clock, and
	// reports whether it is within 1ms of the time between them: however
	// long the reads take, a clock that follows the wall clock is.
	read := func() (got, before, after int64, within bool) {
		before = time.Now().UnixMicro()
		got = c.micros()
		after = time.Now().UnixMicro()
		return got, before, after, got >= before-1000 && got <= after+1000
	}
	if got, before, after, ok := read(); !ok {
		t.Fatalf("micros() = %d, time.Now() = %d before it, %d after", got, before, after)
	}
	// The wall clock steps back an hour; the clock has not looked yet.
	c.offset.Add(-int64(time.Hour))
	if _, _, _, ok := read(); ok {
		t.Fatal("the offset should hold until the next reading")
	}
	c.next.Store(0) // the next reading is due
	from := time.Since(c.origin)
	got, before, after, ok := read()
	to := time.Since(c.origin)
	if !ok {
		t.Errorf("after a reading, micros() = %d, time.Now() = %d before it, %d after", got, before, after)
	}
	if next := time.Duration(c.next.Load()); next < from+anchorEvery || next > to+anchorEvery {
		t.Errorf("next reading at %v, want %v after the reading, at %v to %v (since the origin)", next, anchorEvery, from, to)
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
