package sluice_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// breakable is a real memory store that can be made to fail, or to hang
// until its caller's context ends, as a remote store does when its server
// is gone or stuck. Hung in state 3, it reports its caller's deadline a
// millisecond before the context does, as the Redis client does: it sets
// its connections' deadlines from the context's. In state 4 it fails at
// once with another call's deadline, as the Redis store reports a call
// whose connection its client closed at the deadline of the call on it.
type breakable struct {
	sluice.Store
	state atomic.Int32 // 0 works, 1 fails, 2 hangs, 3 hangs and sees the deadline first, 4 fails with another call's deadline
	calls atomic.Int64
}

var errDown = errors.New("connection refused")

// otherDeadlineError is a failure that another call's deadline caused, as
// the Redis store reports one: context.DeadlineExceeded, marked by its
// method OtherDeadline.
type otherDeadlineError struct{}

func (otherDeadlineError) Error() string       { return "connection closed at a deadline not the call's" }
func (otherDeadlineError) OtherDeadline() bool { return true }
func (otherDeadlineError) Unwrap() error       { return context.DeadlineExceeded }

func (b *breakable) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	b.calls.Add(1)
	switch b.state.Load() {
	case 1:
		return rate.Decision{}, errDown
	case 2:
		<-ctx.Done()
		return rate.Decision{}, ctx.Err()
	case 3:
		dl, ok := ctx.Deadline()
		if !ok {
			<-ctx.Done()
			return rate.Decision{}, ctx.Err()
		}
		early := time.NewTimer(time.Until(dl) - time.Millisecond)
		defer early.Stop()
		select {
		case <-early.C:
			return rate.Decision{}, fmt.Errorf("read: %w", context.DeadlineExceeded)
		case <-ctx.Done():
			return rate.Decision{}, ctx.Err()
		}
	case 4:
		return rate.Decision{}, fmt.Errorf("store: %w", otherDeadlineError{})
	}
	return b.Store.DecideAll(ctx, reqs, out)
}

func (b *breakable) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	var out [1]rate.Decision
	return b.DecideAll(ctx, []rate.Request{r}, out[:])
}

// logLines is a slog handler's output, safe for concurrent use.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.buf.String()), "\n")
}

func setup(t *testing.T, opts sluice.FallbackOptions) (*sluice.Fallback, *breakable, *ratetest.Clock, *logLines) {
	t.Helper()
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	b := &breakable{Store: memory.New(memory.Options{Clock: clk})}
	logs := &logLines{}
	opts.Clock = clk
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	return sluice.NewFallback(b, opts), b, clk, logs
}

var tenPerMinute = rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Minute}

func decideN(t *testing.T, f *sluice.Fallback, n int, r rate.Request) (admitted int, sources map[sluice.Source]int) {
	t.Helper()
	sources = map[sluice.Source]int{}
	out := make([]rate.Decision, 1)
	for range n {
		d, src, err := f.DecideAllSource(context.Background(), []rate.Request{r}, out)
		if err != nil && src != sluice.SourceError {
			t.Fatal(err)
		}
		sources[src]++
		if d.Allowed {
			admitted++
		}
	}
	return admitted, sources
}

func decisionOf(t *testing.T, f *sluice.Fallback, r rate.Request) rate.Decision {
	t.Helper()
	d, err := f.Decide(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Each failure mode decides while the primary fails: fail_open admits,
// fail_closed refuses, local admits each instance's share, and error
// decides nothing, reporting instead.
func TestFallbackModes(t *testing.T) {
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	for _, c := range []struct {
		mode     sluice.FailureMode
		admitted int
		source   sluice.Source
	}{
		{sluice.FailOpen, 20, sluice.SourceFailOpen},
		{sluice.FailClosed, 0, sluice.SourceFailClosed},
		{sluice.FailLocal, 4, sluice.SourceLocal}, // ⌈10/3⌉
		{sluice.FailError, 0, sluice.SourceError},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			f, b, _, logs := setup(t, sluice.FallbackOptions{Mode: c.mode, Instances: 3})
			b.state.Store(1)
			admitted, sources := decideN(t, f, 20, r)
			if admitted != c.admitted || sources[c.source] != 20 {
				t.Errorf("admitted %d of 20, sources %v; want %d, all %v", admitted, sources, c.admitted, c.source)
			}
			if c.mode == sluice.FailClosed {
				if d := decisionOf(t, f, r); d.RetryAfter != sluice.DefaultFallbackRetryAfter {
					t.Errorf("fail closed: %v, want RetryAfter %v", d, sluice.DefaultFallbackRetryAfter)
				}
			}
			if c.mode == sluice.FailOpen {
				if d := decisionOf(t, f, r); d.Remaining != 9 || d.Limit != 10 {
					t.Errorf("fail open: %v, want the full capacity less the cost remaining", d)
				}
			}
			st := f.Stats()
			if !st.Down || st.Outages != 1 || st.Failures != 1 || st.Primary != 0 || st.Fallback < 20 {
				t.Errorf("stats %+v: want down, 1 outage, 1 failure (the rest not sent), 20+ fallback decisions", st)
			}
			if got := b.calls.Load(); got != 1 {
				t.Errorf("primary called %d times while down with no probe due, want 1", got)
			}
			if lines := logs.lines(); len(lines) != 1 || !strings.Contains(lines[0], "mode="+c.mode.String()) {
				t.Errorf("log: %q, want one line naming the mode", lines)
			}
		})
	}
}

