package rate

import (
	"fmt"
	"testing"
	"time"
)

// arrayEnd returns the address of the last element of log's array: it
// stays the same while the log drops units at its front and appends in
// place, and changes when a step copies the log into a new array.
func arrayEnd(log []int64) *int64 { return &log[:cap(log)][cap(log)-1] }

// TestSlidingLogFullCapacity: a sliding_log filled from empty, a unit or a
// few at a time, holds Count timestamps in an array of at most Count: it
// grows by doubling, but never past what the log can hold.
func TestSlidingLogFullCapacity(t *testing.T) {
	for _, count := range []int64{1, 2, 3, 7, 8, 9, 100, 1000, 4096, 5000, MaxLogCount} {
		for _, cost := range []int64{1, 3} {
			t.Run(fmt.Sprintf("%d/cost%d", count, cost), func(t *testing.T) {
				l := Limit{Algorithm: SlidingLog, Count: count, Period: time.Hour}
				var s State
				now := int64(1_700_000_000) * sec
				for int64(len(s.Log)) < count {
					c := min(cost, count-int64(len(s.Log)))
					next, d := l.Step(s, now, c)
					if !d.Allowed {
						t.Fatalf("refused at %d of %d: %+v", len(s.Log), count, d)
					}
					s = next
					now++
				}
				if int64(cap(s.Log)) > count {
					t.Errorf("full log of %d units: capacity %d, want at most %d (%d bytes a unit of the count)",
						len(s.Log), cap(s.Log), count, 8*cap(s.Log)/int(count))
				}
			})
		}
	}
}

// TestSlidingLogFullSlides: a full sliding_log whose units leave one at a
// time, each making room for the next, is copied into a new array about
// once per eighth of its count admitted, not once per unit, and its array
// stays within an eighth of Count beyond it.
func TestSlidingLogFullSlides(t *testing.T) {
	for _, count := range []int64{1, 8, 1000, 4096} {
		t.Run(fmt.Sprint(count), func(t *testing.T) {
			// One unit a microsecond over a period of count µs: once
			// full, every step lets one unit out and one in.
			l := Limit{Algorithm: SlidingLog, Count: count, Period: time.Duration(count) * time.Microsecond}
			var s State
			now := int64(1_700_000_000) * sec
			for range count {
				s, _ = l.Step(s, now, 1)
				now++
			}
			const rounds = 10
			copies := 0
			for i := range rounds * count {
				next, d := l.Step(s, now, 1)
				if !d.Allowed {
					t.Fatalf("step %d refused: %+v", i, d)
				}
				if int64(len(next.Log)) != count {
					t.Fatalf("step %d: %d units in the log, want %d", i, len(next.Log), count)
				}
				if arrayEnd(next.Log) != arrayEnd(s.Log) {
					copies++
				}
				if limit := count + count/8; int64(cap(next.Log)) > limit {
					t.Fatalf("step %d: capacity %d, want at most %d", i, cap(next.Log), limit)
				}
				s = next
				now++
			}
			// One copy per count/8 units admitted, and a tiny log is
			// copied at each step.
			if limit := rounds * count / max(1, count/8); int64(copies) > limit {
				t.Errorf("%d copies of the log in %d units admitted, want at most %d", copies, rounds*count, limit)
			}
		})
	}
}
