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

// TestSystemClockSlewsBack checks that a wall clock stepped back reaches
// decisions as a clock slowed down, never as one gone back more than a
// sliver: a step of a minute would otherwise hold every busy key's state
// a minute in the future, and refuse its client for that minute. Forward,
// the clock follows at once.
func TestSystemClockSlewsBack(t *testing.T) {
	c := newSystemClock()
	const sec, ms, us = int64(time.Second), int64(time.Millisecond), int64(time.Microsecond)
	base := int64(1_800_000_000) * sec // a wall-clock time in ns
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set(base, 0)
	at := func(mono int64) int64 { return mono + c.offset.Load() } // the clock's ns at mono
	if got := at(0); got != base {
		t.Fatalf("after the first reading the clock reads %d, want %d", got, base)
	}
	// A second later the wall clock has stepped back a minute.
	const step = int64(time.Minute)
	wall := func(mono int64) int64 { return base + mono - step }
	c.set(wall(sec), sec)
	// A tenth slower: 900ms on in a second.
	if got, want := at(sec), base+900*ms; got != want {
		t.Fatalf("a second after a minute's step back the clock reads base%+d ns, want base%+d: slowed by a tenth, not stepped", got-base, want-base)
	}
	// From then on it reads the wall clock every millisecond; a read
	// just before each reading and one just after differ by at most
	// the tenth of a millisecond it gives back, and the clock never
	// falls behind the wall clock.
	mono := sec
	caught := false
	for range 20 * 60 * 1000 {
		if next := c.next.Load(); next != mono+ms {
			t.Fatalf("at %v the next reading is due %v on, want 1ms while the clock catches up", time.Duration(mono), time.Duration(next-mono))
		}
		mono += ms
		before := at(mono - 1)
		c.set(wall(mono), mono)
		after := at(mono)
		if after < before+1-100*us {
			t.Fatalf("at %v a reading moved the clock from %d to %d: back %v, want at most 100µs", time.Duration(mono), before, after, time.Duration(before+1-after))
		}
		if after < wall(mono) {
			t.Fatalf("at %v the clock reads %d, behind the wall clock's %d", time.Duration(mono), after, wall(mono))
		}
		if after == wall(mono) {
			caught = true
			// It gains back 100ms a second: 600s for the minute.
			if d := time.Duration(mono); d < 9*time.Minute || d > 11*time.Minute {
				t.Errorf("caught up after %v, want about 10 minutes", d)
			}
			break
		}
	}
	if !caught {
		t.Fatal("the clock never caught up with the wall clock")
	}
	// Caught up, it reads the wall clock once a second again.
	if next := c.next.Load(); next != mono+sec {
		t.Errorf("caught up, the next reading is due %v on, want 1s", time.Duration(next-mono))
	}
	// Forward, at once.
	mono += sec
	c.set(base+mono, mono)
	if got := at(mono); got != base+mono {
		t.Errorf("after a step forward the clock reads %d, want the wall clock's %d", got, base+mono)
	}
}

// A caller that finds a reading due as another has just taken it takes
// none: two readings at one instant would give back twice.
func TestSystemClockOneReadingAtATime(t *testing.T) {
	c := newSystemClock()
	c.next.Store(0)
	c.anchor()
	off, next := c.offset.Load(), c.next.Load()
	// A caller that read next before the reading above now takes its
	// turn: it finds the reading taken, and changes nothing.
	c.anchor()
	if c.offset.Load() != off || c.next.Load() != next {
		t.Errorf("a second reading right after one moved the clock: offset %d to %d, next %d to %d", off, c.offset.Load(), next, c.next.Load())
	}
}
