// Package gcfloor keeps Go's garbage collector from running while the heap
// is small: below a floor, the heap grows to the floor before the next
// collection, and above it the collector runs as GOGC says.
//
// A server whose live heap is small but which allocates for every request
// (a gRPC call allocates a few kilobytes) otherwise collects many times a
// second: at GOGC=100 a heap of 20 MiB live is collected every 20 MiB
// allocated. Each collection takes CPU, and stops the world twice; on a
// machine whose cores are busy, a stop waits for every thread to be
// scheduled, and every request in flight waits with it. Letting such a
// heap grow to a floor of some tens of MiB collects a few times less often,
// for memory most servers have to spare. GOMEMLIMIT, when set, still
// bounds the heap: the collector runs harder as the heap nears it,
// whatever the floor.
package gcfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Floor holds a heap floor in force; Stop lifts it.
type Floor struct {
	floor uint64
	base  int // the GOGC percent in force before, restored by Stop

	mu      sync.Mutex // orders adjust and Stop
	stopped bool
}

// Start keeps the heap from being collected before it reaches floor bytes:
// after each collection it sets the GOGC percent (debug.SetGCPercent) to
// the larger of the one in force when Start was called and the one that
// puts the next collection at floor. It returns nil, and does nothing,
// when floor is 0 or the collector is off (GOGC=off).
//
// It watches collections with a cleanup (runtime.AddCleanup) that each
// collection runs and that arms the next, so it costs nothing between
// collections. Only one Floor should be in force in a process.
func Start(floor uint64) *Floor {
	if floor == 0 {
		return nil
	}
	base := gcPercent()
	if base < 0 {
		return nil
	}
	f := &Floor{floor: floor, base: base}
	f.adjust()
	f.arm()
	return f
}

// Stop lifts the floor: the GOGC percent in force before Start is put back.
func (f *Floor) Stop() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped {
		f.stopped = true
		debug.SetGCPercent(f.base)
	}
}

// sentinel is allocated for each collection to free. It is larger than
// the tiny allocator's objects, which share memory with others and may
// never be freed alone.
type sentinel [4]uint64

// arm allocates a sentinel whose cleanup runs after the next collection.
func (f *Floor) arm() {
	runtime.AddCleanup(new(sentinel), func(f *Floor) {
		if f.adjust() {
			f.arm()
		}
	}, f)
}

// liveMetric is the heap the last collection found live.
const liveMetric = "/gc/heap/live:bytes"

// gcPercent returns the GOGC percent in force, -1 when the collector is
// off, read without setting it.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	v := s[0].Value.Uint64()
	if v > math.MaxInt32 {
		return -1 // GOGC=off reads as the largest percent
	}
	return int(v)
}

// adjust sets the GOGC percent for the heap found live at the last
// collection, and reports whether the floor is still in force.
func (f *Floor) adjust() bool {
	s := []metrics.Sample{{Name: liveMetric}}
	metrics.Read(s)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	if s[0].Value.Kind() == metrics.KindUint64 {
		debug.SetGCPercent(Percent(s[0].Value.Uint64(), f.floor, f.base))
	}
	return true
}

// Percent returns the GOGC percent that lets a heap of live bytes grow to
// floor before it is collected, and base when base lets it grow further.
// A heap of no live bytes yet (before the first collection) gets base:
// the runtime's own floor of 4 MiB applies to it. Nor does the percent
// pass the one that puts the runtime's heap minimum (4 MiB × GOGC/100) at
// floor: a heap of under 4 MiB live reaches floor by that minimum, not by
// a percent that would put it many times higher.
//
// The percent is at most math.MaxInt32 and 2^62/live: the runtime
// computes its goal as (live + stacks + globals)×GOGC in 64 bits, and a
// product that wraps would put the goal below the live heap, collecting
// without pause. A floor that far away (petabytes for a heap of some
// gigabytes) is as good as none.
func Percent(live, floor uint64, base int) int {
	if live == 0 || live >= floor {
		return base
	}
	const most = 1 << 62
	limit := min(math.MaxInt32, most/live)
	// The runtime also keeps the goal at least its heap minimum, 4 MiB ×
	// GOGC/100. Under 4 MiB live, the percent that takes live to floor
	// puts that minimum far above floor (252 MiB for 1 MiB live and a 64
	// MiB floor, growing as live shrinks): past the percent that puts the
	// minimum at floor, rounded up, the minimum alone takes the heap to
	// floor.
	const heapMinimum = 4 << 20
	r := floor % heapMinimum * 100
	limit = min(limit, floor/heapMinimum*100+r/heapMinimum+min(r%heapMinimum, 1))
	// The runtime's goal is live + live×GOGC/100 (plus stacks and
	// globals, which only raise it); round up so that it is not below
	// floor. Past most/100, d×100 would wrap, and the percent is past
	// limit anyway.
	d := floor - live
	if d > most/100 {
		return max(int(limit), base)
	}
	p := d * 100
	p = p/live + min(p%live, 1)
	return max(int(min(p, limit)), base)
}
