package memory

import (
	"sync"
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
// between the clocks.
//
// A step of the wall clock forward (NTP, an operator, a resume from
// suspend) reaches decisions at the next reading, within a second. A step
// back is slewed instead: the clock runs a tenth slower until it meets
// the wall clock again, ten hours for a step of an hour (see slewEvery). Taken whole, the
// step would leave every key's state in the future, and the steps of
// package rate, which never mint what a later time has taken, would hold
// each busy key at its limit for as long as the step (see
// rate.Limit.Step). Slowed, time only refills a tenth less for a while,
// and a day's or a month's window ends up to the step early by the wall
// clock, its count kept.
type systemClock struct {
	// origin carries a monotonic reading; it never changes.
	origin time.Time
	// offset is the wall-clock time in ns minus the monotonic time since
	// origin, as of the last reading.
	offset atomic.Int64
	// next is the monotonic time since origin of the next reading.
	next atomic.Int64
	// mu is held by the one caller taking a reading; the others go on
	// with the offset they find. last, which it guards, is the monotonic
	// time of the last reading.
	mu   sync.Mutex
	last int64
}

func newSystemClock() *systemClock {
	c := &systemClock{origin: time.Now()}
	c.anchor()
	return c
}

// slewBack is how much slower than the monotonic clock the clock runs
// while it catches up with a wall clock stepped back: by 1/slewBack.
const slewBack = 10

// slewEvery is how often the clock reads the wall clock while it catches
// up: between two readings it runs at the monotonic clock's pace, and at
// each it goes back by a tenth of the time since the last, so that the
// readings come often enough for that to be 100µs, well within what a
// decision's wait is measured to (the steps take a clock gone back that
// little at the latest time they have seen).
const slewEvery = time.Millisecond

// anchor reads the wall clock, unless another caller is reading it or
// has just read it.
func (c *systemClock) anchor() {
	if !c.mu.TryLock() {
		return
	}
	defer c.mu.Unlock()
	now := time.Now()
	mono := int64(now.Sub(c.origin)) // both carry monotonic readings
	if mono < c.next.Load() {
		return // read by another caller since this one found it due
	}
	c.set(now.UnixNano(), mono)
}

// set places the clock on a reading of the wall clock, wall ns since the
// epoch, taken mono ns after origin. It requires c.mu held. Forward it
// follows the wall clock at once. Back it does not step: it moves back by
// at most 1/slewBack of the monotonic time since the last reading, so it
// runs that much slower, reading the wall clock every slewEvery, until it
// meets the wall clock again.
func (c *systemClock) set(wall, mono int64) {
	off, every := wall-mono, anchorEvery
	if cur := c.offset.Load(); off < cur {
		if slewed := cur - max(0, mono-c.last)/slewBack; slewed > off {
			off, every = slewed, slewEvery
		}
	}
	c.offset.Store(off)
	c.last = mono
	c.next.Store(mono + int64(every))
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
