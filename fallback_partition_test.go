package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// servers is a real memory store held by servers that fail apart, as a
// Redis Cluster's masters do: a key's first byte names its partition ('a'
// is 1, 'b' is 2 until moved is set, then 3; any other is 0, unknown),
// and each partition can be made to fail or hang on its own. A call that
// meets a failing partition fails with an error naming it, if named is
// set, as the Redis store's do.
type servers struct {
	sluice.Store
	state [4]atomic.Int32 // per partition: 0 works, 1 fails, 2 hangs
	calls [4]atomic.Int64 // calls that reached each partition
	moved atomic.Bool     // partition 2 has handed its keys to 3
	named atomic.Bool
}

// partitionError is the error of a failing partition.
type partitionError struct{ p int }

func (e partitionError) Error() string { return "node-" + strconv.Itoa(e.p) + ": connection refused" }

func (s *servers) Partition(key string) int {
	switch {
	case strings.HasPrefix(key, "a"):
		return 1
	case strings.HasPrefix(key, "b") && s.moved.Load():
		return 3
	case strings.HasPrefix(key, "b"):
		return 2
	}
	return 0
}

func (s *servers) FailedPartition(err error) int {
	var pe partitionError
	if errors.As(err, &pe) {
		return pe.p
	}
	return 0
}

func (s *servers) PartitionName(p int) string { return "node-" + strconv.Itoa(p) }

func (s *servers) PartitionHolds(p int) bool { return p != 2 || !s.moved.Load() }

func (s *servers) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	seen := [4]bool{}
	for _, r := range reqs {
		p := s.Partition(r.Key)
		if seen[p] {
			continue
		}
		seen[p] = true
		s.calls[p].Add(1)
		switch s.state[p].Load() {
		case 1:
			if s.named.Load() {
				return rate.Decision{}, partitionError{p}
			}
			return rate.Decision{}, errDown
		case 2:
			<-ctx.Done()
			return rate.Decision{}, ctx.Err()
		}
	}
	return s.Store.DecideAll(ctx, reqs, out)
}

func (s *servers) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	var out [1]rate.Decision
	return s.DecideAll(ctx, []rate.Request{r}, out[:])
}

func setupServers(t *testing.T, opts sluice.FallbackOptions) (*sluice.Fallback, *servers, *ratetest.Clock, *logLines) {
	t.Helper()
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	s := &servers{Store: memory.New(memory.Options{Clock: clk})}
	s.named.Store(true)
	logs := &logLines{}
	opts.Clock = clk
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	opts.MinBackoff = 100 * time.Millisecond
	return sluice.NewFallback(s, opts), s, clk, logs
}

// sources returns who decided each group of keys, in one call each, and
// fails the test on an error.
func sources(t *testing.T, f *sluice.Fallback, groups ...string) string {
	t.Helper()
	var got []string
	for _, g := range groups {
		var reqs []rate.Request
		for k := range strings.SplitSeq(g, "+") {
			reqs = append(reqs, rate.Request{Key: k, Limit: tenPerMinute, Cost: 0})
		}
		_, src, err := f.DecideAllSource(context.Background(), reqs, make([]rate.Decision, len(reqs)))
		if err != nil {
			t.Fatalf("%s: %v", g, err)
		}
		got = append(got, g+":"+src.String())
	}
	return strings.Join(got, " ")
}