// FailError returns the primary's error on the call that finds it failing,
// then ErrStoreDown at once without calling it, probes it after the
// backoff like the other modes, and decides through it again once a probe
// succeeds.
func TestFallbackFailError(t *testing.T) {
	f, b, clk, logs := setup(t, sluice.FallbackOptions{Mode: sluice.FailError, MinBackoff: 100 * time.Millisecond})
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	out := make([]rate.Decision, 1)
	call := func() (rate.Decision, sluice.Source, error) {
		return f.DecideAllSource(context.Background(), []rate.Request{r}, out)
	}
	if d, src, err := call(); err != nil || src != sluice.SourcePrimary || !d.Allowed {
		t.Fatalf("healthy: %v %v %v", d, src, err)
	}
	b.state.Store(1)
	calls := b.calls.Load()
	if _, src, err := call(); !errors.Is(err, errDown) || errors.Is(err, sluice.ErrStoreDown) || src != sluice.SourceError {
		t.Fatalf("the call that finds the primary failing: %v %v, want the primary's own error", src, err)
	}
	for range 50 {
		_, src, err := call()
		if !errors.Is(err, sluice.ErrStoreDown) || src != sluice.SourceError {
			t.Fatalf("while down: %v %v, want ErrStoreDown", src, err)
		}
		if !strings.Contains(err.Error(), errDown.Error()) {
			t.Errorf("while down: %q does not name the last failure", err)
		}
	}
	if got := b.calls.Load() - calls; got != 1 {
		t.Fatalf("%d calls reached the dead primary for 51 requests, want 1", got)
	}
	// The caller's own errors stay the caller's while the primary is down.
	if _, err := f.Decide(context.Background(), rate.Request{Key: "k", Limit: tenPerMinute, Cost: 11}); !errors.Is(err, rate.ErrCostExceedsCapacity) {
		t.Errorf("cost 11 of 10 while down: %v, want ErrCostExceedsCapacity", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Decide(ctx, r); !errors.Is(err, context.Canceled) || errors.Is(err, sluice.ErrStoreDown) {
		t.Errorf("canceled caller while down: %v, want context.Canceled", err)
	}
	clk.Advance(100 * time.Millisecond) // the probe is due, and fails
	calls = b.calls.Load()
	if _, _, err := call(); !errors.Is(err, errDown) {
		t.Fatalf("failed probe: %v, want the primary's error", err)
	}
	if _, _, err := call(); !errors.Is(err, sluice.ErrStoreDown) {
		t.Fatalf("after a failed probe: %v, want ErrStoreDown", err)
	}
	if got := b.calls.Load() - calls; got != 1 {
		t.Fatalf("%d calls reached the primary at the first probe, want 1", got)
	}
	b.state.Store(0)
	clk.Advance(199 * time.Millisecond) // the backoff doubled: not due yet
	if _, _, err := call(); !errors.Is(err, sluice.ErrStoreDown) {
		t.Fatalf("before the second probe: %v, want ErrStoreDown", err)
	}
	clk.Advance(time.Millisecond)
	for i := range 5 {
		if d, src, err := call(); err != nil || src != sluice.SourcePrimary || d.Remaining != int64(8-i) {
			t.Fatalf("after recovery, call %d: %v %v %v, want decided by the primary", i, d, src, err)
		}
	}
	st := f.Stats()
	if st.Down || st.Outages != 1 || st.Recoveries != 1 || st.Probes != 2 || st.Failures != 2 || st.Primary != 6 || st.Fallback != 54 {
		t.Errorf("stats %+v: want up, 1 outage, 1 recovery, 2 probes, 2 failures, 6 primary, 54 answered by the failure mode", st)
	}
	lines := logs.lines()
	if len(lines) != 2 || !strings.Contains(lines[0], "mode=error") || !strings.Contains(lines[1], "recovered") {
		t.Errorf("log %q: want one line down, one line up", lines)
	}
}

// FailLocal decides with each instance's share of the limits (see
// rate.Limit.Share), and refuses a cost above an instance's share.
func TestFallbackLocalShare(t *testing.T) {
	f, b, _, _ := setup(t, sluice.FallbackOptions{Mode: sluice.FailLocal, Instances: 4})
	b.state.Store(1)
	bucket := rate.Request{Key: "b", Limit: rate.Limit{Algorithm: rate.TokenBucket, Count: 5, Period: time.Second, Burst: 9}, Cost: 1}
	if n, _ := decideN(t, f, 10, bucket); n != 3 { // ⌈9/4⌉
		t.Errorf("burst 9 over 4 instances: %d admitted, want 3", n)
	}
	one := rate.Request{Key: "o", Limit: rate.Limit{Algorithm: rate.SlidingLog, Count: 2, Period: time.Hour}, Cost: 1}
	if n, _ := decideN(t, f, 5, one); n != 1 { // at least 1
		t.Errorf("2 per hour over 4 instances: %d admitted, want 1", n)
	}
	big := rate.Request{Key: "g", Limit: rate.Limit{Algorithm: rate.FixedWindow, Count: 8, Period: time.Hour}, Cost: 3}
	other := rate.Request{Key: "h", Limit: tenPerMinute, Cost: 1}
	out := make([]rate.Decision, 2)
	d, src, err := f.DecideAllSource(context.Background(), []rate.Request{other, big}, out)
	if err != nil || d.Allowed || src != sluice.SourceLocal || out[1].RetryAfter != sluice.DefaultFallbackRetryAfter || !out[0].Allowed {
		t.Errorf("cost 3 over a share of 2: %v %v (%v, %v), want refused locally, the other alone allowed", d, err, out[0], out[1])
	}
	if n, _ := decideN(t, f, 5, other); n != 3 {
		t.Errorf("after the refused group: %d admitted of the other limit's share of 3, want 3 (the refusal consumed nothing)", n)
	}
}

// Each decision of a group the failure mode refuses says what its request
// alone would get (see Store.DecideAll): refused or allowed as it would
// be, with the same wait, and when allowed, what is left without it. With
// fail_local a cost above an instance's share refuses the group without
// hiding the others' refusals, and the group consumes nothing.
func TestFallbackGroupDecisionsAlone(t *testing.T) {
	const instances = 4
	for _, mode := range []sluice.FailureMode{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal} {
		for _, alg := range rate.Algorithms() {
			t.Run(mode.String()+"/"+alg.String(), func(t *testing.T) {
				f, b, _, _ := setup(t, sluice.FallbackOptions{Mode: mode, Instances: instances})
				b.state.Store(1)
				lim := rate.Limit{Algorithm: alg, Count: 10, Period: time.Minute}
				share := lim.Share(instances).Capacity()
				if share >= lim.Capacity() {
					t.Fatalf("%v: a share of %d, not below the capacity %d", lim, share, lim.Capacity())
				}
				// Fails the primary; with fail_local, spends the key's share.
				decisionOf(t, f, rate.Request{Key: "spent", Limit: lim, Cost: share})
				reqs := []rate.Request{
					{Key: "spent", Limit: lim, Cost: 1},
					{Key: "fresh", Limit: lim, Cost: 1},
					{Key: "look", Limit: lim},
					{Key: "big", Limit: lim, Cost: share + 1},
				}
				out := make([]rate.Decision, len(reqs))
				d, err := f.DecideAll(context.Background(), reqs, out)
				if err != nil {
					t.Fatal(err)
				}
				if d != rate.Combine(out) {
					t.Errorf("group: %v, want the combination of %v", d, out)
				}
				if mode == sluice.FailLocal && d.Allowed {
					t.Errorf("group: %v, want refused by the cost %d above the share of %d", d, share+1, share)
				}
				// Distinct keys: deciding each alone after the group leaves
				// the others' states as the group found them.
				for i, r := range reqs {
					alone := decisionOf(t, f, r)
					got, want := out[i], alone
					if alone.Allowed && !d.Allowed {
						// What is left without it; its ResetAfter is that of
						// the state without it too.
						want.Remaining += r.Cost
						got.ResetAfter = want.ResetAfter
					}
					if got != want {
						t.Errorf("%s of cost %d in the group: %v; alone: %v", r.Key, r.Cost, out[i], alone)
					}
					if r.Key == "fresh" && mode == sluice.FailLocal && alone.Remaining != share-1 {
						t.Errorf("fresh alone after the group: %v, want %d remaining of the share of %d: the refused group consumed", alone, share-1, share)
					}
				}
			})
		}
	}
}

// A key twice in a group that a cost above an instance's share refuses:
// with fail_local, the second is decided on what the first would leave.
func TestFallbackLocalShareRepeatedKey(t *testing.T) {
	f, b, _, _ := setup(t, sluice.FallbackOptions{Mode: sluice.FailLocal, Instances: 4})
	b.state.Store(1)
	share := tenPerMinute.Share(4).Capacity()
	reqs := []rate.Request{
		{Key: "k", Limit: tenPerMinute, Cost: share},
		{Key: "big", Limit: tenPerMinute, Cost: share + 1},
		{Key: "k", Limit: tenPerMinute, Cost: 1},
	}
	out := make([]rate.Decision, len(reqs))
	d, src, err := f.DecideAllSource(context.Background(), reqs, out)
	if err != nil || d.Allowed || src != sluice.SourceLocal {
		t.Fatalf("group: %v %v %v, want refused locally", d, src, err)
	}
	if !out[0].Allowed || out[0].Remaining != share || out[1].Allowed || out[2].Allowed || out[2].RetryAfter <= 0 {
		t.Errorf("k's share, the big cost, k again: %v, want the first allowed (%d left without it), the others refused", out, share)
	}
	if d := decisionOf(t, f, reqs[0]); !d.Allowed || d.Remaining != 0 {
		t.Errorf("k's share alone after the group: %v, want allowed, the group consumed nothing", d)
	}
}

// A cost above an instance's share of a sliding_log is refused without
// the local store logging the share's timestamps on the way: that refusal
// costs about what any other does, however large the share, and a client
// repeating it during an outage costs no more than one within its share.
func TestFallbackLocalTooCostlyLog(t *testing.T) {
	f, b, _, _ := setup(t, sluice.FallbackOptions{Mode: sluice.FailLocal, Instances: 2})
	b.state.Store(1)
	lim := rate.Limit{Algorithm: rate.SlidingLog, Count: rate.MaxLogCount, Period: time.Hour}
	share := lim.Share(2).Capacity()
	r := rate.Request{Key: "k", Limit: lim, Cost: share + 1}
	decide := func() {
		t.Helper()
		if d, err := f.Decide(context.Background(), r); err != nil || d.Allowed {
			t.Fatalf("cost %d over a share of %d: %v %v, want refused", r.Cost, share, d, err)
		}
	}
	decide() // fails the primary
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const calls = 10
	for range calls {
		decide()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / calls; per > 16<<10 {
		t.Errorf("a refusal allocated %d bytes: the local store logged the share's %d timestamps", per, share)
	}
}

// A local store that admits a key past its capacity (answers admits
// everything) has consumed what the group a cost above the share refuses
// must not: that is an error, not a refusal the store did not make.
func TestFallbackLocalAdmitsPastCapacity(t *testing.T) {
	f, b, _, _ := setup(t, sluice.FallbackOptions{Mode: sluice.FailLocal, Instances: 4, Local: answers{}})
	b.state.Store(1)
	big := rate.Request{Key: "g", Limit: tenPerMinute, Cost: tenPerMinute.Share(4).Capacity() + 1}
	reqs := []rate.Request{{Key: "k", Limit: tenPerMinute, Cost: 1}, big}
	d, src, err := f.DecideAllSource(context.Background(), reqs, make([]rate.Decision, len(reqs)))
	if err == nil || src != sluice.SourceLocal {
		t.Errorf("%v %v %v, want an error", d, src, err)
	}
	if st := f.Stats(); st.Fallback != 0 {
		t.Errorf("stats %+v: the error counted as a decision", st)
	}
}

// cancelsCaller is a local store whose calls end as their caller goes
// away in the middle of them.
type cancelsCaller struct{ cancel context.CancelFunc }

func (c cancelsCaller) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	return c.DecideAll(ctx, []rate.Request{r}, make([]rate.Decision, 1))
}

func (c cancelsCaller) DecideAll(ctx context.Context, _ []rate.Request, _ []rate.Decision) (rate.Decision, error) {
	c.cancel()
	return rate.Decision{}, ctx.Err()
}

// A call the local store answers with an error decided nothing: Stats
// counts it neither among the failure mode's decisions nor the primary's,
// whether or not a cost above the share refuses the group.
func TestFallbackStatsLocalErrors(t *testing.T) {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	local := &breakable{Store: memory.New(memory.Options{Clock: clk})}
	f, b, _, _ := setup(t, sluice.FallbackOptions{Mode: sluice.FailLocal, Instances: 4, Local: local})
	b.state.Store(1)
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	big := rate.Request{Key: "g", Limit: tenPerMinute, Cost: tenPerMinute.Share(4).Capacity() + 1}
	decisionOf(t, f, r) // fails the primary, decided locally
	local.state.Store(1)
	for _, reqs := range [][]rate.Request{{r}, {r, big}} {
		_, src, err := f.DecideAllSource(context.Background(), reqs, make([]rate.Decision, len(reqs)))
		if !errors.Is(err, errDown) || src != sluice.SourceLocal {
			t.Errorf("%d requests, the local store failing: %v %v, want its error", len(reqs), src, err)
		}
	}
	local.state.Store(0)
	decisionOf(t, f, r)
	if st := f.Stats(); st.Fallback != 2 || st.Primary != 0 {
		t.Errorf("stats %+v: want 2 decisions by the failure mode, the local store's errors not counted", st)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, p, _, _ := setup(t, sluice.FallbackOptions{Mode: sluice.FailLocal, Local: cancelsCaller{cancel}})
	p.state.Store(1)
	if _, err := g.Decide(ctx, r); !errors.Is(err, context.Canceled) {
		t.Errorf("the caller gone during the local call: %v, want context.Canceled", err)
	}
	if st := g.Stats(); st.Fallback != 0 || st.Primary != 0 {
		t.Errorf("stats %+v: the call its caller ended counted as a decision", st)
	}
}

// While down, the primary is probed with one call at a time, after a
// backoff that doubles with each failed probe; the first probe that
// succeeds brings it back, and that is logged once.
func TestFallbackProbesAndRecovers(t *testing.T) {
	f, b, clk, logs := setup(t, sluice.FallbackOptions{MinBackoff: 100 * time.Millisecond, MaxBackoff: 300 * time.Millisecond})
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	if _, src := decideN(t, f, 1, r); src[sluice.SourcePrimary] != 1 {
		t.Fatalf("healthy: sources %v", src)
	}
	b.state.Store(1)
	calls := func() int64 { return b.calls.Load() }
	base := calls()
	decideN(t, f, 5, r) // the first fails and takes it down
	for _, step := range []struct {
		advance time.Duration
		probes  int64 // calls reaching the primary
	}{
		{99 * time.Millisecond, 0},
		{time.Millisecond, 1}, // 100ms: probe fails, next in 200ms
		{199 * time.Millisecond, 0},
		{time.Millisecond, 1}, // probe fails, next in 300ms (the max)
		{299 * time.Millisecond, 0},
		{time.Millisecond, 1}, // probe fails, next in 300ms
	} {
		clk.Advance(step.advance)
		before := calls()
		decideN(t, f, 5, r)
		if got := calls() - before; got != step.probes {
			t.Fatalf("after +%v: %d calls reached the primary, want %d", step.advance, got, step.probes)
		}
	}
	if got := calls() - base; got != 4 {
		t.Fatalf("%d calls reached a dead primary for 35 requests, want 4", got)
	}
	b.state.Store(0)
	clk.Advance(300 * time.Millisecond)
	_, src := decideN(t, f, 5, r)
	if src[sluice.SourcePrimary] != 5 {
		t.Fatalf("after recovery: sources %v, want all primary", src)
	}
	st := f.Stats()
	if st.Down || st.Outages != 1 || st.Recoveries != 1 || st.Probes != 4 {
		t.Errorf("stats %+v: want up, 1 outage, 1 recovery, 4 probes", st)
	}
	lines := logs.lines()
	if len(lines) != 2 || !strings.Contains(lines[0], "unavailable") || !strings.Contains(lines[1], "recovered") {
		t.Errorf("log %q: want one line down, one line up", lines)
	}
}

// emptyAnswers is a primary that answers an empty call without I/O, as
// the Redis store does, and fails the others while down.
type emptyAnswers struct{ *breakable }

func (e emptyAnswers) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	if len(reqs) == 0 {
		return rate.Combine(nil), nil
	}
	return e.breakable.DecideAll(ctx, reqs, out)
}

// A call with nothing to decide allows at once, and is no probe: a
// primary that answers it without I/O has not recovered.
func TestFallbackNothingToDecide(t *testing.T) {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	b := &breakable{Store: memory.New(memory.Options{Clock: clk})}
	f := sluice.NewFallback(emptyAnswers{b}, sluice.FallbackOptions{Mode: sluice.FailError, Clock: clk, MinBackoff: 100 * time.Millisecond})
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	b.state.Store(1)
	if _, err := f.DecideAll(context.Background(), []rate.Request{r}, make([]rate.Decision, 1)); err == nil {
		t.Fatal("a failing primary: no error")
	}
	clk.Advance(time.Second) // a probe is due
	d, src, err := f.DecideAllSource(context.Background(), nil, nil)
	if err != nil || !d.Allowed || src != sluice.SourcePrimary {
		t.Fatalf("nothing to decide while down: %v, %v, %v; want allowed at once", d, src, err)
	}
	if st := f.Stats(); !st.Down || st.Recoveries != 0 || st.Probes != 0 {
		t.Errorf("stats %+v: want still down, no probe, no recovery", st)
	}
}

// A primary that hangs costs at most the timeout per call.
func TestFallbackTimeout(t *testing.T) {
	f, b, _, _ := setup(t, sluice.FallbackOptions{Timeout: 20 * time.Millisecond, Mode: sluice.FailClosed})
	b.state.Store(2)
	start := time.Now()
	d, src, err := f.DecideAllSource(context.Background(), []rate.Request{{Key: "k", Limit: tenPerMinute, Cost: 1}}, make([]rate.Decision, 1))
	if took := time.Since(start); took > time.Second || took < 20*time.Millisecond {
		t.Errorf("a hanging primary took %v, want about the 20ms timeout", took)
	}
	if err != nil || d.Allowed || src != sluice.SourceFailClosed {
		t.Errorf("%v %v %v, want refused by fail_closed", d, src, err)
	}
}

// The caller's own errors are not the primary's: an invalid request, or a
// context that ended, returns an error and leaves the primary up.
func TestFallbackCallerErrors(t *testing.T) {
	f, b, _, _ := setup(t, sluice.FallbackOptions{})
	_, err := f.Decide(context.Background(), rate.Request{Key: "k", Limit: tenPerMinute, Cost: 11})
	if !errors.Is(err, rate.ErrCostExceedsCapacity) {
		t.Errorf("cost 11 of 10: %v, want ErrCostExceedsCapacity", err)
	}
	_, err = f.Decide(context.Background(), rate.Request{Key: "k", Limit: rate.Limit{Count: 0, Period: time.Second}, Cost: 1})
	if err == nil {
		t.Error("invalid limit: no error")
	}
	b.state.Store(2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond) // shorter than the 50ms timeout
	defer cancel()
	if _, err := f.Decide(ctx, rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller's deadline: %v, want DeadlineExceeded", err)
	}
	if st := f.Stats(); st.Down || st.Failures != 0 {
		t.Errorf("stats %+v: the caller's errors took the primary down", st)
	}
}

func TestParseFailureMode(t *testing.T) {
	for _, m := range []sluice.FailureMode{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal, sluice.FailError} {
		got, err := sluice.ParseFailureMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseFailureMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	// A policy file's spellings are read too.
	for name, want := range map[string]sluice.FailureMode{"open": sluice.FailOpen, "closed": sluice.FailClosed} {
		if got, err := sluice.ParseFailureMode(name); err != nil || got != want {
			t.Errorf("ParseFailureMode(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	// An unknown name is an error, and no mode that lets requests through.
	if got, err := sluice.ParseFailureMode("fail-open"); err == nil || got != sluice.FailClosed {
		t.Errorf("ParseFailureMode(fail-open) = %v, %v; want an error and fail_closed", got, err)
	}
}

// A Fallback in FailError mode reports a store that is down instead of
// deciding, so that the caller can apply its own policy, request by
// request, without waiting for a dead server on every call.
func ExampleNewFallback_failError() {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	primary := &breakable{Store: memory.New(memory.Options{Clock: clk})} // a remote store, in real use
	store := sluice.NewFallback(primary, sluice.FallbackOptions{Mode: sluice.FailError, Clock: clk})
	r := rate.Request{Key: "user:42", Limit: tenPerMinute, Cost: 1}

	primary.state.Store(1) // the server goes away
	for range 3 {
		_, err := store.Decide(context.Background(), r)
		switch {
		case errors.Is(err, sluice.ErrStoreDown):
			fmt.Println("known down, not sent: fail open")
		case err != nil:
			fmt.Println("failed:", err)
		}
	}
	fmt.Println("calls sent:", primary.calls.Load())

	primary.state.Store(0) // it comes back
	clk.Advance(sluice.DefaultProbeMinBackoff)
	d, err := store.Decide(context.Background(), r) // the probe
	fmt.Println("allowed:", d.Allowed, err)
	// Output:
	// failed: connection refused
	// known down, not sent: fail open
	// known down, not sent: fail open
	// calls sent: 1
	// allowed: true <nil>
}

// withDenyCache is a breakable store that, like the Redis store, remembers
// one refusal it can repeat without I/O.
type withDenyCache struct {
	*breakable
	denied string
}

func (w *withDenyCache) DecideCached(reqs []rate.Request, out []rate.Decision) (rate.Decision, bool) {
	if len(reqs) != 1 || reqs[0].Key != w.denied {
		return rate.Decision{}, false
	}
	out[0] = rate.Decision{Limit: reqs[0].Limit.Capacity(), RetryAfter: time.Minute}
	return out[0], true
}

// While the primary is down, a refusal it can still give without I/O wins
// over the failure mode's guess; other keys get the mode.
func TestFallbackAsksTheCacheWhileDown(t *testing.T) {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	w := &withDenyCache{breakable: &breakable{Store: memory.New(memory.Options{Clock: clk})}, denied: "spammer"}
	f := sluice.NewFallback(w, sluice.FallbackOptions{Mode: sluice.FailOpen, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	w.state.Store(1)
	if d := decisionOf(t, f, rate.Request{Key: "anyone", Limit: tenPerMinute, Cost: 1}); !d.Allowed {
		t.Fatalf("fail open while down: %v", d)
	}
	calls := w.calls.Load()
	out := make([]rate.Decision, 1)
	d, src, err := f.DecideAllSource(context.Background(), []rate.Request{{Key: "spammer", Limit: tenPerMinute, Cost: 1}}, out)
	if err != nil || d.Allowed || d.RetryAfter != time.Minute || src != sluice.SourcePrimary {
		t.Fatalf("a refusal in force while down: %v, %v, %v; want the cached refusal", d, src, err)
	}
	if w.calls.Load() != calls {
		t.Fatal("the cached refusal went to the primary")
	}
	if d := decisionOf(t, f, rate.Request{Key: "anyone", Limit: tenPerMinute, Cost: 1}); !d.Allowed {
		t.Fatalf("other keys while down: %v, want fail open", d)
	}
}

// shortDeadline is the deadline of a caller that a hung primary makes
// wait it out: short, as Envoy's are.
const shortDeadline = 5 * time.Millisecond

// callBy calls f as Envoy does, with a deadline of the caller's own, d of
// wall time: a hung primary costs the test d per call, while the
// Fallback's clock, fake, stands still unless the test moves it.
func callBy(f *sluice.Fallback, d time.Duration, r rate.Request) (rate.Decision, sluice.Source, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return f.DecideAllSource(ctx, []rate.Request{r}, make([]rate.Decision, 1))
}

// A primary that hangs while every caller's deadline comes before the
// Timeout is down once it has completed no call for longer than the
// silence bound (MaxSilence; Timeout when that is positive): the failure
// mode applies, a probe ended by its caller's deadline is a failed probe,
// and the first probe answered brings the primary back.
func TestFallbackHungPrimary(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  sluice.FallbackOptions
		hang  int32         // the primary's state
		bound time.Duration // 0: never down
		src   sluice.Source // of the calls while down
	}{
		{"timeout", sluice.FallbackOptions{Mode: sluice.FailClosed}, 2, sluice.DefaultFallbackTimeout, sluice.SourceFailClosed},
		{"max silence", sluice.FallbackOptions{Mode: sluice.FailLocal, Timeout: -1, MaxSilence: 200 * time.Millisecond}, 2, 200 * time.Millisecond, sluice.SourceLocal},
		{"default", sluice.FallbackOptions{Mode: sluice.FailError, Timeout: -1}, 2, sluice.DefaultFallbackMaxSilence, sluice.SourceError},
		{"deadline seen first", sluice.FallbackOptions{Mode: sluice.FailClosed, Timeout: -1, MaxSilence: 50 * time.Millisecond}, 3, 50 * time.Millisecond, sluice.SourceFailClosed},
		{"never", sluice.FallbackOptions{Mode: sluice.FailClosed, MaxSilence: -1}, 2, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.MinBackoff = 100 * time.Millisecond
			f, b, clk, _ := setup(t, c.opts)
			r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
			if _, src, err := callBy(f, time.Second, r); err != nil || src != sluice.SourcePrimary {
				t.Fatalf("healthy: %v %v", src, err)
			}
			b.state.Store(c.hang)
			silence := c.bound
			if silence == 0 {
				silence = time.Minute
			}
			// The first call ended unanswered starts the silence; each
			// next one is one step later on the Fallback's clock.
			for i, step := range []time.Duration{0, silence / 2, silence / 2, time.Millisecond} {
				clk.Advance(step)
				_, _, err := callBy(f, shortDeadline, r)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("step %d: %v, want the caller's DeadlineExceeded", i, err)
				}
				if want := c.bound > 0 && i == 3; f.Stats().Down != want {
					t.Fatalf("step %d, silent for %v of %v: stats %+v, want down %v", i, step, c.bound, f.Stats(), want)
				}
			}
			if c.bound == 0 {
				if st := f.Stats(); st.Failures != 0 {
					t.Fatalf("stats %+v: a caller's deadline counted with MaxSilence negative", st)
				}
				return
			}
			calls := b.calls.Load()
			for range 5 {
				d, src, err := callBy(f, shortDeadline, r)
				ok := src == c.src
				switch c.src {
				case sluice.SourceFailClosed:
					ok = ok && err == nil && !d.Allowed
				case sluice.SourceLocal:
					ok = ok && err == nil && d.Allowed
				case sluice.SourceError:
					ok = ok && errors.Is(err, sluice.ErrStoreDown)
				}
				if !ok {
					t.Fatalf("while down: %v %v %v, want decided by %v at once", d, src, err, c.src)
				}
			}
			if got := b.calls.Load() - calls; got != 0 {
				t.Fatalf("%d calls reached the hung primary while it was known down, want 0", got)
			}
			// The probe, still hung, fails and doubles the backoff: the
			// next call is not a probe, nor one 100ms later.
			for _, step := range []struct {
				advance time.Duration
				sent    int64
			}{{100 * time.Millisecond, 1}, {0, 0}, {100 * time.Millisecond, 0}} {
				clk.Advance(step.advance)
				calls := b.calls.Load()
				callBy(f, shortDeadline, r)
				if got := b.calls.Load() - calls; got != step.sent {
					t.Fatalf("after +%v: %d calls reached the hung primary, want %d (stats %+v)", step.advance, got, step.sent, f.Stats())
				}
			}
			if st := f.Stats(); st.Probes != 1 || st.Failures != 2 || !st.Down {
				t.Fatalf("after a probe ended by its caller's deadline: %+v, want 1 probe, 2 failures, down", st)
			}
			b.state.Store(0)
			clk.Advance(100 * time.Millisecond)
			if d, src, err := callBy(f, time.Second, r); err != nil || src != sluice.SourcePrimary || !d.Allowed {
				t.Fatalf("answered probe: %v %v %v, want decided by the primary", d, src, err)
			}
			if st := f.Stats(); st.Down || st.Outages != 1 || st.Recoveries != 1 {
				t.Errorf("stats %+v: want up, 1 outage, 1 recovery", st)
			}
		})
	}
}

// A loaded primary is slow for some calls, whose callers' deadlines pass,
// and completes others: it is not hung, however long that goes on, and
// the calls it completes end each silence before it is long enough. Nor
// is a slow call its failure when the primary reports the deadline before
// the caller's context does.
func TestFallbackLoadedPrimaryStaysUp(t *testing.T) {
	f, b, clk, _ := setup(t, sluice.FallbackOptions{Mode: sluice.FailOpen, Timeout: -1, MaxSilence: 50 * time.Millisecond})
	r := rate.Request{Key: "k", Limit: rate.Limit{Count: 1000, Period: time.Second}, Cost: 1}
	for i := range 40 { // 1.2s, 24 times the bound
		clk.Advance(30 * time.Millisecond)
		for _, slow := range []int32{2, 3} { // queued past the caller's deadline
			b.state.Store(slow)
			if _, _, err := callBy(f, shortDeadline, r); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("round %d, the slow call: %v, want DeadlineExceeded", i, err)
			}
		}
		b.state.Store(0)
		if _, src, err := callBy(f, time.Second, r); err != nil || src != sluice.SourcePrimary {
			t.Fatalf("round %d, the call completed: %v %v, want decided by the primary", i, src, err)
		}
	}
	if st := f.Stats(); st.Down || st.Failures != 0 || st.Primary != 40 {
		t.Errorf("stats %+v: a primary that answered every 30ms was declared down", st)
	}
}

// A call that the primary reports another call's deadline ended (a slow
// primary, whose client closed the connection at the deadline of the call
// on it) is no failure of a primary that still answers: its caller's time
// is not up, so the failure mode decides it, and like a call ended by its
// caller's deadline it counts only once the primary has completed no call
// for longer than MaxSilence. A probe it ends is a failed probe, and the
// next waits twice as long.
func TestFallbackOtherCallsDeadline(t *testing.T) {
	f, b, clk, _ := setup(t, sluice.FallbackOptions{Mode: sluice.FailClosed, Timeout: -1, MaxSilence: 50 * time.Millisecond})
	r := rate.Request{Key: "k", Limit: rate.Limit{Count: 1000, Period: time.Second}, Cost: 1}
	const other = 4
	for i, step := range []struct {
		advance                 time.Duration
		state                   int32
		src                     sluice.Source
		down                    bool
		failures, probes, calls uint64 // calls: sent to the primary so far
	}{
		{0, other, sluice.SourceFailClosed, false, 0, 0, 1},                            // the silence starts
		{40 * time.Millisecond, 0, sluice.SourcePrimary, false, 0, 0, 2},               // and ends
		{40 * time.Millisecond, other, sluice.SourceFailClosed, false, 0, 0, 3},        // a new one starts
		{50 * time.Millisecond, other, sluice.SourceFailClosed, false, 0, 0, 4},        // not longer than the bound
		{time.Millisecond, other, sluice.SourceFailClosed, true, 1, 0, 5},              // longer: down
		{0, 0, sluice.SourceFailClosed, true, 1, 0, 5},                                 // no probe due
		{sluice.DefaultProbeMinBackoff, other, sluice.SourceFailClosed, true, 2, 1, 6}, // a failed probe
		{sluice.DefaultProbeMinBackoff, 0, sluice.SourceFailClosed, true, 2, 1, 6},     // the backoff doubled
		{sluice.DefaultProbeMinBackoff, 0, sluice.SourcePrimary, false, 2, 2, 7},       // the probe answered
	} {
		clk.Advance(step.advance)
		b.state.Store(step.state)
		d, src, err := callBy(f, time.Minute, r)
		if err != nil || src != step.src || src == sluice.SourceFailClosed && d.Allowed {
			t.Fatalf("step %d: %v %v %v, want decided by %v", i, d, src, err, step.src)
		}
		st := f.Stats()
		if st.Down != step.down || st.Failures != step.failures || st.Probes != step.probes || uint64(b.calls.Load()) != step.calls {
			t.Fatalf("step %d: stats %+v, %d calls sent; want down %v, %d failures, %d probes, %d calls", i, st, b.calls.Load(), step.down, step.failures, step.probes, step.calls)
		}
	}
}

// cachesFirst is a primary that, like the Redis store, answers a refusal
// still in force from its deny cache, without I/O, before it hangs.
type cachesFirst struct{ *withDenyCache }

func (c cachesFirst) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	if d, ok := c.DecideCached(reqs, out); ok {
		return d, nil
	}
	return c.breakable.DecideAll(ctx, reqs, out)
}

// A hung primary's deny cache still answers, without I/O: that is no sign
// of life, and refusals of a spammer's key in between do not keep the
// primary from being declared down.
func TestFallbackHungPrimaryDenyCacheIsNoAnswer(t *testing.T) {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	w := &withDenyCache{breakable: &breakable{Store: memory.New(memory.Options{Clock: clk})}, denied: "spammer"}
	f := sluice.NewFallback(cachesFirst{w}, sluice.FallbackOptions{Mode: sluice.FailClosed, Timeout: -1, MaxSilence: 50 * time.Millisecond, Clock: clk})
	w.state.Store(2)
	spam := rate.Request{Key: "spammer", Limit: tenPerMinute, Cost: 1}
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	for i := range 6 { // 60ms
		if d, src, err := callBy(f, time.Second, spam); err != nil || d.Allowed || src != sluice.SourcePrimary {
			t.Fatalf("step %d, the spammer: %v %v %v, want the cached refusal", i, d, src, err)
		}
		if _, _, err := callBy(f, shortDeadline, r); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("step %d: %v, want DeadlineExceeded", i, err)
		}
		clk.Advance(10 * time.Millisecond)
	}
	if _, _, err := callBy(f, shortDeadline, r); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after 60ms: %v, want DeadlineExceeded", err)
	}
	if st := f.Stats(); !st.Down || st.Outages != 1 {
		t.Errorf("stats %+v: a hung primary whose deny cache answered was not declared down", st)
	}
}

// A caller that cancels (the client went away) ends the call: that never
// counts against the primary, however long it has been silent, unless it
// comes at the deadline, as a gRPC client's reset does.
func TestFallbackCancelIsNoFailure(t *testing.T) {
	f, b, clk, _ := setup(t, sluice.FallbackOptions{Mode: sluice.FailClosed, Timeout: -1, MaxSilence: 50 * time.Millisecond})
	b.state.Store(2)
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	cancelled := func() error {
		// A deadline as Envoy sends, far off; the client goes first.
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		timer := time.AfterFunc(shortDeadline, cancel)
		defer timer.Stop()
		_, err := f.Decide(ctx, r)
		return err
	}
	deadline := func() error {
		_, _, err := callBy(f, shortDeadline, r)
		return err
	}
	// A gRPC server's context when its client's deadline passes: the
	// client resets the call, which cancels it a moment before the
	// server's own copy of the deadline passes. The moment, 1ms, is timed
	// from that deadline: a timer set late cancels later, never earlier.
	reset := func() error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		dl := time.Now().Add(shortDeadline + time.Millisecond)
		timer := time.AfterFunc(time.Until(dl)-time.Millisecond, cancel)
		defer timer.Stop()
		_, err := f.Decide(resetCtx{ctx, dl}, r)
		return err
	}
	for _, step := range []struct {
		advance time.Duration
		call    func() error
		err     error
		down    bool
	}{
		{0, cancelled, context.Canceled, false},
		{time.Second, cancelled, context.Canceled, false},
		{time.Second, cancelled, context.Canceled, false},
		{0, deadline, context.DeadlineExceeded, false}, // the silence starts
		{time.Second, cancelled, context.Canceled, false},
		{0, reset, context.Canceled, true}, // at the deadline: counts
	} {
		clk.Advance(step.advance)
		if err := step.call(); !errors.Is(err, step.err) {
			t.Fatalf("after +%v: %v, want %v", step.advance, err, step.err)
		}
		if st := f.Stats(); st.Down != step.down {
			t.Fatalf("after +%v, a call ended by %v: stats %+v, want down %v", step.advance, step.err, st, step.down)
		}
	}
	if st := f.Stats(); st.Failures != 1 {
		t.Errorf("stats %+v: want 1 failure, the reset's after a second of silence", st)
	}
}

