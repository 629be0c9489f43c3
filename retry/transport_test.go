package retry

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rtFunc adapts a function to http.RoundTripper.
type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// trackedBody is a response body that counts what was read and whether it
// was closed.
type trackedBody struct {
	r      io.Reader
	read   atomic.Int64
	closed atomic.Bool
}

func newTrackedBody(s string) *trackedBody { return &trackedBody{r: strings.NewReader(s)} }

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *trackedBody) Close() error { b.closed.Store(true); return nil }

// reply builds a response to req with the given status, header pairs and
// body.
func reply(req *http.Request, status int, body io.ReadCloser, kv ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	if body == nil {
		body = io.NopCloser(strings.NewReader(""))
	}
	return &http.Response{StatusCode: status, Header: h, Body: body, Request: req}
}

// testStart is a fixed instant for fake clocks that are not compared with
// context deadlines.
var testStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func mustRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestWhichRequestsAreRetried sends requests of every kind to a real
// server that refuses the first attempt of each, and checks which were
// retried, and that every attempt carried the whole body.
func TestWhichRequestsAreRetried(t *testing.T) {
	type bodyKind int
	const (
		noBody bodyKind = iota
		replayable
		oneShot // a body with no GetBody
	)
	cases := []struct {
		name         string
		method       string
		key          string
		body         bodyKind
		wantAttempts int
		wantStatus   int
	}{
		{"GET", http.MethodGet, "", noBody, 2, 200},
		{"HEAD", http.MethodHead, "", noBody, 2, 200},
		{"OPTIONS", http.MethodOptions, "", noBody, 2, 200},
		{"TRACE", http.MethodTrace, "", noBody, 2, 200},
		{"DELETE", http.MethodDelete, "", noBody, 2, 200},
		{"PUT with body", http.MethodPut, "", replayable, 2, 200},
		{"POST without key", http.MethodPost, "", replayable, 1, 429},
		{"PATCH without key", http.MethodPatch, "", replayable, 1, 429},
		{"POST with key", http.MethodPost, "k-1", replayable, 2, 200},
		{"PATCH with key", http.MethodPatch, "k-2", replayable, 2, 200},
		{"POST with key, one-shot body", http.MethodPost, "k-3", oneShot, 1, 429},
		{"PUT, one-shot body", http.MethodPut, "", oneShot, 1, 429},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu       sync.Mutex
				attempts int
				bodies   []string
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				attempts++
				n := attempts
				bodies = append(bodies, string(b))
				mu.Unlock()
				if n == 1 {
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				w.WriteHeader(http.StatusOK)
			}))
			defer srv.Close()

			var body io.Reader
			switch tc.body {
			case replayable:
				body = strings.NewReader("payload")
			case oneShot:
				body = io.NopCloser(strings.NewReader("payload"))
			}
			req := mustRequest(t, tc.method, srv.URL, body)
			if tc.key != "" {
				req.Header.Set("Idempotency-Key", tc.key)
			}
			clock := newFakeClock(testStart)
			tr := NewTransport(nil, Options{Clock: clock})
			defer tr.CloseIdleConnections()

			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			mu.Lock()
			defer mu.Unlock()
			if attempts != tc.wantAttempts {
				t.Errorf("server saw %d attempts, want %d", attempts, tc.wantAttempts)
			}
			if tc.body != noBody {
				for i, b := range bodies {
					if b != "payload" {
						t.Errorf("attempt %d carried body %q, want %q", i+1, b, "payload")
					}
				}
			}
			if got := len(clock.Sleeps()); got != tc.wantAttempts-1 {
				t.Errorf("slept %d times, want %d", got, tc.wantAttempts-1)
			}
		})
	}
}

// TestIdempotencyKeyAsNetHTTPReads checks that a POST is marked safe to
// repeat the way net/http's Transport documents it: an Idempotency-Key or
// X-Idempotency-Key entry in the Header map, whatever its value, and a
// zero-length entry marks the request without being sent on the wire.
func TestIdempotencyKeyAsNetHTTPReads(t *testing.T) {
	cases := []struct {
		name   string
		header http.Header
		sent   string // the Idempotency-Key or X-Idempotency-Key the server must see
	}{
		{"Idempotency-Key", http.Header{"Idempotency-Key": {"k-1"}}, "k-1"},
		{"X-Idempotency-Key", http.Header{"X-Idempotency-Key": {"k-2"}}, "k-2"},
		{"nil Idempotency-Key: marked, not sent", http.Header{"Idempotency-Key": nil}, ""},
		{"empty X-Idempotency-Key: marked, not sent", http.Header{"X-Idempotency-Key": {}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				keys []string
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				mu.Lock()
				keys = append(keys, r.Header.Get("Idempotency-Key")+r.Header.Get("X-Idempotency-Key"))
				n := len(keys)
				mu.Unlock()
				if n == 1 {
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(http.StatusTooManyRequests)
				}
			}))
			defer srv.Close()
			req := mustRequest(t, http.MethodPost, srv.URL, strings.NewReader("payload"))
			for k, v := range tc.header {
				req.Header[k] = v
			}
			tr := NewTransport(nil, Options{Clock: newFakeClock(testStart)})
			defer tr.CloseIdleConnections()
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if resp.StatusCode != 200 || len(keys) != 2 {
				t.Fatalf("status %d after %d attempts, want 200 after 2", resp.StatusCode, len(keys))
			}
			for i, k := range keys {
				if k != tc.sent {
					t.Errorf("attempt %d carried key %q, want %q", i+1, k, tc.sent)
				}
			}
		})
	}
}