// One partition down sends its own keys to the failure mode and no others:
// the other partitions' keys, and those whose partition is unknown, are
// still decided by the primary. Calls on its keys are not sent, but for
// its probes, and a group with a key on it falls back whole; the first
// probe answered brings it back.
func TestFallbackPartitionDown(t *testing.T) {
	f, s, clk, logs := setupServers(t, sluice.FallbackOptions{Mode: sluice.FailClosed})
	if got, want := sources(t, f, "a1", "b1", "c1"), "a1:primary b1:primary c1:primary"; got != want {
		t.Fatalf("healthy: %s, want %s", got, want)
	}
	s.state[2].Store(1)
	sent := s.calls[2].Load()
	for i, step := range []struct {
		advance time.Duration
		groups  []string
		want    string
		sent    int64 // calls that reached partition 2
		down    bool
	}{
		{0, []string{"b1"}, "b1:fail_closed", 1, true}, // fails, takes partition 2 down
		{0, []string{"b1", "b2", "a1", "a2", "c1"}, "b1:fail_closed b2:fail_closed a1:primary a2:primary c1:primary", 0, true},
		{0, []string{"a1+b1", "a1+c1"}, "a1+b1:fail_closed a1+c1:primary", 0, true},
		{100 * time.Millisecond, []string{"b1", "b1", "a1"}, "b1:fail_closed b1:fail_closed a1:primary", 1, true}, // the probe fails
		{200 * time.Millisecond, []string{"a1+b1"}, "a1+b1:fail_closed", 1, true},                                 // a group probes too
	} {
		clk.Advance(step.advance)
		if got := sources(t, f, step.groups...); got != step.want {
			t.Fatalf("step %d: %s, want %s", i, got, step.want)
		}
		if got := s.calls[2].Load() - sent; got != step.sent {
			t.Fatalf("step %d: %d calls reached the dead partition, want %d", i, got, step.sent)
		}
		sent = s.calls[2].Load()
		if st := f.Stats(); st.Down != step.down {
			t.Fatalf("step %d: stats %+v, want down %v", i, st, step.down)
		}
	}
	s.state[2].Store(0)
	clk.Advance(400 * time.Millisecond)
	if got, want := sources(t, f, "b1", "b2", "a1+b1"), "b1:primary b2:primary a1+b1:primary"; got != want {
		t.Fatalf("recovered: %s, want %s", got, want)
	}
	if st := f.Stats(); st.Down || st.Outages != 1 || st.Recoveries != 1 || st.Probes != 3 || st.Failures != 3 {
		t.Errorf("stats %+v: want up, 1 outage, 1 recovery, 3 probes, 3 failures", st)
	}
	lines := logs.lines()
	if len(lines) != 2 || !strings.Contains(lines[0], "unavailable") || !strings.Contains(lines[0], "partition=node-2") ||
		!strings.Contains(lines[1], "recovered") || !strings.Contains(lines[1], "partition=node-2") {
		t.Errorf("log %q: want one line down and one up, naming partition node-2", lines)
	}
}

// A call over several partitions that fails is news of the partition its
// error names, if the primary says, and else of each of them.
func TestFallbackPartitionBlame(t *testing.T) {
	for _, c := range []struct {
		named bool
		want  string
	}{
		{true, "a1:primary b1:error c1:primary"},
		{false, "a1:error b1:error c1:primary"},
	} {
		t.Run("named="+strconv.FormatBool(c.named), func(t *testing.T) {
			f, s, _, _ := setupServers(t, sluice.FallbackOptions{Mode: sluice.FailError})
			s.named.Store(c.named)
			s.state[2].Store(1)
			_, src, err := f.DecideAllSource(context.Background(), []rate.Request{
				{Key: "a1", Limit: tenPerMinute, Cost: 1}, {Key: "b1", Limit: tenPerMinute, Cost: 1},
			}, make([]rate.Decision, 2))
			if src != sluice.SourceError || err == nil {
				t.Fatalf("group over a failing partition: %v %v, want its error", src, err)
			}
			var got []string
			for _, k := range []string{"a1", "b1", "c1"} {
				_, src, err := f.DecideAllSource(context.Background(), []rate.Request{{Key: k, Limit: tenPerMinute}}, make([]rate.Decision, 1))
				if src == sluice.SourceError && !errors.Is(err, sluice.ErrStoreDown) {
					t.Fatalf("%s: %v, want ErrStoreDown", k, err)
				}
				got = append(got, k+":"+src.String())
			}
			if g := strings.Join(got, " "); g != c.want {
				t.Fatalf("after the failure: %s, want %s", g, c.want)
			}
		})
	}
	f, s, _, _ := setupServers(t, sluice.FallbackOptions{Mode: sluice.FailError})
	s.state[2].Store(1)
	sources(t, f, "a1")
	_, err := f.Decide(context.Background(), rate.Request{Key: "b1", Limit: tenPerMinute})
	if err == nil {
		t.Fatal("the failing partition's call succeeded")
	}
	_, err = f.Decide(context.Background(), rate.Request{Key: "b1", Limit: tenPerMinute})
	if !errors.Is(err, sluice.ErrStoreDown) || !strings.Contains(err.Error(), "partition node-2") {
		t.Errorf("a call not sent: %v, want ErrStoreDown naming the partition", err)
	}
}

