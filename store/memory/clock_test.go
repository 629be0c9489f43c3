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
// decisions as a clock slowed down, never as one gone back: a step of an
// hour would otherwise hold every key's state an hour in the future, and
// refuse its client for that hour. Forward, the clock follows at once.
func TestSystemClockSlewsBack(t *testing.T) {
	c := newSystemClock()
	const sec = int64(time.Second)
	base := int64(1_800_000_000) * sec // a wall-clock time in ns
	c.set(base, 0)
	at := func(mono int64) int64 { return mono + c.offset.Load() } // the clock's ns at mono
	if got := at(0); got != base {
		t.Fatalf("after the first reading the clock reads %d, want %d", got, base)
	}
	// A second later the wall clock has stepped back an hour.
	c.set(base+sec-int64(time.Hour), sec)
	got := at(sec)
	// A tenth slower: 900ms on in a second.
	if want := base + 900*int64(time.Millisecond); got != want {
		t.Fatalf("a second after an hour's step back the clock reads base%+d ns, want base%+d: slowed by a tenth, not stepped", got-base, want-base)
	}
	// Readings a second apart: the clock keeps moving forward, slowed,
	// until it meets the wall clock again, then follows it exactly.
	prev, mono := got, sec
	caught := false
	for range 20 * 3600 * 10 {
		mono += sec
		wall := base + mono - int64(time.Hour)
		c.set(wall, mono)
		now := at(mono)
		if now <= prev {
			t.Fatalf("at %ds the clock went from %d to %d", mono/sec, prev, now)
		}
		if now < wall {
			t.Fatalf("at %ds the clock reads %d, behind the wall clock's %d", mono/sec, now, wall)
		}
		prev = now
		if now == wall {
			caught = true
			// It gains back 100ms a second: 36,000s for the hour.
			if d := time.Duration(mono); d < 9*time.Hour || d > 11*time.Hour {
				t.Errorf("caught up after %v, want about 10 hours", d)
			}
			break
		}
	}
	if !caught {
		t.Fatal("the clock never caught up with the wall clock")
	}
	// Forward, at once.
	mono += sec
	c.set(base+mono, mono)
	if got := at(mono); got != base+mono {
		t.Errorf("after a step forward the clock reads %d, want the wall clock's %d", got, base+mono)
	}
}
