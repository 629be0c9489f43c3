package retry

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
)

// arrival is one request as the server saw it.
type arrival struct {
	id         string // the client's X-Test-ID header
	at         time.Time
	status     int
	retryAfter string
}

// arrivalLog records every request a test server receives.
type arrivalLog struct {
	mu   sync.Mutex
	list []arrival
}

func (l *arrivalLog) all() []arrival {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]arrival(nil), l.list...)
}

// record wraps next and logs each request with the time, by clock, at
// which it arrived, and the status and Retry-After it got.
func (l *arrivalLog) record(clock Clock, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := clock.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.list = append(l.list, arrival{
			id:         r.Header.Get("X-Test-ID"),
			at:         at,
			status:     rec.status,
			retryAfter: w.Header().Get("Retry-After"),
		})
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// startLimitedServer starts a real HTTP server on a loopback port behind
// sluice's own middleware: a fixed window of limit requests per window,
// keyed by client address, on the in-memory store, all reading clock. It
// answers the rest with 429 and a Retry-After.
func startLimitedServer(t *testing.T, clock Clock, limit int, window time.Duration) (*httptest.Server, *arrivalLog) {
	t.Helper()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})
	config := fmt.Sprintf("policies:\n  - name: api\n    key: ip\n    limits: [\"fixed_window %d per %v\"]\n", limit, window)
	set, err := policy.Load("retry-e2e.yaml", []byte(config))
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Options{Clock: clock})
	limited := httplimit.Middleware(set, store, httplimit.Options{Options: policy.Options{Clock: clock}})(ok)
	log := &arrivalLog{}
	srv := httptest.NewServer(log.record(clock, limited))
	t.Cleanup(srv.Close)
	return srv, log
}

// TestEndToEndHonoursRetryAfter fires three times a server's limit at it,
// all at once, through real sockets. Every GET must get through in the
// end, and no retry may reach the server before the Retry-After it was
// given. Client and server read one simulated clock, so the test takes no
// real time.
func TestEndToEndHonoursRetryAfter(t *testing.T) {
	const (
		limit   = 10
		clients = 3 * limit
		window  = time.Second
	)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newSimClock(start, clients)
	srv, log := startLimitedServer(t, clock, limit, window)

	rng := rand.New(rand.NewPCG(1, 2))
	client := &http.Client{Transport: NewTransport(nil, Options{
		MaxAttempts: 10,
		Clock:       clock,
		Rand:        rng.Float64,
		NoBudget:    true, // a burst of 30 needs more than the default budget; TestBudget* cover it
	})}
	defer client.CloseIdleConnections()

	statuses := make([]int, clients)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			defer clock.Done()
			req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("X-Test-ID", strconv.Itoa(i))
			resp, err := client.Do(req)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute): // a watchdog against a stuck simulation, not a sleep
		t.Fatal("clients did not finish")
	}

	for i, s := range statuses {
		if s != http.StatusOK {
			t.Errorf("client %d ended with status %d, want 200", i, s)
		}
	}

	byID := map[string][]arrival{}
	refused := 0
	for _, a := range log.all() {
		byID[a.id] = append(byID[a.id], a)
		if a.status == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused < clients-limit {
		t.Errorf("server refused %d requests, want at least %d: the test did not exercise retries", refused, clients-limit)
	}
	for id, as := range byID {
		sort.Slice(as, func(i, j int) bool { return as[i].at.Before(as[j].at) })
		for k := 1; k < len(as); k++ {
			prev := as[k-1]
			secs, err := strconv.Atoi(prev.retryAfter)
			if err != nil {
				t.Fatalf("request %s: attempt %d got Retry-After %q", id, k, prev.retryAfter)
			}
			earliest := prev.at.Add(time.Duration(secs) * time.Second)
			if as[k].at.Before(earliest) {
				t.Errorf("request %s: retry at %v, before the Retry-After of %ds given at %v",
					id, as[k].at.Sub(start), secs, prev.at.Sub(start))
			}
		}
		if last := as[len(as)-1]; last.status != http.StatusOK {
			t.Errorf("request %s: last arrival got %d", id, last.status)
		}
	}

	// The server itself must have kept its limit, or the test proves little.
	perWindow := map[time.Time]int{}
	for _, a := range log.all() {
		if a.status == http.StatusOK {
			perWindow[a.at.Truncate(window)]++
		}
	}
	for w, n := range perWindow {
		if n > limit {
			t.Errorf("window %v served %d requests, limit %d", w.Sub(start), n, limit)
		}
	}
	t.Logf("%d arrivals, %d refused, over %s", len(log.all()), refused, fmt.Sprint(clock.Now().Sub(start)))
}
