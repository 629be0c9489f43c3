package logpace

import (
	"sync"
	"testing"
	"time"
)

func TestTake(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var p Pacer
	steps := []struct {
		at   time.Duration
		ok   bool
		held int64
	}{
		{0, true, 0},
		{0, false, 0},
		{500 * time.Millisecond, false, 0},
		{999 * time.Millisecond, false, 0},
		{time.Second, true, 3},
		{time.Second, false, 0},
		{5 * time.Second, true, 1},
		{4 * time.Second, false, 0}, // the clock stepped back
		{6 * time.Second, true, 1},
	}
	for i, s := range steps {
		held, ok := p.Take(start.Add(s.at))
		if ok != s.ok || held != s.held {
			t.Errorf("step %d at %v: (%d, %t), want (%d, %t)", i, s.at, held, ok, s.held, s.ok)
		}
	}
}

// Callers at one instant: one line goes, and the next counts the rest.
func TestTakeConcurrent(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var p Pacer
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for range 50 {
		wg.Go(func() {
			if _, ok := p.Take(start); ok {
				mu.Lock()
				passed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if passed != 1 {
		t.Fatalf("%d lines at one instant, want 1", passed)
	}
	if held, ok := p.Take(start.Add(Every)); !ok || held != 49 {
		t.Fatalf("after a second: (%d, %t), want (49, true)", held, ok)
	}
}
