package redis_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// call records one decision made under load.
type call struct {
	start, end time.Time
	allowed    bool
	source     sluice.Source
	err        error
}

// load runs callers goroutines deciding through f until stop is closed,
// each on its own keys, and returns every call.
func load(f *sluice.Fallback, callers int, stop <-chan struct{}) func() []call {
	var mu sync.Mutex
	var calls []call
	var wg sync.WaitGroup
	limit := rate.Limit{Algorithm: rate.GCRA, Count: 1000, Period: time.Second}
	for i := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			out := make([]rate.Decision, 1)
			var mine []call
			for {
				select {
				case <-stop:
					mu.Lock()
					calls = append(calls, mine...)
					mu.Unlock()
					return
				default:
				}
				r := rate.Request{Key: fmt.Sprintf("load:%d:%d", i, rng.IntN(100)), Limit: limit, Cost: 1}
				c := call{start: time.Now()}
				d, src, err := f.DecideAllSource(context.Background(), []rate.Request{r}, out)
				c.end, c.allowed, c.source, c.err = time.Now(), d.Allowed, src, err
				mine = append(mine, c)
				time.Sleep(time.Millisecond) // a steady load, not a busy loop
			}
		})
	}
	return func() []call { wg.Wait(); return calls }
}

// stalls records when the test's process did not run, as on a machine
// whose CPUs other processes keep busy: a goroutine that sleeps a
// millisecond at a time notes each wake-up that came late.
type stalls struct {
	mu   sync.Mutex
	gaps [][2]time.Time // from, to
}

// watchStalls records stalls until stop is closed.
func watchStalls(stop <-chan struct{}) *stalls {
	st := &stalls{}
	go func() {
		prev := time.Now()
		for {
			select {
			case <-stop:
				return
			default:
			}
			time.Sleep(time.Millisecond)
			now := time.Now()
			if now.Sub(prev) > 5*time.Millisecond {
				st.mu.Lock()
				st.gaps = append(st.gaps, [2]time.Time{prev.Add(time.Millisecond), now})
				st.mu.Unlock()
			}
			prev = now
		}
	}()
	return st
}

// during returns how long the process did not run between from and to.
func (st *stalls) during(from, to time.Time) time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	var d time.Duration
	for _, g := range st.gaps {
		start, end := g[0], g[1]
		if start.Before(from) {
			start = from
		}
		if end.After(to) {
			end = to
		}
		if end.After(start) {
			d += end.Sub(start)
		}
	}
	return d
}

