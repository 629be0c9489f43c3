package rate

import (
	"context"
	"errors"
	"testing"
	"time"
)

// SystemClock's Sleep ends when its context does: it is the wait of every
// request held back in production (max_delay, a leaky_bucket's turn,
// Limiter.Wait), and a client that goes away must not hold a goroutine for
// the rest of the wait. A Sleep that ignored ctx fails here within
// seconds, rather than hang the suite.
func TestSystemClockSleepEndsWithContext(t *testing.T) {
	sleep := func(ctx context.Context, d time.Duration) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- SystemClock{}.Sleep(ctx, d) }()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			t.Fatalf("Sleep(%v) did not end with its context", d)
			return nil
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(cancelled, 1h) = %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Sleep(10ms deadline, 1h) = %v, want context.DeadlineExceeded", err)
	}
	if err := sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms) = %v, want nil", err)
	}
	if err := sleep(context.Background(), -time.Second); err != nil {
		t.Errorf("Sleep(-1s) = %v, want nil", err)
	}
}