// resetCtx is a context with a deadline that only its cancellation ends.
type resetCtx struct {
	context.Context
	deadline time.Time
}

func (r resetCtx) Deadline() (time.Time, bool) { return r.deadline, true }

// A probe that its caller's deadline ends went unanswered, as every call
// since the primary went down did: it is a failed probe, and doubles the
// backoff, however the primary went down and however long ago. A primary
// that errs and then hangs (a server stopped mid-failover) would
// otherwise take every call as a probe, one at a time, each waiting out
// its caller's deadline, until the silence since the outage passed
// MaxSilence.
func TestFallbackProbeEndedByDeadlineAfterError(t *testing.T) {
	for _, c := range []struct {
		name string
		opts sluice.FallbackOptions
	}{
		{"max silence above the backoff", sluice.FallbackOptions{Timeout: -1}}, // 1s of silence
		{"timeout above the backoff", sluice.FallbackOptions{MinBackoff: 10 * time.Millisecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Mode = sluice.FailError
			f, b, clk, _ := setup(t, c.opts)
			backoff := c.opts.MinBackoff
			if backoff == 0 {
				backoff = sluice.DefaultProbeMinBackoff
			}
			r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
			if _, src, err := callBy(f, time.Second, r); err != nil || src != sluice.SourcePrimary {
				t.Fatalf("healthy: %v %v", src, err)
			}
			b.state.Store(1)
			if _, _, err := callBy(f, time.Second, r); !errors.Is(err, errDown) {
				t.Fatalf("the failing call: %v, want the primary's error", err)
			}
			b.state.Store(2)
			for i, step := range []struct {
				advance time.Duration
				sent    int64 // calls reaching the hung primary
			}{
				{backoff, 1}, // the probe runs out its caller's deadline
				{0, 0},
				{0, 0},
				{backoff, 0}, // the backoff doubled
				{backoff, 1},
				{0, 0},
			} {
				clk.Advance(step.advance)
				calls := b.calls.Load()
				callBy(f, shortDeadline, r)
				if got := b.calls.Load() - calls; got != step.sent {
					t.Fatalf("step %d, +%v: %d calls reached the hung primary, want %d (stats %+v)", i, step.advance, got, step.sent, f.Stats())
				}
			}
			if st := f.Stats(); !st.Down || st.Probes != 2 || st.Failures != 3 || st.Outages != 1 {
				t.Errorf("stats %+v: want down, 2 probes, 3 failures (the error, 2 probes), 1 outage", st)
			}
		})
	}
}

