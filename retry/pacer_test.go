package retry

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"
)

// reserve is reserveSlot for tests that never give a slot back.
func (p *pacer) reserve(host string, now time.Time, least, limit time.Duration, book bool) (time.Duration, bool) {
	wait, _, ok := p.reserveSlot(host, now, least, limit, book)
	return wait, ok
}

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
	p := newPacer(10)
	h := http.Header{}
	h.Set("RateLimit", `"api";r=2;t=30`)
	p.observe("h", h, testStart, testStart)
	var got []time.Duration
	for range 3 {
		w, _ := p.reserve("h", testStart, 0, time.Minute, true)
		got = append(got, w)
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("reserve waits %v, want %v", got, want)
	}
}

// TestPacerSlots follows the slots that requests waiting at once, or
// arriving later, reserve after one report, in steps a reader can check by
// hand. No slot lies past the reset: the report says nothing of the quota
// after it, and a request arriving then would be sent at once, so one that
// has been waiting since before must not leave later. A slot further away
// than the limit is refused and not booked, so the slots after it keep
// their spacing. A request with a wait of its own longer than its slot (a
// retry's) books the time it leaves, and the next slot follows it.
func TestPacerSlots(t *testing.T) {
	type step struct {
		at    time.Duration // since the report
		least time.Duration // the request's own wait
		peek  bool          // look without booking
		want  time.Duration // the wait reserved
		ok    bool          // false: the slot is beyond the limit
	}
	cases := []struct {
		name   string
		limit  time.Duration
		report string // RateLimit
		steps  []step
	}{
		{"exhausted: all at the reset", 5 * time.Minute, `"api";r=0;t=60`, []step{
			{0, 0, false, time.Minute, true}, {0, 0, false, time.Minute, true},
			{0, 0, false, time.Minute, true}, {0, 0, false, time.Minute, true},
			{30 * time.Second, 0, false, 30 * time.Second, true}, // a late comer leaves with them
			{time.Minute, 0, false, 0, true},                     // the reset has passed: not paced
		}},
		{"two left: two slots, then the reset", 5 * time.Minute, `"api";r=2;t=30`, []step{
			{0, 0, true, 10 * time.Second, true}, // a look books nothing
			{0, 0, false, 10 * time.Second, true},
			{0, 0, false, 20 * time.Second, true},
			{0, 0, false, 30 * time.Second, true},
			{0, 0, false, 30 * time.Second, true},
		}},
		{"slots beyond the limit", time.Minute, `"api";r=3;t=200`, []step{
			{0, 0, false, 50 * time.Second, true},                 // the slot at 50s
			{0, 0, false, 0, false},                               // the next, at 100s, is beyond the limit: left free
			{0, 0, false, 0, false},                               // and still is
			{45 * time.Second, 0, false, 55 * time.Second, true},  // takes the slot at 100s
			{45 * time.Second, 0, false, 0, false},                // the next, at 150s, is beyond the limit
			{150 * time.Second, 0, false, 0, true},                // the slot at 150s is now
			{150 * time.Second, 0, false, 50 * time.Second, true}, // the reset at 200s
			{160 * time.Second, 0, false, 40 * time.Second, true}, // never past it
		}},
		{"waits of their own", 5 * time.Minute, `"api";r=1;t=20`, []step{
			{0, 15 * time.Second, false, 15 * time.Second, true},              // longer than the slot at 10s: leaves at 15s
			{0, 0, false, 20 * time.Second, true},                             // 10s after it is past the reset: the reset
			{0, 30 * time.Second, false, 30 * time.Second, true},              // longer than the slot at the reset
			{0, 2 * time.Second, false, 20 * time.Second, true},               // shorter: the reset
			{20 * time.Second, 3 * time.Second, false, 3 * time.Second, true}, // after the reset, its own wait
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPacer(DefaultPaceThreshold)
			h := http.Header{}
			h.Set("RateLimit", tc.report)
			p.observe("h", h, testStart, testStart)
			for i, s := range tc.steps {
				got, ok := p.reserve("h", testStart.Add(s.at), s.least, tc.limit, !s.peek)
				if got != s.want || ok != s.ok {
					t.Errorf("step %d (at %v): wait %v, %v; want %v, %v", i, s.at, got, ok, s.want, s.ok)
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
		{0, []string{"RateLimit", `"day";r=1;t=86400`}},                // a day is believed: 12h apart, beyond the bound, so sent at once
		{0, nil}, // and so again: a request sent at once books no slot
	}
	checkPacing(t, steps)
}

// TestPacerMemoryBounded checks that the pacer forgets hosts past its
// bound.
func TestPacerMemoryBounded(t *testing.T) {
	p := newPacer(10)
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

// TestPacingAndRetryAfterShareOneWait checks that before a retry the
// Transport waits once, the longer of the server's Retry-After and the
// time to the host's next pacing slot, and that this one wait is what
// OnRetry reports and what MaxRetryAfter bounds (5m here). Waits stacked
// one after the other would keep the caller beyond the bound, and past
// what OnRetry said.
func TestPacingAndRetryAfterShareOneWait(t *testing.T) {
	cases := []struct {
		name       string
		retryAfter string
		rateLimit  string
		want       []time.Duration // the wait before each retry; none: the 429 comes back at once
	}{
		{"Retry-After the longer", "120", `"api";r=0;t=60`, []time.Duration{2 * time.Minute}},
		{"pacing the longer", "60", `"api";r=0;t=120`, []time.Duration{2 * time.Minute}},
		{"pacing at the bound", "60", `"api";r=0;t=300`, []time.Duration{5 * time.Minute}},
		{"pacing beyond the bound", "240", `"api";r=0;t=600`, nil},
		{"Retry-After beyond the bound", "600", `"api";r=0;t=60`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock(testStart)
			var sentAt []time.Duration
			next := rtFunc(func(req *http.Request) (*http.Response, error) {
				sentAt = append(sentAt, clock.Now().Sub(testStart))
				if len(sentAt) == 1 {
					return reply(req, 429, nil, "Retry-After", tc.retryAfter, "RateLimit", tc.rateLimit), nil
				}
				return reply(req, 200, nil), nil
			})
			var told []time.Duration
			tr := NewTransport(next, Options{Clock: clock, Pacing: true, Rand: func() float64 { return 0 },
				OnRetry: func(i RetryInfo) { told = append(told, i.Wait) }})
			resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://api.example.test/", nil))
			if err != nil {
				t.Fatal(err)
			}
			wantStatus, wantSent := 429, []time.Duration{0}
			if len(tc.want) > 0 {
				wantStatus, wantSent = 200, []time.Duration{0, tc.want[0]}
			}
			if resp.StatusCode != wantStatus || !slices.Equal(sentAt, wantSent) {
				t.Errorf("status %d, attempts sent at %v; want %d, sent at %v", resp.StatusCode, sentAt, wantStatus, wantSent)
			}
			if s := clock.Sleeps(); !slices.Equal(s, tc.want) || !slices.Equal(told, tc.want) {
				t.Errorf("slept %v, OnRetry told %v; want both %v", s, told, tc.want)
			}
		})
	}
}

// TestPacingNeverHoldsBeyondTheBound checks that a request whose slot
// lies further away than MaxRetryAfter (5m) is sent at once, not held for
// the bound and then sent anyway: holding it would keep its caller minutes
// for nothing, and release every request held together into the same
// spent quota. The server, which has the last word, answers it.
func TestPacingNeverHoldsBeyondTheBound(t *testing.T) {
	exhausted := []string{"RateLimit", `"api";r=0;t=600`}
	checkPacing(t, []paceStep{
		{0, exhausted},
		{0, exhausted}, // the reset, 10m away, is beyond the bound
		{0, exhausted},
		{0, []string{"RateLimit", `"api";r=0;t=240`}},
		{4 * time.Minute, nil}, // within the bound: paced
	})
}

// TestPacingCountsAgainstDeadline checks that a pacing wait, like the
// wait for a retry, is not taken when the request's deadline would cut
// short the attempt after it (one as long as the last attempt): the
// caller gets the server's 429 at once, or its first attempt is sent at
// once, rather than its own deadline's error after a wait for nothing.
func TestPacingCountsAgainstDeadline(t *testing.T) {
	// Each attempt takes 1s. The first is refused with Retry-After: 1 and
	// no quota left for 4s, which the retry must wait for: 3s after the
	// refusal, then 1s to send, 5s after the start in all.
	for _, tc := range []struct {
		deadline time.Duration
		want     []time.Duration // the waits
	}{
		{4500 * time.Millisecond, nil},
		{5 * time.Second, nil},
		{5500 * time.Millisecond, []time.Duration{3 * time.Second}},
	} {
		start := time.Now() // compared with a real context deadline
		clock := newFakeClock(start)
		n := 0
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			n++
			clock.Advance(time.Second)
			if n == 1 {
				return reply(req, 429, nil, "Retry-After", "1", "RateLimit", `"api";r=0;t=4`), nil
			}
			return reply(req, 200, nil), nil
		})
		tr := NewTransport(next, Options{Clock: clock, Pacing: true, Rand: func() float64 { return 0 }})
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(tc.deadline))
		resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://api.example.test/", nil).WithContext(ctx))
		cancel()
		wantStatus := 200
		if tc.want == nil {
			wantStatus = 429
		}
		if err != nil || resp.StatusCode != wantStatus || !slices.Equal(clock.Sleeps(), tc.want) {
			t.Errorf("deadline %v: %v, %v after sleeps %v; want %d after %v", tc.deadline, resp, err, clock.Sleeps(), wantStatus, tc.want)
		}
	}

	// A first attempt: the host reported no quota left for 10s in an
	// answer that took 1s, so a request made then waits 9s for its slot,
	// and its attempt is expected to take 1s more.
	for _, tc := range []struct {
		deadline time.Duration // after the report
		want     []time.Duration
	}{
		{9500 * time.Millisecond, nil}, // sent at once: the slot leaves no time for it
		{10 * time.Second, nil},
		{10500 * time.Millisecond, []time.Duration{9 * time.Second}},
	} {
		start := time.Now()
		clock := newFakeClock(start)
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			clock.Advance(time.Second)
			return reply(req, 200, nil, "RateLimit", `"api";r=0;t=10`), nil
		})
		tr := NewTransport(next, Options{Clock: clock, Pacing: true})
		if _, err := tr.RoundTrip(mustRequest(t, "GET", "http://api.example.test/", nil)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(tc.deadline))
		_, err := tr.RoundTrip(mustRequest(t, "GET", "http://api.example.test/", nil).WithContext(ctx))
		cancel()
		if err != nil || !slices.Equal(clock.Sleeps(), tc.want) {
			t.Errorf("first attempt, deadline %v after the report: err %v, sleeps %v; want %v", tc.deadline, err, clock.Sleeps(), tc.want)
		}
	}
}

