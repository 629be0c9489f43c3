package redis_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// The reference model of a refund: what scripts/decide.lua's refund (mark
// 3) and its commit's receipts (mark 4) must do, written plainly in Go over
// package rate's States. The script is held to it step by step
// (TestRefundMatchesModel, TestRefundEdges), and the model to the promise
// that a refund never makes a key fresher than the request's absence
// would have (TestRefundNeverMints).

// receiptOf returns the receipt the commit of a request under l returns,
// having written next at now: where its units went.
func receiptOf(l rate.Limit, next rate.State) [2]int64 {
	if next.A == 0 && next.B == 0 && next.C == 0 && len(next.Log) == 0 {
		return [2]int64{} // fresh: the commit (of cost 0) wrote nothing
	}
	switch l.Algorithm {
	case rate.GCRA, rate.LeakyBucket: // latest time seen, debt in ticks
		return [2]int64{next.C, (next.A-next.C)*l.Count + next.B}
	case rate.TokenBucket: // last refill, debt in ticks
		return [2]int64{next.B, next.A}
	case rate.FixedWindow: // the window's start and end
		return [2]int64{next.A, windowEnd(l, next.A)}
	case rate.SlidingWindow: // the window's start
		return [2]int64{next.A, 0}
	case rate.SlidingLog: // the time logged at
		return [2]int64{next.Log[len(next.Log)-1], 0}
	}
	panic("unknown algorithm")
}

