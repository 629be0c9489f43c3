package rate

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

const sec = int64(time.Second / time.Microsecond)

// arrival is a request of cost at a time.
type arrival struct {
	at   int64 // µs
	cost int64
}

// run steps l from s through arrivals, committing what is allowed, and
// returns the last state and the decisions.
func run(l Limit, s State, arrivals []arrival) (State, []Decision) {
	out := make([]Decision, len(arrivals))
	for i, a := range arrivals {
		next, d := l.Step(s, a.at, a.cost)
		if d.Allowed {
			s = next
		}
		out[i] = d
	}
	return s, out
}

func burst(at int64, n int) []arrival {
	a := make([]arrival, n)
	for i := range a {
		a[i] = arrival{at, 1}
	}
	return a
}

func allowed(ds []Decision) []bool {
	out := make([]bool, len(ds))
	for i, d := range ds {
		out[i] = d.Allowed
	}
	return out
}

func count(ds []Decision) int {
	n := 0
	for _, d := range ds {
		if d.Allowed {
			n++
		}
	}
	return n
}

func mustLimit(t testing.TB, s string) Limit {
	t.Helper()
	l, err := ParseLimit(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Token bucket, capacity 5, refill 1/s.
func TestTokenBucketSeed(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			l := Limit{Algorithm: alg, Count: 1, Period: time.Second, Burst: 5}
			s, ds := run(l, State{}, burst(0, 7))
			if got, want := fmt.Sprint(allowed(ds)), "[true true true true true false false]"; got != want {
				t.Errorf("burst of 7 at 0: %s, want %s", got, want)
			}
			if ds[5].RetryAfter != time.Second {
				t.Errorf("6th request RetryAfter = %v, want 1s", ds[5].RetryAfter)
			}
			s, ds = run(l, s, burst(2*sec, 3))
			if got, want := fmt.Sprint(allowed(ds)), "[true true false]"; got != want {
				t.Errorf("3 at 2s: %s, want %s", got, want)
			}
			_, ds = run(l, s, burst(10*sec, 10))
			if got := count(ds); got != 5 {
				t.Errorf("10 at 10s: %d allowed, want 5", got)
			}
		})
	}
}

// 10 per 60s: 10 requests at 59.9s and 10 at 60.0s.
func TestBoundaryBurst(t *testing.T) {
	want := map[Algorithm]int{
		FixedWindow: 20, // two windows, 10 each: the classic double burst
		SlidingLog:  10, // the first 10 are still inside the last 60s
		// At 60.0s the new window has just begun (e = 0), so the previous
		// window's 10 weigh ⌈10·(60−0)/60⌉ = 10: nothing more passes. The
		// sliding window counter admits at most Count plus whatever the
		// weighting forgives; here it forgives nothing.
		SlidingWindow: 10,
		TokenBucket:   10,
		GCRA:          10,
		LeakyBucket:   10,
	}
	for alg, n := range want {
		t.Run(alg.String(), func(t *testing.T) {
			l := Limit{Algorithm: alg, Count: 10, Period: 60 * time.Second}
			arrivals := append(burst(59_900_000, 10), burst(60_000_000, 10)...)
			_, ds := run(l, State{}, arrivals)
			if got := count(ds); got != n {
				t.Errorf("allowed %d of 20, want %d", got, n)
			}
		})
	}
}

