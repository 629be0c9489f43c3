package retry

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// paceStep is one request of a paced sequence: the wait wanted before it
// is sent, and the headers of its response.
type paceStep struct {
	wantWait time.Duration
	kv       []string
}

// checkPacing sends requests one after another, with Pacing on, to a
// server that answers each with the headers of its step, and checks the
// wait before each send.
func checkPacing(t *testing.T, steps []paceStep) {
	t.Helper()
	clock := newFakeClock(testStart)
	i := 0
	var sentAt []time.Time
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		sentAt = append(sentAt, clock.Now())
		kv := steps[i].kv
		i++
		return reply(req, 200, nil, kv...), nil
	})
	tr := NewTransport(next, Options{Clock: clock, Pacing: true})
	for k, s := range steps {
		before := clock.Now()
		resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://api.example.test/", nil))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("step %d: %v, %v", k, resp, err)
		}
		if got := sentAt[k].Sub(before); got != s.wantWait {
			t.Errorf("step %d: waited %v before sending, want %v", k, got, s.wantWait)
		}
	}
}

// TestPacingSteps sends requests one after another to a server whose
// RateLimit answers are scripted, and checks the wait before each send.
func TestPacingSteps(t *testing.T) {
	steps := []paceStep{
		{0, []string{"RateLimit", `"api";r=1;t=10`}},                                   // 1 left for 10s: space by 5s
		{5 * time.Second, []string{"RateLimit", `"api";r=0;t=5`}},                      // none left, reset in 5s
		{5 * time.Second, []string{"RateLimit", `"api";r=100;t=60`}},                   // plenty: stop pacing
		{0, []string{"RateLimit", `"burst";r=5;t=1, "api";r=50;t=60, "day";r=2;t=30`}}, // widest spacing of the low items: 30s/3
		{10 * time.Second, []string{"X-RateLimit-Remaining", "20"}},                    // no usable quota: state unchanged
		{10 * time.Second, nil}, // nothing reported: unchanged
		{10 * time.Second, []string{"RateLimit-Policy", `"x";q=5;w=1`}},        // policy alone: nothing remaining known
		{0, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "40"}}, // the day quota reset at 40s
		{40 * time.Second, []string{"RateLimit", "garbage;;"}},
		{0, nil}, // reset passed: no wait
	}
	checkPacing(t, steps)
}

// TestPacingOffByDefault checks that without Options.Pacing the quota
// headers change nothing.
func TestPacingOffByDefault(t *testing.T) {
	clock := newFakeClock(testStart)
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		return reply(req, 200, nil, "RateLimit", `"api";r=0;t=60`), nil
	})
	tr := NewTransport(next, Options{Clock: clock})
	for range 3 {
		if _, err := tr.RoundTrip(mustRequest(t, "GET", "http://api.example.test/", nil)); err != nil {
			t.Fatal(err)
		}
	}
	if s := clock.Sleeps(); len(s) != 0 {
		t.Errorf("slept %v with pacing off", s)
	}
}

// TestPacingLegacyUnixReset checks the absolute form of X-RateLimit-Reset.
func TestPacingLegacyUnixReset(t *testing.T) {
	clock := newFakeClock(testStart)
	reset := strconv.FormatInt(testStart.Add(30*time.Second).Unix(), 10)
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		return reply(req, 200, nil, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", reset), nil
	})
	tr := NewTransport(next, Options{Clock: clock, Pacing: true})
	for range 2 {
		if _, err := tr.RoundTrip(mustRequest(t, "GET", "http://api.example.test/", nil)); err != nil {
			t.Fatal(err)
		}
	}
	if s := clock.Sleeps(); len(s) != 1 || s[0] != 30*time.Second {
		t.Errorf("slept %v, want one 30s wait for the reset", s)
	}
}

// TestPacingRespectsDeadline checks that a pacing wait that would cross
// the request's deadline is skipped and the request sent at once, and that
// other hosts are not paced.
func TestPacingRespectsDeadline(t *testing.T) {
	start := time.Now() // compared with a real context deadline
	clock := newFakeClock(start)
	n := 0
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		n++
		return reply(req, 200, nil, "RateLimit", `"api";r=0;t=60`), nil
	})
	tr := NewTransport(next, Options{Clock: clock, Pacing: true})
	if _, err := tr.RoundTrip(mustRequest(t, "GET", "http://a.example.test/", nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.RoundTrip(mustRequest(t, "GET", "http://b.example.test/", nil)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(10*time.Second))
	defer cancel()
	if _, err := tr.RoundTrip(mustRequest(t, "GET", "http://a.example.test/", nil).WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	if n != 3 || len(clock.Sleeps()) != 0 {
		t.Errorf("%d sends, sleeps %v; want 3 sends and no sleep", n, clock.Sleeps())
	}
}

// TestPacerSpacesConcurrentRequests checks that requests waiting at the
// same moment get successive slots, and that one wait never exceeds the
// bound.
func TestPacerSpacesConcurrentRequests(t *testing.T) {
	p := newPacer(10, time.Minute)
	h := http.Header{}
	h.Set("RateLimit", `"api";r=2;t=30`)
	p.observe("h", h, testStart, testStart)
	var got []time.Duration
	for range 3 {
		got = append(got, p.reserve("h", testStart, time.Time{}, false))
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("reserve waits %v, want %v", got, want)
		}
	}

	h.Set("RateLimit", `"api";r=0;t=86400000`) // a bogus, enormous reset
	p.observe("h", h, testStart, testStart)
	if w := p.reserve("h", testStart, time.Time{}, false); w != time.Minute {
		t.Errorf("wait %v for an enormous reset, want the bound %v", w, time.Minute)
	}
}

// TestPacerMemoryBounded checks that the pacer forgets hosts past its
// bound.
func TestPacerMemoryBounded(t *testing.T) {
	p := newPacer(10, time.Minute)
	h := http.Header{}
	h.Set("RateLimit", `"api";r=0;t=30`)
	for i := range 3 * maxPacedHosts {
		p.observe(strconv.Itoa(i), h, testStart, testStart)
	}
	if n := len(p.hosts); n > maxPacedHosts {
		t.Errorf("pacer holds %d hosts, bound %d", n, maxPacedHosts)
	}
}

// TestPacingAfterReset checks that a fresh report replaces the spacing
// booked under an older, wider one: after waiting out an exhausted quota,
// a new window with r left is paced at t/(r+1), not at the old interval.
func TestPacingAfterReset(t *testing.T) {
	steps := []paceStep{
		{0, []string{"RateLimit", `"api";r=0;t=9`}},               // exhausted: wait for the reset
		{9 * time.Second, []string{"RateLimit", `"api";r=2;t=9`}}, // new window, 2 left: space by 3s
		{3 * time.Second, []string{"RateLimit", `"api";r=1;t=6`}},
		{3 * time.Second, []string{"RateLimit", `"api";r=0;t=3`}},
		{3 * time.Second, nil}, // the reset
	}
	checkPacing(t, steps)
}