// windowEnd returns the end of l's window that holds the instant at.
func windowEnd(l rate.Limit, at int64) int64 {
	if l.Calendar == rate.Month {
		y, m, _ := time.UnixMicro(at).UTC().Date()
		return time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	}
	p := l.Period.Microseconds()
	return floorDiv(at, p)*p + p
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// refundOf returns the state a refund at now leaves of s, for a request
// of cost under l whose commit returned receipt rc: s itself when there is
// nothing to give back, the zero State when the key is to be deleted.
func refundOf(l rate.Limit, s rate.State, now, cost int64, rc [2]int64) rate.State {
	if cost == 0 {
		return s
	}
	n, t := l.Count, l.Period.Microseconds()
	switch l.Algorithm {
	case rate.GCRA, rate.LeakyBucket:
		// The TAT as rate reads it: a fraction of n or more, left by a
		// limit with a larger count, rounds up to the next µs.
		tus, trem := s.A, s.B
		if trem >= n || trem < 0 {
			tus, trem = s.A+1, 0
		}
		// k: how far the commit's TAT is ahead of the latest time seen,
		// in ticks. None (k ≤ 0), or a C before the commit's (the key was
		// reset since), gives nothing back.
		lag := s.C - rc[0]
		if lag < 0 || lag >= ceilDiv(rc[1], n) {
			return s
		}
		k := rc[1] - lag*n
		give := min(cost*t, k)
		d := tus - s.C
		if lag == 0 {
			// Every step since the commit was at its instant, where the
			// debt is a sum: the request's units are what is left of it.
			if d < 0 {
				return s
			}
			if d <= k/n+1 {
				give = min(give, d*n+trem)
			}
		} else if d < 0 || d <= k/n+1 && d*n+trem < k {
			// Nor does a TAT before the commit's: not the commit's state
			// become ((T − C)·n < k; d·n is exact where it is compared).
			return s
		}
		us, rem := tus-give/n, trem-give%n
		if rem < 0 {
			us, rem = us-1, rem+n
		}
		if at := max(now, s.C); us < at || us == at && rem == 0 {
			return rate.State{} // full: fresh
		}
		return rate.State{A: us, B: rem, C: s.C}
	case rate.TokenBucket:
		debt, last := s.A, s.B
		lag := last - rc[0]
		if lag < 0 || lag >= ceilDiv(rc[1], n) {
			return s
		}
		k := rc[1] - lag*n
		give := min(cost*t, k)
		if lag == 0 {
			// At the commit's instant the debt is a sum (see gcra).
			give = min(give, debt)
		} else if debt < k {
			return s
		}
		debt -= give
		if debt == 0 || last+ceilDiv(debt, n) <= now {
			return rate.State{}
		}
		return rate.State{A: debt, B: last}
	case rate.FixedWindow:
		if s.A != rc[0] || s.B <= 0 {
			return s
		}
		if s.B <= cost || rc[1] <= now {
			return rate.State{}
		}
		return rate.State{A: s.A, B: s.B - cost}
	case rate.SlidingWindow:
		cur, prev := s.B, s.C
		switch s.A {
		case rc[0]:
			cur = max(0, cur-cost)
		case rc[0] + t:
			prev = max(0, prev-cost)
		}
		if cur == s.B && prev == s.C {
			return s
		}
		var reset int64
		switch {
		case cur > 0:
			reset = s.A + 2*t - now
		case prev > 0:
			reset = s.A + t - now
		}
		if reset <= 0 {
			return rate.State{}
		}
		return rate.State{A: s.A, B: cur, C: prev}
	case rate.SlidingLog:
		i := slices.Index(s.Log, rc[0])
		if i < 0 {
			return s
		}
		j := i
		for j < len(s.Log) && s.Log[j] == rc[0] && int64(j-i) < cost {
			j++
		}
		log := slices.Delete(slices.Clone(s.Log), i, j)
		if len(log) == 0 || log[len(log)-1]+t <= now {
			return rate.State{}
		}
		return rate.State{Log: log}
	}
	panic("unknown algorithm")
}

// stepGroup steps reqs at now over states as the script steps a group,
// all or nothing: a key named twice sees what the earlier step left. It
// returns the decisions, the new states (states itself if refused) and
// whether all passed. With look, a request that passed reports the
// remaining and reset after of a step of cost 0 from the state before the
// group, as a check does.
func stepGroup(reqs []rate.Request, states map[string]rate.State, now int64, look bool) ([]rate.Decision, map[string]rate.State, bool) {
	pending := maps(states)
	ds := make([]rate.Decision, len(reqs))
	ok := true
	for i, r := range reqs {
		next, d := r.Limit.StepWithin(clone(pending[r.Key]), now, r.Cost, r.MaxDelay)
		ds[i] = d
		if d.Allowed {
			pending[r.Key] = next
		} else {
			ok = false
		}
	}
	if look || !ok {
		for i, r := range reqs {
			if ds[i].Allowed {
				_, d := r.Limit.StepWithin(clone(states[r.Key]), now, 0, r.MaxDelay)
				ds[i].Remaining, ds[i].ResetAfter = d.Remaining, d.ResetAfter
			}
		}
	}
	if !ok {
		return ds, states, false
	}
	return ds, pending, true
}

func maps(m map[string]rate.State) map[string]rate.State {
	c := make(map[string]rate.State, len(m))
	for k, v := range m {
		c[k] = clone(v)
	}
	return c
}

// clone gives s a Log of its own: a step may extend the one it is given.
func clone(s rate.State) rate.State {
	s.Log = slices.Clone(s.Log)
	return s
}

// canon returns s with an empty Log as nil, for comparisons.
func canon(s rate.State) rate.State {
	if len(s.Log) == 0 {
		s.Log = nil
	}
	return s
}

func sameState(a, b rate.State) bool {
	a, b = canon(a), canon(b)
	return a.A == b.A && a.B == b.B && a.C == b.C && slices.Equal(a.Log, b.Log)
}

// decodeState reads what the script wrote under alg: the zero State for
// no key, with the sliding log's runs one time per unit, as rate keeps
// them.
func decodeState(t *testing.T, alg rate.Algorithm, raw string) rate.State {
	t.Helper()
	if raw == "" {
		return rate.State{}
	}
	f := func(p int) int64 {
		v := math.Float64frombits(binary.BigEndian.Uint64([]byte(raw[p : p+8])))
		if v != math.Trunc(v) {
			t.Fatalf("state %x holds %v, not an integer", raw, v)
		}
		return int64(v)
	}
	if raw[0] != byte(alg) {
		t.Fatalf("state %x is not %s's", raw, alg)
	}
	if alg != rate.SlidingLog {
		if len(raw) != 25 {
			t.Fatalf("state %x: want 25 bytes", raw)
		}
		return rate.State{A: f(1), B: f(9), C: f(17)}
	}
	var s rate.State
	for p := 1; p+16 <= len(raw); p += 16 {
		for range f(p + 8) {
			s.Log = append(s.Log, f(p))
		}
	}
	return s
}

// scriptStates reads the states of keys under s through client.
func scriptStates(t *testing.T, client rueidis.Client, s *redis.Store, alg rate.Algorithm, keys []string) map[string]rate.State {
	t.Helper()
	states := map[string]rate.State{}
	for _, k := range keys {
		raw, err := client.Do(context.Background(), client.B().Get().Key(s.Key(k)).Build()).ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			t.Fatal(err)
		}
		states[k] = decodeState(t, alg, raw)
	}
	return states
}