// TestWaitsForRetryAfter checks that the wait before a retry is the
// server's Retry-After plus at most one Base of jitter, for both forms of
// the header, and the backoff when the header is missing.
//
// A date is measured from the response's Date, so a client clock a minute
// ahead of the server's (the client's is testStart) does not cut the wait
// short. A decimal number of seconds is read as meant, and a value that
// cannot be read at all still means the server asked for a wait: one
// second, the least delta-seconds can ask for, not a backoff of a tenth.
func TestWaitsForRetryAfter(t *testing.T) {
	base := 100 * time.Millisecond
	date := func(d time.Duration) string { return testStart.Add(d).Format(http.TimeFormat) }
	cases := []struct {
		name     string
		status   int
		header   string // Retry-After; "-" for none
		date     string // the response's Date; "" for none
		min, max time.Duration
	}{
		{"seconds", 429, "7", "", 7 * time.Second, 7*time.Second + base},
		{"seconds on 503", 503, "3", "", 3 * time.Second, 3*time.Second + base},
		{"zero", 429, "0", "", 0, base},
		{"date in future", 429, date(90 * time.Second), "", 90 * time.Second, 90*time.Second + base},
		{"date in past", 429, date(-time.Hour), "", 0, base},
		{"date after the response's Date", 429, date(-30 * time.Second), date(-time.Minute), 30 * time.Second, 30*time.Second + base},
		{"date before the response's Date", 429, date(-2 * time.Minute), date(-time.Minute), 0, base},
		{"date, unreadable Date: client's clock", 429, date(90 * time.Second), "yesterday", 90 * time.Second, 90*time.Second + base},
		{"seconds ignore Date", 429, "7", date(-time.Hour), 7 * time.Second, 7*time.Second + base},
		{"decimal seconds", 429, "1.5", "", 1500 * time.Millisecond, 1500*time.Millisecond + base},
		{"no header: backoff", 429, "-", "", 0, base},
		{"blank: backoff", 429, " ", "", 0, base},
		{"garbage: one second", 429, "soon", "", time.Second, time.Second + base},
		{"negative: one second", 503, "-5", "", time.Second, time.Second + base},
		{"odd date format: one second", 429, testStart.Add(time.Hour).Format(time.RFC3339), "", time.Second, time.Second + base},
		{"date in UTC", 429, testStart.Add(90 * time.Second).Format(time.RFC1123), "", 90 * time.Second, 90*time.Second + base},
		{"date at +0000, Date in UTC", 429, testStart.Add(30 * time.Second).Format(time.RFC1123Z),
			testStart.Add(-time.Minute).Format(time.RFC1123), 90 * time.Second, 90*time.Second + base},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var kv []string
			if tc.header != "-" {
				kv = append(kv, "Retry-After", tc.header)
			}
			if tc.date != "" {
				kv = append(kv, "Date", tc.date)
			}
			// Rand just below 1 puts the wait at the top of its range,
			// where an off-by-a-window mistake would show.
			sleeps := sleepsAfterRefusal(t, tc.status, kv, base, 0.999)
			if len(sleeps) != 1 {
				t.Fatalf("slept %v, want one sleep", sleeps)
			}
			if w := sleeps[0]; w < tc.min || w > tc.max {
				t.Errorf("waited %v, want within [%v, %v]", w, tc.min, tc.max)
			}
		})
	}
}

// sleepsAfterRefusal sends a GET through a Transport on a fake clock,
// with Base base and Rand giving rnd, to a server that refuses it once
// with status and the header fields kv (name, value, ...) and then serves
// it, and returns the waits the Transport slept.
func sleepsAfterRefusal(t *testing.T, status int, kv []string, base time.Duration, rnd float64) []time.Duration {
	t.Helper()
	n := 0
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		n++
		if n == 1 {
			return reply(req, status, nil, kv...), nil
		}
		return reply(req, 200, nil), nil
	})
	clock := newFakeClock(testStart)
	tr := NewTransport(next, Options{Clock: clock, Base: base, Rand: func() float64 { return rnd }})
	resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil))
	if err != nil || resp.StatusCode != 200 || n != 2 {
		t.Fatalf("got %v, %v after %d attempts; want 200 after 2", resp, err, n)
	}
	return clock.Sleeps()
}

// TestRetryAfterSentTwice checks a Retry-After sent more than once: as
// two field lines (a server's own and one a gateway added), or as one line
// a proxy joined ("5, 60"). Each value is a wait someone in front of the
// client asked for, so the longest is honoured; the first alone, or the
// joined line read as garbage (one second), would bring the client back
// before it was told to. A member that cannot be read still counts as one
// second, as a lone one does.
func TestRetryAfterSentTwice(t *testing.T) {
	base := 100 * time.Millisecond
	date := func(d time.Duration) string { return testStart.Add(d).Format(http.TimeFormat) }
	cases := []struct {
		name  string
		lines []string // the Retry-After field lines, in order
		want  time.Duration
	}{
		{"two lines, shorter first", []string{"5", "60"}, time.Minute},
		{"two lines, longer first", []string{"60", "5"}, time.Minute},
		{"a blank line and a value", []string{"", "7"}, 7 * time.Second},
		{"joined", []string{"5, 60"}, time.Minute},
		{"joined without space", []string{"60,5"}, time.Minute},
		{"joined, empty member", []string{"5,, 60"}, time.Minute},
		{"joined dates", []string{date(30*time.Second) + ", " + date(90*time.Second)}, 90 * time.Second},
		{"joined RFC 850 dates", []string{testStart.Add(90*time.Second).Format(rfc850GMT) + ", 5"}, 90 * time.Second},
		{"a date and seconds on two lines", []string{date(90 * time.Second), "5"}, 90 * time.Second},
		{"seconds and garbage", []string{"5, soon"}, 5 * time.Second},
		{"zero and garbage: one second", []string{"0, soon"}, time.Second},
		{"all garbage: one second", []string{"soon, later"}, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var kv []string
			for _, l := range tc.lines {
				kv = append(kv, "Retry-After", l)
			}
			if s := sleepsAfterRefusal(t, 429, kv, base, 0); len(s) != 1 || s[0] != tc.want {
				t.Errorf("Retry-After %q: slept %v, want one wait of %v", tc.lines, s, tc.want)
			}
		})
	}
}

// A retry that would start in time but could not finish before the
// deadline (its attempt taking as long as the last one) is not waited
// for: the caller gets the server's 429 now, where it would get its own
// deadline's error a second later.
func TestNoRetryTheDeadlineWouldCut(t *testing.T) {
	start := time.Now()
	clock := newFakeClock(start)
	n := 0
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		n++
		clock.Advance(400 * time.Millisecond) // a slow server
		return reply(req, 429, nil, "Retry-After", "1"), nil
	})
	tr := NewTransport(next, Options{Clock: clock, Base: time.Millisecond})
	for _, tc := range []struct {
		deadline time.Duration
		attempts int
	}{
		{1500 * time.Millisecond, 1}, // 0.4s + 1s wait + 0.4s > 1.5s
		{1900 * time.Millisecond, 2}, // 0.4s + 1s wait + 0.4s < 1.9s
	} {
		n = 0
		ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(tc.deadline))
		resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil).WithContext(ctx))
		cancel()
		if err != nil || resp.StatusCode != 429 {
			t.Fatalf("deadline %v: %v, %v; want the 429", tc.deadline, resp, err)
		}
		resp.Body.Close()
		if n != tc.attempts {
			t.Errorf("deadline %v: %d attempts, want %d", tc.deadline, n, tc.attempts)
		}
	}
}

// TestClockSteppingBackDuringAttempt checks that a clock stepping back
// while an attempt is under way (a wall clock corrected, in a Clock with no
// monotonic reading) does not make the attempt look endless: the retry
// still fits an hour's deadline and is sent.
func TestClockSteppingBackDuringAttempt(t *testing.T) {
	clock := newFakeClock(time.Now()) // compared with a real context deadline
	n := 0
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		n++
		if n == 1 {
			clock.Advance(-time.Minute)
			return reply(req, 429, nil, "Retry-After", "1"), nil
		}
		return reply(req, 200, nil), nil
	})
	tr := NewTransport(next, Options{Clock: clock})
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(time.Hour))
	defer cancel()
	resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil).WithContext(ctx))
	if err != nil || resp.StatusCode != 200 || n != 2 {
		t.Fatalf("got %v, %v after %d attempts; want 200 after 2", resp, err, n)
	}
}

