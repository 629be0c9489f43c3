package rate

import (
	"context"
	"time"
)

// Clock tells the time and waits. Limiters take one so that tests can drive
// time instead of sleeping; production uses [SystemClock].
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx is done, whichever comes first, and
	// returns ctx's error in the second case.
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock is the real clock. Its zero value is ready to use.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep waits on a timer, or for ctx.
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Micros returns t as microseconds since the Unix epoch, the unit every
// step computes in.
func Micros(t time.Time) int64 { return t.UnixMicro() }
