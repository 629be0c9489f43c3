package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// total is one row of the golden tables: what one algorithm in one setup
// passes and refuses over a whole scenario.
type total struct {
	alg              rate.Algorithm
	setup            Setup
	passed, refused  int
	calmRefused      int // calm-burst only: refusals of the calm client
	burstRefused     int // calm-burst only: refusals of the burst
	maxDelay         time.Duration
	checkClientSplit bool
}

const (
	fw  = rate.FixedWindow
	sl  = rate.SlidingLog
	sw  = rate.SlidingWindow
	tb  = rate.TokenBucket
	lb  = rate.LeakyBucket
	gc  = rate.GCRA
	sec = time.Second
)

// golden holds the expected totals of every built-in scenario at its
// defaults. Each number is worked out from the algorithm's definition in
// the comment above it, not copied from a run.
var golden = map[string][]total{
	// boundary: limit 10 per 10s; 10 requests at 9.9 s, 10 at 10.1 s.
	"boundary": {
		// Windows [0,10) and [10,20) hold one burst each: 10 + 10.
		{alg: fw, setup: Single, passed: 20, refused: 0},
		// At 10.1 s the log holds 10 entries of 9.9 s (10.1−9.9 < 10): full.
		{alg: sl, setup: Single, passed: 10, refused: 10},
		// At 10.1 s: cur 0, prev 10, e = 0.1 s: ⌈10·9.9/10⌉ = 10; 10+1 > 10.
		{alg: sw, setup: Single, passed: 10, refused: 10},
		// Full bucket of 10 at 9.9 s; 0.2 token refilled by 10.1 s.
		{alg: tb, setup: Single, passed: 10, refused: 10},
		// Same policy as token_bucket; the queue of 10 drains 1 per second,
		// so the 10th request of 9.9 s waits 9 s.
		{alg: lb, setup: Single, passed: 10, refused: 10, maxDelay: 9 * sec},
		{alg: gc, setup: Single, passed: 10, refused: 10},
	},
	// calm-burst: limit 10 per 10s; calm requests at 0, 3, …, 27 s (10),
	// a burst of 15 at 4.5 s, all on one key. 25 requests.
	"calm-burst": {
		// Window [0,10): calm 0 and 3 pass, 8 of the burst fill it, 7 of the
		// burst and the calm 6 and 9 are refused; the calm 12…27 pass in
		// windows of their own (3 each). Passed 2+8+6 = 16.
		{alg: fw, setup: Single, passed: 16, refused: 9, calmRefused: 2, burstRefused: 7, checkClientSplit: true},
		// Log {0,3} at 4.5 s: 8 of the burst fit. At 6 and 9 s the log
		// holds 10. At 12 s the entry of 0 s has left (12−0 ≥ 10): 9, pass.
		// At 15 s the entries of 3 and 4.5 s have left. Passed 16.
		{alg: sl, setup: Single, passed: 16, refused: 9, calmRefused: 2, burstRefused: 7, checkClientSplit: true},
		// Window [0,10) as fixed_window (no previous window). At 12 s: cur 0,
		// prev 10, e = 2 s: ⌈10·8/10⌉ = 8, 0+1+8 ≤ 10 pass; 15 s: 1+1+5;
		// 18 s: 2+1+2; 21 s: prev 3, ⌈3·9/10⌉ = 3, 0+1+3. Passed 16.
		{alg: sw, setup: Single, passed: 16, refused: 9, calmRefused: 2, burstRefused: 7, checkClientSplit: true},
		// Bucket full at 4.5 s (9 after the calm 3 s, +1 by 4 s): 10 of the
		// burst; then 1.5 tokens at 6 s, and 3 more per 3 s interval.
		{alg: tb, setup: Single, passed: 20, refused: 5, calmRefused: 0, burstRefused: 5, checkClientSplit: true},
		// The burst's 10th request waits 9 s; the calm 6 s waits until
		// the queue drains to it at 14.5 s: 8.5 s.
		{alg: lb, setup: Single, passed: 20, refused: 5, calmRefused: 0, burstRefused: 5, checkClientSplit: true, maxDelay: 9 * sec},
		{alg: gc, setup: Single, passed: 20, refused: 5, calmRefused: 0, burstRefused: 5, checkClientSplit: true},
	},
	// flood: limit 10 per 10s; a request every 100 ms for 10 s (100),
	// round robin over 3 instances: 34, 33 and 33 requests, every 300 ms.
	"flood": {
		// Every request falls in window [0,10): 10 per counter.
		{alg: fw, setup: OwnCounters, passed: 30, refused: 70},
		{alg: fw, setup: SharedCounter, passed: 10, refused: 90},
		// The whole flood lasts 9.9 s < 10 s: nothing leaves the log.
		{alg: sl, setup: OwnCounters, passed: 30, refused: 70},
		{alg: sl, setup: SharedCounter, passed: 10, refused: 90},
		// No previous window: the estimate is the current count.
		{alg: sw, setup: OwnCounters, passed: 30, refused: 70},
		{alg: sw, setup: SharedCounter, passed: 10, refused: 90},
		// Instance 0 (requests at 0, 0.3, …, 9.9 s) has 10+t tokens in all
		// by time t: its 19th passes at 9.0 s, and 20 would need t ≥ 10.
		// Instances 1 and 2 start 0.1 and 0.2 s later, with the same
		// offset on their refills: 19 each. 57 of 100.
		{alg: tb, setup: OwnCounters, passed: 57, refused: 43},
		// Shared: 11 pass at 0…1.0 s (10 tokens +1 refilled by 1.0 s),
		// then one at each of 2, 3, …, 9 s: 19.
		{alg: tb, setup: SharedCounter, passed: 19, refused: 81},
		// The queue admits what the bucket does; a request admitted when
		// the queue holds 9 waits 9 s (shared: the 11th, at 1.0 s, queued
		// until 10 s; own: instance 0's 19th, at 9.0 s, until 18 s).
		{alg: lb, setup: OwnCounters, passed: 57, refused: 43, maxDelay: 9 * sec},
		{alg: lb, setup: SharedCounter, passed: 19, refused: 81, maxDelay: 9 * sec},
		{alg: gc, setup: OwnCounters, passed: 57, refused: 43},
		{alg: gc, setup: SharedCounter, passed: 19, refused: 81},
	},
	// token-bucket: limit 5 per 5s (bucket 5, 1 per second); 7 at 0 s,
	// 3 at 2 s, 10 at 10 s.
	"token-bucket": {
		// Windows [0,5), [5,10), [10,15): 5 at 0 s, 0 at 2 s, 5 at 10 s.
		{alg: fw, setup: Single, passed: 10, refused: 10},
		// 5 at 0 s; at 2 s the log is full; at 10 s it is empty.
		{alg: sl, setup: Single, passed: 10, refused: 10},
		// At 10 s the previous window [5,10) is empty.
		{alg: sw, setup: Single, passed: 10, refused: 10},
		// 5 (full), 2 (refilled in 2 s), 5 (full again after 8 s).
		{alg: tb, setup: Single, passed: 12, refused: 8},
		// The 5th request at 0 s waits 4 s (and the 5th at 10 s too).
		{alg: lb, setup: Single, passed: 12, refused: 8, maxDelay: 4 * sec},
		{alg: gc, setup: Single, passed: 12, refused: 8},
	},
	// steady: limit 10 per 10s; a request at 0, 1, …, 29 s.
	"steady": {
		// 10 requests in each window.
		{alg: fw, setup: Single, passed: 30, refused: 0},
		// The request of t−10 s leaves exactly at t (t − (t−10) ≥ 10).
		{alg: sl, setup: Single, passed: 30, refused: 0},
		// At 10 s: 0 + ⌈10·10/10⌉ + 1 = 11, refused. At 11…19 s: cur k−1
		// and ⌈10·(10−k)/10⌉ = 10−k at 10+k s: 10, pass (window [10,20)
		// ends with 9). At 20 s: 0 + 9 + 1, pass. At 21 s: 1 + ⌈9·9/10⌉ + 1
		// = 1 + 9 + 1 = 11, refused; 22…29 s: 10 each, pass. 28 of 30.
		{alg: sw, setup: Single, passed: 28, refused: 2},
		// 1 token refilled per second, 1 spent: always full.
		{alg: tb, setup: Single, passed: 30, refused: 0},
		{alg: lb, setup: Single, passed: 30, refused: 0},
		{alg: gc, setup: Single, passed: 30, refused: 0},
	},
}