// TestDeadlineShorterThanWait checks that when the wait would cross the
// request's deadline, the real refusal comes back at once, without sleeping.
func TestDeadlineShorterThanWait(t *testing.T) {
	cases := []struct {
		name string
		kv   []string
		opts Options
	}{
		{"Retry-After beyond deadline", []string{"Retry-After", "5"}, Options{}},
		{"backoff beyond deadline", nil, Options{Base: 10 * time.Second, Rand: func() float64 { return 0.5 }}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Deadlines are real times; the fake clock starts at the real
			// now so the Transport compares like with like.
			start := time.Now()
			clock := newFakeClock(start)
			n := 0
			next := rtFunc(func(req *http.Request) (*http.Response, error) {
				n++
				return reply(req, 429, io.NopCloser(strings.NewReader("slow down")), tc.kv...), nil
			})
			opts := tc.opts
			opts.Clock = clock
			tr := NewTransport(next, opts)
			ctx, cancel := context.WithDeadline(context.Background(), start.Add(time.Second))
			defer cancel()
			req := mustRequest(t, "GET", "http://example.test/", nil).WithContext(ctx)

			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("err = %v, want the 429 response", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 429 {
				t.Errorf("status %d, want 429", resp.StatusCode)
			}
			if b, _ := io.ReadAll(resp.Body); string(b) != "slow down" {
				t.Errorf("body %q, want the server's body intact", b)
			}
			if n != 1 {
				t.Errorf("%d attempts, want 1", n)
			}
			if s := clock.Sleeps(); len(s) != 0 {
				t.Errorf("slept %v, want no sleep", s)
			}
			if !clock.Now().Equal(start) {
				t.Errorf("clock advanced by %v", clock.Now().Sub(start))
			}
		})
	}
}

// TestRetryAfterAboveCap checks the documented choice: a server asking
// for more than MaxRetryAfter gets its response handed back, not a retry.
func TestRetryAfterAboveCap(t *testing.T) {
	for _, ra := range []string{"301", "99999999999999999999999"} {
		n := 0
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			n++
			return reply(req, 503, nil, "Retry-After", ra), nil
		})
		clock := newFakeClock(testStart)
		tr := NewTransport(next, Options{Clock: clock, MaxRetryAfter: 5 * time.Minute})
		resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 503 || n != 1 || len(clock.Sleeps()) != 0 {
			t.Errorf("Retry-After %s: status %d after %d attempts and sleeps %v; want 503 after 1, no sleep",
				ra, resp.StatusCode, n, clock.Sleeps())
		}
	}
}

// TestMaxWaitBoundsTheSumOfWaits checks that the waits of one request
// add up to MaxWait at most: when the next would take the sum past it,
// the last refusal comes back at once, as one beyond MaxRetryAfter does,
// without OnRetry and without spending the budget. Left at zero, MaxWait
// is MaxRetryAfter: a server answering every attempt with Retry-After: 300
// holds the call for one wait of five minutes, not three.
func TestMaxWaitBoundsTheSumOfWaits(t *testing.T) {
	cases := []struct {
		name       string
		opts       Options
		retryAfter string  // on every refusal; "" for none
		rnd        float64 // Rand's value
		want       []time.Duration
	}{
		{"default: one Retry-After at the bound", Options{}, "300", 0, []time.Duration{5 * time.Minute}},
		{"default follows MaxRetryAfter", Options{MaxRetryAfter: 10 * time.Second}, "4", 0,
			[]time.Duration{4 * time.Second, 4 * time.Second}},
		{"negative: the default", Options{MaxRetryAfter: 10 * time.Second, MaxWait: -1}, "4", 0,
			[]time.Duration{4 * time.Second, 4 * time.Second}},
		{"every wait fits", Options{MaxWait: 10 * time.Second}, "3", 0,
			[]time.Duration{3 * time.Second, 3 * time.Second, 3 * time.Second}},
		{"the sum exactly at the bound", Options{MaxWait: 10 * time.Second}, "5", 0,
			[]time.Duration{5 * time.Second, 5 * time.Second}},
		{"the first wait beyond the bound", Options{MaxWait: time.Second}, "5", 0, nil},
		// The jitter shrinks to what is left: the server's floor, not the
		// jitter, is what the bound must leave room for.
		{"jitter shrinks to fit", Options{MaxWait: 10 * time.Second, Base: 4 * time.Second}, "9", 0.5,
			[]time.Duration{9*time.Second + 500*time.Millisecond}},
		// A backoff is not shortened to fit: the refusal comes back.
		{"backoff", Options{MaxWait: 25 * time.Second, Base: 10 * time.Second}, "", 0.5,
			[]time.Duration{5 * time.Second, 10 * time.Second}},
		{"backoff beyond what is left", Options{MaxWait: 12 * time.Second, Base: 10 * time.Second}, "", 0.5,
			[]time.Duration{5 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			next := rtFunc(func(req *http.Request) (*http.Response, error) {
				n++
				if tc.retryAfter == "" {
					return reply(req, 429, nil), nil
				}
				return reply(req, 429, nil, "Retry-After", tc.retryAfter), nil
			})
			clock := newFakeClock(testStart)
			var told []time.Duration
			opts := tc.opts
			opts.Clock = clock
			opts.Rand = func() float64 { return tc.rnd }
			opts.BudgetMinRetries = len(tc.want) + 1 // one retry left once these are spent
			opts.OnRetry = func(i RetryInfo) { told = append(told, i.Wait) }
			tr := NewTransport(next, opts)
			resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil))
			if err != nil || resp.StatusCode != 429 {
				t.Fatalf("got %v, %v; want the 429", resp, err)
			}
			resp.Body.Close()
			if s := clock.Sleeps(); !slices.Equal(s, tc.want) || !slices.Equal(told, tc.want) || n != len(tc.want)+1 {
				t.Errorf("%d attempts, slept %v, OnRetry told %v; want %d attempts, both %v", n, s, told, len(tc.want)+1, tc.want)
			}
			if !tr.budget.allowRetry(clock.Now()) {
				t.Error("the retry not made spent the budget's last retry")
			}
		})
	}
}

