package memory

import (
	"sync/atomic"
	"time"
)

// anchorEvery is how often systemClock reads the wall clock again.
const anchorEvery = time.Second

// systemClock tells the wall-clock time in µs for every decision, at the
// cost of one monotonic clock read: time.Now reads two clocks, the wall
// clock and the monotonic one, and the first of the two is what a decision
// pays for most.
//
// It reads the wall clock once a second and adds the monotonic time
// elapsed since: between two readings the two clocks advance at the same
// rate (NTP slews both), so this is the wall-clock time to within the
// gap between the two reads of one time.Now, well under a microsecond.
// Every decision still reads the clock; nothing is cached but the offset
// between the clocks. A step of the wall clock (NTP, an operator, a
// resume from suspend) reaches decisions at the next reading, within a
// second; the steps take time going backwards into account.
type systemClock struct {
	// origin carries a monotonic reading; it never changes.
	origin time.Time
	// offset is the wall-clock time in ns minus the monotonic time since
	// origin, as of the last reading.
	offset atomic.Int64
	// next is the monotonic time since origin of the next reading.
	next atomic.Int64
}

func newSystemClock() *systemClock {
	c := &systemClock{origin: time.Now()}
	c.anchor()
	return c
}

// anchor reads the wall clock.
func (c *systemClock) anchor() {
	now := time.Now()
	mono := int64(now.Sub(c.origin)) // both carry monotonic readings
	// Concurrent callers may both read it: either result is right.
	c.offset.Store(now.UnixNano() - mono)
	c.next.Store(mono + int64(anchorEvery))
}

// micros returns the wall-clock time in µs since the Unix epoch.
func (c *systemClock) micros() int64 {
	mono := int64(time.Since(c.origin))
	if mono >= c.next.Load() {
		c.anchor()
	}
	ns := mono + c.offset.Load()
	us := ns / 1e3
	if ns < 0 && ns%1e3 != 0 {
		us-- // round towards the past, like time.Time.UnixMicro
	}
	return us
}