func TestBuiltinGolden(t *testing.T) {
	for _, sc := range Builtins(Params{}) {
		want, ok := golden[sc.Name]
		if !ok {
			if sc.Name != "clients" { // random arrivals: TestAgainstModel
				t.Errorf("scenario %s has no golden totals", sc.Name)
			}
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			res, err := Run(context.Background(), sc)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Rows) != len(want) {
				t.Errorf("%d rows, want %d", len(res.Rows), len(want))
			}
			for _, w := range want {
				row, ok := res.Row(w.alg, w.setup)
				if !ok {
					t.Errorf("no row for %s/%s", w.alg, w.setup)
					continue
				}
				if row.Passed != w.passed || row.Refused != w.refused {
					t.Errorf("%s/%s: passed %d refused %d, want %d and %d", w.alg, w.setup, row.Passed, row.Refused, w.passed, w.refused)
				}
				if row.MaxDelay != w.maxDelay {
					t.Errorf("%s/%s: max delay %v, want %v", w.alg, w.setup, row.MaxDelay, w.maxDelay)
				}
				if w.checkClientSplit {
					calm, _ := row.Client("calm")
					burst, _ := row.Client("burst")
					if calm.Refused != w.calmRefused || burst.Refused != w.burstRefused {
						t.Errorf("%s/%s: refused calm %d burst %d, want %d and %d", w.alg, w.setup, calm.Refused, burst.Refused, w.calmRefused, w.burstRefused)
					}
				}
				var p, r int
				for _, s := range row.PerSecond {
					p += s.Passed
					r += s.Refused
				}
				if p != row.Passed || r != row.Refused {
					t.Errorf("%s/%s: per second sums to %d/%d, totals %d/%d", w.alg, w.setup, p, r, row.Passed, row.Refused)
				}
			}
		})
	}
}