// byKey is a primary whose every call answers, fails or hangs until its
// caller's context ends, as its first request's key says.
type byKey struct{ sluice.Store }

func (p byKey) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	switch reqs[0].Key {
	case "hang":
		<-ctx.Done()
		return rate.Decision{}, ctx.Err()
	case "fail":
		return rate.Decision{}, errDown
	}
	return p.Store.DecideAll(ctx, reqs, out)
}

// Calls answered, failed and run out by their callers' deadlines, from
// several goroutines at once while the clock moves: the success path
// reads the silence's state without the lock. Whatever the interleaving,
// no probe stays in flight, and once the primary answers and a probe is
// due, the next call is decided by it. Run with -race.
func TestFallbackSilenceConcurrent(t *testing.T) {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	p := byKey{memory.New(memory.Options{Clock: clk})}
	f := sluice.NewFallback(p, sluice.FallbackOptions{Mode: sluice.FailOpen, Timeout: -1, MaxSilence: time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond, Clock: clk})
	limit := rate.Limit{Count: 1 << 30, Period: time.Second}
	keys := []string{"ok", "hang", "ok", "fail", "ok", "hang", "ok"}
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			for i := range 150 {
				callBy(f, time.Millisecond, rate.Request{Key: keys[(g+i)%len(keys)], Limit: limit, Cost: 1})
			}
		})
	}
	stop := make(chan struct{})
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		for {
			select {
			case <-stop:
				return
			default:
				clk.Advance(100 * time.Microsecond)
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-moved
	clk.Advance(4 * time.Millisecond)
	if _, src, err := callBy(f, time.Second, rate.Request{Key: "ok", Limit: limit, Cost: 1}); err != nil || src != sluice.SourcePrimary {
		t.Fatalf("the primary answering, a probe due: %v %v, want decided by the primary (stats %+v)", src, err, f.Stats())
	}
	if st := f.Stats(); st.Down || st.Outages != st.Recoveries || st.Outages == 0 {
		t.Errorf("stats %+v: want up, as many recoveries as outages, at least one", st)
	}
}

// answers is a primary that admits every request at once: through it, a
// benchmark measures the Fallback's own cost.
type answers struct{}

func (a answers) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	var out [1]rate.Decision
	return a.DecideAll(ctx, []rate.Request{r}, out[:])
}