// Sliding window counter, step by step: the second half of a window
// forgives half of the previous one.
func TestSlidingWindowSteps(t *testing.T) {
	l := Limit{Algorithm: SlidingWindow, Count: 10, Period: 10 * time.Second}
	steps := []struct {
		at        int64
		cost      int64
		ok        bool
		remaining int64
		retry     time.Duration
	}{
		{0, 10, true, 0, 0},
		{9 * sec, 1, false, 0, time.Second + 1*time.Second}, // next window at 10s: prev 10 weighs 10 until e ≥ 1s
		{10 * sec, 1, false, 0, time.Second},
		{11 * sec, 1, true, 0, 0},  // ⌈10·9/10⌉ = 9, +1 = 10
		{15 * sec, 1, true, 3, 0},  // ⌈10·5/10⌉ = 5, cur 2 → 7 used, 3 left
		{15 * sec, 4, false, 3, 0}, // needs 4 more: at e=6s weight 4 → 2+4+4 = 10; retry checked below
	}
	s := State{}
	for i, st := range steps {
		next, d := l.Step(s, st.at, st.cost)
		if d.Allowed != st.ok || d.Remaining != st.remaining || (st.retry != 0 && d.RetryAfter != st.retry) {
			t.Fatalf("step %d at %dµs cost %d: %v, want ok=%t remaining=%d retry=%v", i, st.at, st.cost, d, st.ok, st.remaining, st.retry)
		}
		if d.Allowed {
			s = next
		}
	}
	// The last request passes exactly RetryAfter later, not a microsecond earlier.
	_, d := l.Step(s, 15*sec, 4)
	if d.RetryAfter != time.Second {
		t.Fatalf("RetryAfter = %v, want 1s", d.RetryAfter)
	}
	if _, d := l.Step(s, 16*sec-1, 4); d.Allowed {
		t.Errorf("cost 4 passed at 16s−1µs, before its RetryAfter: %v", d)
	}
	if _, d := l.Step(s, 16*sec, 4); !d.Allowed {
		t.Errorf("cost 4 refused at 16s, after its RetryAfter: %v", d)
	}
}

func TestLeakyBucketDelays(t *testing.T) {
	// 2 per second, a queue of 4: requests leave every 500ms.
	l := Limit{Algorithm: LeakyBucket, Count: 2, Period: time.Second, Burst: 4}
	s := State{}
	want := []time.Duration{0, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond}
	for i, w := range want {
		next, d := l.Step(s, 0, 1)
		if !d.Allowed || d.Delay != w {
			t.Fatalf("request %d: %v, want allowed with delay %v", i, d, w)
		}
		s = next
	}
	_, d := l.Step(s, 0, 1)
	if d.Allowed || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("5th request: %v, want refused, retry 500ms", d)
	}
	// A caller who can wait at most 700ms is refused a 1s delay...
	_, d = l.StepWithin(State{A: 0}, 0, 1, 0)
	if !d.Allowed {
		t.Fatal("fresh queue refused")
	}
	s2, _ := l.Step(State{}, 0, 1)
	s2, _ = l.Step(s2, 0, 1)
	_, d = l.StepWithin(s2, 0, 1, 700*time.Millisecond)
	if d.Allowed || d.RetryAfter != 300*time.Millisecond {
		t.Fatalf("delay 1s with max 700ms: %v, want refused, retry 300ms", d)
	}
	// ...and admitted once 300ms have passed.
	_, d = l.StepWithin(s2, 300_000, 1, 700*time.Millisecond)
	if !d.Allowed || d.Delay != 700*time.Millisecond {
		t.Fatalf("after 300ms: %v, want allowed with delay 700ms", d)
	}
}

