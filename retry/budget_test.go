package retry

import (
	"context"
	"errors"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBudgetSteps walks the budget through a table a reader can check by
// hand: ratio 0.5, at least 1 retry, window 10s in 1s buckets.
func TestBudgetSteps(t *testing.T) {
	type step struct {
		at    time.Duration // since the budget's origin
		req   int           // requests recorded first
		allow bool          // expected answer to one retry asked for after them
	}
	// Each comment gives the window's requests and retries before the ask,
	// and the allowance max(1, 0.5·requests).
	table := []step{
		{0, 0, true},                          // 0 req, 0 retries; 1: 1 ≤ 1
		{0, 0, false},                         // 0 req, 1 retry; 1: 2 > 1
		{time.Second, 3, false},               // 3 req, 1 retry; 1.5: 2 > 1.5
		{2 * time.Second, 1, true},            // 4 req, 1 retry; 2: 2 ≤ 2
		{2 * time.Second, 0, false},           // 4 req, 2 retries; 2: 3 > 2
		{10 * time.Second, 0, true},           // second 0 slid out: 4 req, 1 retry; 2: 2 ≤ 2
		{10 * time.Second, 0, false},          // 4 req, 2 retries; 2: 3 > 2
		{12 * time.Second, 0, false},          // seconds 3..12: 0 req, 1 retry; 1: 2 > 1
		{21 * time.Second, 0, true},           // seconds 12..21: empty; 1: 1 ≤ 1
		{-5 * time.Second, 0, true},           // clock stepped back: nothing counted there; no panic
		{200 * 365 * 24 * time.Hour, 0, true}, // far future: empty window
	}
	b := newBudget(0.5, 1, 10*time.Second, testStart)
	for i, s := range table {
		now := testStart.Add(s.at)
		for range s.req {
			b.request(now)
		}
		if got := b.allowRetry(now); got != s.allow {
			t.Fatalf("step %d (at %v, +%d requests): allowRetry = %v, want %v", i, s.at, s.req, got, s.allow)
		}
	}
}

// TestBudgetRatioNaN checks that a BudgetRatio of NaN, which no
// comparison matches, means the default ratio like any other ratio that
// is not positive, instead of an allowance no retry ever exceeds. Two
// requests refused, with at least one retry allowed: one retry in all,
// where without a budget each request would be retried to MaxAttempts.
func TestBudgetRatioNaN(t *testing.T) {
	attempts := 0
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		attempts++
		return reply(req, http.StatusServiceUnavailable, nil), nil
	})
	tr := NewTransport(next, Options{Clock: newFakeClock(testStart), BudgetRatio: math.NaN(), BudgetMinRetries: 1})
	for range 2 {
		if _, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil)); err != nil {
			t.Fatal(err)
		}
	}
	if attempts != 3 {
		t.Errorf("%d attempts for 2 requests, want 3: one retry, from the budget", attempts)
	}
}

// TestBudgetBoundsRetriesUnderFlood floods a Transport with requests that
// all fail, 100 a second for 20 seconds from 4 goroutines, and checks that
// in every 10-second window retries stay within 10% of requests, while
// without a budget each request would be retried MaxAttempts-1 times.
func TestBudgetBoundsRetriesUnderFlood(t *testing.T) {
	const (
		seconds   = 20
		perSecond = 100
		workers   = 4
	)
	run := func(opts Options) (retriesPerSecond []int64) {
		clock := newFakeClock(testStart)
		clock.frozen = true // only the test moves time, one second per round
		var attempts atomic.Int64
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			attempts.Add(1)
			return reply(req, http.StatusServiceUnavailable, nil), nil
		})
		opts.Clock = clock
		tr := NewTransport(next, opts)
		for range seconds {
			before := attempts.Load()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := w; i < perSecond; i += workers {
						resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil))
						if err != nil {
							t.Error(err)
							return
						}
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			retriesPerSecond = append(retriesPerSecond, attempts.Load()-before-perSecond)
			clock.Advance(time.Second)
		}
		return retriesPerSecond
	}

	unbudgeted := run(Options{NoBudget: true})
	for s, r := range unbudgeted {
		if r != perSecond*(DefaultMaxAttempts-1) {
			t.Fatalf("without budget, second %d saw %d retries, want %d", s, r, perSecond*(DefaultMaxAttempts-1))
		}
	}

	budgeted := run(Options{}) // ratio 0.1, minimum 10, window 10s
	var total int64
	for end := range seconds {
		var retries int64
		for s := max(0, end-9); s <= end; s++ {
			retries += budgeted[s]
		}
		requests := int64(min(end+1, 10) * perSecond)
		if limit := max(int64(DefaultBudgetMinRetries), requests/10); retries > limit {
			t.Errorf("window ending at second %d: %d retries for %d requests, budget %d", end, retries, requests, limit)
		}
		total += budgeted[end]
	}
	// The window slides: the second half of the flood earns retries too.
	var late int64
	for _, r := range budgeted[10:] {
		late += r
	}
	if late == 0 || total == 0 {
		t.Errorf("retries per second %v: the budget never let a retry through", budgeted)
	}
}

// cancellingClock is a fakeClock whose first Sleep cancels the request
// first, as a caller giving up during the wait for a retry.
type cancellingClock struct {
	*fakeClock
	cancel context.CancelFunc
}

func (c *cancellingClock) Sleep(ctx context.Context, d time.Duration) error {
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	return c.fakeClock.Sleep(ctx, d)
}

// TestCancelledWaitRefundsBudget checks that a retry the caller gives up
// during its wait costs no retry from the budget: it was never sent, and
// the budget bounds retries sent.
func TestCancelledWaitRefundsBudget(t *testing.T) {
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		return reply(req, http.StatusServiceUnavailable, nil), nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := &cancellingClock{fakeClock: newFakeClock(testStart), cancel: cancel}
	tr := NewTransport(next, Options{Clock: clock, BudgetMinRetries: 1})
	resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil).WithContext(ctx))
	if resp != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, %v; want context.Canceled", resp, err)
	}
	if !tr.budget.allowRetry(clock.Now()) {
		t.Error("a retry given up during its wait spent the only retry of the budget")
	}
}