func (answers) DecideAll(_ context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	for i, r := range reqs {
		out[i] = rate.Decision{Allowed: true, Limit: r.Limit.Capacity(), Remaining: r.Limit.Capacity() - r.Cost}
	}
	return rate.Combine(out[:len(reqs)]), nil
}

// envoyCtx is the context of a call that, as each of Envoy's does, has a
// deadline 20ms away, before the Fallback's Timeout: it never ends.
type envoyCtx struct{ context.Context }

func (envoyCtx) Deadline() (time.Time, bool) { return time.Now().Add(20 * time.Millisecond), true }

// BenchmarkFallback measures the success path, the hot one: with a timer
// of the Fallback's own per call (the default Timeout, a caller without a
// deadline), without one (a caller's deadline comes first, or Timeout
// -1), and from every core at once.
func BenchmarkFallback(b *testing.B) {
	for _, c := range []struct {
		name     string
		timeout  time.Duration
		deadline bool
		parallel bool
	}{
		{"timeout", 0, false, false},
		{"caller deadline", 0, true, false},
		{"no timeout", -1, false, false},
		{"no timeout parallel", -1, false, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			f := sluice.NewFallback(answers{}, sluice.FallbackOptions{Timeout: c.timeout})
			var ctx context.Context = context.Background()
			if c.deadline {
				ctx = envoyCtx{ctx}
			}
			r := rate.Request{Key: "user:1234567", Limit: tenPerMinute, Cost: 1}
			b.ReportAllocs()
			if c.parallel {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if d, err := f.Decide(ctx, r); err != nil || !d.Allowed {
							b.Fatal(d, err)
						}
					}
				})
				return
			}
			for b.Loop() {
				if d, err := f.Decide(ctx, r); err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
			}
		})
	}
}