// A partition that hangs is down once it has completed no call for longer
// than MaxSilence, though the others answer all along: each partition's
// silence is its own.
func TestFallbackPartitionHung(t *testing.T) {
	f, s, clk, _ := setupServers(t, sluice.FallbackOptions{Mode: sluice.FailClosed, Timeout: -1, MaxSilence: 50 * time.Millisecond})
	s.state[2].Store(2)
	b1 := rate.Request{Key: "b1", Limit: tenPerMinute, Cost: 1}
	a1 := rate.Request{Key: "a1", Limit: tenPerMinute, Cost: 1}
	for i := range 4 {
		if _, src, err := callBy(f, time.Second, a1); err != nil || src != sluice.SourcePrimary {
			t.Fatalf("round %d: a1 %v %v, want decided by the primary", i, src, err)
		}
		if _, _, err := callBy(f, shortDeadline, b1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: b1 %v, want the caller's DeadlineExceeded", i, err)
		}
		if want := i == 3; f.Stats().Down != want {
			t.Fatalf("round %d, partition 2 silent for %v: stats %+v, want down %v", i, time.Duration(i)*20*time.Millisecond, f.Stats(), want)
		}
		clk.Advance(20 * time.Millisecond)
	}
	sent := s.calls[2].Load()
	if got, want := sources(t, f, "b1", "a1"), "b1:fail_closed a1:primary"; got != want {
		t.Fatalf("down: %s, want %s", got, want)
	}
	if got := s.calls[2].Load() - sent; got != 0 {
		t.Errorf("%d calls reached the hung partition while it was known down", got)
	}
}

// A partition that has handed its keys on, as a dead master does to the
// replica that takes its place, no longer makes the primary down, and its
// keys are decided where they now are.
func TestFallbackPartitionMoved(t *testing.T) {
	f, s, _, _ := setupServers(t, sluice.FallbackOptions{Mode: sluice.FailClosed})
	s.state[2].Store(1)
	if got, want := sources(t, f, "b1", "b1"), "b1:fail_closed b1:fail_closed"; got != want {
		t.Fatalf("down: %s, want %s", got, want)
	}
	if !f.Stats().Down {
		t.Fatalf("stats %+v: want down", f.Stats())
	}
	s.moved.Store(true)
	if st := f.Stats(); st.Down {
		t.Fatalf("stats %+v: a partition that holds no keys keeps the primary down", st)
	}
	if got, want := sources(t, f, "b1"), "b1:primary"; got != want {
		t.Fatalf("moved: %s, want %s", got, want)
	}
}

// A group over two partitions down goes as the probe of both once both
// are due, and brings both back; while one is not yet due, it is not sent
// and leaves the other's probe to the next call.
func TestFallbackPartitionsProbeTogether(t *testing.T) {
	f, s, clk, _ := setupServers(t, sluice.FallbackOptions{Mode: sluice.FailClosed})
	s.state[1].Store(1)
	s.state[2].Store(1)
	sources(t, f, "a1")
	clk.Advance(50 * time.Millisecond)
	sources(t, f, "b1")
	s.state[1].Store(0)
	s.state[2].Store(0)
	clk.Advance(50 * time.Millisecond) // a's probe due, b's not
	sentA, sentB := s.calls[1].Load(), s.calls[2].Load()
	if got, want := sources(t, f, "a1+b1"), "a1+b1:fail_closed"; got != want {
		t.Fatalf("b not due: %s, want %s", got, want)
	}
	if s.calls[1].Load() != sentA || s.calls[2].Load() != sentB {
		t.Fatal("a group was sent with one of its partitions down and not due")
	}
	if got, want := sources(t, f, "a1", "b1"), "a1:primary b1:fail_closed"; got != want {
		t.Fatalf("a probed alone: %s, want %s", got, want)
	}
	s.state[1].Store(1)
	sources(t, f, "a1") // down again, at once: its backoff doubles
	clk.Advance(200 * time.Millisecond)
	s.state[1].Store(0)
	probes := f.Stats().Probes
	if got, want := sources(t, f, "a1+b1", "a1", "b1"), "a1+b1:primary a1:primary b1:primary"; got != want {
		t.Fatalf("both due: %s, want %s", got, want)
	}
	if st := f.Stats(); st.Down || st.Probes != probes+1 || st.Recoveries != 3 {
		t.Errorf("stats %+v: want up after one more probe, 3 recoveries", st)
	}
}

// manyServers is a memory store held by up to 16 partitions: key "pN.x" is
// in partition N. A failing partition fails the call with an error naming
// it, as the Redis store's do.
type manyServers struct {
	sluice.Store
	failing [17]atomic.Bool
}

func (s *manyServers) Partition(key string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(key, ".", 2)[0], "p"))
	return n
}

func (s *manyServers) FailedPartition(err error) int {
	if pe, ok := err.(partitionError); ok {
		return pe.p
	}
	return 0
}