// Redis killed (and later restarted on the same port) or paused (SIGSTOP,
// later SIGCONT) under load, with each failure mode: no call errs or
// blocks much past the 50ms timeout, every call made while Redis is gone
// is decided by the mode, and decisions come from Redis again once it is
// back, but after a call that took the timeout (a loaded machine holds
// one that long now and then), which takes Redis down again until a
// probe, as it should.
func TestRedisOutage(t *testing.T) {
	const timeout = 50 * time.Millisecond
	// How long a call may take, not counting the time the whole process
	// did not run (see stalls): the timeout, and a second for a loaded
	// 2-core machine running the race detector, which can leave a caller
	// unscheduled for hundreds of milliseconds when the others run. A
	// paused Redis stays paused for longer, so that a call held until it
	// answers again takes longer still; the store's own CallTimeout is
	// longer again, so that only the Fallback's timeout can end such a
	// call in time.
	const stall = timeout + time.Second
	for _, tc := range []struct {
		outage  string
		stopFor time.Duration
	}{
		{"kill", 300 * time.Millisecond},
		{"pause", stall + 300*time.Millisecond},
	} {
		t.Run(tc.outage, func(t *testing.T) {
			srv := redistest.Start(t)
			modes := []sluice.FailureMode{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal}
			var fallbacks []*sluice.Fallback
			for _, m := range modes {
				s, err := redis.Dial("redis://"+srv.Addr(), redis.Options{CallTimeout: 10 * stall})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				fallbacks = append(fallbacks, sluice.NewFallback(s, sluice.FallbackOptions{
					Mode: m, Timeout: timeout, Instances: 2,
					MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
				}))
			}
			// waitUp waits until every fallback has heard from Redis again
			// and returns when that was, deciding through each that is down,
			// as the load does, so that it probes even when the load has
			// stopped.
			limit := rate.Limit{Algorithm: rate.GCRA, Count: 1000, Period: time.Second}
			waitUp := func(what string) time.Time {
				t.Helper()
				deadline := time.Now().Add(5 * time.Second)
				for {
					now, down := time.Now(), false
					for _, f := range fallbacks {
						if f.Stats().Down {
							down = true
							_, _, _ = f.DecideAllSource(context.Background(), []rate.Request{{Key: "up", Limit: limit, Cost: 1}}, make([]rate.Decision, 1))
						}
					}
					if !down {
						return now
					}
					if now.After(deadline) {
						t.Fatalf("Redis back for 5s, %s, and a fallback is still down", what)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			stop := make(chan struct{})
			stalled := watchStalls(stop)
			var results []func() []call
			for _, f := range fallbacks {
				results = append(results, load(f, 4, stop))
			}

			time.Sleep(100 * time.Millisecond)
			if tc.outage == "kill" {
				srv.Kill()
			} else {
				srv.Pause()
			}
			// Not before: until Kill and Pause return, Redis may answer.
			down := time.Now()
			time.Sleep(tc.stopFor)
			back := time.Now()
			if tc.outage == "kill" {
				srv.Restart()
			} else {
				srv.Resume()
			}
			recovered := waitUp("under load")
			// The load goes on until Redis has decided for it again, a
			// few times each: at least 100ms, longer on a loaded machine.
			var primary []uint64
			for _, f := range fallbacks {
				primary = append(primary, f.Stats().Primary)
			}
			time.Sleep(100 * time.Millisecond)
			for i, f := range fallbacks {
				for f.Stats().Primary < primary[i]+20 && time.Since(recovered) < 5*time.Second {
					time.Sleep(10 * time.Millisecond)
				}
			}
			// A call the loaded machine holds past the timeout takes Redis
			// down again, as it should, until a probe: the fallbacks come
			// back before the load stops, and after, for a call that was
			// in flight as it did.
			waitUp("under load, again")
			close(stop)
			calls := make([][]call, len(fallbacks))
			for i := range fallbacks {
				calls[i] = results[i]()
			}
			waitUp("the load stopped")

			for i, f := range fallbacks {
				mode := modes[i]
				var during, after, afterPrimary, excused int
				var slowest, slowestRunning time.Duration
				// The first moment after the recovery when the Fallback's
				// timeout may have ended a call sent since Redis was back:
				// from then on, decisions by the mode may be that call's
				// outage, not a failure to come back.
				var timedOut time.Time
				for _, c := range calls[i] {
					if took := c.end.Sub(c.start); took >= timeout && c.start.After(back) && c.end.After(recovered) {
						if at := c.start.Add(timeout); timedOut.IsZero() || at.Before(timedOut) {
							timedOut = at
						}
					}
				}
				for _, c := range calls[i] {
					if c.err != nil {
						t.Fatalf("%v: a call failed: %v", mode, c.err)
					}
					slowest = max(slowest, c.end.Sub(c.start))
					slowestRunning = max(slowestRunning, c.end.Sub(c.start)-stalled.during(c.start, c.end))
					switch {
					case c.start.After(down) && c.end.Before(back):
						during++
						if c.source == sluice.SourcePrimary {
							t.Fatalf("%v: a call while Redis was down says Redis decided", mode)
						}
						if mode == sluice.FailOpen && !c.allowed || mode == sluice.FailClosed && c.allowed {
							t.Fatalf("%v: while down, allowed = %t", mode, c.allowed)
						}
					case c.start.After(recovered):
						after++
						switch {
						case c.source == sluice.SourcePrimary:
							afterPrimary++
						case !timedOut.IsZero() && !c.end.Before(timedOut):
							excused++
						}
					}
				}
				st := f.Stats()
				t.Logf("%v: %d calls, %d while down, slowest %v (%v with the process running), after recovery %d by Redis, %d by the mode after a call timed out; stats %+v",
					mode, len(calls[i]), during, slowest, slowestRunning, afterPrimary, excused, st)
				if slowestRunning > stall {
					t.Errorf("%v: a call took %v with the process running, timeout %v", mode, slowestRunning, timeout)
				}
				if during < 10 {
					t.Errorf("%v: only %d calls while Redis was down", mode, during)
				}
				if st.Down || st.Outages < 1 || st.Recoveries != st.Outages {
					t.Errorf("%v: stats %+v, want recovered after each outage", mode, st)
				}
				if afterPrimary == 0 || afterPrimary+excused != after {
					t.Errorf("%v: after recovery %d of %d calls decided by Redis, and %d by the mode after a call timed out; want all by Redis but those",
						mode, afterPrimary, after, excused)
				}
			}
		})
	}
}

// hungStore returns a store with opts on a redis-server that has answered
// once and now hangs, and the limit it was asked with. The answer (a dial
// and the script's load) goes through another store on the same client,
// with the default CallTimeout: opts' may be far too short for a loaded
// machine, and Redis, not yet paused, is no part of what the test times.
// The store's Stats count none of it.
func hungStore(t *testing.T, opts redis.Options) (*redis.Store, rate.Limit) {
	t.Helper()
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	warm := redis.New(client, redis.Options{})
	t.Cleanup(warm.Close)
	s := redis.New(client, opts)
	t.Cleanup(s.Close)
	limit := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Second}
	if _, err := warm.Decide(context.Background(), rate.Request{Key: "warm", Limit: limit, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	t.Cleanup(srv.Resume)
	return s, limit
}

// With Redis hung, CallTimeout ends every decision, the queued ones too:
// each of many concurrent callers, none with a deadline of its own, gets
// context.DeadlineExceeded within about twice the timeout (a caller may
// queue behind a call on the wire), with room for a loaded machine.
// However many decisions queue, none waits much more: a caller that has
// queued for longer than CallTimeout when its turn comes fails at once,
// rather than waiting a CallTimeout for each of the batches ahead of it
// (a batch carries at most 256 keys, two go at a time: the last of 32
// batches would wait 16 CallTimeouts, 3.2s, far past the bound).
func TestCallTimeout(t *testing.T) {
	for _, tt := range []struct {
		name               string
		callers, perCaller int
	}{
		{"a few callers", 32, 1},
		{"many batches queued", 128, 64}, // 8192 keys: 32 full batches
	} {
		t.Run(tt.name, func(t *testing.T) {
			const timeout = 200 * time.Millisecond
			// Twice the timeout, and a second for a loaded 2-core machine
			// running the race detector, whose collector may hold callers
			// that long.
			const bound = 2*timeout + time.Second
			s, limit := hungStore(t, redis.Options{CallTimeout: timeout})
			// Every request is made before any caller starts, and the
			// callers start together: the time measured is the wait for
			// Redis, not for the others' allocations.
			reqs := make([][]rate.Request, tt.callers)
			for i := range reqs {
				reqs[i] = make([]rate.Request, tt.perCaller)
				for j := range reqs[i] {
					reqs[i][j] = rate.Request{Key: fmt.Sprintf("c%d:k%d", i, j), Limit: limit, Cost: 1}
				}
			}
			errs := make([]error, tt.callers)
			took := make([]time.Duration, tt.callers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range tt.callers {
				wg.Go(func() {
					out := make([]rate.Decision, tt.perCaller)
					<-start
					begin := time.Now()
					_, errs[i] = s.DecideAll(context.Background(), reqs[i], out)
					took[i] = time.Since(begin)
				})
			}
			close(start)
			wg.Wait()
			for i := range tt.callers {
				if !errors.Is(errs[i], context.DeadlineExceeded) {
					t.Errorf("caller %d: err = %v, want context.DeadlineExceeded", i, errs[i])
				}
				if took[i] > bound {
					t.Errorf("caller %d waited %v for a hung Redis, want about 2×%v at most", i, took[i], timeout)
				}
			}
		})
	}
}

// The zero Options bound a call too, by DefaultCallTimeout: a caller with
// no deadline of its own, or a later one, is not held for ever by a hung
// Redis. A negative CallTimeout is no bound but the caller's context. The
// client answers at once and records the deadline each call gave it, which
// the store sets from the real time (context.WithTimeout): a call made
// between before and after has its bound between before and after plus
// the timeout. (That the client ends a call at its deadline on a hung
// Redis is TestCallTimeout's and TestNoRetryOnTimeout's to show.)
func TestDefaultCallTimeout(t *testing.T) {
	client := newClient(t, redistest.Start(t).Addr())
	limit := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Second}
	for _, tt := range []struct {
		name        string
		callTimeout time.Duration
		caller      time.Duration // the caller's deadline, from the call; 0 for none
		want        string        // "default": DefaultCallTimeout from the call; "caller's"; "none"
	}{
		{"zero Options, no deadline", 0, 0, "default"},
		{"zero Options, a later deadline", 0, time.Hour, "default"},
		{"zero Options, an earlier deadline", 0, redis.DefaultCallTimeout / 2, "caller's"},
		{"CallTimeout -1, no deadline", -1, 0, "none"},
		{"CallTimeout -1, a later deadline", -1, time.Hour, "caller's"},
	} {
		c := &deadlineClient{Client: client}
		s := redis.New(c, redis.Options{CallTimeout: tt.callTimeout})
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if tt.caller > 0 {
			ctx, cancel = context.WithTimeout(ctx, tt.caller)
		}
		before := time.Now()
		_, err := s.Decide(ctx, rate.Request{Key: "k", Limit: limit, Cost: 1})
		after := time.Now()
		cancel()
		s.Close()
		if !errors.Is(err, errAnswered) {
			t.Fatalf("%s: err = %v, want the client's %v", tt.name, err, errAnswered)
		}
		seen := c.seen()
		if len(seen) == 0 {
			t.Fatalf("%s: the client saw no call", tt.name)
		}
		callers, _ := ctx.Deadline()
		// since shows a deadline as the time after the start, or none.
		since := func(dl time.Time) string {
			if dl.IsZero() {
				return "none"
			}
			return dl.Sub(before).String()
		}
		for i, dl := range seen {
			switch tt.want {
			case "default":
				if lo, hi := before.Add(redis.DefaultCallTimeout), after.Add(redis.DefaultCallTimeout); dl.Before(lo) || dl.After(hi) {
					t.Errorf("%s: call %d has its deadline at %s, want %s to %s after the start", tt.name, i, since(dl), since(lo), since(hi))
				}
			case "caller's":
				if !dl.Equal(callers) {
					t.Errorf("%s: call %d has its deadline at %s, want the caller's, %s after the start", tt.name, i, since(dl), since(callers))
				}
			case "none":
				if !dl.IsZero() {
					t.Errorf("%s: call %d has its deadline at %s after the start, want none", tt.name, i, since(dl))
				}
			}
		}
	}
}

// errAnswered is how deadlineClient answers.
var errAnswered = errors.New("answered at once")

// deadlineClient is a client that answers every command at once with
// errAnswered and records the deadline of its context, zero for none. The
// rest is Client's.
type deadlineClient struct {
	rueidis.Client
	mu        sync.Mutex
	deadlines []time.Time
}

func (c *deadlineClient) Do(ctx context.Context, _ rueidis.Completed) rueidis.RedisResult {
	dl, _ := ctx.Deadline()
	c.mu.Lock()
	c.deadlines = append(c.deadlines, dl)
	c.mu.Unlock()
	return rueidis.NewErrorResult(errAnswered)
}

// seen returns the deadlines recorded, one a command.
func (c *deadlineClient) seen() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadlines
}

// A call that times out on a hung Redis is not sent again: its deadline
// has passed, which no retry mends, and a retry would only dial a server
// that does not answer and, once it does, leave it the same script twice.
// (The client reports the deadline as it passes, a moment before the
// context itself says so.)
func TestNoRetryOnTimeout(t *testing.T) {
	s, limit := hungStore(t, redis.Options{CallTimeout: 20 * time.Millisecond, DisableCoalescing: true})
	for i := range 10 {
		if _, err := s.Decide(context.Background(), rate.Request{Key: "k", Limit: limit, Cost: 1}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d to a hung Redis: %v, want context.DeadlineExceeded", i, err)
		}
	}
	if st := s.Stats(); st.Retries != 0 || st.ScriptCalls != 10 {
		t.Errorf("10 calls to a hung Redis: stats %+v, want 10 script calls and no retry", st)
	}
}

// failingClient is a client on which every command fails with err, as on
// a connection that broke or timed out; with atDeadline, once the
// command's deadline has passed. The rest is client's.
type failingClient struct {
	rueidis.Client
	err        error
	atDeadline bool
}

func (c failingClient) Do(ctx context.Context, _ rueidis.Completed) rueidis.RedisResult {
	if dl, ok := ctx.Deadline(); ok && c.atDeadline {
		time.Sleep(time.Until(dl))
	}
	return rueidis.NewErrorResult(c.err)
}

// A call's deadline is context.DeadlineExceeded however the client words
// it: a dial or a read whose deadline, set from the call's, fires before
// the context's timer fails with "i/o timeout" (os.ErrDeadlineExceeded),
// which the store reports as the deadline it is, in the client's words.
// sluice.Fallback tells a call's deadline from Redis's failure by
// errors.Is(err, context.DeadlineExceeded). A timeout while the call's
// time is not up is a dead connection, and so is not the deadline.
func TestTimeoutAtDeadline(t *testing.T) {
	client := newClient(t, redistest.Start(t).Addr())
	dialTimeout := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6379}, Err: os.ErrDeadlineExceeded}
	readTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	patient, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		name       string
		ctx        context.Context
		opts       redis.Options
		err        error
		atDeadline bool
		want       bool
	}{
		{"dial timed out at the caller's deadline", lateContext{context.Background()}, redis.Options{}, dialTimeout, false, true},
		{"read timed out at the caller's deadline", lateContext{context.Background()}, redis.Options{}, readTimeout, false, true},
		{"dial timed out at CallTimeout", context.Background(), redis.Options{CallTimeout: 20 * time.Millisecond}, dialTimeout, true, true},
		{"read timed out, time not up", patient, redis.Options{}, readTimeout, false, false},
		{"connection refused at the deadline", lateContext{context.Background()}, redis.Options{}, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false, false},
	} {
		c.opts.DisableCoalescing = true
		s := redis.New(failingClient{client, c.err, c.atDeadline}, c.opts)
		_, err := s.Decide(c.ctx, rate.Request{Key: "k", Limit: rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Second}, Cost: 1})
		s.Close()
		if err == nil || !strings.HasSuffix(err.Error(), c.err.Error()) {
			t.Errorf("%s: err = %v, want the client's %q", c.name, err, c.err)
			continue
		}
		if got := errors.Is(err, context.DeadlineExceeded); got != c.want {
			t.Errorf("%s: %v is context.DeadlineExceeded: %t, want %t", c.name, err, got, c.want)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%s: %v does not wrap the client's error", c.name, err)
		}
	}
}