// A look (cost 0) consumes nothing and is never refused, by any store:
// fail_closed too admits it while the primary is down, reporting nothing
// remaining, and refuses the requests that would spend. WaitN(0) through
// it returns at once.
func TestFallbackFailClosedLooks(t *testing.T) {
	f, b, _, _ := setup(t, sluice.FallbackOptions{Mode: sluice.FailClosed})
	b.state.Store(1)
	look := rate.Request{Key: "k", Limit: tenPerMinute}
	spend := rate.Request{Key: "j", Limit: tenPerMinute, Cost: 1}
	for range 2 { // the call that finds the primary failing, then one not sent
		out := make([]rate.Decision, 2)
		d, src, err := f.DecideAllSource(context.Background(), []rate.Request{look, spend}, out)
		if err != nil || d.Allowed || src != sluice.SourceFailClosed {
			t.Fatalf("a look and a spend: %v %v %v, want refused by fail_closed", d, src, err)
		}
		if !out[0].Allowed || out[0].Remaining != 0 || out[1].Allowed {
			t.Errorf("a look and a spend: %v and %v, want the look alone allowed (0 remaining), the spend refused", out[0], out[1])
		}
		if d := decisionOf(t, f, look); !d.Allowed || d.Remaining != 0 || d.RetryAfter != 0 {
			t.Errorf("a look alone: %v, want allowed, 0 remaining", d)
		}
	}
	// The limiter's clock is another fake one, far enough ahead that a
	// context deadline set from it is a real one in the future.
	waits := ratetest.NewClock(start)
	lim, err := sluice.NewLimiter(sluice.LimiterOptions{Limits: []rate.Limit{tenPerMinute}, Store: f, Clock: waits})
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.WaitN(withDeadline(t, waits, 10*time.Second), "k", 0); err != nil {
		t.Errorf("WaitN(0) while down: %v, want nil at once", err)
	}
	if slept, n := waits.Slept(); n != 0 {
		t.Errorf("WaitN(0) while down slept %v in %d calls, want none", slept, n)
	}
}