// TestBoundaryPerSecond checks where in time the boundary scenario's
// decisions fall: the picture is the point.
func TestBoundaryPerSecond(t *testing.T) {
	sc, err := Builtin("boundary", Params{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range res.Rows {
		if len(row.PerSecond) != 20 {
			t.Fatalf("%s: %d seconds, want 20", row.Algorithm, len(row.PerSecond))
		}
		second9, second10 := row.PerSecond[9], row.PerSecond[10]
		want9 := Second{T: 9, Passed: 10}
		if row.Algorithm == rate.LeakyBucket {
			// The first goes at once, the other 9 wait their turn in
			// the queue, 1…9 s.
			want9.Held = 9
		}
		if second9 != want9 {
			t.Errorf("%s: second 9 = %+v, want %+v", row.Algorithm, second9, want9)
		}
		want := Second{T: 10, Refused: 10}
		if row.Algorithm == rate.FixedWindow {
			want = Second{T: 10, Passed: 10}
		}
		if second10 != want {
			t.Errorf("%s: second 10 = %+v, want %+v", row.Algorithm, second10, want)
		}
	}
}

// TestCalmNeverRefusedByTokenBucket is the claim calm-burst exists to
// show, over calm-burst at several lengths.
func TestCalmNeverRefusedByTokenBucket(t *testing.T) {
	for _, secs := range []int{10, 30, 120} {
		sc, _ := Builtin("calm-burst", Params{Seconds: secs})
		res, err := Run(context.Background(), sc)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []rate.Algorithm{rate.TokenBucket, rate.GCRA, rate.LeakyBucket} {
			row, _ := res.Row(a, Single)
			calm, ok := row.Client("calm")
			if !ok || calm.Passed == 0 || calm.Refused != 0 {
				t.Errorf("%ds, %s: calm client %+v, want every request passed", secs, a, calm)
			}
			burst, _ := row.Client("burst")
			if burst.Passed != 10 {
				t.Errorf("%ds, %s: %d of the burst passed, want 10", secs, a, burst.Passed)
			}
		}
		for _, a := range []rate.Algorithm{rate.FixedWindow, rate.SlidingLog, rate.SlidingWindow} {
			row, _ := res.Row(a, Single)
			if calm, _ := row.Client("calm"); calm.Refused == 0 {
				t.Errorf("%ds, %s: no calm request refused", secs, a)
			}
		}
	}
}

// TestSharedIsSingle: with no network between instances, one shared
// counter decides exactly as one limiter.
func TestSharedIsSingle(t *testing.T) {
	for _, sc := range Builtins(Params{}) {
		sc.Setups = []Setup{Single, SharedCounter, OwnCounters}
		res, err := Run(context.Background(), sc)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range sc.algorithms() {
			single, ok1 := res.Row(a, Single)
			shared, ok2 := res.Row(a, SharedCounter)
			own, ok3 := res.Row(a, OwnCounters)
			if !ok1 || !ok2 || !ok3 || len(single.PerSecond) == 0 {
				t.Fatalf("%s/%s: a setup's row is missing or empty", sc.Name, a)
			}
			if !slices.Equal(single.PerSecond, shared.PerSecond) {
				t.Errorf("%s/%s: shared counter differs from single", sc.Name, a)
			}
			if own.Passed < single.Passed {
				t.Errorf("%s/%s: own counters passed %d < single %d", sc.Name, a, own.Passed, single.Passed)
			}
		}
	}
}

// TestAgainstModel replays every built-in scenario, and the random one
// under several seeds, against reference models written from the
// definitions with exact rational arithmetic, independently of package
// rate, in every setup.
func TestAgainstModel(t *testing.T) {
	var scenarios []Scenario
	scenarios = append(scenarios, Builtins(Params{})...)
	for seed := uint64(2); seed < 8; seed++ {
		sc, _ := Builtin("clients", Params{Seed: seed, Seconds: 40})
		scenarios = append(scenarios, sc)
	}
	// Rates that do not divide evenly, a burst unlike the count, costs.
	odd, _ := Builtin("clients", Params{Seed: 9})
	odd.Name = "clients-3-per-7s-burst-5"
	odd.Limit = rate.Limit{Count: 3, Period: 7 * sec, Burst: 5}
	for i := range odd.Events {
		odd.Events[i].Cost = int64(1 + i%3)
	}
	scenarios = append(scenarios, odd)
	// A client that waits: the buckets hold what refills within the
	// wait, a leaky_bucket refuses a turn later than it.
	for _, wait := range []time.Duration{time.Millisecond, 1500 * time.Millisecond, 4 * sec} {
		for _, name := range []string{"token-bucket", "calm-burst", "flood"} {
			sc, _ := Builtin(name, Params{})
			sc.Name = fmt.Sprintf("%s-waiting-%v", name, wait)
			sc.MaxDelay = wait
			scenarios = append(scenarios, sc)
		}
		waiting := odd
		waiting.Name = fmt.Sprintf("%s-waiting-%v", odd.Name, wait)
		waiting.MaxDelay = wait
		scenarios = append(scenarios, waiting)
	}

	for _, sc := range scenarios {
		sc.Setups = Setups()
		sc.Instances = 2
		res, err := Run(context.Background(), sc)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range res.Rows {
			want := modelRun(t, sc, row.Algorithm, row.Setup)
			if !slices.Equal(row.PerSecond, want) {
				t.Errorf("%s %s/%s: per second differs from the model:\n got  %v\n want %v", sc.Name, row.Algorithm, row.Setup, row.PerSecond, want)
			}
		}
	}
}

// modelRun decides sc's traffic with a reference model of algorithm a.
func modelRun(t *testing.T, sc Scenario, a rate.Algorithm, setup Setup) []Second {
	t.Helper()
	events := slices.Clone(sc.Events)
	slices.SortStableFunc(events, func(x, y Event) int { return cmp.Compare(x.At, y.At) })
	counters := 1
	if setup == OwnCounters {
		counters = sc.instances()
	}
	models := make([]model, counters)
	for i := range models {
		models[i] = newModel(sc.LimitFor(a), sc.MaxDelay)
	}
	out := make([]Second, sc.seconds())
	for i := range out {
		out[i].T = i
	}
	capacity := sc.LimitFor(a).Capacity()
	count := func(e Event, ok, held bool) {
		s := &out[e.At/time.Second]
		switch {
		case !ok:
			s.Refused++
		case held:
			s.Passed++
			s.Held++
		default:
			s.Passed++
		}
	}
	// A request a window refused waits once, within MaxDelay, for the
	// first instant it would pass, and is decided again then: the
	// waiting, by that instant, then by arrival.
	type waiter struct {
		at int64
		i  int
	}
	var waiting []waiter
	maxWait := int64(sc.MaxDelay / time.Microsecond)
	again := func(until int64) {
		for len(waiting) > 0 && waiting[0].at <= until {
			w := waiting[0]
			waiting = waiting[1:]
			e := events[w.i]
			ok, _ := models[w.i%counters].allow(e.Key, w.at, e.cost())
			count(e, ok, ok)
		}
	}
	for i, e := range events {
		now := int64(e.At / time.Microsecond)
		again(now)
		if e.cost() > capacity {
			count(e, false, false) // no wait lets it pass
			continue
		}
		m := models[i%counters]
		ok, held := m.allow(e.Key, now, e.cost())
		if w, isWindow := m.(windowModel); !ok && isWindow && maxWait > 0 {
			if at := firstPass(w, e.Key, now, e.cost()); at-now <= maxWait {
				k, _ := slices.BinarySearchFunc(waiting, waiter{at, i}, func(a, b waiter) int {
					return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.i, b.i))
				})
				waiting = slices.Insert(waiting, k, waiter{at, i})
				continue
			}
		}
		count(e, ok, held)
	}
	again(math.MaxInt64)
	return out
}