// TestResponseDateOnlyInGMT checks that a response's Date in a zone
// other than GMT, which RFC 9110 does not allow, is not read, for a
// Retry-After date as for a Unix-time X-RateLimit-Reset: both are then
// measured from the client's clock. Go's parser would read an RFC 850 date
// in EST or CET at the local zone's offset when it has that abbreviation,
// and at none when it does not, so the wait would change with the zone of
// the machine, which the test sets through time.Local.
//
// The server's clock is a minute behind the client's. Its Retry-After
// asks for 90s, its reset is 2m away, both by its clock: from the client's
// clock, 30s and 1m. The Date read as its zone means would give 90s and
// 2m; read at another offset, waits hours off.
func TestResponseDateOnlyInGMT(t *testing.T) {
	defer func(l *time.Location) { time.Local = l }(time.Local)
	est, cet := time.FixedZone("EST", -5*60*60), time.FixedZone("CET", 60*60)
	for _, local := range []*time.Location{time.UTC, est, cet} {
		for _, zone := range []*time.Location{est, cet} {
			time.Local = local
			clock := newFakeClock(testStart)
			// The server's clock written in its zone, as time.RFC850 writes
			// it: "Monday, 31-Dec-29 18:59:00 EST".
			date := func(server time.Time) string { return server.In(zone).Format(time.RFC850) }
			n := 0
			next := rtFunc(func(req *http.Request) (*http.Response, error) {
				n++
				server := clock.Now().Add(-time.Minute)
				if req.URL.Host == "paced.example.test" {
					return reply(req, 200, nil, "Date", date(server),
						"X-RateLimit-Remaining", "0",
						"X-RateLimit-Reset", strconv.FormatInt(server.Add(2*time.Minute).Unix(), 10)), nil
				}
				if n == 1 {
					return reply(req, 429, nil, "Date", date(server),
						"Retry-After", server.Add(90*time.Second).Format(http.TimeFormat)), nil
				}
				return reply(req, 200, nil), nil
			})
			tr := NewTransport(next, Options{Clock: clock, Pacing: true, Rand: func() float64 { return 0 }})
			resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil))
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || !slices.Equal(clock.Sleeps(), []time.Duration{30 * time.Second}) {
				t.Errorf("local zone %v, Date in %v: status %d after sleeps %v; want 200 after one wait of 30s",
					local, zone, resp.StatusCode, clock.Sleeps())
			}
			before := len(clock.Sleeps())
			for range 2 {
				if _, err := tr.RoundTrip(mustRequest(t, "GET", "http://paced.example.test/", nil)); err != nil {
					t.Fatal(err)
				}
			}
			if s := clock.Sleeps()[before:]; !slices.Equal(s, []time.Duration{time.Minute}) {
				t.Errorf("local zone %v, Date in %v: paced by %v; want one wait of 1m", local, zone, s)
			}
		}
	}
}

// TestMaxAttemptsAndDraining checks that a request is sent MaxAttempts
// times at most, that the last response comes back unread, and that every
// discarded response was drained (a bounded amount) and closed.
func TestMaxAttemptsAndDraining(t *testing.T) {
	big := strings.Repeat("x", 4*maxDrain)
	var bodies []*trackedBody
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		b := newTrackedBody(big)
		bodies = append(bodies, b)
		return reply(req, 503, b), nil
	})
	clock := newFakeClock(testStart)
	tr := NewTransport(next, Options{Clock: clock, MaxAttempts: 3})
	resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 {
		t.Errorf("status %d, want 503", resp.StatusCode)
	}
	if len(bodies) != 3 {
		t.Fatalf("%d attempts, want 3", len(bodies))
	}
	for i, b := range bodies[:2] {
		if !b.closed.Load() {
			t.Errorf("discarded body %d not closed", i)
		}
		if r := b.read.Load(); r == 0 || r > maxDrain+1 {
			t.Errorf("discarded body %d: read %d bytes, want 1..%d", i, r, maxDrain+1)
		}
	}
	last := bodies[2]
	if last.closed.Load() || last.read.Load() != 0 {
		t.Errorf("returned body was touched: read %d, closed %v", last.read.Load(), last.closed.Load())
	}
	if len(clock.Sleeps()) != 2 {
		t.Errorf("slept %v, want 2 sleeps", clock.Sleeps())
	}
}

// TestRefusedBodyReusesConnection checks, against a real server, that a
// refused response's body of up to maxDrain bytes is read to its end, so
// that the retry goes out on the same connection, and that a larger one
// is cut off and its connection closed. The bodies are sent in one chunk,
// whose end (the last, empty chunk) is a read of its own after the last
// byte: reading maxDrain bytes alone would not see it.
func TestRefusedBodyReusesConnection(t *testing.T) {
	for _, tc := range []struct {
		size  int
		conns int32
	}{
		{10, 1},
		{maxDrain, 1},
		{2 * maxDrain, 3},
	} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			var conns, n atomic.Int32
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) < 3 {
					w.Header().Set("Retry-After", "0")
					w.WriteHeader(http.StatusTooManyRequests)
					w.Write(bytes.Repeat([]byte("x"), tc.size)) // one chunk
				}
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()
			tr := NewTransport(&http.Transport{}, Options{Clock: newFakeClock(testStart)})
			defer tr.CloseIdleConnections()
			resp, err := tr.RoundTrip(mustRequest(t, "GET", srv.URL, nil))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || n.Load() != 3 || conns.Load() != tc.conns {
				t.Errorf("status %d after %d attempts over %d connections; want 200 after 3 over %d",
					resp.StatusCode, n.Load(), conns.Load(), tc.conns)
			}
		})
	}
}

// TestConnectionErrors checks that connection errors are retried for safe
// requests only, and that a caller's cancellation is never retried.
func TestConnectionErrors(t *testing.T) {
	var errConn error = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	t.Run("GET retried", func(t *testing.T) {
		n := 0
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			n++
			if n == 1 {
				return nil, errConn
			}
			return reply(req, 200, nil), nil
		})
		var infos []RetryInfo
		tr := NewTransport(next, Options{Clock: newFakeClock(testStart), OnRetry: func(i RetryInfo) { infos = append(infos, i) }})
		resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil))
		if err != nil || resp.StatusCode != 200 || n != 2 {
			t.Fatalf("got %v, %v after %d attempts; want 200 after 2", resp, err, n)
		}
		if len(infos) != 1 || !errors.Is(infos[0].Err, errConn) || infos[0].StatusCode != 0 {
			t.Errorf("OnRetry saw %+v, want one call carrying the error", infos)
		}
	})
	t.Run("POST not retried", func(t *testing.T) {
		n := 0
		next := rtFunc(func(req *http.Request) (*http.Response, error) { n++; return nil, errConn })
		tr := NewTransport(next, Options{Clock: newFakeClock(testStart)})
		_, err := tr.RoundTrip(mustRequest(t, "POST", "http://example.test/", strings.NewReader("x")))
		if !errors.Is(err, errConn) || n != 1 {
			t.Errorf("err %v after %d attempts, want the connection error after 1", err, n)
		}
	})
	t.Run("cancellation not retried", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			n++
			cancel()
			return nil, req.Context().Err()
		})
		clock := newFakeClock(testStart)
		retries := 0
		tr := NewTransport(next, Options{Clock: clock, OnRetry: func(RetryInfo) { retries++ }})
		_, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil).WithContext(ctx))
		if !errors.Is(err, context.Canceled) || n != 1 || retries != 0 || len(clock.Sleeps()) != 0 {
			t.Errorf("err %v after %d attempts, %d retries planned, sleeps %v; want context.Canceled after 1, none planned, no sleep",
				err, n, retries, clock.Sleeps())
		}
	})
	t.Run("retries exhausted return the last error", func(t *testing.T) {
		n := 0
		next := rtFunc(func(req *http.Request) (*http.Response, error) { n++; return nil, errConn })
		tr := NewTransport(next, Options{Clock: newFakeClock(testStart), MaxAttempts: 2})
		resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil))
		if resp != nil || !errors.Is(err, errConn) || n != 2 {
			t.Errorf("got %v, %v after %d attempts; want the error after 2", resp, err, n)
		}
	})
}

