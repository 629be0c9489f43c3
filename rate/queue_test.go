package rate_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

func mustLimit(t *testing.T, s string) rate.Limit {
	t.Helper()
	l, err := rate.ParseLimit(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A gcra or token_bucket caller who waits (a MaxDelay) is admitted past
// the burst with the Delay until its unit refills, its unit reserved, as
// far as it waits: 10/s burst 9 waiting up to 400ms lets 9 through at
// once and holds the next 4 for 100, 200, 300 and 400ms (NGINX's
// limit_req burst=12 delay=8), and refuses the 14th, whose unit comes
// 100ms too late.
func TestBucketQueue(t *testing.T) {
	for _, spec := range []string{"gcra 10/s burst 9", "token_bucket 10/s burst 9"} {
		l := mustLimit(t, spec)
		var s rate.State
		now := rate.Micros(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		for i := range 14 {
			next, d := l.StepWithin(s, now, 1, 400*time.Millisecond)
			var want time.Duration
			if i >= 9 {
				want = time.Duration(i-8) * 100 * time.Millisecond
			}
			if i == 13 {
				if d.Allowed || d.RetryAfter != 100*time.Millisecond || d.Remaining != 0 {
					t.Fatalf("%s: request 14: %v; want refused, retry in 100ms", spec, d)
				}
				continue
			}
			// Remaining counts what passes at once, never a held unit.
			if !d.Allowed || d.Delay != want || d.Remaining != max(0, int64(8-i)) {
				t.Fatalf("%s: request %d: %v; want allowed with delay %v, %d left", spec, i+1, d, want, max(0, 8-i))
			}
			s = next
		}
		// Without a wait, the same state refuses at once, as before.
		if _, d := l.Step(s, now, 1); d.Allowed || d.Delay != 0 || d.RetryAfter != 500*time.Millisecond {
			t.Errorf("%s: a caller who does not wait: %v; want refused, retry in 500ms", spec, d)
		}
	}
}

// On random arrivals, costs and waits, a bucket's queued admissions are
// exact: the instants the admitted requests proceed at (now + Delay)
// conform to the limit with no wait at all; a refusal's RetryAfter is
// the wait after which the same request passes; Remaining says whether
// one more unit passes now, at once; and token_bucket decides as gcra
// does.
func TestBucketQueueModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, spec := range []string{"gcra 10/s burst 3", "gcra 3 per 7s burst 2", "gcra 1000/s burst 50", "gcra 5/m", "gcra 7 per 3s burst 1"} {
		l := mustLimit(t, spec)
		tb := l
		tb.Algorithm = rate.TokenBucket
		var s, ts rate.State
		var proceeds [][2]int64 // (when, cost) of those that proceed in the last period
		var inPeriod int64
		now := rate.Micros(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		period := l.Period.Microseconds()
		admitted := 0
		for i := range 30000 {
			// Time runs forward here, some requests at one instant.
			if rng.IntN(3) != 0 {
				now += rng.Int64N(2*period/l.Count + 1)
			}
			cost := 1 + rng.Int64N(l.Capacity())
			if rng.IntN(2) == 0 {
				cost = 1
			}
			wait := time.Duration(rng.Int64N(3*period)) * time.Microsecond
			next, d := l.StepWithin(s, now, cost, wait)
			tnext, td := tb.StepWithin(ts, now, cost, wait)
			if td.Allowed != d.Allowed || td.Delay != d.Delay || td.RetryAfter != d.RetryAfter || td.Remaining != d.Remaining {
				t.Fatalf("%s, request %d (cost %d, wait %v): gcra %v, token_bucket %v", spec, i, cost, wait, d, td)
			}
			if !d.Allowed {
				if d.RetryAfter <= 0 {
					t.Fatalf("%s, request %d: refused with RetryAfter %v", spec, i, d.RetryAfter)
				}
				if _, again := l.StepWithin(s, now+d.RetryAfter.Microseconds(), cost, wait); !again.Allowed {
					t.Fatalf("%s, request %d: refused, retry in %v; then refused again: %v", spec, i, d.RetryAfter, again)
				}
				if d.RetryAfter > time.Microsecond {
					if _, early := l.StepWithin(s, now+d.RetryAfter.Microseconds()-1, cost, wait); early.Allowed {
						t.Fatalf("%s, request %d: refused, retry in %v; passes 1µs sooner", spec, i, d.RetryAfter)
					}
				}
				continue
			}
			if d.Delay < 0 || d.Delay > wait {
				t.Fatalf("%s, request %d: delay %v, caller waits %v", spec, i, d.Delay, wait)
			}
			// Remaining: one more unit passes now, at once, exactly when
			// Remaining says some do.
			if _, more := l.Step(next, now, 1); more.Allowed != (d.Remaining > 0) {
				t.Fatalf("%s, request %d: remaining %d, yet one more unit: %v", spec, i, d.Remaining, more)
			}
			// The request goes at now + Delay, the first whole µs at which
			// a caller who does not wait would pass, given the same state.
			if _, there := l.Step(s, now+d.Delay.Microseconds(), cost); !there.Allowed {
				t.Fatalf("%s, request %d (cost %d): delay %v, yet at +%v a plain step refuses it: %v", spec, i, cost, d.Delay, d.Delay, there)
			}
			if d.Delay > 0 {
				if _, before := l.Step(s, now+d.Delay.Microseconds()-1, cost); before.Allowed {
					t.Fatalf("%s, request %d (cost %d): delay %v, yet 1µs sooner a plain step passes it", spec, i, cost, d.Delay)
				}
			}
			// Over any period, what proceeds is what the limit lets
			// through in a period: the burst and a period's refill (the
			// first unit's whole-µs rounding allowed for).
			goes := now + d.Delay.Microseconds()
			proceeds = append(proceeds, [2]int64{goes, cost})
			inPeriod += cost
			for proceeds[0][0] <= goes-period {
				inPeriod -= proceeds[0][1]
				proceeds = proceeds[1:]
			}
			if inPeriod > l.Capacity()+l.Count {
				t.Fatalf("%s, request %d: %d units proceed within one period", spec, i, inPeriod)
			}
			s, ts = next, tnext
			admitted++
		}
		if admitted < 1000 {
			t.Fatalf("%s: only %d admitted", spec, admitted)
		}
	}
}

// With a clock that steps back (Redis's, after a failover), a queued
// admission still waits no longer than its caller does, and a refusal's
// RetryAfter is still exact: a step before the latest time seen is taken
// at that time, and the waits are measured from the caller's now.
func TestBucketQueueClockBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 13))
	for _, spec := range []string{"gcra 10/s burst 3", "gcra 3 per 7s burst 2", "token_bucket 10/s burst 3", "token_bucket 3 per 7s burst 2"} {
		l := mustLimit(t, spec)
		var s rate.State
		now := rate.Micros(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		period := l.Period.Microseconds()
		for i := range 30000 {
			now += rng.Int64N(2*period/l.Count+1) - period/l.Count/2
			cost := 1 + rng.Int64N(l.Capacity())
			wait := time.Duration(rng.Int64N(3*period)) * time.Microsecond
			next, d := l.StepWithin(s, now, cost, wait)
			if !d.Allowed {
				if _, again := l.StepWithin(s, now+d.RetryAfter.Microseconds(), cost, wait); !again.Allowed {
					t.Fatalf("%s, request %d: refused, retry in %v; then refused again: %v", spec, i, d.RetryAfter, again)
				}
				if d.RetryAfter > time.Microsecond {
					if _, early := l.StepWithin(s, now+d.RetryAfter.Microseconds()-1, cost, wait); early.Allowed {
						t.Fatalf("%s, request %d: refused, retry in %v; passes 1µs sooner", spec, i, d.RetryAfter)
					}
				}
				continue
			}
			if d.Delay > wait {
				t.Fatalf("%s, request %d: delay %v, caller waits %v", spec, i, d.Delay, wait)
			}
			if _, more := l.Step(next, now, 1); more.Allowed != (d.Remaining > 0) || more.Delay != 0 {
				t.Fatalf("%s, request %d: remaining %d, yet one more unit: %v", spec, i, d.Remaining, more)
			}
			s = next
		}
	}
}