// windowModel is a window algorithm's model, which can tell whether a
// request would pass at a time without deciding it.
type windowModel interface {
	model
	would(key string, now, cost int64) bool
}

// firstPass returns the first instant from now on at which a request of
// cost would pass w, as nothing else is admitted: found by bisection,
// as a window's count only falls with time, from the model's own
// arithmetic. A request that never passes gives MaxInt64.
func firstPass(w windowModel, key string, now, cost int64) int64 {
	lo, hi := now, now+1
	for !w.would(key, hi, cost) {
		if hi-now > 1<<50 {
			return math.MaxInt64
		}
		hi = now + 2*(hi-now)
	}
	for lo+1 < hi { // would(lo) is false, would(hi) true
		mid := lo + (hi-lo)/2
		if w.would(key, mid, cost) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// model is a reference limiter: one counter per key, time in µs. allow
// reports whether a request passes, and whether it is held back first.
type model interface {
	allow(key string, now, cost int64) (ok, held bool)
}

// newModel returns the model of l for a client that waits up to
// maxDelay (none if not positive).
func newModel(l rate.Limit, maxDelay time.Duration) model {
	n, t := l.Count, int64(l.Period/time.Microsecond)
	switch l.Algorithm {
	case rate.FixedWindow:
		return &fixedModel{n: n, t: t, win: map[string][2]int64{}}
	case rate.SlidingLog:
		return &logModel{n: n, t: t, log: map[string][]int64{}}
	case rate.SlidingWindow:
		return &slidingModel{n: n, t: t, counts: map[string]map[int64]int64{}}
	default: // the buckets admit alike
		b := l.Burst
		if b == 0 {
			b = n
		}
		wait := int64(-1)
		if maxDelay > 0 {
			wait = int64(maxDelay / time.Microsecond)
		}
		return &bucketModel{leaky: l.Algorithm == rate.LeakyBucket, wait: wait,
			rate: big.NewRat(n, t), burst: big.NewRat(b, 1), tokens: map[string]*big.Rat{}, last: map[string]int64{}}
	}
}

// fixedModel counts per window ⌊now/T⌋.
type fixedModel struct {
	n, t int64
	win  map[string][2]int64 // window index, count
}

func (m *fixedModel) count(key string, now int64) [2]int64 {
	w := m.win[key]
	if idx := now / m.t; w[0] != idx {
		w = [2]int64{idx, 0}
	}
	return w
}

func (m *fixedModel) would(key string, now, cost int64) bool {
	return m.count(key, now)[1]+cost <= m.n
}

func (m *fixedModel) allow(key string, now, cost int64) (ok, held bool) {
	if !m.would(key, now, cost) {
		return false, false
	}
	w := m.count(key, now)
	w[1] += cost
	m.win[key] = w
	return true, false
}

// logModel counts the admitted units a with now − T < a ≤ now.
type logModel struct {
	n, t int64
	log  map[string][]int64
}

func (m *logModel) would(key string, now, cost int64) bool {
	var in int64
	for _, a := range m.log[key] {
		if now-a < m.t {
			in++
		}
	}
	return in+cost <= m.n
}

func (m *logModel) allow(key string, now, cost int64) (ok, held bool) {
	if !m.would(key, now, cost) {
		return false, false
	}
	for range cost {
		m.log[key] = append(m.log[key], now)
	}
	return true, false
}

// slidingModel estimates cur + ⌈prev·(T−e)/T⌉ from counts per window.
type slidingModel struct {
	n, t   int64
	counts map[string]map[int64]int64
}

func (m *slidingModel) would(key string, now, cost int64) bool {
	c := m.counts[key]
	w := now / m.t
	e := now - w*m.t
	weighted := new(big.Rat).SetFrac64(c[w-1]*(m.t-e), m.t)
	return c[w]+ceil(weighted)+cost <= m.n
}

func (m *slidingModel) allow(key string, now, cost int64) (ok, held bool) {
	if !m.would(key, now, cost) {
		return false, false
	}
	c := m.counts[key]
	if c == nil {
		c = map[int64]int64{}
		m.counts[key] = c
	}
	c[now/m.t] += cost
	return true, false
}

// bucketModel keeps tokens as an exact fraction, refilled at Count per
// Period up to Burst, starting full. For a client that waits up to wait
// µs (none if negative), a gcra or token_bucket request past the tokens
// passes if what it lacks refills within the wait, and takes its tokens
// ahead (they go below zero); a leaky_bucket, a queue of Burst places
// drained at the rate, delays a request until the places ahead of it
// have drained, (Burst − tokens)/rate, and refuses one whose delay is
// longer than the wait.
type bucketModel struct {
	leaky       bool
	wait        int64
	rate, burst *big.Rat
	tokens      map[string]*big.Rat
	last        map[string]int64
}

func (m *bucketModel) allow(key string, now, cost int64) (ok, held bool) {
	tok, seen := m.tokens[key]
	if !seen {
		tok = new(big.Rat).Set(m.burst)
	} else {
		refill := new(big.Rat).Mul(m.rate, big.NewRat(now-m.last[key], 1))
		tok = new(big.Rat).Add(tok, refill)
		if tok.Cmp(m.burst) > 0 {
			tok.Set(m.burst)
		}
	}
	m.tokens[key], m.last[key] = tok, now
	c := big.NewRat(cost, 1)
	// The wait for what is missing: lack/rate µs, compared with the
	// whole µs of the wait (a delay is rounded up to a whole µs, so it
	// is within the wait exactly when the exact one is).
	within := func(lack *big.Rat) bool {
		if m.wait < 0 {
			return true
		}
		d := new(big.Rat).Quo(lack, m.rate)
		return d.Cmp(big.NewRat(m.wait, 1)) <= 0
	}
	if m.leaky {
		ahead := new(big.Rat).Sub(m.burst, tok)
		if tok.Cmp(c) < 0 || !within(ahead) {
			return false, false
		}
		tok.Sub(tok, c)
		return true, ahead.Sign() > 0
	}
	if tok.Cmp(c) >= 0 {
		tok.Sub(tok, c)
		return true, false
	}
	if m.wait < 0 || !within(new(big.Rat).Sub(c, tok)) {
		return false, false
	}
	tok.Sub(tok, c)
	return true, true
}

// ceil returns ⌈r⌉ for r ≥ 0.
func ceil(r *big.Rat) int64 {
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if new(big.Rat).SetInt(q).Cmp(r) < 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// TestClientsIsolated: in the clients scenario each key has its own
// counter, so taking alice away changes nothing for the others.
func TestClientsIsolated(t *testing.T) {
	sc, _ := Builtin("clients", Params{})
	res, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	quiet := sc
	quiet.Events = slices.DeleteFunc(slices.Clone(sc.Events), func(e Event) bool { return e.Key == "alice" })
	alone, err := Run(context.Background(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	for i, row := range res.Rows {
		alice, _ := row.Client("alice")
		if alice.Refused == 0 {
			t.Errorf("%s: alice (3 per second against 10 per 10s) never refused", row.Algorithm)
		}
		for _, c := range alone.Rows[i].Clients {
			if got, _ := row.Client(c.Client); got != c {
				t.Errorf("%s: %s with alice %+v, without %+v", row.Algorithm, c.Client, got, c)
			}
		}
	}
}

func TestRunDeterministic(t *testing.T) {
	a, _ := Builtin("clients", Params{Seed: 42})
	b, _ := Builtin("clients", Params{Seed: 42})
	c, _ := Builtin("clients", Params{Seed: 43})
	if !slices.Equal(a.Events, b.Events) {
		t.Error("the same seed gave different traffic")
	}
	if slices.Equal(a.Events, c.Events) {
		t.Error("different seeds gave the same traffic")
	}
	ra, err := Run(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := Run(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ra.Rows) != len(rate.Algorithms()) || len(rb.Rows) != len(ra.Rows) {
		t.Fatalf("%d and %d rows, want one per algorithm", len(ra.Rows), len(rb.Rows))
	}
	for i := range ra.Rows {
		if !slices.Equal(ra.Rows[i].PerSecond, rb.Rows[i].PerSecond) {
			t.Errorf("%s: two runs of one scenario differ", ra.Rows[i].Algorithm)
		}
	}
}

func TestRunInvalid(t *testing.T) {
	ok := Scenario{Name: "x", Limit: tenPer10s, Events: []Event{{At: sec, Key: "k"}}}
	tests := []struct {
		name   string
		change func(*Scenario)
		want   string
	}{
		{"no limit", func(s *Scenario) { s.Limit = rate.Limit{} }, "count must be at least 1"},
		{"month", func(s *Scenario) { s.Limit = rate.Limit{Algorithm: rate.FixedWindow, Count: 5, Calendar: rate.Month} }, "monthly"},
		{"negative time", func(s *Scenario) { s.Events[0].At = -sec }, "before the start"},
		{"after the end", func(s *Scenario) { s.Seconds = 1 }, "after the scenario's 1 seconds"},
		{"no key", func(s *Scenario) { s.Events[0].Key = "" }, "no key"},
		{"negative cost", func(s *Scenario) { s.Events[0].Cost = -1 }, "negative cost"},
		{"instances", func(s *Scenario) { s.Instances = MaxInstances + 1 }, "instances"},
		{"too long", func(s *Scenario) { s.Events[0].At = MaxSeconds * sec }, "at most 3600s"},
		// Its length in seconds, times a second, is past the largest
		// Duration: it must still be told as too long, not as arriving
		// after an end that wrapped round.
		{"longest duration", func(s *Scenario) { s.Events[0].At = math.MaxInt64 }, "at most 3600s"},
		{"bad setup", func(s *Scenario) { s.Setups = []Setup{Setup(9)} }, "invalid setup"},
		{"before 1970", func(s *Scenario) { s.Start = time.Date(1969, 6, 1, 0, 0, 0, 0, time.UTC) }, "before 1970"},
	}
	for _, tt := range tests {
		s := ok
		s.Events = slices.Clone(ok.Events)
		tt.change(&s)
		_, err := Run(context.Background(), s)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want ErrInvalid and %q", tt.name, err, tt.want)
		}
	}
	if _, err := Run(context.Background(), ok); err != nil {
		t.Errorf("valid scenario: %v", err)
	}
}

func TestRunCanceled(t *testing.T) {
	sc := Scenario{Name: "big", Limit: tenPer10s, Events: Steady("k", 0, 100*sec, time.Millisecond)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, sc); !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

func TestCostAboveCapacityRefused(t *testing.T) {
	sc := Scenario{Name: "cost", Limit: tenPer10s, Algorithms: []rate.Algorithm{rate.GCRA, rate.FixedWindow},
		Events: []Event{{At: 0, Key: "k", Cost: 11}, {At: 0, Key: "k", Cost: 10}}}
	res, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range res.Rows {
		if row.Passed != 1 || row.Refused != 1 {
			t.Errorf("%s: passed %d refused %d, want the cost-11 request refused and the cost-10 one passed", row.Algorithm, row.Passed, row.Refused)
		}
		if row.OverCapacity != 1 {
			t.Errorf("%s: %d requests over capacity, want the cost-11 one", row.Algorithm, row.OverCapacity)
		}
	}
}

// TestOverCapacityNoted: a request that costs more than an algorithm's
// capacity is counted apart and the text says so, for a store answers it
// with an error where the table shows a refusal. A burst makes the
// buckets' capacity larger than the windows'.
func TestOverCapacityNoted(t *testing.T) {
	sc := Scenario{Name: "cost", Limit: rate.Limit{Count: 10, Period: 10 * sec, Burst: 20},
		Algorithms: []rate.Algorithm{rate.FixedWindow, rate.GCRA},
		Setups:     []Setup{Single, OwnCounters},
		Events:     []Event{{At: 0, Key: "k", Cost: 15}, {At: 0, Key: "k", Cost: 25}, {At: sec, Key: "k"}}}
	res, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		alg   rate.Algorithm
		setup Setup
		over  int
	}{{fw, Single, 2}, {fw, OwnCounters, 2}, {gc, Single, 1}, {gc, OwnCounters, 1}} {
		row, ok := res.Row(w.alg, w.setup)
		if !ok || row.OverCapacity != w.over {
			t.Errorf("%s/%s: %d over capacity (row found: %t), want %d", w.alg, w.setup, row.OverCapacity, ok, w.over)
		}
	}
	var b strings.Builder
	if err := WriteText(&b, res); err != nil {
		t.Fatal(err)
	}
	want := "Costing more than the capacity: 2 requests for fixed_window (10), 1 for gcra (20)."
	if !strings.Contains(strings.Join(strings.Fields(b.String()), " "), want) { // as if unwrapped
		t.Errorf("text lacks %q:\n%s", want, b.String())
	}
	if s := textOf(t, Scenario{Name: "fits", Limit: tenPer10s, Events: []Event{{Key: "k", Cost: 10}}}); strings.Contains(s, "capacity") {
		t.Errorf("a note on capacity where every cost fits:\n%s", s)
	}
}
