package rate

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A clock stepped back never mints tokens: from any state the algorithm
// remembers, a step at an earlier time t' than a later time t admits no
// more than a step at t, and leaves a state that, seen from any time after
// t, has nothing more to give than the state a step at t leaves.
func TestTimeBackwardsNeverMints(t *testing.T) {
	for _, alg := range Algorithms() {
		l := Limit{Algorithm: alg, Count: 3, Period: 7 * time.Second}
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, uint64(alg)))
			s := State{}
			now := int64(1_000_000_000) * sec
			checked := 0
			for i := range 20_000 {
				now += rng.Int64N(3 * sec)
				next, d := l.Step(s, now, 1)
				if d.Allowed {
					s = next
				}
				if s.A == 0 && s.B == 0 && s.Log == nil {
					continue // fresh: nothing remembered, nothing to protect
				}
				back := now - 1 - rng.Int64N(10*sec)
				// Each step gets its own copy of a sliding_log's timestamps:
				// two steps from one State may extend its Log in place, and
				// the second would overwrite what the first recorded.
				sBack, dBack := l.Step(State{A: s.A, B: s.B, C: s.C, Log: slices.Clone(s.Log)}, back, 1)
				sNow, dNow := l.Step(s, now, 1)
				if dBack.Allowed && !dNow.Allowed {
					t.Fatalf("step %d: admitted at %d (back) but not at %d", i, back, now)
				}
				if !dBack.Allowed {
					sBack = s
				}
				if !dNow.Allowed {
					sNow = s
				}
				for _, later := range []int64{now, now + rng.Int64N(2*sec), now + 7*sec} {
					_, a := l.Step(sBack, later, 0)
					_, b := l.Step(sNow, later, 0)
					if a.Remaining > b.Remaining {
						t.Fatalf("step %d: after a step back, %d remain at %d; after a step at %d, %d", i, a.Remaining, later, now, b.Remaining)
					}
				}
				checked++
			}
			if checked < 1000 {
				t.Fatalf("only %d states checked", checked)
			}
		})
	}
}

// A fixed window that saw a later window keeps counting in it when the
// clock goes back into an earlier one.
func TestFixedWindowBackwards(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Count: 2, Period: 10 * time.Second}
	s, ds := run(l, State{}, burst(15*sec, 2))
	if count(ds) != 2 {
		t.Fatal(ds)
	}
	_, d := l.Step(s, 5*sec, 1)
	if d.Allowed {
		t.Fatalf("clock back into the previous window: %v, want refused", d)
	}
	if d.RetryAfter != 15*time.Second {
		t.Fatalf("RetryAfter = %v, want 15s (until 20s, from 5s)", d.RetryAfter)
	}
}