// A caller who waits at most MaxDelay can use only the places in the queue
// whose turn comes within it: Remaining counts those, so a refusal never
// says that units remain.
func TestLeakyBucketMaxDelayRemaining(t *testing.T) {
	// 2 per second, a queue of 4: turns every 500ms. Waiting at most
	// 700ms, a caller can take the turns at +0 and +500ms, not +1s.
	l := Limit{Algorithm: LeakyBucket, Count: 2, Period: time.Second, Burst: 4}
	const wait = 700 * time.Millisecond
	steps := []struct {
		at        int64
		cost      int64
		ok        bool
		remaining int64
		delay     time.Duration
		retry     time.Duration
	}{
		{0, 0, true, 2, 0, 0},                      // turns at 0 and 500ms
		{0, 1, true, 1, 0, 0},                      // next turn at 500ms
		{0, 1, true, 0, 500 * time.Millisecond, 0}, // next turn at 1s: too late
		{0, 1, false, 0, 0, 300 * time.Millisecond},
		{0, 0, true, 0, 0, 0},
		{300_000, 1, true, 0, 700 * time.Millisecond, 0}, // next turn at 1.5s, 1.2s away
		{800_000, 1, true, 0, 700 * time.Millisecond, 0}, // next turn at 2s, 1.2s away
		// Its turn 800ms away: refused, though 2 places are free.
		{1_200_000, 1, false, 0, 0, 100 * time.Millisecond},
	}
	s := State{}
	for i, st := range steps {
		next, d := l.StepWithin(s, st.at, st.cost, wait)
		if d.Allowed != st.ok || d.Remaining != st.remaining || d.Delay != st.delay || d.RetryAfter != st.retry {
			t.Fatalf("step %d at %dµs cost %d: %v, want ok=%t remaining=%d delay=%v retry=%v", i, st.at, st.cost, d, st.ok, st.remaining, st.delay, st.retry)
		}
		if d.Allowed {
			s = next
		}
	}

	// At random: Remaining unit requests pass at once under the same
	// MaxDelay and one more does not; RetryAfter is the least wait.
	for _, spec := range []string{"3 per 7s burst 5", "5 per 1us burst 9", "2 per 3us burst 7"} {
		l := mustLimit(t, "leaky_bucket "+spec)
		rng := rand.New(rand.NewPCG(5, uint64(len(spec))))
		s, now, p := State{}, int64(0), l.periodMicros()
		for i := range 5000 {
			now += rng.Int64N(p/2 + 2)
			cost := rng.Int64N(l.Capacity() + 1)
			maxDelay := dur(1 + rng.Int64N(2*p))
			next, d := l.StepWithin(s, now, cost, maxDelay)
			if d.Allowed {
				s = next
			} else {
				w := micros(d.RetryAfter)
				if _, d2 := l.StepWithin(s, now+w, cost, maxDelay); !d2.Allowed {
					t.Fatalf("%v step %d: refused again after RetryAfter %v: %v", l, i, d.RetryAfter, d2)
				}
				if _, d2 := l.StepWithin(s, now+w-1, cost, maxDelay); d2.Allowed {
					t.Fatalf("%v step %d: RetryAfter %v is not the least wait", l, i, d.RetryAfter)
				}
			}
			probe := s
			for k := range d.Remaining {
				var pd Decision
				if probe, pd = l.StepWithin(probe, now, 1, maxDelay); !pd.Allowed {
					t.Fatalf("%v step %d (%v, max delay %v): Remaining %d but unit %d refused", l, i, d, maxDelay, d.Remaining, k+1)
				}
			}
			if _, pd := l.StepWithin(probe, now, 1, maxDelay); pd.Allowed {
				t.Fatalf("%v step %d (%v, max delay %v): Remaining %d but one more passed", l, i, d, maxDelay, d.Remaining)
			}
		}
	}
}