// refundLimits are limits to refund under, for each algorithm: rates whose
// emission interval is no whole number of µs, bursts, calendar months.
func refundLimits() []rate.Limit {
	var ls []rate.Limit
	for _, alg := range rate.Algorithms() {
		ls = append(ls,
			rate.Limit{Algorithm: alg, Count: 3, Period: 7 * time.Second},
			rate.Limit{Algorithm: alg, Count: 5, Period: time.Second})
		if alg.HasBurst() {
			ls = append(ls, rate.Limit{Algorithm: alg, Count: 2, Period: 3 * time.Second, Burst: 7})
		}
	}
	return append(ls, rate.Limit{Algorithm: rate.FixedWindow, Count: 10, Calendar: rate.Month})
}

// span returns a length of time that l's state spans: its period, or a
// month.
func span(l rate.Limit) int64 {
	if l.Calendar == rate.Month {
		return (31 * 24 * time.Hour).Microseconds()
	}
	return l.Period.Microseconds() * max(1, l.Burst/l.Count)
}

// The script's refund and receipts against the model: random sequences of
// decisions, commits (of one or two requests, a key perhaps named twice)
// and refunds of commits made any time before, on two keys, with time
// pinned, going forward by steps of every size and at times backwards.
// After every call the script's states are the model's, and every
// decision, receipt and report the model's too. In the frozen histories
// time seldom moves: many commits and refunds interleave at one instant,
// as raced requests across slots do on a busy key.
func TestRefundMatchesModel(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	for li, l := range refundLimits() {
		for _, frozen := range []bool{false, true} {
			name, seed := fmt.Sprintf("%d-%s", li, l), uint64(7)
			if frozen {
				name, seed = name+"/frozen", 8
			}
			t.Run(name, func(t *testing.T) { refundMatchesModel(t, client, l, li, seed, frozen) })
		}
	}
}