// TestWhichErrorsAreRetried checks the rule for errors: only a failure of
// the connection is retried, as another attempt, on another connection,
// may not meet it. Any other error would recur on every attempt, each
// after a backoff and a retry from the budget.
func TestWhichErrorsAreRetried(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	cases := []struct {
		name    string
		err     error
		retried bool
	}{
		{"read reset", reset, true},
		{"dial refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true},
		{"a timeout of the transport's own", os.ErrDeadlineExceeded, true},
		{"server closed the connection", fmt.Errorf("net/http: Transport failed to read from server: %w", io.EOF), true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"kept-alive connection closed", errors.New("http: server closed idle connection"), true},
		{"HTTP/2 GOAWAY", errors.New(`http2: server sent GOAWAY and closed the connection; LastStreamID=1, ErrCode=NO_ERROR, debug=""`), true},
		{"url.Error around a reset", &url.Error{Op: "Get", URL: "http://example.test/", Err: reset}, true},
		{"any other error", errors.New("net/http: invalid method \"G T\""), false},
		{"url.Error around another error", &url.Error{Op: "Get", URL: "ftp://example.test/", Err: errors.New(`unsupported protocol scheme "ftp"`)}, false},
		// crypto/tls reports the server's alert (a client certificate
		// refused, say) in this shape, its Err an unexported alert type.
		{"TLS alert from the server", &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, false},
		// A dial that fails on its address, not on the network: every
		// attempt would fail the same way.
		{"invalid port", &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "invalid port", Addr: "99999"}}, false},
		{"unparsable address", &net.OpError{Op: "dial", Net: "tcp", Err: &net.ParseError{Type: "IP address", Text: "1.2.3"}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			next := rtFunc(func(req *http.Request) (*http.Response, error) {
				n++
				if n == 1 {
					return nil, tc.err
				}
				return reply(req, 200, nil), nil
			})
			clock := newFakeClock(testStart)
			tr := NewTransport(next, Options{Clock: clock})
			resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil))
			if tc.retried && (err != nil || n != 2) {
				t.Errorf("got %v, %v after %d attempts; want 200 after 2", resp, err, n)
			}
			if !tc.retried && (err != tc.err || n != 1 || len(clock.Sleeps()) != 0) {
				t.Errorf("got %v, %v after %d attempts and sleeps %v; want the error after 1, no sleep", resp, err, n, clock.Sleeps())
			}
		})
	}
}

// TestOnRetry checks what the hook is told and that its Wait is the one
// slept.
func TestOnRetry(t *testing.T) {
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		return reply(req, 503, nil), nil
	})
	clock := newFakeClock(testStart)
	var infos []RetryInfo
	req := mustRequest(t, "GET", "http://example.test/", nil)
	tr := NewTransport(next, Options{Clock: clock, OnRetry: func(i RetryInfo) { infos = append(infos, i) }})
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	sleeps := clock.Sleeps()
	if len(infos) != DefaultMaxAttempts-1 || len(sleeps) != len(infos) {
		t.Fatalf("%d OnRetry calls and %d sleeps, want %d of each", len(infos), len(sleeps), DefaultMaxAttempts-1)
	}
	for i, info := range infos {
		if info.Attempt != i+1 || info.StatusCode != 503 || info.Err != nil || info.Request != req || info.Wait != sleeps[i] {
			t.Errorf("call %d: %+v (slept %v)", i, info, sleeps[i])
		}
	}
}

// TestBackoff checks the window min(Cap, Base·2^(attempt-1)) at its top
// (Rand 1) and bottom (Rand 0), including attempts that would overflow.
func TestBackoff(t *testing.T) {
	one := func() float64 { return 1 }
	cases := []struct {
		base, cap time.Duration
		rand      func() float64
		attempt   int
		want      time.Duration
	}{
		{0, 0, one, 1, 100 * time.Millisecond}, // defaults
		{0, 0, one, 2, 200 * time.Millisecond},
		{0, 0, one, 9, 25600 * time.Millisecond},
		{0, 0, one, 10, 30 * time.Second}, // capped
		{0, 0, one, 0, 100 * time.Millisecond},
		{0, 0, one, -7, 100 * time.Millisecond},
		{0, 0, one, 64, 30 * time.Second},
		{0, 0, one, math.MaxInt, 30 * time.Second},
		{time.Second, time.Millisecond, one, 1, time.Millisecond}, // base above cap
		{math.MaxInt64 / 3, math.MaxInt64, one, 100, math.MaxInt64},
		{time.Second, time.Minute, func() float64 { return 0 }, 5, 0},
		{time.Second, time.Minute, func() float64 { return 0.5 }, 3, 2 * time.Second},
		{time.Second, time.Minute, func() float64 { return math.NaN() }, 3, 0},
		{time.Second, time.Minute, func() float64 { return 7 }, 3, 4 * time.Second},
		{time.Second, time.Minute, func() float64 { return -1 }, 3, 0},
	}
	for _, tc := range cases {
		tr := NewTransport(nil, Options{Base: tc.base, Cap: tc.cap, Rand: tc.rand})
		if got := tr.Backoff(tc.attempt); got != tc.want {
			t.Errorf("Base %v Cap %v Rand %v: Backoff(%d) = %v, want %v", tc.base, tc.cap, tc.rand(), tc.attempt, got, tc.want)
		}
	}
}

// TestZeroTransport checks that a zero Transport works, over
// http.DefaultTransport.
func TestZeroTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hi")
	}))
	defer srv.Close()
	var tr Transport
	c := &http.Client{Transport: &tr}
	defer c.CloseIdleConnections()
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "hi" {
		t.Errorf("got %d %q, want 200 \"hi\"", resp.StatusCode, b)
	}
	if tr.Backoff(1) > DefaultBase {
		t.Errorf("zero Transport Backoff(1) = %v, above the default Base", tr.Backoff(1))
	}
}

