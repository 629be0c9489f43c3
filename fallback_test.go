package sluice_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
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
// is gone or stuck.
type breakable struct {
	sluice.Store
	state atomic.Int32 // 0 works, 1 fails, 2 hangs
	calls atomic.Int64
}

var errDown = errors.New("connection refused")

func (b *breakable) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	b.calls.Add(1)
	switch b.state.Load() {
	case 1:
		return rate.Decision{}, errDown
	case 2:
		<-ctx.Done()
		return rate.Decision{}, ctx.Err()
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
		if err != nil {
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
// fail_closed refuses, local admits each instance's share.
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

// FailLocal divides Count and Burst by the number of instances, rounding
// up, and refuses a cost above an instance's share.
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
	for _, m := range []sluice.FailureMode{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal} {
		got, err := sluice.ParseFailureMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseFailureMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := sluice.ParseFailureMode("open"); err == nil {
		t.Error("ParseFailureMode(open): no error")
	}
}
