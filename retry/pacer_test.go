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
// same moment get successive slots.
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
}

// TestPacerSlots follows the slots that requests waiting at once, or
// arriving later, reserve after one report, in steps a reader can check by
// hand. No slot lies past the reset: the report says nothing of the quota
// after it, and a request arriving then would be sent at once, so one that
// has been waiting since before must not leave later. A slot past the
// bound on a single wait holds its request at the bound without being
// booked, so the slots after it keep their spacing.
func TestPacerSlots(t *testing.T) {
	type step struct {
		at   time.Duration // since the report
		want time.Duration // the wait reserved
	}
	cases := []struct {
		name    string
		maxWait time.Duration
		report  string // RateLimit
		steps   []step
	}{
		{"exhausted: all at the reset", 5 * time.Minute, `"api";r=0;t=60`, []step{
			{0, time.Minute}, {0, time.Minute}, {0, time.Minute}, {0, time.Minute},
			{0, time.Minute}, {0, time.Minute}, {0, time.Minute}, {0, time.Minute},
			{30 * time.Second, 30 * time.Second}, // a late comer leaves with them
			{time.Minute, 0},                     // the reset has passed: not paced
		}},
		{"two left: two slots, then the reset", 5 * time.Minute, `"api";r=2;t=30`, []step{
			{0, 10 * time.Second}, {0, 20 * time.Second}, {0, 30 * time.Second},
			{0, 30 * time.Second}, {0, 30 * time.Second},
		}},
		{"slots past the bound", time.Minute, `"api";r=3;t=200`, []step{
			{0, 50 * time.Second},                 // the slot at 50s
			{0, time.Minute},                      // its slot at 100s is past the bound: held there, slot left free
			{0, time.Minute},                      // and so is this one
			{45 * time.Second, 55 * time.Second},  // takes the slot at 100s
			{45 * time.Second, time.Minute},       // the next, at 150s, is past the bound
			{150 * time.Second, 0},                // the slot at 150s is now
			{150 * time.Second, 50 * time.Second}, // the reset at 200s
			{160 * time.Second, 40 * time.Second}, // never past it
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPacer(DefaultPaceThreshold, tc.maxWait)
			h := http.Header{}
			h.Set("RateLimit", tc.report)
			p.observe("h", h, testStart, testStart)
			for i, s := range tc.steps {
				if got := p.reserve("h", testStart.Add(s.at), time.Time{}, false); got != s.want {
					t.Errorf("step %d (at %v): wait %v, want %v", i, s.at, got, s.want)
				}
			}
		})
	}
}

// TestPacingIgnoresImplausibleReset checks that a quota whose reset is
// more than a day away is not believed: such a value is almost always a
// misread field, an X-RateLimit-Reset in Unix milliseconds (read as
// seconds, tens of thousands of years away) or a Unix time sent where the
// draft wants delta-seconds, and pacing by it would hold every request to
// the host for the longest wait while the server still has quota. A day
// itself is believed.
func TestPacingIgnoresImplausibleReset(t *testing.T) {
	ms := strconv.FormatInt(testStart.Add(time.Minute).UnixMilli(), 10)
	unix := testStart.Add(time.Minute).Unix()
	steps := []paceStep{
		{0, []string{"X-RateLimit-Remaining", "10", "X-RateLimit-Reset", ms}},
		{0, []string{"RateLimit", `"api";r=0;t=` + strconv.FormatInt(unix, 10)}},
		{0, []string{"RateLimit", `"api";r=0;t=86400000`}},
		{0, []string{"RateLimit", `"burst";r=1;t=60, "bogus";r=0;t=86401`}},
		{30 * time.Second, []string{"RateLimit", `"day";r=1;t=86400`}}, // spaced by burst alone
		{DefaultMaxRetryAfter, nil},                                    // a day is believed: 12h apart, held at the bound
	}
	checkPacing(t, steps)
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