// closeCounter is a RoundTripper with a CloseIdleConnections method.
type closeCounter struct {
	http.RoundTripper
	n int
}

func (c *closeCounter) CloseIdleConnections() { c.n++ }

func TestCloseIdleConnectionsForwards(t *testing.T) {
	cc := &closeCounter{}
	Client(Options{}).CloseIdleConnections() // over http.DefaultTransport: must not panic
	c := &http.Client{Transport: NewTransport(cc, Options{})}
	c.CloseIdleConnections()
	if cc.n != 1 {
		t.Errorf("wrapped CloseIdleConnections called %d times, want 1", cc.n)
	}
}

// TestErrorsAnotherAttemptCannotCure checks that a certificate that fails
// verification, a server that refuses the client's certificate, a server
// that does not speak TLS, or an address that cannot be dialled, is
// reported at once instead of being retried: each attempt would fail the
// same way, after a full handshake and a backoff.
func TestErrorsAnotherAttemptCannotCure(t *testing.T) {
	// countConns starts srv, counting the connections it accepts.
	countConns := func(srv *httptest.Server, useTLS bool) *atomic.Int32 {
		var n atomic.Int32
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				n.Add(1)
			}
		}
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshakes are expected
		if useTLS {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
		return &n
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})

	t.Run("untrusted certificate", func(t *testing.T) {
		srv := httptest.NewUnstartedServer(handler)
		conns := countConns(srv, true)
		clock := newFakeClock(testStart)
		tr := NewTransport(&http.Transport{}, Options{Clock: clock}) // does not trust the test certificate
		defer tr.CloseIdleConnections()
		_, err := tr.RoundTrip(mustRequest(t, "GET", srv.URL, nil))
		var verr *tls.CertificateVerificationError
		if !errors.As(err, &verr) {
			t.Fatalf("err = %v, want a certificate verification error", err)
		}
		if n := conns.Load(); n != 1 || len(clock.Sleeps()) != 0 {
			t.Errorf("%d connections and sleeps %v, want 1 connection and no sleep", n, clock.Sleeps())
		}
	})
	t.Run("plain HTTP on an https URL", func(t *testing.T) {
		srv := httptest.NewUnstartedServer(handler)
		conns := countConns(srv, false)
		clock := newFakeClock(testStart)
		tr := NewTransport(&http.Transport{}, Options{Clock: clock})
		defer tr.CloseIdleConnections()
		_, err := tr.RoundTrip(mustRequest(t, "GET", "https"+strings.TrimPrefix(srv.URL, "http"), nil))
		var rerr tls.RecordHeaderError
		if !errors.As(err, &rerr) {
			t.Fatalf("err = %v, want a TLS record header error", err)
		}
		if n := conns.Load(); n != 1 || len(clock.Sleeps()) != 0 {
			t.Errorf("%d connections and sleeps %v, want 1 connection and no sleep", n, clock.Sleeps())
		}
	})
	// A server that requires a client certificate the client does not
	// have answers the handshake with an alert, which crypto/tls reports
	// as a *net.OpError, a net.Error: in TLS 1.2 during the handshake, in
	// TLS 1.3 on the first read after it, once the request is written.
	for _, tc := range []struct {
		name    string
		version uint16
	}{
		{"client certificate refused, TLS 1.2", tls.VersionTLS12},
		{"client certificate refused, TLS 1.3", tls.VersionTLS13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(handler)
			srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, MaxVersion: tc.version}
			conns := countConns(srv, true)
			inner := srv.Client().Transport.(*http.Transport) // trusts the server, has no certificate of its own
			clock := newFakeClock(testStart)
			tr := NewTransport(inner, Options{Clock: clock})
			defer tr.CloseIdleConnections()
			_, err := tr.RoundTrip(mustRequest(t, "GET", srv.URL, nil))
			var oerr *net.OpError
			if !errors.As(err, &oerr) || oerr.Op != "remote error" {
				t.Fatalf("err = %v, want the server's TLS alert", err)
			}
			if n := conns.Load(); n != 1 || len(clock.Sleeps()) != 0 {
				t.Errorf("%d connections and sleeps %v, want 1 connection and no sleep", n, clock.Sleeps())
			}
		})
	}
	// http.Transport refuses these requests before any I/O, or the dialer
	// before any packet; each attempt would be refused the same way.
	for _, tc := range []struct {
		name string
		req  func() *http.Request
	}{
		{"unsupported scheme", func() *http.Request { return mustRequest(t, "GET", "ftp://example.test/", nil) }},
		{"invalid header value", func() *http.Request {
			r := mustRequest(t, "GET", "http://127.0.0.1:1/", nil)
			r.Header["X-Bad"] = []string{"a\nb"}
			return r
		}},
		{"nil URL", func() *http.Request {
			r := mustRequest(t, "GET", "http://example.test/", nil)
			r.URL = nil
			return r
		}},
		// A POST too: a failed dial is retried whatever the method, but
		// not one that failed on the address itself.
		{"invalid port", func() *http.Request {
			return mustRequest(t, "POST", "http://127.0.0.1:99999/", strings.NewReader("payload"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := &countingRT{next: &http.Transport{}}
			clock := newFakeClock(testStart)
			tr := NewTransport(inner, Options{Clock: clock})
			if _, err := tr.RoundTrip(tc.req()); err == nil {
				t.Fatal("want an error")
			} else if n := inner.n.Load(); n != 1 || len(clock.Sleeps()) != 0 {
				t.Errorf("%v: %d attempts, sleeps %v; want 1 attempt and no sleep", err, n, clock.Sleeps())
			}
		})
	}
	t.Run("x509 error from another RoundTripper", func(t *testing.T) {
		n := 0
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			n++
			return nil, fmt.Errorf("handshake: %w", x509.UnknownAuthorityError{})
		})
		clock := newFakeClock(testStart)
		tr := NewTransport(next, Options{Clock: clock})
		_, err := tr.RoundTrip(mustRequest(t, "GET", "https://example.test/", nil))
		if !errors.As(err, new(x509.UnknownAuthorityError)) || n != 1 || len(clock.Sleeps()) != 0 {
			t.Errorf("err %v after %d attempts, sleeps %v; want the x509 error after 1, no sleep", err, n, clock.Sleeps())
		}
	})
}

// countingRT counts the attempts that reach next.
type countingRT struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// blockingClock is a Clock whose Sleep announces itself on sleeping and
// then returns only when its context is done, as the system clock does
// for a wait that outlasts the caller.
type blockingClock struct {
	now      time.Time
	sleeping chan struct{}
}

func (c *blockingClock) Now() time.Time { return c.now }