// lateContext is a context between its deadline and the moment its timer
// fires: the deadline has passed, and Err does not say so yet.
type lateContext struct{ context.Context }

func (lateContext) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// Only a call that failed on its connection is sent again: not one whose
// deadline has passed, however the client words it (a context error, a
// dial or a read that timed out at the deadline) and even before the
// context says so, nor one the caller or the client gave up. A read that
// timed out with no deadline of the call's is a dead connection, and is
// retried; so is a call failed with a deadline while its own has not
// passed, or it has none: the client closed its connection at another
// call's deadline.
func TestRetryable(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	expired, cancel := context.WithDeadline(live, time.Now().Add(-time.Second))
	defer cancel()
	patient, cancel := context.WithTimeout(live, time.Minute)
	defer cancel()
	_, dialTimeout := (&net.Dialer{}).DialContext(expired, "tcp", "127.0.0.1:1")
	if dialTimeout == nil {
		t.Fatal("a dial past its deadline did not fail")
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"connection reset", live, syscall.ECONNRESET, true},
		{"connection closed", live, io.EOF, true},
		{"read timed out, no deadline", live, os.ErrDeadlineExceeded, true},
		{"deadline reported before the context's", lateContext{live}, context.DeadlineExceeded, false},
		{"deadline wrapped", lateContext{live}, fmt.Errorf("redis: %w", context.DeadlineExceeded), false},
		{"dial timed out at the deadline", lateContext{live}, dialTimeout, false},
		{"read timed out at the deadline", lateContext{live}, os.ErrDeadlineExceeded, false},
		{"another call's deadline", patient, context.DeadlineExceeded, false},
		{"another call's deadline, none of its own", live, context.DeadlineExceeded, false},
		{"another call's dial timed out", patient, dialTimeout, false},
		{"caller gave up", cancelled, context.Canceled, false},
		{"client closed", live, rueidis.ErrClosing, false},
	} {
		if got := redis.Retryable(c.ctx, c.err); got != c.want {
			t.Errorf("%s (%v): retryable = %t, want %t", c.name, c.err, got, c.want)
		}
	}
}

