package redis_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// A sliding window's reset lies up to two periods past its window's
// start: with a period of 2^52µs, past 2^53µs, where float64s step by 2.
// The script took start + 2·period first and now from that, and the sum
// rounded: its ResetAfter was a microsecond off rate's. It takes the
// difference first, exact, as the gcra refusal does.
func TestSlidingWindowResetPast2p53(t *testing.T) {
	short := rate.Limit{Algorithm: rate.SlidingWindow, Count: 10, Period: 7 * time.Microsecond}
	long := rate.Limit{Algorithm: rate.SlidingWindow, Count: 1, Period: 1 << 52 * time.Microsecond}
	checkSteps(t, []step{
		{0, "w", short, 1},
		{0, "w", long, 1},
		{time.Microsecond, "w", long, 0},
		{time.Microsecond, "w", long, 1},
	})
}