func (c *blockingClock) Sleep(ctx context.Context, d time.Duration) error {
	c.sleeping <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

// TestCancelDuringWait checks that cancelling the request while it waits
// for a retry ends RoundTrip with the context's error, and closes both the
// refused response and the body prepared for the retry.
func TestCancelDuringWait(t *testing.T) {
	var replayed []*trackedBody
	req := mustRequest(t, "PUT", "http://example.test/", strings.NewReader("payload"))
	req.GetBody = func() (io.ReadCloser, error) {
		b := newTrackedBody("payload")
		replayed = append(replayed, b)
		return b, nil
	}
	refused := newTrackedBody("slow down")
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
		return reply(req, http.StatusTooManyRequests, refused, "Retry-After", "10"), nil
	})
	clock := &blockingClock{now: time.Now(), sleeping: make(chan struct{})}
	tr := NewTransport(next, Options{Clock: clock})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-clock.sleeping
		cancel()
	}()

	resp, err := tr.RoundTrip(req.WithContext(ctx))
	if resp != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, %v; want no response and context.Canceled", resp, err)
	}
	if !refused.closed.Load() {
		t.Error("the refused response was not closed")
	}
	if len(replayed) != 1 || !replayed[0].closed.Load() {
		t.Errorf("%d bodies prepared for the retry, closed: %v; want 1, closed", len(replayed), len(replayed) == 1 && replayed[0].closed.Load())
	}
}

// TestCancelAsRefusalArrives checks that a caller who gives up while a 429
// is on its way gets that 429, untouched, and that no retry is planned
// for it: OnRetry is not told of one, and the budget is not spent on it.
func TestCancelAsRefusalArrives(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	refused := newTrackedBody("slow down")
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		cancel()
		return reply(req, http.StatusTooManyRequests, refused, "Retry-After", "1"), nil
	})
	clock := newFakeClock(testStart)
	planned := 0
	tr := NewTransport(next, Options{Clock: clock, OnRetry: func(RetryInfo) { planned++ }, BudgetMinRetries: 1})
	resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil).WithContext(ctx))
	if err != nil || resp == nil || resp.StatusCode != 429 {
		t.Fatalf("got %v, %v; want the server's 429", resp, err)
	}
	if refused.read.Load() != 0 || refused.closed.Load() {
		t.Errorf("the 429's body was touched: read %d, closed %v", refused.read.Load(), refused.closed.Load())
	}
	if planned != 0 || len(clock.Sleeps()) != 0 {
		t.Errorf("%d retries announced, sleeps %v; want none", planned, clock.Sleeps())
	}
	if !tr.budget.allowRetry(clock.Now()) {
		t.Error("the request spent the only retry of the budget")
	}
}

// TestGetBodyFailureSpendsNoBudget checks that a retry that cannot happen
// because the request's body cannot be replayed costs no retry from the
// budget: the budget bounds retries sent, not retries thought of.
func TestGetBodyFailureSpendsNoBudget(t *testing.T) {
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		return reply(req, http.StatusServiceUnavailable, nil), nil
	})
	clock := newFakeClock(testStart)
	tr := NewTransport(next, Options{Clock: clock, BudgetMinRetries: 1})
	req := mustRequest(t, "PUT", "http://example.test/", strings.NewReader("payload"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("body gone") }
	resp, err := tr.RoundTrip(req)
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("got %v, %v; want the 503", resp, err)
	}
	if !tr.budget.allowRetry(clock.Now()) {
		t.Error("a retry that was never sent spent the only retry of the budget")
	}
}

// slowRefusal is a refused response's body that takes its time: each Read
// calls during, then gives one chunk.
type slowRefusal struct {
	chunks []string
	during func() error
}

func (b *slowRefusal) Read(p []byte) (int, error) {
	if err := b.during(); err != nil {
		return 0, err
	}
	if len(b.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.chunks[0])
	b.chunks = b.chunks[1:]
	return n, nil
}

func (b *slowRefusal) Close() error { return nil }

// TestReadingTheRefusalCountsAgainstDeadline checks that the time spent
// reading a refused body, which the Transport does to reuse its
// connection, counts against the deadline like the wait: when the body
// takes the time the retry needed, or the caller gives up while it is
// read, the caller gets the refusal at once, with the body it read given
// back, instead of its own deadline's error and no response.
func TestReadingTheRefusalCountsAgainstDeadline(t *testing.T) {
	cases := []struct {
		name   string
		during func(clock *fakeClock, cancel context.CancelFunc) error
	}{
		{"reading takes the retry's time", func(clock *fakeClock, _ context.CancelFunc) error {
			clock.Advance(500 * time.Millisecond)
			return nil
		}},
		{"the caller gives up while it is read", func(_ *fakeClock, cancel context.CancelFunc) error {
			cancel()
			return context.Canceled
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now() // compared with a real context deadline
			clock := newFakeClock(start)
			ctx, cancel := context.WithDeadline(context.Background(), start.Add(time.Second))
			defer cancel()
			n := 0
			next := rtFunc(func(req *http.Request) (*http.Response, error) {
				n++
				clock.Advance(100 * time.Millisecond)
				body := &slowRefusal{chunks: []string{"slow ", "down"}}
				first := true
				body.during = func() error {
					if first { // the first chunk has arrived with the header
						first = false
						return nil
					}
					return tc.during(clock, cancel)
				}
				return reply(req, 429, body, "Retry-After", "0"), nil
			})
			// The retry fits as the 429 arrives: a wait of at most 1ms and
			// an attempt of 100ms, with 900ms to go.
			tr := NewTransport(next, Options{Clock: clock, Base: time.Millisecond})
			resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil).WithContext(ctx))
			if err != nil || resp == nil || resp.StatusCode != 429 {
				t.Fatalf("got %v, %v; want the server's 429", resp, err)
			}
			defer resp.Body.Close()
			if b, _ := io.ReadAll(resp.Body); !strings.HasPrefix(string(b), "slow ") {
				t.Errorf("body %q, want what was read of it given back", b)
			}
			if n != 1 || len(clock.Sleeps()) != 0 {
				t.Errorf("%d attempts and sleeps %v, want 1 attempt and no sleep", n, clock.Sleeps())
			}
		})
	}
}

// TestDialTimeoutRetried checks that a connection attempt that timed out
// by the dialer's own timeout is retried like any connection error: the
// net package's "i/o timeout" matches context.DeadlineExceeded with
// errors.Is, but the caller's context did not give up.
func TestDialTimeoutRetried(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	var dials atomic.Int32
	next := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := &net.Dialer{}
		if dials.Add(1) == 1 {
			// A deadline already past: the dial fails as a real dial
			// timeout does, with the net package's own error.
			d.Deadline = time.Now().Add(-time.Second)
		}
		return d.DialContext(ctx, network, addr)
	}}
	defer next.CloseIdleConnections()
	clock := newFakeClock(testStart)
	tr := NewTransport(next, Options{Clock: clock})
	resp, err := tr.RoundTrip(mustRequest(t, "GET", srv.URL, nil))
	if err != nil {
		t.Fatalf("err = %v after %d dials, want the retry to succeed", err, dials.Load())
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || dials.Load() != 2 || len(clock.Sleeps()) != 1 {
		t.Errorf("status %d after %d dials and sleeps %v; want 200 after 2 dials and one sleep",
			resp.StatusCode, dials.Load(), clock.Sleeps())
	}
}

