package rate

import (
	"math"
	"math/big"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The fleet tests here run n instances, each deciding alone with its
// share of a limit, and check what the fleet admits against what the
// limit admits.

// roundUpShare divides Count and Burst by n, rounding up, at least 1. The
// fleet tests show that such shares admit more than the limit, to show
// that they can tell.
func roundUpShare(l Limit, n int64) Limit {
	if n <= 1 {
		return l
	}
	l.Count = max(1, (l.Count+n-1)/n)
	if l.Burst > 0 {
		l.Burst = max(1, (l.Burst+n-1)/n)
	}
	return l
}

func TestShareTable(t *testing.T) {
	tests := []struct {
		l    string
		n    int64
		want string
	}{
		// n below 2: the limit itself.
		{"10/s", 1, "gcra 10/s"},
		{"10/s", 0, "gcra 10/s"},
		{"10/s", -3, "gcra 10/s"},
		// Buckets: Count per n×Period, reduced by what Count and n share;
		// the burst ⌈Burst/n⌉, written as 0 when it is the count.
		{"10/s", 2, "gcra 5/s"},
		{"10/s", 3, "gcra 10 per 3s burst 4"},
		{"10/s", 4, "gcra 5 per 2s burst 3"},
		{"5/m burst 5", 4, "gcra 5 per 4m0s burst 2"},
		{"5/s burst 10", 4, "gcra 5 per 4s burst 3"},
		{"token_bucket 1/s", 4, "token_bucket 1 per 4s"},
		{"leaky_bucket 3 per 7s", 4, "leaky_bucket 3 per 28s burst 1"},
		{"3 per 7s", 3, "gcra 1 per 7s"},
		{"2/s burst 1", 5, "gcra 2 per 5s burst 1"},
		{"10/s burst 21", 4, "gcra 5 per 2s burst 6"},
		{"token_bucket 5/s burst 9", 4, "token_bucket 5 per 4s burst 3"},
		{"10/s", 10000, "gcra 1 per 16m40s"},
		// Near the bounds: 1000000/h on 3 would be 1000000 per 3h, past
		// 2^52; in lowest terms it is 1 per 10.8ms.
		{"1000000/h", 3, "gcra 1 per 10.8ms burst 333334"},
		{"1200000/h", 7, "gcra 1 per 21ms burst 171429"},
		{"1200000/h", 4, "gcra 300000/h"},
		{"4 per 1125899906842624us", 5, "gcra 1 per 16289d1h28m3.55328s"},
		// Not even in lowest terms: rounded down, to the largest count
		// that fits with the period it needs.
		{"4503599 per 1000000007us", 2, "gcra 3184525 per 23m34.213398s burst 2251800"},
		{"4503599 per 1000000007us", 10000, "gcra 45035 per 1d3h46m37.802459s burst 451"},
		{"3 per 1125899906842624us", 5, "gcra 1 per 21718d17h57m24.737707s"},
		{"4503599627370495 per 1us burst 999", 2, "gcra 2251799813685247 per 1µs burst 500"},
		{"2 per 1us burst 4503599627370496", 3, "gcra 1 per 2µs burst 1501199875790166"}, // the burst leaves 2µs at most
		// Many units a microsecond: the largest count that fits,
		// 374115270590, needs 12038µs and is 35 millionths slow; 12037µs
		// and the count it holds are short of the exact rate by less than
		// a unit.
		{"3695376227266022 per 1us", 118902826, "gcra 374097446999 per 12.037ms burst 31078961"},
		{"token_bucket 1308685599140029 per 1us", 29951051931, "token_bucket 14027830402 per 321.046ms burst 43695"},
		// Neither fits: 1 per 2^52 µs/⌈Burst/n⌉, faster than 1/n of l.
		{"1 per 1125899906842624us", 5, "gcra 1 per 52124d23h53m47.370496s"},
		{"1 per 1125899906842624us burst 4", 2, "gcra 1 per 26062d11h56m53.685248s burst 2"},
		{"1/s", math.MaxInt64, "gcra 1 per 52124d23h53m47.370496s"},
		// Windows: ⌊Count/n⌋ in l's windows.
		{"fixed_window 10000/month", 3, "fixed_window 3333/month"},
		{"fixed_window 100/h", 3, "fixed_window 33/h"},
		{"fixed_window 5/m", 4, "fixed_window 1/m"},
		{"sliding_window 52000/d", 7, "sliding_window 7428/d"},
		{"sliding_log 65536/h", 3, "sliding_log 21845/h"},
		// Count below n: 1 per ⌈n/Count⌉ windows.
		{"fixed_window 5/m", 7, "fixed_window 1 per 2m0s"},
		{"sliding_log 3 per 15m", 4, "sliding_log 1 per 30m0s"},
		{"sliding_window 1/s", 4, "sliding_window 1 per 4s"},
		{"fixed_window 2 per 1125899906842624us", 9, "fixed_window 1 per 52124d23h53m47.370496s"}, // capped
		// A month cannot be stretched.
		{"fixed_window 2/month", 3, "fixed_window 1/month"},
	}
	for _, tt := range tests {
		l := mustLimit(t, tt.l)
		got := l.Share(tt.n)
		if got.String() != tt.want {
			t.Errorf("%v.Share(%d) = %v, want %v", l, tt.n, got, tt.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%v.Share(%d) = %#v: %v", l, tt.n, got, err)
		}
	}
	// An invalid limit is returned as it is, for its user to hear why.
	for _, bad := range []Limit{{}, {Count: 5}, {Count: 5, Period: time.Second, Burst: -1}, {Algorithm: FixedWindow, Count: 5, Period: time.Second, Calendar: Month}} {
		if got := bad.Share(4); got != bad {
			t.Errorf("%#v.Share(4) = %#v, want it unchanged", bad, got)
		}
	}
}

// Every share of a valid limit is valid and is what the doc says: for the
// buckets, ⌈Burst/n⌉ and exactly 1/n of l's rate where that fits
// Validate's bounds, a little less where it does not; for the windows,
// ⌊Count/n⌋ in l's windows, or 1 per ⌈n/Count⌉ of them.
func TestShareProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	counts := []int64{1, 2, 3, 5, 7, 10, 64, 1000, 65536, 1_000_003, 1 << 30, MaxExact}
	periods := []int64{1, 7, 1000, sec, 7 * sec, 3600 * sec, 86400 * sec, 1 << 40, MaxExact}
	ns := []int64{2, 3, 4, 7, 10, 64, 10000, 1 << 20, 1 << 40, math.MaxInt64}
	tried := 0
	for range 20000 {
		l := Limit{
			Algorithm: Algorithm(rng.IntN(numAlgorithms)),
			Count:     max(1, counts[rng.IntN(len(counts))]+rng.Int64N(3)-1),
			Period:    dur(max(1, periods[rng.IntN(len(periods))]-rng.Int64N(2))),
		}
		if l.Algorithm.HasBurst() && rng.IntN(2) == 0 {
			l.Burst = max(1, counts[rng.IntN(len(counts))]+rng.Int64N(3)-1)
		}
		if l.Algorithm == FixedWindow && rng.IntN(4) == 0 {
			l.Period, l.Calendar = 0, Month
		}
		if l.Validate() != nil {
			continue
		}
		tried++
		n := ns[rng.IntN(len(ns))] - rng.Int64N(2)
		if rng.IntN(2) == 0 {
			n = 2 + rng.Int64N(1<<(1+rng.IntN(62))) // between the listed ones
		}
		s := l.Share(n)
		if err := s.Validate(); err != nil {
			t.Fatalf("%#v.Share(%d) = %#v: %v", l, n, s, err)
		}
		if s.Algorithm != l.Algorithm || s.Calendar != l.Calendar {
			t.Fatalf("%v.Share(%d) = %v: another algorithm or calendar", l, n, s)
		}
		if l.Algorithm.HasBurst() {
			checkBucketShare(t, l, n, s)
		} else {
			checkWindowShare(t, l, n, s)
		}
	}
	if tried < 5000 {
		t.Fatalf("only %d valid limits tried", tried)
	}
}

func checkBucketShare(t *testing.T, l Limit, n int64, s Limit) {
	t.Helper()
	b := (l.burst()-1)/n + 1
	if s.Capacity() != b {
		t.Fatalf("%v.Share(%d) = %v: capacity %d, want ⌈%d/%d⌉ = %d", l, n, s, s.Capacity(), l.burst(), n, b)
	}
	// Per µs: exact = Count/(n·T), got = s.Count/s.Period.
	exact := new(big.Rat).SetFrac(big.NewInt(l.Count), new(big.Int).Mul(big.NewInt(n), big.NewInt(l.periodMicros())))
	got := big.NewRat(s.Count, s.periodMicros())
	num, den := exact.Num(), exact.Denom()
	fits := den.Cmp(big.NewInt(MaxExact)) <= 0 &&
		new(big.Int).Mul(bigMax(num, big.NewInt(b)), den).Cmp(big.NewInt(MaxExact)) <= 0
	switch c := got.Cmp(exact); {
	case fits && c != 0:
		t.Fatalf("%v.Share(%d) = %v: rate %v per µs, want exactly %v", l, n, s, got, exact)
	case c < 0:
		// Rounded down: by less than a millionth, unless the burst
		// leaves no room for a period twice as long.
		short := new(big.Rat).Quo(got, exact)
		if short.Cmp(big.NewRat(999_999, 1_000_000)) < 0 && 2*b <= MaxExact/s.periodMicros() {
			t.Fatalf("%v.Share(%d) = %v: rate %v per µs, %v of the exact %v", l, n, s, got, short.FloatString(9), exact)
		}
	case c > 0:
		// Only where nothing slower is valid: Count below n, and 1 per
		// ⌈n·T/Count⌉ past the bound with this burst.
		slowest := big.NewRat(1, MaxExact/b)
		if l.Count >= n || got.Cmp(slowest) != 0 {
			t.Fatalf("%v.Share(%d) = %v: rate %v per µs, above the exact %v", l, n, s, got, exact)
		}
	}
}

func bigMax(a, b *big.Int) *big.Int {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

func checkWindowShare(t *testing.T, l Limit, n int64, s Limit) {
	t.Helper()
	if l.Count >= n {
		if s.Count != l.Count/n || s.Period != l.Period {
			t.Fatalf("%v.Share(%d) = %v, want %d in the same windows", l, n, s, l.Count/n)
		}
		return
	}
	if s.Count != 1 {
		t.Fatalf("%v.Share(%d) = %v, want 1 unit per share", l, n, s)
	}
	if l.Calendar == Month {
		return // cannot stretch: n a month
	}
	k := int64(s.Period / l.Period)
	if s.Period%l.Period != 0 || k != min((n-1)/l.Count+1, MaxExact/l.periodMicros()) {
		t.Fatalf("%v.Share(%d) = %v, want a period of ⌈n/Count⌉ = %d windows, capped at 2^52 µs", l, n, s, (n-1)/l.Count+1)
	}
}

// FuzzShare checks that Share never panics and that the share of a valid
// limit is valid.
func FuzzShare(f *testing.F) {
	f.Add("gcra 10/s", int64(4))
	f.Add("5/m burst 5", int64(3))
	f.Add("leaky_bucket 1 per 1125899906842624us", int64(9223372036854775807))
	f.Add("fixed_window 10000/month", int64(10001))
	f.Add("sliding_log 65536/h", int64(65537))
	f.Add("token_bucket 4503599 per 1000000007us burst 1", int64(7))
	f.Fuzz(func(t *testing.T, limit string, n int64) {
		l, err := ParseLimit(limit)
		if err != nil {
			return
		}
		s := l.Share(n)
		if err := s.Validate(); err != nil {
			t.Fatalf("%v.Share(%d) = %#v: %v", l, n, s, err)
		}
		if n <= 1 && s != l {
			t.Fatalf("%v.Share(%d) = %v, want l", l, n, s)
		}
	})
}

// bucketCases are the awkward limits of the fleet tests: rates n does not
// divide, a count of 1, a burst below the count, counts near Validate's
// bounds (1000000/h on 3 instances is past them unless reduced to lowest
// terms; 4503599 per 1000000007µs is past them even so, and rounded down).
var bucketCases = []string{
	"3 per 7s", "5/m burst 5", "1/s", "10/s burst 1", "100/s",
	"1000000/h", "1200000/h burst 1200000", "4503599 per 1000000007us",
}

var fleetSizes = []int64{2, 3, 4, 7}

const t0 = 1_700_000_000_000_000 // µs, in 2023

// exactShare reports whether s refills at exactly 1/n of l.
func exactShare(l Limit, n int64, s Limit) bool {
	a := new(big.Int).Mul(big.NewInt(s.Count), big.NewInt(n*l.periodMicros()))
	return a.Cmp(new(big.Int).Mul(big.NewInt(l.Count), big.NewInt(s.periodMicros()))) == 0
}

// saturate returns what one instance deciding with s admits from t0 to
// t0+h when its clients keep it busy: a request of cost at t0, another at
// once after each one admitted, and after each refusal another exactly
// RetryAfter later.
func saturate(t *testing.T, s Limit, cost, h int64) int64 {
	var st State
	admitted := int64(0)
	for now := int64(t0); now <= t0+h; {
		next, d := s.Step(st, now, cost)
		if d.Allowed {
			st, admitted = next, admitted+cost
			continue
		}
		if d.RetryAfter <= 0 {
			t.Fatalf("%v refused cost %d at %d with RetryAfter %v", s, cost, now, d.RetryAfter)
		}
		now += micros(d.RetryAfter)
	}
	return admitted
}

// A fleet kept busy admits what the limit admits over the same time, but
// for the burst: at most n×⌈Burst/n⌉ + Count×h/Period, and for an exact
// share at least that less n×(cost+1): each instance may be waiting for
// the last units of a request, and its clients, at whole microseconds,
// may find its bucket full a fraction of one before they come back and
// lose that fraction. The rounded-up shares admit more.
func TestShareFleetSaturated(t *testing.T) {
	for _, a := range []Algorithm{GCRA, TokenBucket, LeakyBucket} {
		for _, text := range bucketCases {
			l := mustLimit(t, text)
			l.Algorithm = a
			for _, n := range fleetSizes {
				s := l.Share(n)
				b := s.Capacity()
				cost := max(1, b/4)
				periods := 30 * n
				h := periods * l.periodMicros()
				fleetBurst := n * b
				most := fleetBurst + l.Count*periods // n×⌈B/n⌉ + Count×h/T
				// The instances are alike and alone: each admits the same.
				got := n * saturate(t, s, cost, h)
				if got > most {
					t.Errorf("%v on %d instances (%v each) kept busy for %d periods: fleet admitted %d, above %d = burst %d + %d",
						l, n, s, periods, got, most, fleetBurst, l.Count*periods)
				}
				least := most - n*(cost+1)
				if !exactShare(l, n, s) {
					least -= most / 1_000_000 // rounded down: by less than 10^-6 here
				}
				if got < least {
					t.Errorf("%v on %d instances (%v each) kept busy for %d periods: fleet admitted %d, want at least %d",
						l, n, s, periods, got, least)
				}
				up := roundUpShare(l, n)
				upGot := n * saturate(t, up, max(1, up.Capacity()/4), h)
				if l.Count%n != 0 && l.Count < 1000 && upGot <= most {
					t.Errorf("%v on %d instances: the rounded-up share %v admitted %d, within %d: the test cannot tell", l, n, up, upGot, most)
				}
			}
		}
	}
}

// A fleet under random arrivals never admits, in any span of time D, more
// than n×⌈Burst/n⌉ + D×Count/Period. The rounded-up shares do, for the limits n
// does not divide.
func TestShareFleetRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, a := range []Algorithm{GCRA, TokenBucket, LeakyBucket} {
		for _, text := range bucketCases {
			l := mustLimit(t, text)
			l.Algorithm = a
			for _, n := range fleetSizes {
				s := l.Share(n)
				h := 30 * n * l.periodMicros()
				arrivals := randomArrivals(rng, n, s.Capacity(), l.Count*30*n, h)
				admitted := runFleet(s, n, arrivals)
				T := l.periodMicros()
				if excess := maxExcess(t, admitted, l); excess > n*s.Capacity()*T {
					t.Errorf("%v on %d instances (%v each), %d arrivals: the fleet admitted %v more than %v in some span, above its burst %d",
						l, n, s, len(arrivals), units(excess, T), l, n*s.Capacity())
				}
				up := roundUpShare(l, n)
				if l.Count%n != 0 && l.Count < 1000 {
					admitted := runFleet(up, n, arrivals)
					if excess := maxExcess(t, admitted, l); excess <= n*up.Capacity()*T {
						t.Errorf("%v on %d instances: the rounded-up share %v admitted at most %v over the limit: the test cannot tell", l, n, up, units(excess, T))
					}
				}
			}
		}
	}
}

// fleetArrival is a request of cost at an instance.
type fleetArrival struct {
	arrival
	instance int
}

// randomArrivals returns requests spread at random over [t0, t0+h] on n
// instances, offering about ten times units: a quarter of them in bursts
// at one instant, most of cost 1 and some up to capacity.
func randomArrivals(rng *rand.Rand, n, capacity, units, h int64) []fleetArrival {
	mean := 0.8 + 0.2*float64(capacity+1)/2
	count := min(20000, int(10*float64(units)/mean)+1)
	times := make([]int64, count)
	for i := range times {
		times[i] = t0 + rng.Int64N(h+1)
	}
	slices.Sort(times)
	out := make([]fleetArrival, count)
	for i := range out {
		at := times[i]
		if i > 0 && rng.IntN(4) == 0 {
			at = out[i-1].at
		}
		cost := int64(1)
		if rng.IntN(5) == 0 {
			cost = 1 + rng.Int64N(capacity)
		}
		out[i] = fleetArrival{arrival{at, cost}, rng.IntN(int(n))}
	}
	return out
}

// runFleet decides each arrival at its instance with s, each instance
// keeping its own state, and returns the admitted ones in order.
func runFleet(s Limit, n int64, arrivals []fleetArrival) []arrival {
	states := make([]State, n)
	var admitted []arrival
	for _, a := range arrivals {
		cost := min(a.cost, s.Capacity())
		next, d := s.Step(states[a.instance], a.at, cost)
		if d.Allowed {
			states[a.instance] = next
			admitted = append(admitted, arrival{a.at, cost})
		}
	}
	return admitted
}

// maxExcess returns the most that admitted (in time order) holds, in any
// span [t_i, t_j], beyond l's rate over it, in units of 1/Period:
// units×Period − Count×(t_j−t_i).
func maxExcess(t *testing.T, admitted []arrival, l Limit) int64 {
	// For j, (cum_j − cum_{i−1})·T − Count·(t_j − t_i), maximised over
	// i ≤ j with the least cum_{i−1}·T − Count·t_i; times from t0 keep
	// the products within an int64 over these horizons.
	T := l.periodMicros()
	mul := func(a, b int64) int64 {
		if hi, lo := bits.Mul64(uint64(a), uint64(b)); hi != 0 || lo > math.MaxInt64/2 {
			t.Fatalf("%d×%d overflows: shorten the horizon", a, b)
		}
		return a * b
	}
	best, least, cum := int64(math.MinInt64), int64(math.MaxInt64), int64(0)
	for _, a := range admitted {
		least = min(least, mul(cum, T)-mul(l.Count, a.at-t0))
		cum += a.cost
		best = max(best, mul(cum, T)-mul(l.Count, a.at-t0)-least)
	}
	return max(best, 0)
}

// units formats x/T.
func units(x, T int64) string { return new(big.Rat).SetFrac64(x, T).FloatString(2) }

// windowCases are the window limits of the fleet tests, with counts
// below, at and above the fleet sizes and near the bounds.
var windowCases = []string{
	"fixed_window 5/m", "fixed_window 3 per 7s", "fixed_window 1/s", "fixed_window 100/h",
	"fixed_window 10000/month", "fixed_window 7/month",
	"sliding_window 5/m", "sliding_window 3 per 7s", "sliding_window 1/s", "sliding_window 52000/d",
	"sliding_log 5/m", "sliding_log 3 per 7s", "sliding_log 1/s", "sliding_log 65536/h",
}

// Under random arrivals, a fleet of window shares admits at most Count in
// one of l's windows when Count is at least n (fixed_window: each window;
// sliding_log: any Period; sliding_window: the estimate from the fleet's
// counts), and otherwise at most n, no more than k×Count, in a share's
// k×Period. The rounded-up shares admit more in some window.
func TestShareFleetWindows(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, text := range windowCases {
		l := mustLimit(t, text)
		for _, n := range fleetSizes {
			s := l.Share(n)
			k := int64(1)
			if l.Calendar != Month {
				k = int64(s.Period / l.Period)
			}
			var h int64
			if l.Calendar == Month {
				h = 100 * 86400 * sec // into the fourth month
			} else {
				h = 30 * k * l.periodMicros()
			}
			units := l.Count * h / max(1, l.periodMicros())
			if l.Calendar == Month {
				units = l.Count * 4
			}
			arrivals := randomArrivals(rng, n, s.Capacity(), units, h)
			admitted := runFleet(s, n, arrivals)
			// What l admits in k of its windows (a month with Count below
			// n aside: n).
			allowed := k * l.Count
			if l.Calendar == Month && l.Count < n {
				allowed = n
			}
			if n*s.Count > allowed {
				t.Errorf("%v on %d instances: %d each, %d in all, above the limit's %d in %d windows", l, n, s.Count, n*s.Count, allowed, k)
			}
			if got := fleetMost(s, admitted); got > allowed {
				t.Errorf("%v on %d instances (%v each), %d arrivals: %d admitted in one of %v's windows, above %d",
					l, n, s, len(arrivals), got, s, allowed)
			}
			if len(admitted) == 0 {
				t.Errorf("%v on %d instances: nothing admitted", l, n)
			}
			if l.Count%n != 0 && l.Count < 1000 {
				// The rounded-up shares keep l's windows, and fill k of them
				// with more than k×Count.
				up := roundUpShare(l, n)
				if got := fleetMost(s, runFleet(up, n, arrivals)); got <= k*l.Count {
					t.Errorf("%v on %d instances: the rounded-up share %v admitted at most %d in %d windows: the test cannot tell", l, n, up, got, k)
				}
			}
		}
	}
}

// fleetMost returns the most units that admitted hold in one of w's
// windows: an aligned window for fixed_window, any Period for sliding_log,
// and for sliding_window the highest estimate it makes of their counts.
func fleetMost(w Limit, admitted []arrival) int64 {
	most := int64(0)
	switch w.Algorithm {
	case FixedWindow:
		counts := map[int64]int64{}
		for _, a := range admitted {
			start, _ := w.window(a.at)
			counts[start] += a.cost
			most = max(most, counts[start])
		}
	case SlidingLog:
		t := w.periodMicros()
		in, i := int64(0), 0
		for _, a := range admitted {
			in += a.cost
			for a.at-admitted[i].at >= t {
				in -= admitted[i].cost
				i++
			}
			most = max(most, in)
		}
	case SlidingWindow:
		t := w.periodMicros()
		counts := map[int64]int64{}
		for _, a := range admitted {
			start, _ := w.window(a.at)
			counts[start] += a.cost
			prev := counts[start-t]
			most = max(most, counts[start]+prev-prev*(a.at-start)/t)
		}
	}
	return most
}

// Random limits across the whole valid range: a bucket share refills at
// most 1/n of l's rate (unless even 1 per ⌈nT/Count⌉ does not fit), with a
// burst of ⌈Burst/n⌉; a window share keeps the windows with ⌊Count/n⌋ (or
// 1 per k windows). It logs the shares more than a millionth slower than
// 1/n.
func TestShareRates(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	periods := []int64{1, 7, 999_999, 1_000_000, 7_000_000, 3_600_000_000, 86_400_000_000, 30 * 86_400_000_000}
	checked, slow := 0, 0
	iterations := 50_000
	if raceEnabled {
		iterations = 10_000
	}
	for range iterations {
		alg := Algorithms()[rng.IntN(6)]
		p := periods[rng.IntN(len(periods))]
		l := Limit{Algorithm: alg, Period: dur(p)}
		maxc := MaxExact / p
		switch rng.IntN(3) {
		case 0:
			l.Count = 1 + rng.Int64N(20)
		case 1:
			l.Count = 1 + rng.Int64N(max(1, min(maxc, 1<<40)))
		case 2:
			l.Count = max(1, maxc-rng.Int64N(1000))
		}
		if alg == SlidingLog {
			l.Count = 1 + rng.Int64N(MaxLogCount)
		}
		if alg.HasBurst() && rng.IntN(2) == 0 {
			l.Burst = 1 + rng.Int64N(max(1, min(maxc, 1<<20)))
		}
		if l.Validate() != nil {
			continue
		}
		n := int64(2 + rng.IntN(7))
		if rng.IntN(4) == 0 {
			n = 2 + rng.Int64N(100000)
		}
		s := l.Share(n)
		if err := s.Validate(); err != nil {
			t.Fatalf("%v share %d = %v invalid: %v", l, n, s, err)
		}
		checked++
		if alg.HasBurst() {
			if want := (l.burst()-1)/n + 1; s.burst() != want {
				t.Fatalf("%v share %d = %v: burst %d, want %d", l, n, s, s.burst(), want)
			}
			full := new(big.Rat).SetFrac64(l.Count, p*n)
			got := new(big.Rat).SetFrac64(s.Count, s.periodMicros())
			if got.Cmp(full) > 0 {
				// allowed only when 1 per ⌈nT/C⌉ does not fit
				if ceilDiv(n*p, l.Count)*s.burst() <= MaxExact && n*p > 0 {
					t.Fatalf("%v share %d = %v refills faster than 1/n", l, n, s)
				}
			}
			lo := new(big.Rat).Mul(full, big.NewRat(999_999, 1_000_000))
			if got.Cmp(lo) < 0 {
				slow++
				if slow < 4 {
					t.Logf("%v share %d = %v: rate %v of 1/n", l, n, s, new(big.Rat).Quo(got, full).FloatString(6))
				}
			}
		} else {
			if l.Count >= n || l.Calendar == Month {
				if s.Count != max(1, l.Count/n) || s.Period != l.Period {
					t.Fatalf("%v share %d = %v", l, n, s)
				}
			} else if s.Count != 1 || s.periodMicros()%p != 0 {
				t.Fatalf("%v share %d = %v", l, n, s)
			}
		}
	}
	t.Logf("%d shares checked, %d bucket shares more than a millionth slow", checked, slow)
}
