package redis

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
)

// queuedGroup returns a caller's group of reqs as the coalescer queues it.
func queuedGroup(reqs ...rate.Request) *pendingCall {
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = redisKey("", r.Key)
	}
	return &pendingCall{ctx: context.Background(), keys: keys, args: groupArgs(reqs, markDecide), done: make(chan struct{})}
}

// batchesOf queues groups behind calls on the wire and returns the
// batches the coalescer sends them in, as the groups' places in the queue.
func batchesOf(groups []*pendingCall) [][]int {
	c := &coalescer{s: &Store{}, inFlight: maxInFlight, queue: slices.Clone(groups)}
	var out [][]int
	for b := c.next(); b != nil; b = c.next() {
		var places []int
		for _, p := range b {
			places = append(places, slices.Index(groups, p))
		}
		out = append(out, places)
	}
	return out
}

// span returns the places from..to-1.
func span(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// A coalesced batch is bounded by the work it gives Redis, not only by
// its keys: a sliding_log decision reads (and an admit writes) every run
// of its log, up to its Count, so a batch counts it by its Count. Full
// logs of rate.MaxLogCount each go alone, and a heavy log closes the
// batch of ordinary requests queued before it. (Before, one batch took
// up to 256 full logs: a single script run of seconds, during which
// Redis answered BUSY to everyone.)
func TestCoalescerBatchBoundedByWork(t *testing.T) {
	n := 0
	gcra := func() rate.Request {
		n++
		return rate.Request{Key: fmt.Sprint("g", n), Limit: rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Second}, Cost: 1}
	}
	slog := func(count int64) rate.Request {
		n++
		return rate.Request{Key: fmt.Sprint("l", n), Limit: rate.Limit{Algorithm: rate.SlidingLog, Count: count, Period: time.Hour}, Cost: 1}
	}
	groups := func(k int, f func() rate.Request) []*pendingCall {
		var gs []*pendingCall
		for range k {
			gs = append(gs, queuedGroup(f()))
		}
		return gs
	}
	full := func() rate.Request { return slog(rate.MaxLogCount) }
	quarter := func() rate.Request { return slog(maxWeight / 4) }
	for _, c := range []struct {
		name   string
		groups []*pendingCall
		want   [][]int
	}{
		{"ordinary requests batch by keys", groups(300, gcra), [][]int{span(0, maxBatch), span(maxBatch, 300)}},
		{"full logs go alone", groups(3, full), [][]int{{0}, {1}, {2}}},
		{"a full log closes the batch before it", slices.Concat(groups(5, gcra), groups(1, full), groups(5, gcra)),
			[][]int{span(0, 5), {5}, span(6, 11)}},
		{"a log weighs its Count", groups(9, quarter), [][]int{span(0, 4), span(4, 8), {8}}},
		{"a batch fills up to the bound", slices.Concat([]*pendingCall{queuedGroup(slog(maxWeight - 3))}, groups(5, gcra)),
			[][]int{span(0, 4), span(4, 6)}},
		{"a log heavier than the bound goes alone", slices.Concat([]*pendingCall{queuedGroup(slog(maxWeight + 1))}, groups(2, gcra)),
			[][]int{{0}, {1, 2}}},
		{"a group weighs the sum of its requests", []*pendingCall{queuedGroup(gcra()), queuedGroup(gcra(), slog(maxWeight))},
			[][]int{{0}, {1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := batchesOf(c.groups)
			if !slices.EqualFunc(got, c.want, slices.Equal) {
				t.Errorf("batches %v, want %v", brief(got), brief(c.want))
			}
		})
	}
}

// brief shows batches as their first and last places and their length.
func brief(batches [][]int) []string {
	var s []string
	for _, b := range batches {
		s = append(s, fmt.Sprintf("[%d..%d](%d)", b[0], b[len(b)-1], len(b)))
	}
	return s
}

// logSteps decides groups on a Redis store whose script time is pinned to
// a fake clock, and compares every decision with package rate's, as the
// conformance suite does (a refused group consumes nothing, and a request
// in it that would have passed alone reports a step of cost 0).
type logSteps struct {
	t     *testing.T
	srv   *redistest.Server
	s     *Store
	clk   *ratetest.Clock
	noon  time.Time
	model map[string]rate.State
}

func newLogSteps(t *testing.T) *logSteps {
	srv := redistest.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	noon := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	clk := ratetest.NewClock(noon)
	s := New(c, Options{DisableDenyCache: true, DisableCoalescing: true, Clock: clk, pinned: clk})
	return &logSteps{t: t, srv: srv, s: s, clk: clk, noon: noon, model: map[string]rate.State{}}
}

// decide decides reqs as one group at noon plus at.
func (h *logSteps) decide(at time.Duration, reqs ...rate.Request) {
	h.t.Helper()
	h.clk.Set(h.noon.Add(at))
	now := rate.Micros(h.clk.Now())
	want := make([]rate.Decision, len(reqs))
	states := map[string]rate.State{}
	all := true
	for i, r := range reqs {
		st, ok := states[r.Key]
		if !ok {
			st = h.model[r.Key]
		}
		next, d := r.Limit.Step(st, now, r.Cost)
		want[i] = d
		if d.Allowed {
			states[r.Key] = next
		}
		all = all && d.Allowed
	}
	if all {
		for _, r := range reqs {
			h.model[r.Key] = states[r.Key]
		}
	} else {
		for i, r := range reqs {
			if want[i].Allowed {
				_, peek := r.Limit.Step(h.model[r.Key], now, 0)
				want[i].Remaining, want[i].ResetAfter = peek.Remaining, peek.ResetAfter
			}
		}
	}
	got := make([]rate.Decision, len(reqs))
	if _, err := h.s.DecideAll(context.Background(), reqs, got); err != nil {
		h.t.Fatalf("at %v: %v", at, err)
	}
	for i := range reqs {
		if got[i] != want[i] {
			h.t.Errorf("at %v, request %d (%v cost %d):\n got  %v\n want %v", at, i, reqs[i].Limit, reqs[i].Cost, got[i], want[i])
		}
	}
}

// logValue returns the script's encoding of a log of runs (time in µs,
// units).
func logValue(runs ...[2]float64) string {
	b := []byte{5}
	for _, r := range runs {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(r[0]))
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(r[1]))
	}
	return string(b)
}

