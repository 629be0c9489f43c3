package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
)

// A store that sees no decisions (a Fallback's local store while its
// primary is up) keeps its keys, fresh or not, until Sweep reclaims the
// fresh ones; the others stay.
func TestSweep(t *testing.T) {
	clock := ratetest.NewClock(time.Unix(1_800_000_000, 0))
	s := New(Options{Clock: clock})
	fast := rate.Limit{Count: 20, Period: time.Second}   // fresh 50ms after one request
	slow := rate.Limit{Count: 1, Period: 24 * time.Hour} // fresh a day after one
	for i := range 1000 {
		l := fast
		if i%10 == 0 {
			l = slow
		}
		if _, err := s.Decide(context.Background(), rate.Request{Key: fmt.Sprint("k", i), Limit: l, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute)
	if n := s.Len(); n != 1000 {
		t.Fatalf("before Sweep, with no decisions since: %d keys, want the 1000 kept", n)
	}
	s.Sweep()
	if n := s.Len(); n != 100 {
		t.Errorf("after Sweep: %d keys, want the 100 not yet fresh", n)
	}
	if st := s.Stats(); st.Expired != 900 {
		t.Errorf("Stats.Expired %d, want 900", st.Expired)
	}
}