// TestStateOfAnotherLimit: a limit changed under a key meets the state the
// old limit left there.
func TestStateOfAnotherLimit(t *testing.T) {
	now := 1_700_000_000 * sec
	// 700 requests at once at 999999/s leave the TAT 700 + 700/999999 µs
	// ahead: a fraction of 700, in millionths less one.
	old := Limit{Count: 999_999, Period: time.Second, Burst: 1000}
	s, d := old.Step(State{}, now, 700)
	if !d.Allowed || s.A != now+700 || s.B != 700 {
		t.Fatalf("700 at 999999/s: %v, state %+v; want allowed, TAT now+700µs and 700/999999", d, s)
	}
	// At 10/s the fraction counts in tenths: 700 of them are not a
	// fraction. The TAT rounds up to now+701µs, and the request adds
	// 100ms to it.
	l := Limit{Count: 10, Period: time.Second}
	next, d := l.Step(s, now, 1)
	if !d.Allowed || d.Remaining != 8 || d.ResetAfter != 100_701*time.Microsecond {
		t.Errorf("10/s after it: %v, want allowed, 8 remaining, reset 100.701ms", d)
	}
	if next.A != now+100_701 || next.B != 0 {
		t.Errorf("10/s after it: state %+v, want TAT now+100701µs and no fraction", next)
	}

	// A window's count can be over a smaller limit's: nothing remains,
	// and a look still passes.
	twenty := Limit{Algorithm: FixedWindow, Count: 20, Period: time.Minute}
	ten := Limit{Algorithm: FixedWindow, Count: 10, Period: time.Minute}
	s, _ = twenty.Step(State{}, now, 15)
	if _, d := ten.Step(s, now, 1); d.Allowed || d.Remaining != 0 {
		t.Errorf("10/m with 15 counted: %v, want refused, nothing remaining", d)
	}
	if next, d := ten.Step(s, now, 0); !d.Allowed || d.Remaining != 0 || next.A != s.A || next.B != s.B {
		t.Errorf("a look at 10/m with 15 counted: %v, state %+v; want allowed, nothing remaining, the state kept", d, next)
	}

	// A sliding window's counts over a smaller limit's are read as full
	// windows, but kept as they are: a look, or a request admitted as
	// the previous window's weight decays, must not write them down to
	// the smaller limit, or a limit raised again would admit what the
	// first already counted.
	slide20 := Limit{Algorithm: SlidingWindow, Count: 20, Period: time.Minute}
	slide10 := Limit{Algorithm: SlidingWindow, Count: 10, Period: time.Minute}
	minute := 1_700_000_040 * sec // aligned to the minute
	s, _ = slide20.Step(State{}, minute, 15)
	if next, d := slide10.Step(s, minute, 0); !d.Allowed || d.Remaining != 0 || next.B != 15 {
		t.Errorf("a look at 10/m with 15 counted: %v, state %+v; want allowed, nothing remaining, the count of 15 kept", d, next)
	}
	// A minute on, the 15 weigh 15·(1−e/T): 59.5s in, ⌈0.125⌉ = 1 of
	// them, and 9 more fit under 10/m.
	late := minute + 60*sec + 59_500_000
	next, d = slide10.Step(s, late, 9)
	if !d.Allowed || next.B != 9 || next.C != 15 {
		t.Errorf("9 at 10/m as 15 counted decay: %v, state %+v; want allowed, the previous count of 15 kept", d, next)
	}

	// A sliding window's counts from a billion a second, met by 3 a day:
	// the counts times a day's microseconds pass 2^63. They count as full
	// windows of 3, and the waits are the formula's.
	midnight := 1_717_286_400 * sec // aligned to the day
	fast := Limit{Algorithm: SlidingWindow, Count: 1_000_000_000, Period: time.Second}
	daily := Limit{Algorithm: SlidingWindow, Count: 3, Period: 24 * time.Hour}
	s, _ = fast.Step(State{}, midnight-sec, 1_000_000_000)
	s, d = fast.Step(s, midnight+999_999, 999_999_000)
	if !d.Allowed || s.B != 999_999_000 || s.C != 1_000_000_000 {
		t.Fatalf("a billion a second: %v, state %+v", d, s)
	}
	noon := midnight + 12*3600*sec
	// Full this window and the last: the next window has the last one's
	// 3 weighing on it, and 1 passes when 2 of them have decayed, 8h in.
	if _, d := daily.Step(s, noon, 1); d.Allowed || d.RetryAfter != 20*time.Hour || d.ResetAfter != 36*time.Hour {
		t.Errorf("3/d at noon: %v, want refused, retry in 20h, reset in 36h", d)
	}
	if _, d := daily.Step(s, midnight+24*3600*sec+7*sec, 1); d.Allowed || d.RetryAfter != 8*time.Hour-7*time.Second {
		t.Errorf("3/d 7s into the next day: %v, want refused, retry in 7h59m53s", d)
	}
	if _, d := daily.Step(s, midnight+35*3600*sec, 1); !d.Allowed {
		t.Errorf("3/d 11h into the next day: %v, want allowed", d)
	}
}

