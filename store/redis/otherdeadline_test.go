package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
)

// failing is a store whose every decision fails with err.
type failing struct{ err error }

func (s failing) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	return rate.Decision{}, s.err
}

func (s failing) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	return rate.Decision{}, s.err
}

// A script call that a deadline not its own ended fails with the client's
// context.DeadlineExceeded, saying that it was not the call's.
// sluice.Fallback takes it for news that Redis is slow, not down: with
// Redis answering until then, the failure mode decides the call and Redis
// stays up.
func TestOtherDeadlineError(t *testing.T) {
	err := fmt.Errorf("redis store: %w", &otherDeadlineError{context.DeadlineExceeded})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v is no context.DeadlineExceeded", err)
	}
	f := sluice.NewFallback(failing{err}, sluice.FallbackOptions{Mode: sluice.FailError, Timeout: -1, MaxSilence: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := rate.Request{Key: "k", Limit: rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Second}, Cost: 1}
	_, src, got := f.DecideAllSource(ctx, []rate.Request{r}, make([]rate.Decision, 1))
	if src != sluice.SourceError || !errors.Is(got, err) {
		t.Errorf("%v %v, want the store's error from the failure mode", src, got)
	}
	if st := f.Stats(); st.Down || st.Failures != 0 {
		t.Errorf("stats %+v: another call's deadline took Redis down", st)
	}
}