// Redis paused for less than the breaker's silence bound, and two calls
// on one connection: one with Envoy's 20ms deadline, then one with a 5s
// deadline. The client closes the connection at the first call's deadline
// and fails the call queued behind it with that deadline, as it fails any
// call that takes the connection up before it is replaced. That is not the
// second call's deadline: the store says so (OtherDeadline), and the
// Fallback decides the call by its failure mode, counting nothing against
// Redis, which answers again within the silence bound: the breaker keeps
// Redis up. Which call reaches the connection first is the scheduler's
// choice, so the sequence runs several times, each on a client of its own.
func TestOtherCallsDeadline(t *testing.T) {
	srv := redistest.Start(t)
	t.Cleanup(srv.Resume)
	limit := rate.Limit{Algorithm: rate.GCRA, Count: 1000, Period: time.Second}
	const tries = 10
	failedSo := 0
	for try := range tries {
		// One connection, which the two calls share, as two of many
		// callers share one of a few under load.
		s, err := redis.DialOption(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, PipelineMultiplex: -1}, redis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		f := sluice.NewFallback(s, sluice.FallbackOptions{Mode: sluice.FailError, Timeout: -1, MaxSilence: 200 * time.Millisecond})
		decide := func(d time.Duration, key string) error {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			_, err := f.Decide(ctx, rate.Request{Key: fmt.Sprintf("%s:%d", key, try), Limit: limit, Cost: 1})
			return err
		}
		if err := decide(5*time.Second, "warm"); err != nil {
			t.Fatalf("try %d, Redis up: %v", try, err)
		}
		srv.Pause()
		paused := time.Now()
		sent := s.Stats().ScriptCalls
		short, patient := make(chan error, 1), make(chan error, 1)
		go func() { short <- decide(20*time.Millisecond, "short") }()
		for s.Stats().ScriptCalls == sent {
			if time.Since(paused) > 5*time.Second {
				t.Fatalf("try %d: the call with 20ms to go did not start: %+v", try, s.Stats())
			}
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(5 * time.Millisecond) // for the short call to reach the connection
		go func() { patient <- decide(5*time.Second, "patient") }()
		time.Sleep(60*time.Millisecond - time.Since(paused))
		srv.Resume()
		shortErr, err := <-short, <-patient
		st := f.Stats()
		s.Close()
		var other interface{ OtherDeadline() bool }
		switch {
		case err == nil:
		case errors.As(err, &other) && other.OtherDeadline():
			failedSo++
		default:
			t.Fatalf("try %d: the call with 5s to go failed: %v (the one with 20ms: %v)", try, err, shortErr)
		}
		if st.Down || st.Failures != 0 {
			t.Fatalf("try %d: Redis paused for 60ms, answering again: breaker %+v, want up (the call with 5s to go: %v)", try, st, err)
		}
	}
	t.Logf("the call with 5s to go failed at the other's deadline in %d of %d tries", failedSo, tries)
}

// After Redis restarts, the client's connections to the old process are
// dead, and each fails on its first use: the store retries such a call
// once on a fresh connection, so no decision fails for it.
func TestRestartNoFailures(t *testing.T) {
	srv := redistest.Start(t)
	s, err := redis.Dial("redis://"+srv.Addr(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	limit := rate.Limit{Algorithm: rate.GCRA, Count: 1000, Period: time.Second}
	decideAll := func(what string) (failed int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range 64 {
			wg.Go(func() {
				_, err := s.Decide(context.Background(), rate.Request{Key: fmt.Sprintf("k%d", i), Limit: limit, Cost: 1})
				if err != nil {
					mu.Lock()
					failed++
					if failed == 1 {
						t.Logf("%s: %v", what, err)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return failed
	}
	if n := decideAll("before"); n != 0 {
		t.Fatalf("%d decisions failed before the restart", n)
	}
	srv.Kill()
	srv.Restart()
	if n := decideAll("after the restart"); n != 0 {
		t.Errorf("%d of 64 decisions failed after Redis restarted", n)
	}
}

// Dial turns rueidis's client-side cache off, which the store never
// reads: no CLIENT TRACKING is sent, so an ACL user granted only what
// decisions need connects and decides.
func TestDialNeedsNoTracking(t *testing.T) {
	srv := redistest.Start(t)
	srv.MustDo("ACL", "SETUSER", "sluice", "on", ">pw", "~lim:*", "+@all", "-client")
	s, err := redis.Dial("redis://sluice:pw@"+srv.Addr()+"/0", redis.Options{Prefix: "lim:"})
	if err != nil {
		t.Fatalf("Dial as a user without CLIENT: %v", err)
	}
	defer s.Close()
	limit := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Second}
	if d, err := s.Decide(context.Background(), rate.Request{Key: "k", Limit: limit, Cost: 1}); err != nil || !d.Allowed {
		t.Errorf("a decision as that user: %v, %v", d, err)
	}
}