// refundMatchesModel runs a history of TestRefundMatchesModel under l,
// from the seed (li, seed).
func refundMatchesModel(t *testing.T, client rueidis.Client, l rate.Limit, li int, seed uint64, frozen bool) {
	ctx := context.Background()
	keys := []string{"a", "b"}
	o, clk := pinnedOptions(redis.Options{DisableDenyCache: true, Prefix: t.Name() + ":"})
	s := redis.New(client, o)
	rng := rand.New(rand.NewPCG(uint64(li), seed))
	model := map[string]rate.State{}
	type commit struct {
		reqs     []rate.Request
		receipts [][2]int64
	}
	var commits []commit
	// What the refunds did, key by key: so that every path is
	// seen to be taken.
	var kept, changed, deleted int
	now := rate.Micros(clk.Now())
	base := now
	request := func() rate.Request {
		r := rate.Request{Key: keys[rng.IntN(len(keys))], Limit: l, Cost: rng.Int64N(l.Capacity()/2 + 1)}
		if l.Algorithm.HasBurst() && rng.IntN(2) == 0 {
			r.MaxDelay = time.Duration(rng.Int64N(span(l))) * time.Microsecond
		}
		return r
	}
	for step := range 400 {
		move := rng.IntN(8)
		if frozen && move > 1 && rng.IntN(6) > 0 {
			move = 0
		}
		switch p := span(l); move {
		case 0, 1:
		case 2:
			now++
		case 3:
			now = max(base, now-rng.Int64N(p)) // a clock stepped back
		default:
			now += rng.Int64N(p * int64(1+rng.IntN(3)) / 2)
		}
		clk.Set(time.UnixMicro(now))
		what := ""
		switch op := rng.IntN(10); {
		case op < 4: // another caller's decision
			r := request()
			what = fmt.Sprintf("decide %v", r)
			ds, next, _ := stepGroup([]rate.Request{r}, model, now, false)
			got, err := s.Decide(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if got != ds[0] {
				t.Fatalf("step %d, %s: got %v, want %v", step, what, got, ds[0])
			}
			model = next
		case op < 7: // a commit
			reqs := []rate.Request{request()}
			if rng.IntN(2) == 0 {
				reqs = append(reqs, request())
			}
			reqs[0].Cost = max(1, reqs[0].Cost)
			what = fmt.Sprintf("commit %v", reqs)
			ds, next, ok := stepGroup(reqs, model, now, false)
			got, receipts, err := redis.Commit(ctx, s, reqs)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				want := make([][2]int64, len(reqs))
				pending := maps(model)
				for i, r := range reqs {
					pending[r.Key], _ = r.Limit.StepWithin(clone(pending[r.Key]), now, r.Cost, r.MaxDelay)
					want[i] = receiptOf(l, pending[r.Key])
				}
				if !slices.Equal(got, ds) || !slices.Equal(receipts, want) {
					t.Fatalf("step %d, %s:\n got  %v %v\n want %v %v", step, what, got, receipts, ds, want)
				}
				commits = append(commits, commit{reqs, receipts})
			} else if rate.Combine(got).Allowed || !slices.Equal(receipts, make([][2]int64, len(reqs))) {
				t.Fatalf("step %d, %s: got %v %v, want refused, no receipts", step, what, got, receipts)
			}
			model = next
		default: // a refund of a commit made before
			if len(commits) == 0 {
				continue
			}
			i := rng.IntN(len(commits))
			c := commits[i]
			commits = slices.Delete(commits, i, i+1)
			what = fmt.Sprintf("refund %v %v", c.reqs, c.receipts)
			for j, r := range c.reqs {
				next := refundOf(l, model[r.Key], now, r.Cost, c.receipts[j])
				switch {
				case sameState(next, model[r.Key]):
					kept++
				case sameState(next, rate.State{}):
					deleted++
				default:
					changed++
				}
				model[r.Key] = next
			}
			want, _, _ := stepGroup(c.reqs, model, now, true)
			got, err := redis.Refund(ctx, s, c.reqs, c.receipts)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("step %d at %+dµs, %s: reports\n got  %v\n want %v", step, now-base, what, got, want)
			}
		}
		for k, st := range scriptStates(t, client, s, l.Algorithm, keys) {
			if !sameState(st, model[k]) {
				t.Fatalf("step %d at %+dµs, %s: %s holds %+v, model %+v", step, now-base, what, k, st, model[k])
			}
		}
	}
	t.Logf("refunds: %d kept the state, %d changed it, %d deleted it", kept, changed, deleted)
	if kept == 0 || changed == 0 || deleted == 0 {
		t.Error("a kind of refund was never made")
	}
}

// edge is a refund to check by hand: states built by steps (at an offset
// from the pinned noon, of a cost), a commit, steps between, and the
// refund; then a look at the refund's time must find want remaining.
type edge struct {
	name     string
	l        rate.Limit
	before   []at
	commit   at
	between  []at
	refundAt time.Duration
	want     int64
}

type at struct {
	at   time.Duration
	cost int64
}