func TestFixedWindowCalendarMonth(t *testing.T) {
	l := mustLimit(t, "2/month")
	jan31 := time.Date(2026, 1, 31, 23, 59, 59, 999_999_000, time.UTC).UnixMicro()
	feb1 := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	s, ds := run(l, State{}, burst(jan31, 3))
	if count(ds) != 2 || ds[2].RetryAfter != time.Microsecond {
		t.Fatalf("January: %v", ds)
	}
	_, ds = run(l, s, burst(feb1, 3))
	if count(ds) != 2 {
		t.Fatalf("February: %v", ds)
	}
	// February 2026 has 28 days.
	if want := 28 * 24 * time.Hour; ds[2].RetryAfter != want {
		t.Fatalf("RetryAfter in February = %v, want %v", ds[2].RetryAfter, want)
	}
}

// Every algorithm against the reference model: random arrivals, random
// costs, awkward rates; every field of every decision must match.
func TestStepMatchesModel(t *testing.T) {
	limits := []string{
		"3 per 7s", "1/s burst 5", "10 per 10s", "7 per 3s burst 2", "1 per 1s", "5 per 999999us",
		"100/m burst 7", "13 per 1s",
	}
	steps := 3000
	if testing.Short() || raceEnabled {
		steps = 300 // the exact model is slow, and one goroutine gives the race detector nothing to find
	}
	for _, spec := range limits {
		for _, alg := range Algorithms() {
			l := mustLimit(t, spec)
			l.Algorithm = alg
			if !alg.HasBurst() {
				l.Burst = 0
			}
			t.Run(fmt.Sprintf("%s/%s", alg, spec), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(len(spec)), uint64(alg)))
				m := newModel(l)
				s := State{}
				now := int64(1_700_000_000) * sec
				period := l.periodMicros()
				for i := range steps {
					switch rng.IntN(4) {
					case 0: // same instant
					case 1:
						now += rng.Int64N(period/l.Count + 1)
					case 2:
						now += rng.Int64N(2 * period)
					case 3:
						now += rng.Int64N(1000)
					}
					cost := int64(1)
					if rng.IntN(5) == 0 {
						cost = rng.Int64N(l.Capacity() + 1)
					}
					want := expect(l, m, now, cost)
					next, got := l.Step(s, now, cost)
					if got != want {
						t.Fatalf("step %d at %d cost %d:\n got %v\nwant %v", i, now, cost, got, want)
					}
					if got.Allowed {
						s = next
					}
				}
			})
		}
	}
}