// TestPacingMeasuresResetFromDate checks that an X-RateLimit-Reset given
// as a Unix time is measured from the response's Date, as a Retry-After
// date is, so that a client clock ten minutes off the server's still
// waits the minute the server meant, not eleven (held to the bound) or
// none.
func TestPacingMeasuresResetFromDate(t *testing.T) {
	for _, skew := range []time.Duration{0, 10 * time.Minute, -10 * time.Minute} {
		clock := newFakeClock(testStart)
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			server := clock.Now().Add(skew)
			return reply(req, 200, nil, "Date", server.Format(http.TimeFormat),
				"X-RateLimit-Remaining", "0",
				"X-RateLimit-Reset", strconv.FormatInt(server.Add(time.Minute).Unix(), 10)), nil
		})
		tr := NewTransport(next, Options{Clock: clock, Pacing: true})
		for range 2 {
			if _, err := tr.RoundTrip(mustRequest(t, "GET", "http://api.example.test/", nil)); err != nil {
				t.Fatal(err)
			}
		}
		if s := clock.Sleeps(); !slices.Equal(s, []time.Duration{time.Minute}) {
			t.Errorf("server clock %v off: slept %v, want one wait of 1m", skew, s)
		}
	}
}

// TestPacingGivesBackCancelledSlot checks that a request whose caller
// gives up while it waits for its pacing slot, before a first attempt or
// before a retry, gives the slot back: it never leaves, so the next
// request to the host waits only what the schedule without it gives, not
// an interval more for nothing.
func TestPacingGivesBackCancelledSlot(t *testing.T) {
	// Two left for 15s: slots 5s apart, counted from the send that got
	// the report, at 0.
	const quota = `"api";r=2;t=15`
	cases := []struct {
		name  string
		first []string // the headers of the answer to the first attempt
		warm  bool     // a request answered first, to start the pacing
	}{
		{"waiting to send", []string{"RateLimit", quota}, true},
		{"waiting to retry", []string{"Retry-After", "1", "RateLimit", quota}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := &cancellingClock{fakeClock: newFakeClock(testStart)}
			var sentAt []time.Duration
			next := rtFunc(func(req *http.Request) (*http.Response, error) {
				sentAt = append(sentAt, clock.Now().Sub(testStart))
				if len(sentAt) == 1 && !tc.warm {
					return reply(req, 429, nil, tc.first...), nil
				}
				return reply(req, 200, nil, tc.first...), nil
			})
			tr := NewTransport(next, Options{Clock: clock, Pacing: true, Rand: func() float64 { return 0 }})
			if tc.warm {
				if _, err := tr.RoundTrip(mustRequest(t, "GET", "http://api.example.test/", nil)); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			clock.cancel = cancel
			if resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://api.example.test/", nil).WithContext(ctx)); resp != nil || !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled request: %v, %v; want no response and context.Canceled", resp, err)
			}
			if _, err := tr.RoundTrip(mustRequest(t, "GET", "http://api.example.test/", nil)); err != nil {
				t.Fatal(err)
			}
			// The cancelled request's slot, at 5s, was given back: the
			// next request takes it.
			if want := []time.Duration{0, 5 * time.Second}; !slices.Equal(sentAt, want) {
				t.Errorf("requests sent at %v, want %v", sentAt, want)
			}
		})
	}
}

