package sluice_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
)

// A primary that answers its probe and fails the next call (a full Redis
// answers a refusal, which writes nothing, and fails every write) is not
// taken back at the shortest backoff each time: the backoff goes on
// doubling from one outage to the next while the primary stays up less
// than MaxBackoff between them, so it flaps ever more slowly, up to once a
// MaxBackoff. One that stays up MaxBackoff starts again from MinBackoff.
func TestFallbackFlappingPrimaryBacksOff(t *testing.T) {
	f, b, clock, _ := setup(t, sluice.FallbackOptions{Mode: sluice.FailOpen, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	flap := func() {
		t.Helper()
		b.state.Store(1)
		decisionOf(t, f, r) // fails: down
		if !f.Stats().Down {
			t.Fatal("a failed call left the primary up")
		}
		b.state.Store(0)
	}
	// probeAfter reports how long after going down the primary comes back,
	// probing every 10ms.
	probeAfter := func() time.Duration {
		t.Helper()
		for waited := time.Duration(0); waited <= 2*time.Second; waited += 10 * time.Millisecond {
			decisionOf(t, f, r)
			if !f.Stats().Down {
				return waited
			}
			clock.Advance(10 * time.Millisecond)
		}
		t.Fatal("the primary never came back")
		return 0
	}
	var got []time.Duration
	for range 6 {
		flap()
		got = append(got, probeAfter())
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("outages back to back came back after %v, want %v", got, want)
		}
	}
	// Up for MaxBackoff: the next outage starts from MinBackoff again.
	clock.Advance(time.Second)
	flap()
	if d := probeAfter(); d != 100*time.Millisecond {
		t.Errorf("after a second up, the next outage came back after %v, want 100ms", d)
	}
}