func (s *manyServers) PartitionName(p int) string { return "node-" + strconv.Itoa(p) }
func (s *manyServers) PartitionHolds(p int) bool  { return true }

func (s *manyServers) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	for _, r := range reqs {
		if p := s.Partition(r.Key); s.failing[p].Load() {
			return rate.Decision{}, partitionError{p}
		}
	}
	return s.Store.DecideAll(ctx, reqs, out)
}

func (s *manyServers) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	var out [1]rate.Decision
	return s.DecideAll(ctx, []rate.Request{r}, out[:])
}

// spanning returns one request on each of partitions 1 to n.
func spanning(n int) []rate.Request {
	var reqs []rate.Request
	for p := 1; p <= n; p++ {
		reqs = append(reqs, rate.Request{Key: fmt.Sprintf("p%d.k", p), Limit: tenPerMinute})
	}
	return reqs
}

// A call over more partitions than a call keeps breakers for (8) is news
// of the first 8 only: failing on the 9th, it takes none of them down.
func TestFallbackPartitionsPastMaxBreakers(t *testing.T) {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	s := &manyServers{Store: memory.New(memory.Options{Clock: clk})}
	f := sluice.NewFallback(s, sluice.FallbackOptions{Mode: sluice.FailError, Clock: clk, MinBackoff: 100 * time.Millisecond})
	ctx := context.Background()
	s.failing[9].Store(true)
	reqs := spanning(9)
	if _, src, err := f.DecideAllSource(ctx, reqs, make([]rate.Decision, len(reqs))); src != sluice.SourceError || err == nil {
		t.Fatalf("a call over a dead partition: %v %v, want its error", src, err)
	}
	var down []string
	for p := 1; p <= 8; p++ {
		r := []rate.Request{{Key: fmt.Sprintf("p%d.k", p), Limit: tenPerMinute}}
		if _, src, err := f.DecideAllSource(ctx, r, make([]rate.Decision, 1)); src != sluice.SourcePrimary {
			down = append(down, fmt.Sprintf("p%d: %v %v", p, src, err))
		}
	}
	if len(down) > 0 {
		t.Errorf("healthy partitions sent to the failure mode by a call that failed on partition 9:\n%s\nstats %+v",
			strings.Join(down, "\n"), f.Stats())
	}
}

// A call over exactly 8 partitions whose failure names none is news of
// all 8, and each is down on its own.
func TestFallbackPartitionsEightUnnamed(t *testing.T) {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	s := &manyServers{Store: memory.New(memory.Options{Clock: clk})}
	f := sluice.NewFallback(&unnamed{s}, sluice.FallbackOptions{Mode: sluice.FailClosed, Clock: clk})
	ctx := context.Background()
	s.failing[8].Store(true)
	reqs := spanning(8)
	if _, src, _ := f.DecideAllSource(ctx, reqs, make([]rate.Decision, len(reqs))); src != sluice.SourceFailClosed {
		t.Fatalf("src %v", src)
	}
	if st := f.Stats(); st.Outages != 8 || !st.Down {
		t.Errorf("stats %+v: want 8 outages", st)
	}
}

// unnamed is manyServers whose errors name no partition.
type unnamed struct{ *manyServers }

func (u *unnamed) FailedPartition(error) int { return 0 }

// A group whose requests of one key under one limit add up past its
// capacity can never pass: it is the caller's error, in every mode and
// whether the primary is up or down, and reaches no store.
func TestFallbackGroupPastCapacity(t *testing.T) {
	one := rate.Limit{Algorithm: rate.GCRA, Count: 1, Period: time.Second}
	reqs := []rate.Request{{Key: "k", Limit: one, Cost: 1}, {Key: "k", Limit: one, Cost: 1}}
	for _, mode := range []sluice.FailureMode{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal, sluice.FailError} {
		for _, down := range []bool{false, true} {
			f, b, _, _ := setup(t, sluice.FallbackOptions{Mode: mode})
			if down {
				b.state.Store(1)
				f.Decide(context.Background(), rate.Request{Key: "other", Limit: tenPerMinute, Cost: 1})
			}
			calls := b.calls.Load()
			_, _, err := f.DecideAllSource(context.Background(), reqs, make([]rate.Decision, 2))
			if !errors.Is(err, rate.ErrCostExceedsCapacity) {
				t.Errorf("%v, primary down %v: %v, want ErrCostExceedsCapacity", mode, down, err)
			}
			if b.calls.Load() != calls {
				t.Errorf("%v, primary down %v: the group reached the primary", mode, down)
			}
		}
	}
}
