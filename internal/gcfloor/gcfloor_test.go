package gcfloor

import (
	"math"
	"math/bits"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, floor uint64
		base, want  int
	}{
		{live: 16 * mib, floor: 64 * mib, base: 100, want: 300}, // 16 + 48 = 64
		{live: 20 * mib, floor: 64 * mib, base: 100, want: 220}, // 20 + 44 = 64
		{live: 5 * mib, floor: 7*mib + 1, base: 10, want: 41},   // 5 + 2.05 ≥ 7: rounded up
		{live: 48 * mib, floor: 64 * mib, base: 100, want: 100}, // the floor asks less than GOGC
		{live: 16 * mib, floor: 64 * mib, base: 400, want: 400}, // GOGC=400 lets it grow further
		{live: 64 * mib, floor: 64 * mib, base: 100, want: 100}, // at the floor
		{live: 80 * mib, floor: 64 * mib, base: 50, want: 50},   // above it: GOGC alone
		{live: 0, floor: 64 * mib, base: 100, want: 100},        // no collection yet
		// Under 4 MiB live, the runtime's heap minimum (4 MiB × GOGC/100)
		// sets the goal: 1600 puts it at 64 MiB, where 6300 would put it at
		// 252 MiB.
		{live: 1 * mib, floor: 64 * mib, base: 100, want: 1600},
		{live: mib / 8, floor: 64 * mib, base: 100, want: 1600},
		{live: 3 * mib, floor: 64 * mib, base: 2000, want: 2000}, // GOGC's own, larger
		{live: 1, floor: math.MaxUint64 / 200, base: 100, want: math.MaxInt32},
		{live: 1 << 20, floor: math.MaxUint64, base: 100, want: math.MaxInt32}, // would overflow
		{live: 100, floor: math.MaxInt32, base: 100, want: 51200},              // the heap minimum reaches the floor
		{live: 1 << 30, floor: 1 << 40, base: 100, want: 102300},               // 1 GiB + 1023 GiB = 1 TiB
		// The runtime multiplies live by the percent in 64 bits: from 2 GiB
		// live, the percent stays at most 2^62/live.
		{live: 1 << 31, floor: math.MaxUint64, base: 100, want: math.MaxInt32},
		{live: 1 << 33, floor: math.MaxUint64, base: 100, want: 1 << 29},
		{live: 1 << 34, floor: math.MaxUint64, base: 100, want: 1 << 28},
		{live: 1 << 34, floor: 1<<58 + 1<<34, base: 100, want: 1 << 28}, // 100 × (floor − live) passes 2^64
		{live: 1 << 34, floor: 1<<40 + 1<<34, base: 100, want: 6400},
	} {
		p := Percent(c.live, c.floor, c.base)
		if p != c.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", c.live, c.floor, c.base, p, c.want)
		}
		if hi, lo := bits.Mul64(c.live, uint64(p)); hi != 0 || lo > 1<<62 {
			t.Errorf("Percent(%d, %d, %d) = %d: the runtime's goal, live × percent, would overflow", c.live, c.floor, c.base, p)
		}
		// The runtime's goal is also at least its heap minimum, 4 MiB ×
		// GOGC/100: a percent raised for the floor must not put that
		// above the floor, by more than the live heap.
		if minimum := 4 * mib * uint64(p) / 100; p > c.base && c.live < c.floor && minimum > c.floor && minimum-c.floor > c.live {
			t.Errorf("Percent(%d, %d, %d) = %d puts the runtime's heap minimum at %d, above the floor", c.live, c.floor, c.base, p, minimum)
		}
		atCap := p == math.MaxInt32 || c.live > 0 && uint64(p) == (1<<62)/c.live
		goal := max(c.live+c.live*uint64(p)/100, 4*mib*uint64(p)/100)
		if c.live > 0 && c.live < c.floor && !atCap && goal < c.floor {
			t.Errorf("Percent(%d, %d, %d) = %d puts the goal at %d, below the floor", c.live, c.floor, c.base, p, goal)
		}
	}
}

// cycles returns the number of collections so far.
func cycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var sink []byte

// churn allocates n bytes in 64 KiB pieces, none kept, and returns the
// number of collections meanwhile.
func churn(n int) uint64 {
	before := cycles()
	for range n / (64 << 10) {
		sink = make([]byte, 64<<10)
	}
	sink = nil
	return cycles() - before
}

// TestFloor allocates 256 MiB with a small live heap, with and without a
// floor of 512 MiB: without, the runtime collects every few MiB; with it,
// the first collection raises the goal past what is allocated.
func TestFloor(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	runtime.GC()
	without := churn(256 << 20)
	if without < 10 {
		t.Fatalf("%d collections for 256 MiB with GOGC=100 and a small heap: the test expects many", without)
	}

	f := Start(512 << 20)
	// The floor is set as Start returns, and again after every
	// collection, from a goroutine of the runtime's: wait for the one
	// after this collection.
	runtime.GC()
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() < 1000 {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC percent %d after a collection with a floor of 512 MiB: not raised", gcPercent())
		}
		runtime.Gosched()
	}
	with := churn(256 << 20)
	if with > 2 {
		t.Errorf("%d collections for 256 MiB under a floor of 512 MiB, %d without: want at most 2", with, without)
	}

	f.Stop()
	if p := gcPercent(); p != 100 {
		t.Errorf("GOGC percent %d after Stop, want 100 back", p)
	}
	// A collection after Stop leaves the percent alone.
	runtime.GC()
	runtime.GC()
	if p := gcPercent(); p != 100 {
		t.Errorf("GOGC percent %d after Stop and two collections, want 100", p)
	}
}

func TestStartOff(t *testing.T) {
	if f := Start(0); f != nil {
		t.Error("Start(0) returned a floor")
	}
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	if f := Start(64 << 20); f != nil {
		f.Stop()
		t.Error("Start with GOGC=off returned a floor")
	}
	if p := gcPercent(); p != -1 {
		t.Errorf("GOGC percent %d, want the collector left off", p)
	}
	var f *Floor
	f.Stop() // a nil Floor is one that was never started
}

// gcPercent reads the percent in force, the collector off included.
func TestGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, p := range []int{250, 100, 5, -1} {
		debug.SetGCPercent(p)
		if got := gcPercent(); got != p {
			t.Errorf("gcPercent() = %d with GOGC %d", got, p)
		}
	}
}