// TestPacerRelease follows the slots of requests that book theirs and
// then give some back, in steps a reader can check by hand. A slot given
// back frees its time once every slot booked after it is given back too,
// in whatever order: the requests after it keep theirs, and a newcomer is
// spaced from the latest send still booked. A slot whose time has come is
// spent, and one booked in a state since dropped frees nothing in the
// new one.
func TestPacerRelease(t *testing.T) {
	type step struct {
		at     time.Duration // since the first report
		do     string        // "book", "peek" (look without booking), "release" or "report"
		least  time.Duration // book: the request's own wait
		n      int           // release: the booking given back, counted from 0
		report string        // report: the RateLimit of a response to a request sent at at
		want   time.Duration // book, peek: the wait
	}
	book := func(at, least, want time.Duration) step { return step{at: at, do: "book", least: least, want: want} }
	peek := func(at, want time.Duration) step { return step{at: at, do: "peek", want: want} }
	release := func(at time.Duration, n int) step { return step{at: at, do: "release", n: n} }
	report := func(at time.Duration, rl string) step { return step{at: at, do: "report", report: rl} }
	const s = time.Second
	cases := []struct {
		name   string
		report string // RateLimit, received at 0
		steps  []step
	}{
		{"given back latest first", `"api";r=4;t=50`, []step{
			book(0, 0, 10*s), book(0, 0, 20*s), book(0, 0, 30*s),
			release(0, 2), peek(0, 30*s), // the slot at 30s is free again
			release(0, 1), peek(0, 20*s),
			release(0, 0), peek(0, 10*s), // back to the schedule of the report
		}},
		{"given back in the order booked", `"api";r=4;t=50`, []step{
			book(0, 0, 10*s), book(0, 0, 20*s), book(0, 0, 30*s),
			release(0, 0), peek(0, 40*s), // the slots at 20s and 30s are still held: no hole under them
			release(0, 1), peek(0, 40*s),
			release(0, 2), peek(0, 10*s), // the last one frees all three
		}},
		{"the slots after it keep theirs", `"api";r=4;t=50`, []step{
			book(0, 0, 10*s), book(0, 0, 20*s), book(0, 0, 30*s),
			release(0, 1), book(0, 0, 40*s), // after the latest held, 30s
			release(5*s, 2), peek(5*s, 45*s), // 40s still held: the reset, at 50s
			release(5*s, 3), peek(5*s, 15*s), // 10s still held: 20s
		}},
		{"given back before its time, not after", `"api";r=4;t=50`, []step{
			book(0, 0, 10*s), book(0, 0, 20*s),
			release(5*s, 1), peek(5*s, 15*s), // before 20s: free, the next at 20s
			book(5*s, 0, 15*s),
			release(20*s, 2), peek(20*s, 10*s), // at 20s it is spent: the next at 30s
		}},
		{"a slot held twice", `"api";r=1;t=20`, []step{
			book(0, 45*s, 45*s), book(0, 45*s, 45*s), // retries waiting past the reset
			release(0, 0), peek(0, 20*s), // the other still leaves at 45s: the reset
			release(0, 1), peek(0, 10*s),
		}},
		{"booked in a state since dropped", `"api";r=1;t=20`, []step{
			book(0, 0, 10*s),
			report(0, `"api";r=100;t=20`), report(0, `"api";r=1;t=20`), // pacing stopped, then started anew
			book(0, 0, 10*s),
			release(0, 0), peek(0, 20*s), // the new state's slot at 10s stays booked
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPacer(DefaultPaceThreshold)
			h := http.Header{}
			h.Set("RateLimit", tc.report)
			p.observe("h", h, testStart, testStart)
			var booked []slot
			for i, st := range tc.steps {
				now := testStart.Add(st.at)
				switch st.do {
				case "book", "peek":
					got, b, ok := p.reserveSlot("h", now, st.least, 5*time.Minute, st.do == "book")
					if got != st.want || !ok {
						t.Errorf("step %d: %s at %v: wait %v, %v; want %v, true", i, st.do, st.at, got, ok, st.want)
					}
					if st.do == "book" {
						booked = append(booked, b)
					}
				case "release":
					p.release(booked[st.n], now)
				case "report":
					h := http.Header{}
					h.Set("RateLimit", st.report)
					p.observe("h", h, now, now)
				}
			}
		})
	}
}