// A refusal from the primary's deny cache is the primary's decision, as
// its Source says: Stats counts it among the primary's, so that Primary
// and Fallback add up to every decision made.
func TestFallbackStatsCountCachedRefusals(t *testing.T) {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	w := &withDenyCache{breakable: &breakable{Store: memory.New(memory.Options{Clock: clk})}, denied: "spammer"}
	f := sluice.NewFallback(w, sluice.FallbackOptions{Mode: sluice.FailOpen, Clock: clk})
	spam := rate.Request{Key: "spammer", Limit: tenPerMinute, Cost: 1}
	other := rate.Request{Key: "anyone", Limit: tenPerMinute, Cost: 1}
	decisionOf(t, f, other) // the primary's
	w.state.Store(1)
	decisionOf(t, f, other) // fails: fail_open's
	for range 3 {
		if d := decisionOf(t, f, spam); d.Allowed {
			t.Fatalf("the spammer while down: %v, want the cached refusal", d)
		}
	}
	decisionOf(t, f, other) // fail_open's
	if st := f.Stats(); st.Primary != 4 || st.Fallback != 2 {
		t.Errorf("stats %+v: want 4 decisions by the primary (3 from its cache), 2 by the failure mode", st)
	}
}

// A call that the Fallback's own Timeout ends is a failure of the primary,
// decided by the failure mode, even when the caller's deadline is due
// within a moment of it (a client that allows a little more than the
// Timeout): the caller's deadline did not end the call, the Timeout did.
//
// The caller's deadline is 1ms after the Timeout, so a goroutine held
// back for over a millisecond between making the caller's context and the
// Fallback's look at it (a loaded machine) finds the caller's deadline
// first, as it should, and sets no Timeout of its own. Such a try proves
// nothing either way, and the test tries again, up to 5 times; a Fallback
// that let the caller's deadline win over its own Timeout fails every
// try.
func TestFallbackTimeoutJustBeforeTheCallersDeadline(t *testing.T) {
	var problems []string
	for try := range 5 {
		f, b, _, _ := setup(t, sluice.FallbackOptions{Timeout: 20 * time.Millisecond, Mode: sluice.FailClosed})
		b.state.Store(2)
		d, src, err := callBy(f, 21*time.Millisecond, rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1})
		st := f.Stats()
		if err == nil && !d.Allowed && src == sluice.SourceFailClosed && st.Down && st.Failures == 1 {
			return
		}
		problems = append(problems, fmt.Sprintf("try %d: %v %v %v, stats %+v", try+1, d, src, err, st))
	}
	t.Errorf("want refused by fail_closed, down after 1 failure, the call the Timeout ended:\n%s", strings.Join(problems, "\n"))
}

// Calls from many goroutines at one instant, a probe due, the primary
// failing: the probe that fails moves the next one a backoff away, so it
// is the only one, however the calls interleave. A call that saw the
// probe due before it failed must not probe again once it has. A stress
// test: without the guarantee, it fails in most runs with -race.
func TestFallbackOneProbeAtAnInstant(t *testing.T) {
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	for i := range 300 {
		clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
		f := sluice.NewFallback(unreachable{}, sluice.FallbackOptions{MinBackoff: time.Second, Clock: clk})
		f.Decide(context.Background(), r) // fails: the primary is down
		clk.Advance(time.Second)          // a probe is due
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					f.Decide(context.Background(), r)
				}
			})
		}
		wg.Wait()
		if st := f.Stats(); st.Probes != 1 {
			t.Fatalf("run %d: stats %+v, want 1 probe at one instant, the backoff doubled after it", i, st)
		}
	}
}

// held is a breakable store whose calls for the key "held" each wait for
// the test to answer them: arrived receives a call's answer channel once
// the call has reached the store, and the call returns the error sent on
// it, errHang meaning that it waits for its context to end, or, given
// nil, decides. The other keys go to the breakable store.
type held struct {
	*breakable
	arrived chan chan error
}

var errHang = errors.New("hangs until its context ends")

func (h *held) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	if len(reqs) == 0 || reqs[0].Key != "held" {
		return h.breakable.DecideAll(ctx, reqs, out)
	}
	h.calls.Add(1)
	answer := make(chan error)
	h.arrived <- answer
	switch err := <-answer; err {
	case nil:
		return h.breakable.Store.DecideAll(ctx, reqs, out)
	case errHang:
		<-ctx.Done()
		return rate.Decision{}, ctx.Err()
	default:
		return rate.Decision{}, err
	}
}

func (h *held) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	var out [1]rate.Decision
	return h.DecideAll(ctx, []rate.Request{r}, out[:])
}

func setupHeld(t *testing.T, opts sluice.FallbackOptions) (*sluice.Fallback, *held, *ratetest.Clock, *logLines) {
	t.Helper()
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	h := &held{breakable: &breakable{Store: memory.New(memory.Options{Clock: clk})}, arrived: make(chan chan error)}
	logs := &logLines{}
	opts.Clock = clk
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	return sluice.NewFallback(h, opts), h, clk, logs
}

// outcome is what a Fallback returned for a call.
type outcome struct {
	d   rate.Decision
	src sluice.Source
	err error
}

// inFlight is a call for the key "held", sent to the held store and not
// answered yet.
type inFlight struct {
	answer chan error
	done   chan outcome
}

// send starts a call for the key "held" and returns once it has reached
// the primary.
func (h *held) send(t *testing.T, f *sluice.Fallback, ctx context.Context) inFlight {
	t.Helper()
	c := inFlight{done: make(chan outcome, 1)}
	go func() {
		d, src, err := f.DecideAllSource(ctx, []rate.Request{{Key: "held", Limit: tenPerMinute, Cost: 1}}, make([]rate.Decision, 1))
		c.done <- outcome{d, src, err}
	}()
	select {
	case c.answer = <-h.arrived:
	case o := <-c.done:
		t.Fatalf("the call was not sent to the primary: %v %v %v", o.d, o.src, o.err)
	}
	return c
}

// reply makes the primary end the call with err (see held), and returns
// what the Fallback returned.
func (c inFlight) reply(err error) outcome {
	c.answer <- err
	return <-c.done
}

// dueCtx is the context of a call whose deadline is now, though it has
// not ended yet: a store that reports its deadline passed is believed, as
// the Redis client is, which sees it pass on its connection first.
type dueCtx struct{ context.Context }

func (dueCtx) Deadline() (time.Time, bool) { return time.Now(), true }