// Long logs, of several hundred runs (the script reads them in chunks of
// 128), decide as package rate does: expiry across chunks, a refusal
// whose unit to wait for lies chunks in, a log read under two periods in
// one group (the second reads the log as the first left it, or, refused,
// as it was), a look that trims the log, time going back, and a log with
// a bad run deep inside it, which reads as fresh.
func TestLongLogMatchesRate(t *testing.T) {
	h := newLogSteps(t)
	lim := func(count int64, period time.Duration) rate.Limit {
		return rate.Limit{Algorithm: rate.SlidingLog, Count: count, Period: period}
	}
	hour, mid, fast, tight := lim(1000, time.Hour), lim(1000, 250*time.Millisecond), lim(200, 100*time.Millisecond), lim(100, time.Hour)
	req := func(key string, l rate.Limit, cost int64) rate.Request {
		return rate.Request{Key: "{log}" + key, Limit: l, Cost: cost}
	}
	for i := range 300 {
		at := time.Duration(i) * time.Millisecond
		h.decide(at, req("k", hour, 1))
		h.decide(at, req("m", hour, 1+int64(i%3)))
	}
	// m: the first chunk has left mid's window, the second partly; under
	// two periods in one group, the second step reads the log the first
	// left.
	h.decide(500*time.Millisecond, req("m", mid, 1))
	h.decide(500*time.Millisecond, req("m", hour, 1), req("m", mid, 1))
	h.decide(500*time.Millisecond, req("m", mid, 2), req("m", hour, 0))
	h.decide(510*time.Millisecond, req("m", tight, 1)) // refused: wait for a unit chunks in
	h.decide(510*time.Millisecond, req("m", tight, 100), req("m", mid, 1))

	h.decide(300*time.Millisecond, req("k", hour, 1), req("k", fast, 1))
	// Refused by fast: nothing is spent, and hour reports the log as it
	// was, read under fast's period first.
	h.decide(300*time.Millisecond, req("k", fast, 150), req("k", hour, 1))
	h.decide(350*time.Millisecond, req("k", fast, 0)) // trims the log
	h.decide(350*time.Millisecond, req("k", hour, 1))
	h.decide(345*time.Millisecond, req("k", hour, 2)) // time went back: logged at 350ms
	h.decide(345*time.Millisecond, req("k", tight, 1))
	h.decide(2*time.Hour, req("k", hour, 0))

	// A bad run (out of order) past the first chunk: the log reads as
	// fresh, and the decision replaces it.
	var runs [][2]float64
	base := float64(rate.Micros(h.noon))
	for i := range 300 {
		runs = append(runs, [2]float64{base + float64(i), 1})
	}
	runs[200][0] = runs[199][0]
	h.srv.MustDo("SET", h.s.Key("{log}bad"), logValue(runs...))
	h.decide(time.Second, req("bad", tight, 1))
	h.decide(time.Second, req("bad", tight, 0))
}
