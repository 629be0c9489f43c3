package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Steady gives one request per interval from from, before to, as the
// plain loop does, wherever the range lies.
func TestSteady(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		from := time.Duration(rng.Int64N(1e6)) - 5e5
		to := from + time.Duration(rng.Int64N(2e5)) - 1e4
		every := time.Duration(rng.Int64N(1e4)) - 10
		var want []Event
		if every > 0 {
			for at := from; at < to; at += every {
				want = append(want, Event{At: at, Key: "k"})
			}
		}
		if got := Steady("k", from, to, every); !slices.Equal(got, want) {
			t.Fatalf("Steady(%v, %v, %v): %d events, want %d", from, to, every, len(got), len(want))
		}
	}
}

// Absurd ranges and counts give at most MaxEvents requests, in order and
// in range, rather than a panic, an endless loop or times that wrap.
func TestTrafficBounds(t *testing.T) {
	check := func(name string, events []Event, from, to time.Duration) {
		t.Helper()
		if len(events) > MaxEvents {
			t.Errorf("%s: %d events, more than MaxEvents", name, len(events))
		}
		for i, e := range events {
			if e.At < from || e.At >= to || i > 0 && e.At < events[i-1].At {
				t.Fatalf("%s: event %d at %v, out of [%v, %v) or of order", name, i, e.At, from, to)
			}
		}
	}
	const lo, hi = time.Duration(math.MinInt64), time.Duration(math.MaxInt64)
	all := Steady("k", lo, hi, 1)
	check("Steady over all time, every ns", all, lo, hi)
	if len(all) != MaxEvents {
		t.Errorf("Steady over all time: %d events, want MaxEvents", len(all))
	}
	two := Steady("k", lo, hi, hi)
	check("Steady over all time, every 292 years", two, lo, hi)
	if len(two) != 3 {
		t.Errorf("Steady over all time every MaxInt64 ns: %d events, want 3", len(two))
	}
	if n := len(Steady("k", 0, hi, hi-1)); n != 2 {
		t.Errorf("Steady over [0, MaxInt64) every MaxInt64-1: %d events, want 2", n)
	}
	for _, n := range []int{-1, 0, 5, MaxEvents + 1, math.MaxInt} {
		want := min(max(n, 0), MaxEvents)
		if got := len(Burst("k", 0, n)); got != want {
			t.Errorf("Burst(%d): %d events, want %d", n, got, want)
		}
	}
	for _, r := range []float64{1e-15, 1e-9, 1, math.Inf(1), math.NaN(), -1} {
		check("Poisson over all time", Poisson(rand.New(rand.NewPCG(1, 1)), "k", lo, hi, r), lo, hi)
	}
}
