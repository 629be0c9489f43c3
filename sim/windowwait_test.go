package sim

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// Under a window limit sluice serve lets a refused request wait once for
// its Retry-After, within max_delay, and decides it again; the
// simulation does the same. Limit 1 per second, six requests at 0.5 s on
// one key, max delay 3s:
//
//   - fixed_window: the 1st passes; the other five are told to retry at
//     the next window, 0.5 s on, and wait; at 1 s one of them passes
//     (held 0.5 s) and four are refused, with no second wait.
//   - sliding_log: the 1st is logged at 0.5 s; the others may go when it
//     leaves, 1 s on, at 1.5 s: one passes (held 1 s), four refused.
//   - sliding_window: at 0.5 s the current window counts 1; the next
//     window weighs it (1 − e) for e into it, so a unit fits only once
//     it has gone whole, at 2 s: one passes, held 1.5 s, four refused.
//
// With a max delay of 400ms no wait is within it: 1 passes, 5 refused.
// With 1.5s, fixed_window and sliding_log wait as above, sliding_window
// too (1.5 s is within 1.5 s).
func TestWindowsWaitOnce(t *testing.T) {
	const sec = time.Second
	for _, tt := range []struct {
		maxDelay time.Duration
		want     map[rate.Algorithm][2]int // passed, held
		delay    map[rate.Algorithm]time.Duration
	}{
		{3 * sec, map[rate.Algorithm][2]int{rate.FixedWindow: {2, 1}, rate.SlidingLog: {2, 1}, rate.SlidingWindow: {2, 1}},
			map[rate.Algorithm]time.Duration{rate.FixedWindow: sec / 2, rate.SlidingLog: sec, rate.SlidingWindow: 3 * sec / 2}},
		{400 * time.Millisecond, map[rate.Algorithm][2]int{rate.FixedWindow: {1, 0}, rate.SlidingLog: {1, 0}, rate.SlidingWindow: {1, 0}},
			map[rate.Algorithm]time.Duration{}},
		{3 * sec / 2, map[rate.Algorithm][2]int{rate.FixedWindow: {2, 1}, rate.SlidingLog: {2, 1}, rate.SlidingWindow: {2, 1}},
			map[rate.Algorithm]time.Duration{rate.FixedWindow: sec / 2, rate.SlidingLog: sec, rate.SlidingWindow: 3 * sec / 2}},
	} {
		sc := Scenario{Name: "wait", Limit: rate.Limit{Count: 1, Period: sec}, MaxDelay: tt.maxDelay, Seconds: 3,
			Algorithms: []rate.Algorithm{rate.FixedWindow, rate.SlidingLog, rate.SlidingWindow},
			Events:     Burst("k", sec/2, 6)}
		res, err := Run(context.Background(), sc)
		if err != nil {
			t.Fatal(err)
		}
		for a, w := range tt.want {
			row, ok := res.Row(a, Single)
			if !ok {
				t.Fatalf("no %v row", a)
			}
			if row.Passed != w[0] || row.Held != w[1] || row.Refused != 6-w[0] || row.MaxDelay != tt.delay[a] {
				t.Errorf("max delay %v, %v: passed %d, held %d, refused %d, longest wait %v; want %d, %d, %d, %v",
					tt.maxDelay, a, row.Passed, row.Held, row.Refused, row.MaxDelay, w[0], w[1], 6-w[0], tt.delay[a])
			}
			// Counted in the second they arrived: second 0.
			if s := row.PerSecond[0]; s.Passed != w[0] || s.Held != w[1] {
				t.Errorf("max delay %v, %v: second 0 %+v, want %d passed, %d held", tt.maxDelay, a, s, w[0], w[1])
			}
		}
	}
}