// The refund on edges, in the script and the model, against numbers
// checked by hand. Three per 7 seconds emits a unit every 2⅓s.
func TestRefundEdges(t *testing.T) {
	gcra := rate.Limit{Algorithm: rate.GCRA, Count: 3, Period: 7 * time.Second}
	leaky := rate.Limit{Algorithm: rate.LeakyBucket, Count: 3, Period: 7 * time.Second}
	token := rate.Limit{Algorithm: rate.TokenBucket, Count: 3, Period: 7 * time.Second}
	fixed := rate.Limit{Algorithm: rate.FixedWindow, Count: 3, Period: 7 * time.Second}
	monthly := rate.Limit{Algorithm: rate.FixedWindow, Count: 10, Calendar: rate.Month}
	sliding := rate.Limit{Algorithm: rate.SlidingWindow, Count: 3, Period: 7 * time.Second}
	log := rate.Limit{Algorithm: rate.SlidingLog, Count: 3, Period: 7 * time.Second}
	s := time.Second
	// Noon on 1 June 2024 is 1717243200s after the epoch, 7 × 245320457
	// + 1: windows of 7s start at noon − 1s, noon + 6s, noon + 13s, ...
	edges := []edge{
		{name: "fresh", l: gcra, commit: at{0, 1}, want: 3},
		{name: "debt", l: gcra, before: []at{{0, 2}}, commit: at{s, 1}, refundAt: s, want: 1},
		{name: "tat behind now", l: gcra, commit: at{0, 1}, refundAt: 5 * s, want: 3},
		// Commit 2 at 0 (TAT 4⅔s); another spends 1 at 3s, when the bucket
		// without the request would have been full: TAT 7s, and 3s + 2⅓s
		// without the request. Moving the TAT back by all 4⅔s would leave
		// 2⅓s, behind now: a full bucket, a unit more than the request's
		// absence leaves. The refund moves it back by Tc − C = 1⅔s only.
		{name: "refilled past full, then spent", l: gcra, commit: at{0, 2}, between: []at{{3 * s, 1}}, refundAt: 3 * s, want: 2},
		{name: "refilled past full, then spent", l: leaky, commit: at{0, 2}, between: []at{{3 * s, 1}}, refundAt: 3 * s, want: 2},
		{name: "refilled past full, then spent", l: token, commit: at{0, 2}, between: []at{{3 * s, 1}}, refundAt: 3 * s, want: 2},
		// The other spends at the commit's instant: all is given back.
		{name: "spent at the same instant", l: gcra, commit: at{0, 2}, between: []at{{0, 1}}, want: 2},
		{name: "spent at the same instant", l: token, commit: at{0, 2}, between: []at{{0, 1}}, want: 2},
		// A clock stepped back: the commit at 4s counts from 5s, the
		// latest time seen; the refund at 3s gives it all back.
		{name: "time backwards", l: gcra, before: []at{{5 * s, 1}}, commit: at{4 * s, 1}, refundAt: 3 * s, want: 2},
		{name: "time backwards", l: token, before: []at{{5 * s, 1}}, commit: at{4 * s, 1}, refundAt: 3 * s, want: 2},
		{name: "refilled past full", l: token, commit: at{0, 1}, refundAt: 5 * s, want: 3},
		// The commit at 5s is refilled by 10s, where a look deletes the
		// key; a clock stepped back to 4s writes it anew, with 3 units
		// that are not the commit's. Its latest time seen, 4s, is before
		// the commit's: the refund gives nothing back.
		{name: "written anew before the commit", l: gcra, commit: at{5 * s, 1}, between: []at{{10 * s, 0}, {4 * s, 3}}, refundAt: 4 * s, want: 0},
		{name: "written anew before the commit", l: token, commit: at{5 * s, 1}, between: []at{{10 * s, 0}, {4 * s, 3}}, refundAt: 4 * s, want: 0},
		{name: "same window", l: fixed, before: []at{{0, 1}}, commit: at{s, 2}, refundAt: 2 * s, want: 2},
		{name: "window rolled", l: fixed, commit: at{3 * s, 1}, refundAt: 7 * s, want: 3},
		{name: "window rolled, then spent", l: fixed, commit: at{3 * s, 1}, between: []at{{7 * s, 1}}, refundAt: 7 * s, want: 2},
		{name: "month", l: monthly, before: []at{{-11 * time.Hour, 4}}, commit: at{time.Hour, 3}, refundAt: 2 * time.Hour, want: 6},
		// Noon on 1 June is in June: a commit on 31 May, refunded in June.
		{name: "month rolled", l: monthly, commit: at{-13 * time.Hour, 3}, between: []at{{0, 1}}, want: 9},
		{name: "same window", l: sliding, commit: at{s, 2}, refundAt: 2 * s, want: 3},
		// Window [−1s, 6s) takes 2; at 7s, in the next, another spends 1:
		// 6/7 of the previous count, 2, still weighs ⌈1.71⌉ = 2. The refund
		// empties the previous count: 3 − 1 − 0 remain.
		{name: "window moved on by one", l: sliding, commit: at{0, 2}, between: []at{{7 * s, 1}}, refundAt: 7 * s, want: 2},
		// At 14s, in [13s, 20s), [−1s, 6s) weighs nothing.
		{name: "window moved on by two", l: sliding, commit: at{0, 2}, between: []at{{14 * s, 1}}, refundAt: 14 * s, want: 2},
		{name: "run", l: log, before: []at{{0, 1}}, commit: at{s, 2}, refundAt: 2 * s, want: 2},
		{name: "run shared", l: log, before: []at{{s, 1}}, commit: at{s, 1}, between: []at{{s, 1}}, refundAt: 2 * s, want: 1},
		{name: "log expired", l: log, commit: at{0, 2}, between: []at{{8 * s, 1}}, refundAt: 8 * s, want: 2},
		// Logged at 5s, the latest time logged, though asked at 4s.
		{name: "time backwards", l: log, before: []at{{5 * s, 1}}, commit: at{4 * s, 1}, refundAt: 3 * s, want: 2},
	}
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	ctx := context.Background()
	for _, e := range edges {
		t.Run(e.l.Algorithm.String()+"/"+e.name, func(t *testing.T) {
			o, clk := pinnedOptions(redis.Options{DisableDenyCache: true, Prefix: t.Name() + ":"})
			s := redis.New(client, o)
			noon := clk.Now()
			model := map[string]rate.State{}
			r := rate.Request{Key: "k", Limit: e.l}
			decide := func(a at) {
				t.Helper()
				clk.Set(noon.Add(a.at))
				r.Cost = a.cost
				next, want := e.l.Step(model["k"], rate.Micros(clk.Now()), a.cost)
				if !want.Allowed {
					t.Fatalf("the step %v is refused: %v", a, want)
				}
				model["k"] = next
				if got, err := s.Decide(ctx, r); err != nil || got != want {
					t.Fatalf("step %v: %v, %v; want %v", a, got, err, want)
				}
			}
			for _, a := range e.before {
				decide(a)
			}
			clk.Set(noon.Add(e.commit.at))
			r.Cost = e.commit.cost
			next, _ := e.l.Step(model["k"], rate.Micros(clk.Now()), r.Cost)
			model["k"] = next
			_, receipts, err := redis.Commit(ctx, s, []rate.Request{r})
			if err != nil {
				t.Fatal(err)
			}
			if want := receiptOf(e.l, next); receipts[0] != want {
				t.Fatalf("receipt %v, model %v", receipts[0], want)
			}
			for _, a := range e.between {
				decide(a)
			}
			clk.Set(noon.Add(e.refundAt))
			now := rate.Micros(clk.Now())
			r.Cost = e.commit.cost
			model["k"] = refundOf(e.l, model["k"], now, r.Cost, receipts[0])
			if _, err := redis.Refund(ctx, s, []rate.Request{r}, receipts); err != nil {
				t.Fatal(err)
			}
			if got := scriptStates(t, client, s, e.l.Algorithm, []string{"k"})["k"]; !sameState(got, model["k"]) {
				t.Errorf("the script left %+v, the model %+v", got, model["k"])
			}
			_, look := e.l.Step(model["k"], now, 0)
			r.Cost = 0
			got, err := s.Decide(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if got.Remaining != e.want || look.Remaining != e.want {
				t.Errorf("after the refund, %d remaining (the model: %d), want %d", got.Remaining, look.Remaining, e.want)
			}
		})
	}
}

// The model's promise, over random histories for every algorithm: a state
// is built by steps; a request is committed; other callers' steps follow,
// some admitted; then the refund. The reference is the same history with
// a step of cost 0 in the commit's place (the request's absence, at the
// same instant), taking the same other steps. Probed by steps of every
// cost at the refund's time and later, the refunded state never admits
// what the reference refuses, never reports more remaining, and never
// sends a caller back sooner. When no other step took anything, it
// decides every probe exactly as the reference does.
//
// Except in one history, which a refund cannot tell from others: after
// the commit the key became fresh (deleted, or in Redis expired), and a
// step at an earlier instant than the one that found it fresh (a clock
// stepped back) wrote it anew. While a key exists its instants only move
// forward (a bucket's latest time seen, a window's start, a log's last
// run), which is what tells a refund the state is the commit's become;
// a key written anew after such a step back may look like it, and be
// given back units it does not hold. Those histories are counted, not
// checked.
func TestRefundNeverMints(t *testing.T) {
	noon := rate.Micros(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	for li, l := range refundLimits() {
		t.Run(fmt.Sprintf("%d-%s", li, l), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(li), 11))
			p := span(l)
			// jump returns the next instant: often the same, at times
			// earlier (a clock stepped back).
			jump := func(now int64) int64 {
				switch rng.IntN(6) {
				case 0:
					return now
				case 1:
					return now + 1 + rng.Int64N(10)
				case 2:
					return now - rng.Int64N(p)
				}
				return now + rng.Int64N(2*p)
			}
			var exact, partial, reset int
			for trial := range 4000 {
				now := noon
				var s rate.State
				for range rng.IntN(4) {
					now = jump(now)
					if next, d := l.Step(clone(s), now, rng.Int64N(l.Capacity()+1)); d.Allowed {
						s = next
					}
				}
				now = jump(now)
				cost := 1 + rng.Int64N(l.Capacity())
				with, d := l.Step(clone(s), now, cost)
				if !d.Allowed {
					continue
				}
				rc := receiptOf(l, with)
				ref, _ := l.Step(clone(s), now, 0)
				history := fmt.Sprintf("from %+v, commit %d at %d", s, cost, now)
				others, fresh, back := false, false, false
				latest := now
				for range rng.IntN(4) {
					now = jump(now)
					back = back || fresh && now < latest
					latest = max(latest, now)
					c := rng.Int64N(l.Capacity() + 1)
					next, d := l.Step(clone(with), now, c)
					if !d.Allowed {
						continue
					}
					fresh = fresh || sameState(next, rate.State{})
					rnext, rd := l.Step(clone(ref), now, c)
					if !rd.Allowed {
						t.Fatalf("trial %d, %s: a step the request's absence refuses was admitted: %d at %d", trial, history, c, now)
					}
					with, ref = next, rnext
					others = others || c > 0
					history += fmt.Sprintf(", %d at %d", c, now)
				}
				if back {
					reset++
					continue
				}
				now = jump(now)
				got := refundOf(l, with, now, cost, rc)
				history += fmt.Sprintf(", refund at %d: %+v, refunded %+v, reference %+v", now, with, got, ref)
				if !others {
					exact++
				} else if !sameState(got, with) {
					partial++
				}
				for _, at := range []int64{now, now + 1, now + p/3, now + p, now + 2*p} {
					for c := range l.Capacity() + 1 {
						_, g := l.Step(clone(got), at, c)
						_, w := l.Step(clone(ref), at, c)
						switch {
						case !others && g != w:
							t.Fatalf("trial %d, %s: probe %d at %d: %v, the request's absence %v", trial, history, c, at, g, w)
						case g.Allowed && !w.Allowed,
							c == 0 && g.Remaining > w.Remaining,
							!g.Allowed && !w.Allowed && g.RetryAfter < w.RetryAfter:
							t.Fatalf("trial %d, %s: probe %d at %d: %v, fresher than the request's absence %v", trial, history, c, at, g, w)
						}
					}
				}
			}
			t.Logf("%d exact refunds, %d after others spent, %d histories with a key written anew after a step back", exact, partial, reset)
		})
	}
}
