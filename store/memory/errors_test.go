package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/storetest"
)

// The memory store says a bad call in the words every store uses, under
// its own prefix (storetest.ErrorTexts), DecideKey too, which only it
// has; and no bad call stores a key.
func TestErrorTexts(t *testing.T) {
	s := memory.New(memory.Options{Clock: ratetest.NewClock(start)})
	storetest.ErrorTexts(t, s, "memory store: ")
	l := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Second}
	_, err := s.DecideKey(context.Background(), "k", &l, -1)
	if want := `memory store: key "k": negative cost -1`; err == nil || err.Error() != want || !errors.Is(err, rate.ErrNegativeCost) {
		t.Errorf("DecideKey, negative cost: %v, want %q wrapping ErrNegativeCost", err, want)
	}
	if n := s.Len(); n != 0 {
		t.Errorf("bad calls stored %d keys, want 0", n)
	}
}