// TestPacingWaitsCountTowardsMaxWait checks that pacing waits count in
// the sum MaxWait bounds, a first attempt's included: a first attempt
// whose slot lies beyond MaxWait is sent at once, as one beyond
// MaxRetryAfter is, and a retry whose wait, slot and all, would take the
// sum past MaxWait is not made, its refusal returned at once.
func TestPacingWaitsCountTowardsMaxWait(t *testing.T) {
	exhausted := []string{"RateLimit", `"api";r=0;t=60`} // no quota left for a minute
	cases := []struct {
		name       string
		maxWait    time.Duration
		before     []string // the header of an earlier request's answer; nil: no earlier request
		refusal    []string // the header of a 429 answering the first attempt; nil: a 200
		want       []time.Duration
		wantStatus int
	}{
		{"first attempt's slot within", time.Minute, exhausted, nil, []time.Duration{time.Minute}, 200},
		{"first attempt's slot beyond: sent at once", 30 * time.Second, exhausted, nil, nil, 200},
		{"first attempt's wait counts", 90 * time.Second, exhausted, []string{"Retry-After", "40"},
			[]time.Duration{time.Minute}, 429},
		{"first attempt's wait and the retry's fit", 100 * time.Second, exhausted, []string{"Retry-After", "40"},
			[]time.Duration{time.Minute, 40 * time.Second}, 200},
		{"retry's slot within", time.Minute, nil, append([]string{"Retry-After", "10"}, exhausted...),
			[]time.Duration{time.Minute}, 200},
		{"retry's slot beyond", 30 * time.Second, nil, append([]string{"Retry-After", "10"}, exhausted...), nil, 429},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock(testStart)
			type answer struct {
				status int
				kv     []string
			}
			var script []answer // the answers in order; a 200 once it runs out
			if tc.before != nil {
				script = append(script, answer{200, tc.before})
			}
			if tc.refusal != nil {
				script = append(script, answer{429, tc.refusal})
			}
			next := rtFunc(func(req *http.Request) (*http.Response, error) {
				if len(script) == 0 {
					return reply(req, 200, nil), nil
				}
				a := script[0]
				script = script[1:]
				return reply(req, a.status, nil, a.kv...), nil
			})
			tr := NewTransport(next, Options{Clock: clock, Pacing: true, MaxWait: tc.maxWait, Rand: func() float64 { return 0 }})
			if tc.before != nil {
				if _, err := tr.RoundTrip(mustRequest(t, "GET", "http://api.example.test/", nil)); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://api.example.test/", nil))
			if err != nil {
				t.Fatal(err)
			}
			if s := clock.Sleeps(); resp.StatusCode != tc.wantStatus || !slices.Equal(s, tc.want) {
				t.Errorf("status %d after sleeps %v; want %d after %v", resp.StatusCode, s, tc.wantStatus, tc.want)
			}
		})
	}
}