// TestUnsentRequestRetried checks that a request whose connection could
// not be made is retried whatever its method: it never reached the server,
// so sending it cannot repeat anything (net/http's Transport retries such
// a request too). A non-idempotent request that did reach the server, or
// whose body cannot be replayed, is still sent once.
func TestUnsentRequestRetried(t *testing.T) {
	// closedAddr is a loopback address nothing listens on: dialing it is
	// refused before any byte of the request is written.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := l.Addr().String()
	l.Close()

	cases := []struct {
		name       string
		hangUp     bool // the server reads the request, then drops the connection
		oneShot    bool // the body has no GetBody
		wantDials  int32
		wantServed int32 // requests the server received whole
		wantOK     bool
	}{
		{"POST refused at dial: retried", false, false, 2, 1, true},
		{"POST refused at dial, one-shot body: sent once", false, true, 1, 0, false},
		{"POST lost after it was sent: not retried", true, false, 1, 1, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var served atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if b, _ := io.ReadAll(r.Body); string(b) == "payload" {
					served.Add(1)
				}
				if tc.hangUp {
					conn, _, err := w.(http.Hijacker).Hijack()
					if err == nil {
						conn.Close()
					}
					return
				}
				io.WriteString(w, "ok")
			}))
			defer srv.Close()
			var dials atomic.Int32
			next := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if dials.Add(1) == 1 && !tc.hangUp {
					addr = closedAddr
				}
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}}
			defer next.CloseIdleConnections()
			clock := newFakeClock(testStart)
			tr := NewTransport(next, Options{Clock: clock})

			var body io.Reader = strings.NewReader("payload")
			if tc.oneShot {
				body = io.NopCloser(body)
			}
			resp, err := tr.RoundTrip(mustRequest(t, http.MethodPost, srv.URL, body))
			if resp != nil {
				resp.Body.Close()
			}
			if ok := err == nil && resp.StatusCode == 200; ok != tc.wantOK {
				t.Errorf("got %v, %v; want success %v", resp, err, tc.wantOK)
			}
			if d, s := dials.Load(), served.Load(); d != tc.wantDials || s != tc.wantServed {
				t.Errorf("%d dials, %d requests served; want %d and %d", d, s, tc.wantDials, tc.wantServed)
			}
		})
	}
}

// TestNilResponseBody checks that a wrapped RoundTripper returning a
// response with a nil Body, as test doubles often do and http.Client
// tolerates, is retried without a panic.
func TestNilResponseBody(t *testing.T) {
	n := 0
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		n++
		if n == 1 {
			return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{}, Request: req}, nil
		}
		return reply(req, 200, nil), nil
	})
	tr := NewTransport(next, Options{Clock: newFakeClock(testStart)})
	resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil))
	if err != nil || resp.StatusCode != 200 || n != 2 {
		t.Fatalf("got %v, %v after %d attempts; want 200 after 2", resp, err, n)
	}

	// No response and no error at all is reported as an error, as
	// http.Client does.
	none := rtFunc(func(*http.Request) (*http.Response, error) { return nil, nil })
	tr = NewTransport(none, Options{Clock: newFakeClock(testStart)})
	if resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil)); resp != nil || err == nil {
		t.Errorf("nil response and nil error gave %v, %v; want an error", resp, err)
	}
}

// TestNilResponseWithPacing: with Pacing on, a wrapped RoundTripper that
// returns neither a response nor an error gets the same error, without a
// panic: there are no quota headers to read.
func TestNilResponseWithPacing(t *testing.T) {
	none := rtFunc(func(*http.Request) (*http.Response, error) { return nil, nil })
	tr := NewTransport(none, Options{Clock: newFakeClock(testStart), Pacing: true})
	if resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil)); resp != nil || err == nil {
		t.Errorf("nil response and nil error with Pacing: %v, %v; want an error", resp, err)
	}
}

// TestNoRetryTheDeadlineWouldCutHugeWait: a Retry-After at the largest
// Duration, honoured (MaxRetryAfter as large), plus the attempt's time
// does not wrap around to a short wait: the deadline still returns the
// 429 at once.
func TestNoRetryTheDeadlineWouldCutHugeWait(t *testing.T) {
	clock := newFakeClock(testStart)
	n := 0
	next := rtFunc(func(req *http.Request) (*http.Response, error) {
		n++
		clock.Advance(time.Millisecond)
		return reply(req, 429, nil, "Retry-After", "99999999999999"), nil
	})
	tr := NewTransport(next, Options{Clock: clock, MaxRetryAfter: math.MaxInt64})
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(time.Hour))
	defer cancel()
	resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil).WithContext(ctx))
	if err != nil || resp.StatusCode != 429 || n != 1 || len(clock.Sleeps()) != 0 {
		t.Fatalf("%v, %v after %d attempts and sleeps %v; want the 429 after 1, no sleep", resp, err, n, clock.Sleeps())
	}
	resp.Body.Close()
}

// TestStalledRefusalBody checks that reading a refused body before a
// retry is bounded in time as it is in size: a 503 whose body stops
// coming does not hold the call (for ever, without a deadline). The
// Transport gives up on the body and its connection, as it does on a body
// too large, and the retry goes out on a new connection.
func TestStalledRefusalBody(t *testing.T) {
	release := make(chan struct{})
	var conns, n atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 1 {
			io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "partial ")
		w.(http.Flusher).Flush()
		select { // the rest of the body never comes
		case <-release:
		case <-r.Context().Done():
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	defer close(release)

	tr := NewTransport(&http.Transport{}, Options{Clock: newFakeClock(testStart)})
	tr.drainTime = 10 * time.Millisecond // real time: the stall is on a real connection
	defer tr.CloseIdleConnections()
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := tr.RoundTrip(mustRequest(t, "GET", srv.URL, nil))
		done <- result{resp, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second): // a watchdog, not a sleep: the fixed Transport returns in a fraction of this
		t.Fatal("RoundTrip still reading the stalled refusal after 10s")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	b, _ := io.ReadAll(r.resp.Body)
	r.resp.Body.Close()
	if r.resp.StatusCode != 200 || string(b) != "ok" || n.Load() != 2 || conns.Load() != 2 {
		t.Errorf("got %d %q after %d attempts over %d connections; want 200 \"ok\" after 2 over 2",
			r.resp.StatusCode, b, n.Load(), conns.Load())
	}
}