// The properties every algorithm keeps, checked on the real steps alone,
// calendar months included, with time going back and standing still,
// random costs and a leaky_bucket's MaxDelay: waiting RetryAfter lets the
// same request pass and waiting a microsecond less does not; Remaining
// unit requests pass at once and one more does not, and Remaining is the
// largest single cost that passes (but under a MaxDelay; see
// TestLeakyBucketMaxDelayLargerCost); at ResetAfter, and not before, a look
// sees the whole capacity; a look changes nothing.
func TestStepProperties(t *testing.T) {
	type lc struct {
		spec string
		alg  Algorithm
	}
	var cases []lc
	for _, spec := range []string{"3 per 7s", "5 per 3us", "7 per 10s", "1 per 1us"} {
		for _, alg := range Algorithms() {
			cases = append(cases, lc{spec, alg})
		}
	}
	cases = append(cases, lc{"3/month", FixedWindow}, lc{"7 per 3s burst 2", GCRA}, lc{"7 per 3s burst 11", LeakyBucket}, lc{"7 per 3s burst 11", TokenBucket})
	steps := 3000
	if raceEnabled {
		steps = 500
	}
	for _, c := range cases {
		l := mustLimit(t, c.spec)
		l.Algorithm = c.alg
		if !c.alg.HasBurst() {
			l.Burst = 0
		}
		t.Run(fmt.Sprintf("%v %s", c.alg, c.spec), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(len(c.spec)), uint64(c.alg)+77))
			p := l.periodMicros()
			if l.Calendar == Month {
				p = 31 * 24 * 3600 * sec
			}
			cp := func(s State) State { s.Log = slices.Clone(s.Log); return s }
			// Start near the end of 2023 / Feb 2024 so months cross a new
			// year and a leap February.
			now := time.Date(2023, 12, 30, 0, 0, 0, 0, time.UTC).UnixMicro()
			s := State{}
			capa := l.Capacity()
			for i := range steps {
				switch rng.IntN(6) {
				case 0:
				case 1:
					now += rng.Int64N(p/l.Count + 1)
				case 2:
					now += rng.Int64N(p + 1)
				case 3:
					now -= rng.Int64N(p + 1)
				case 4:
					now += rng.Int64N(3)
				case 5:
					now -= rng.Int64N(3)
				}
				now = max(now, 0)
				cost := 1 + rng.Int64N(capa)
				if rng.IntN(4) == 0 {
					cost = 0
				}
				var md time.Duration
				if c.alg == LeakyBucket && rng.IntN(2) == 0 {
					md = dur(1 + rng.Int64N(p))
				}
				next, d := l.StepWithin(cp(s), now, cost, md)
				if d.Remaining < 0 || d.Remaining > capa || d.RetryAfter < 0 || d.ResetAfter < 0 || d.Delay < 0 {
					t.Fatalf("step %d: ill-formed %v", i, d)
				}
				if cost == 0 && !d.Allowed {
					t.Fatalf("step %d: look refused %v", i, d)
				}
				if !d.Allowed {
					w := micros(d.RetryAfter)
					if w <= 0 {
						t.Fatalf("step %d at %d cost %d: refused with RetryAfter %v", i, now, cost, d.RetryAfter)
					}
					if _, d2 := l.StepWithin(cp(s), now+w, cost, md); !d2.Allowed {
						t.Fatalf("step %d at %d cost %d from %+v: %v; refused again after RetryAfter: %v", i, now, cost, s, d, d2)
					}
					if _, d2 := l.StepWithin(cp(s), now+w-1, cost, md); d2.Allowed {
						t.Fatalf("step %d at %d cost %d from %+v: %v; RetryAfter not the least wait: passes 1µs earlier", i, now, cost, s, d)
					}
				}
				after := s
				if d.Allowed {
					after = next
				}
				if cost == 0 && d.Allowed {
					// A look consumes nothing: the same decisions follow.
					for _, dt := range []int64{0, 1, p / 3, p} {
						_, a := l.StepWithin(cp(s), now+dt, 1, md)
						_, b := l.StepWithin(cp(after), now+dt, 1, md)
						if a != b {
							t.Fatalf("step %d: a look changed what follows at +%dµs: %v vs %v", i, dt, a, b)
						}
					}
				}
				// Remaining: unit requests.
				probe := cp(after)
				units := int64(0)
				for units <= capa {
					nx, pd := l.StepWithin(cp(probe), now, 1, md)
					if !pd.Allowed {
						break
					}
					probe = nx
					units++
				}
				if units != d.Remaining {
					t.Fatalf("step %d at %d cost %d (%v, md %v) from %+v: Remaining %d but %d unit requests pass", i, now, cost, d, md, s, d.Remaining, units)
				}
				// Remaining: the largest single cost.
				largest := int64(0)
				for c := capa; c >= 1; c-- {
					if _, pd := l.StepWithin(cp(after), now, c, md); pd.Allowed {
						largest = c
						break
					}
				}
				if largest != d.Remaining && !(c.alg == LeakyBucket && md > 0) {
					t.Fatalf("step %d: Remaining %d but the largest cost that passes is %d", i, d.Remaining, largest)
				}
				// ResetAfter: a look then sees the whole capacity, and not a µs earlier.
				r := micros(d.ResetAfter)
				if _, ld := l.Step(cp(after), now+r, 0); ld.Remaining != capa {
					t.Fatalf("step %d at %d cost %d (%v) from %+v: at +ResetAfter a look sees %v", i, now, cost, d, s, ld)
				}
				if r > 0 {
					if _, ld := l.Step(cp(after), now+r-1, 0); ld.Remaining == capa {
						t.Fatalf("step %d at %d cost %d (%v) from %+v: 1µs before ResetAfter a look already sees %v", i, now, cost, d, s, ld)
					}
				}
				s = after
			}
		})
	}
}