// A call sent before an outage that fails only once a probe has brought
// the primary back, an error, the Fallback's own Timeout or its caller's
// deadline ending it, tells of the old outage, not of the primary now: it
// does not take the recovered primary down again. Its own error or
// failure mode decision is still the caller's, and an error or a timeout
// still counts among the Failures.
func TestFallbackOldCallFailingAfterRecovery(t *testing.T) {
	deadline := fmt.Errorf("read: %w", context.DeadlineExceeded)
	for _, c := range []struct {
		name     string
		opts     sluice.FallbackOptions
		ctx      context.Context
		end      error // how the primary ends the old calls
		old      int   // how many old calls
		want     outcome
		failures uint64
	}{
		{"error", sluice.FallbackOptions{Mode: sluice.FailError}, context.Background(), errDown, 1,
			outcome{src: sluice.SourceError, err: errDown}, 2},
		{"timeout", sluice.FallbackOptions{Mode: sluice.FailClosed, Timeout: 20 * time.Millisecond}, context.Background(), errHang, 1,
			outcome{src: sluice.SourceFailClosed}, 2},
		// Two calls ended by their callers' deadlines further apart than
		// MaxSilence, the primary idle after the probe.
		{"callers' deadlines", sluice.FallbackOptions{Mode: sluice.FailLocal, Timeout: -1, MaxSilence: 50 * time.Millisecond}, dueCtx{context.Background()}, deadline, 2,
			outcome{src: sluice.SourcePrimary, err: context.DeadlineExceeded}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.MinBackoff = 100 * time.Millisecond
			f, h, clk, logs := setupHeld(t, c.opts)
			r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
			if _, src := decideN(t, f, 1, r); src[sluice.SourcePrimary] != 1 {
				t.Fatalf("healthy: sources %v", src)
			}
			var old []inFlight
			for range c.old {
				old = append(old, h.send(t, f, c.ctx))
			}
			h.state.Store(1) // another call fails: down
			if _, src := decideN(t, f, 1, r); src[sluice.SourcePrimary] != 0 {
				t.Fatalf("the failing call: sources %v", src)
			}
			h.state.Store(0)
			clk.Advance(100 * time.Millisecond) // the probe brings it back
			if _, src := decideN(t, f, 1, r); src[sluice.SourcePrimary] != 1 {
				t.Fatalf("the probe: sources %v", src)
			}
			for i, call := range old {
				clk.Advance(51 * time.Millisecond)
				o := call.reply(c.end)
				if o.src != c.want.src || !errors.Is(o.err, c.want.err) || (c.want.err == nil) != (o.err == nil) {
					t.Errorf("old call %d: %v %v %v, want %v %v", i, o.d, o.src, o.err, c.want.src, c.want.err)
				}
			}
			st := f.Stats()
			if st.Down || st.Outages != 1 || st.Recoveries != 1 || st.Failures != c.failures {
				t.Errorf("stats %+v: want up, 1 outage, 1 recovery, %d failures", st, c.failures)
			}
			calls := h.calls.Load()
			if _, src := decideN(t, f, 1, r); src[sluice.SourcePrimary] != 1 || h.calls.Load() != calls+1 {
				t.Errorf("after the old calls: sources %v, want decided by the primary", src)
			}
			if lines := logs.lines(); len(lines) != 2 {
				t.Errorf("log %q: want one line down, one line up", lines)
			}
		})
	}
}

// A call sent before the primary failed and answered after it may have
// been answered before the failure: it is the primary's decision, but it
// brings the primary back no more than an old failure takes it down. The
// next calls go to the failure mode, not to the failing primary, until a
// probe is answered.
func TestFallbackOldAnswerIsNoRecovery(t *testing.T) {
	f, h, clk, logs := setupHeld(t, sluice.FallbackOptions{Mode: sluice.FailClosed, MinBackoff: 100 * time.Millisecond})
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	if _, src := decideN(t, f, 1, r); src[sluice.SourcePrimary] != 1 {
		t.Fatalf("healthy: sources %v", src)
	}
	old := h.send(t, f, context.Background())
	h.state.Store(1)
	if _, src := decideN(t, f, 1, r); src[sluice.SourceFailClosed] != 1 {
		t.Fatalf("the failing call: sources %v", src)
	}
	if o := old.reply(nil); o.err != nil || o.src != sluice.SourcePrimary || !o.d.Allowed {
		t.Fatalf("the old call answered: %v %v %v, want admitted by the primary", o.d, o.src, o.err)
	}
	calls := h.calls.Load()
	if _, src := decideN(t, f, 3, r); src[sluice.SourceFailClosed] != 3 || h.calls.Load() != calls {
		t.Errorf("after the old answer: sources %v, %d calls sent to the failing primary; want 3 by fail_closed, none sent", src, h.calls.Load()-calls)
	}
	if st := f.Stats(); !st.Down || st.Outages != 1 || st.Recoveries != 0 || st.Primary != 2 {
		t.Errorf("stats %+v: want down, 1 outage, no recovery, 2 decisions by the primary", st)
	}
	h.state.Store(0)
	clk.Advance(100 * time.Millisecond)
	if _, src := decideN(t, f, 1, r); src[sluice.SourcePrimary] != 1 {
		t.Fatalf("the probe: sources %v", src)
	}
	if st := f.Stats(); st.Down || st.Recoveries != 1 || st.Probes != 1 {
		t.Errorf("stats %+v: want up, 1 recovery, by the 1 probe", st)
	}
	if lines := logs.lines(); len(lines) != 2 {
		t.Errorf("log %q: want one line down, one line up", lines)
	}
}

// pausesInCache is a breakable store with a deny cache that holds a call
// for the key "paused" when the Fallback asks it, as it does of a primary
// down, until the test resumes it.
type pausesInCache struct {
	*breakable
	asked, resume chan struct{}
}

func (p *pausesInCache) DecideCached(reqs []rate.Request, out []rate.Decision) (rate.Decision, bool) {
	if reqs[0].Key == "paused" {
		p.asked <- struct{}{}
		<-p.resume
	}
	return rate.Decision{}, false
}

// A call that found the primary down, a probe due, and reaches it only
// after another call's probe has brought it back, is no probe: an
// ordinary call of the primary up, held to MaxSilence if its caller's
// deadline ends it, and not counted among the Probes.
func TestFallbackNoProbeOnceRecovered(t *testing.T) {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	p := &pausesInCache{breakable: &breakable{Store: memory.New(memory.Options{Clock: clk})}, asked: make(chan struct{}), resume: make(chan struct{})}
	f := sluice.NewFallback(p, sluice.FallbackOptions{Mode: sluice.FailClosed, Timeout: -1, MaxSilence: 50 * time.Millisecond, MinBackoff: 100 * time.Millisecond, Clock: clk})
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	p.state.Store(1)
	decideN(t, f, 1, r) // down
	clk.Advance(100 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		_, _, err := callBy(f, shortDeadline, rate.Request{Key: "paused", Limit: tenPerMinute, Cost: 1})
		done <- err
	}()
	<-p.asked // it found the primary down
	p.state.Store(0)
	if _, src := decideN(t, f, 1, r); src[sluice.SourcePrimary] != 1 {
		t.Fatalf("the probe: sources %v", src)
	}
	// Slow now: a call that its caller's deadline ends starts a silence,
	// and the paused one ends 1ms into it, far within MaxSilence.
	p.state.Store(2)
	if _, _, err := callBy(f, shortDeadline, r); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the slow call: %v, want DeadlineExceeded", err)
	}
	clk.Advance(time.Millisecond)
	close(p.resume)
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the paused call: %v, want its caller's DeadlineExceeded", err)
	}
	if st := f.Stats(); st.Down || st.Outages != 1 || st.Probes != 1 || st.Failures != 1 {
		t.Errorf("stats %+v: want up, 1 outage, 1 probe, 1 failure", st)
	}
}

// A Fallback over no store is a mistake the constructor names, not a nil
// dereference at the first decision.
func TestNewFallbackNilPrimary(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "nil primary store") {
			t.Errorf("recovered %v, want a panic naming the nil primary store", r)
		}
	}()
	sluice.NewFallback(nil, sluice.FallbackOptions{})
}

// Instances is the count FailLocal divides each limit by, as the options
// gave it, with zero or negative meaning one.
func TestFallbackInstances(t *testing.T) {
	for _, c := range []struct{ opt, want int }{{4, 4}, {1, 1}, {0, 1}, {-3, 1}} {
		f := sluice.NewFallback(memory.New(memory.Options{}), sluice.FallbackOptions{Mode: sluice.FailLocal, Instances: c.opt})
		if got := f.Instances(); got != c.want {
			t.Errorf("Instances %d: Instances() = %d, want %d", c.opt, got, c.want)
		}
	}
}
