package server

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate/ratetest"
)

// slowPolicy lets one request through every 10s per client, and holds
// the next for its unit for up to a minute: longer than the shutdown.
const slowPolicy = `
policies:
  - name: slow
    key: ip
    limits: ["gcra 1/10s"]
    max_delay: 1m
`

// checkStatus is the status and Retry-After of a request to the check
// endpoint, or the error that kept it from an answer.
type checkStatus struct {
	code  int
	retry string
	err   error
}

func (c checkStatus) String() string {
	if c.err != nil {
		return c.err.Error()
	}
	return fmt.Sprintf("%d, Retry-After %q", c.code, c.retry)
}

// getCheck asks /check of ts, with a bound on a failing test's wait.
func getCheck(ts *testServer) checkStatus {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + ts.Addrs().Check + "/check")
	if err != nil {
		return checkStatus{err: err}
	}
	resp.Body.Close()
	return checkStatus{code: resp.StatusCode, retry: resp.Header.Get("Retry-After")}
}

// A request held for its unit when the shutdown begins, whose unit comes
// after the drain's end (the delay and the timeout), is answered 503 with
// Retry-After at once, and counted as a request whose hold ended early
// (throttled, its unit spent), rather than held until the shutdown
// timeout cuts it with no answer. A request that comes during the
// shutdown delay and would be held past the end is refused at once
// (429), reserving nothing. Nothing is cut. At start, the policy whose
// max_delay exceeds the shutdown timeout is warned of.
func TestShutdownAnswersHeldRequests(t *testing.T) {
	clock := &heldClock{Clock: ratetest.NewClock(start), waiting: make(chan time.Duration, 1), release: make(chan struct{})}
	ts := startServer(t, slowPolicy, Options{Clock: clock, ShutdownDelay: 2 * time.Second, ShutdownTimeout: time.Second})
	if !strings.Contains(ts.logs.String(), "policy=slow max_delay=1m0s shutdown_timeout=1s") {
		t.Errorf("no warning at start of max_delay beyond the shutdown timeout")
	}
	if got := getCheck(ts); got.code != http.StatusOK {
		t.Fatalf("first request: %v, want 200", got)
	}
	held := make(chan checkStatus, 1)
	go func() { held <- getCheck(ts) }()
	select {
	case w := <-clock.waiting:
		if w != 10*time.Second {
			t.Fatalf("second request held for %v, want 10s", w)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second request was not held")
	}
	ts.cancel()
	select {
	case got := <-held:
		if got.code != http.StatusServiceUnavailable || got.retry != "10" {
			t.Errorf("the request held at shutdown: %v, want 503 with Retry-After 10", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request held at shutdown was not answered")
	}
	eventually(t, "the drain to begin", func() bool { return ts.draining.Load() })
	got := getCheck(ts)
	if n, _ := strconv.Atoi(got.retry); got.code != http.StatusTooManyRequests || n <= 0 {
		t.Errorf("a request during the shutdown delay: %v, want 429 at once with a Retry-After", got)
	}
	select {
	case w := <-clock.waiting:
		t.Errorf("a request was held for %v during the drain", w)
	default:
	}
	ts.wantMetrics("during the drain",
		`sluice_decisions_total{policy="slow",result="throttled"} 1`,
		`sluice_decisions_total{policy="slow",result="refused"} 1`,
		`sluice_requests_total{code="503",listener="check"} 1`,
	)
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ts.logs.String(), "were cut") {
		t.Error("requests were cut at the shutdown timeout")
	}
}