// The bucket algorithms against clockedBucket, field by field, with time
// that goes forward, stands still and goes back, costs of 0 up to the
// capacity, a leaky_bucket's MaxDelay, and limits at the bounds of the
// exact arithmetic. The Redis store's conformance tests compare its Lua
// with the steps; this is what catches a mistake the two share.
func TestStepMatchesClockedModel(t *testing.T) {
	limits := []string{
		"3 per 7s", "3 per 7s burst 5", "1/s burst 5", "7 per 3s burst 2", "13 per 1s",
		"5 per 999999us burst 3", "2 per 3us burst 7", "999983 per 1000003us burst 4000",
		"1 per 1125899906842us burst 4000", // B·T near 2^52
		"4503599627 per 1s", "4503599627370496 per 1us", "1 per 4503599627370496us", "1/s burst 4503599627",
		"4503599627370495 per 1us burst 3", "2 per 2251799813685248us",
	}
	steps := 500
	if testing.Short() || raceEnabled {
		steps = 150 // the exact model is slow, and one goroutine gives the race detector nothing to find
	}
	for _, spec := range limits {
		for _, alg := range []Algorithm{GCRA, TokenBucket, LeakyBucket} {
			for _, bounded := range []bool{false, true} {
				// Remaining under a MaxDelay is the model's slowest
				// part: one turn at a time.
				if bounded && (alg != LeakyBucket || mustLimit(t, spec).Capacity() > 100) {
					continue
				}
				l := mustLimit(t, spec)
				l.Algorithm = alg
				t.Run(fmt.Sprintf("%v/%s/maxdelay=%t", alg, spec, bounded), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(len(spec)), uint64(alg)+9))
					m := newClockedBucket(l)
					s := State{}
					p := l.periodMicros()
					iv := max(1, p/l.Count)
					now := int64(1_700_000_000) * sec
					for i := range steps {
						switch rng.IntN(6) {
						case 0:
						case 1:
							now += rng.Int64N(iv + 1)
						case 2:
							now += rng.Int64N(2*p + 1)
						case 3:
							now -= rng.Int64N(2*iv + 1)
						case 4:
							now += rng.Int64N(3)
						case 5:
							now -= rng.Int64N(3)
						}
						cost := int64(1)
						switch rng.IntN(5) {
						case 0:
							cost = rng.Int64N(l.Capacity() + 1)
						case 1:
							cost = 0
						}
						var md int64
						if bounded {
							md = 1 + rng.Int64N(2*iv*l.burst()+1)
						}
						want := Decision{Limit: l.burst(), Allowed: m.allows(now, cost, md)}
						horizon := ceilDiv(l.burst()*p, l.Count) + 10 + max(0, m.last-now) + md
						if want.Allowed {
							if alg == LeakyBucket {
								want.Delay = dur(m.delay(now))
							}
							m.admit(now, cost)
						} else {
							want.RetryAfter = dur(searchWait(now, horizon, func(x int64) bool { return m.allows(x, cost, md) }))
						}
						want.Remaining = m.remaining(now, md)
						want.ResetAfter = dur(m.reset(now))
						if cost == 0 {
							want.Allowed, want.RetryAfter = true, 0
						}
						next, got := l.StepWithin(s, now, cost, dur(md))
						if got != want {
							t.Fatalf("step %d at %d cost %d max delay %dµs from %+v:\n got %v\nwant %v", i, now, cost, md, s, got, want)
						}
						if got.Allowed {
							s = next
						}
					}
				})
			}
		}
	}
}

// A leaky_bucket decided with a MaxDelay at a time before the latest it
// has seen (a clock stepped back) is decided at that latest time, where
// the queue has room: the request waits only for its turn to come within
// the MaxDelay, not for the clock to catch up as well.
func TestLeakyBucketMaxDelayClockBehind(t *testing.T) {
	l := mustLimit(t, "leaky_bucket 3 per 7s")
	s := State{A: 1700000297126584, B: 0, C: 1700000294218001}
	now, md := int64(1700000289997519), 6263683*time.Microsecond
	_, d := l.StepWithin(s, now, 1, md)
	if d.Allowed || d.RetryAfter != 865382*time.Microsecond {
		t.Fatalf("turn at +%dµs, max delay %v: %v, want refused for 865382µs", s.A-now, md, d)
	}
	if _, d := l.StepWithin(s, now+865382, 1, md); !d.Allowed {
		t.Fatalf("after RetryAfter: %v, want allowed", d)
	}
	if _, d := l.StepWithin(s, now+865381, 1, md); d.Allowed {
		t.Fatalf("1µs before RetryAfter: %v, want refused", d)
	}
}

// A positive MaxDelay under a microsecond is a bound, not its absence: a
// Delay is whole microseconds, so only a request with no Delay passes.
func TestLeakyBucketMaxDelaySubMicrosecond(t *testing.T) {
	l := Limit{Algorithm: LeakyBucket, Count: 2, Period: time.Second, Burst: 4}
	s := State{}
	for range 3 {
		s, _ = l.Step(s, 0, 1) // turns at 0, 0.5s and 1s
	}
	for _, md := range []time.Duration{time.Nanosecond, 500 * time.Nanosecond, 999 * time.Nanosecond, time.Microsecond} {
		if _, d := l.StepWithin(s, 0, 1, md); d.Allowed || d.Remaining != 0 {
			t.Errorf("max delay %v, turn 1.5s away: %v, want refused with nothing remaining", md, d)
		}
		if _, d := l.StepWithin(State{}, 0, 1, md); !d.Allowed || d.Delay != 0 {
			t.Errorf("max delay %v, empty queue: %v, want allowed at once", md, d)
		}
	}
	if _, d := l.StepWithin(s, 0, 1, 0); !d.Allowed || d.Delay != 1500*time.Millisecond {
		t.Errorf("no max delay: %v, want allowed with a delay of 1.5s", d)
	}
}

// Under a MaxDelay, Remaining counts unit requests whose turns come in
// time; a single request of a larger cost waits only for its first turn,
// and passes.
func TestLeakyBucketMaxDelayLargerCost(t *testing.T) {
	l := Limit{Algorithm: LeakyBucket, Count: 2, Period: time.Second, Burst: 4}
	md := 700 * time.Millisecond
	_, look := l.StepWithin(State{}, 0, 0, md)
	_, four := l.StepWithin(State{}, 0, 4, md)
	if look.Remaining != 2 || !four.Allowed || four.Delay != 0 {
		t.Fatalf("max delay %v: a look says %v, a cost of 4 %v; want Remaining 2 (turns at 0 and 0.5s) and the cost of 4 allowed at once", md, look, four)
	}
}

// A million arrivals at 3 per 7s with random gaps: the steps admit exactly
// what the real-valued definition admits, with no drift.
func TestNoDriftMillion(t *testing.T) {
	n, modelSteps := 1_000_000, 1_000_000
	if testing.Short() || raceEnabled {
		modelSteps = 50_000
	}
	for _, alg := range []Algorithm{GCRA, TokenBucket, LeakyBucket, SlidingWindow, FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			l := Limit{Algorithm: alg, Count: 3, Period: 7 * time.Second}
			rng := rand.New(rand.NewPCG(3, 7))
			var s State
			now := int64(0)
			got := 0
			var want int
			// The model is exact and slow: under -short it checks a prefix.
			m := newModel(l)
			for i := range n {
				now += rng.Int64N(3 * sec)
				next, d := l.Step(s, now, 1)
				if d.Allowed {
					s = next
					got++
				}
				if i < modelSteps {
					if m.allows(now, 1) {
						m.admit(now, 1)
						want++
					}
					if i == modelSteps-1 && got != want {
						t.Fatalf("after %d arrivals: steps admitted %d, model %d", i+1, got, want)
					}
				}
			}
			// Over the whole run nothing can beat the long-run rate: at most
			// burst + elapsed·3/7 (windows: 3 per started window, doubled for
			// the sliding window's worst case).
			bound := l.Capacity() + now*3/(7*sec) + 3
			if alg == FixedWindow || alg == SlidingWindow {
				bound = 3 * (now/(7*sec) + 1)
			}
			if int64(got) > bound {
				t.Fatalf("admitted %d over %v, more than %d", got, time.Duration(now)*time.Microsecond, bound)
			}
		})
	}
}
