package retry

import (
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

// herdReturns simulates n clients refused at the same instant without a
// Retry-After. Each is a Transport of its own with its own clock, all
// starting at testStart, and randFor(i) as its random source. It returns
// how long after the refusal each client came back.
func herdReturns(t *testing.T, n int, base time.Duration, randFor func(i int) func() float64) []time.Duration {
	t.Helper()
	returns := make([]time.Duration, 0, n)
	for i := range n {
		clock := newFakeClock(testStart)
		attempts := 0
		next := rtFunc(func(req *http.Request) (*http.Response, error) {
			attempts++
			if attempts == 1 {
				return reply(req, http.StatusTooManyRequests, nil), nil
			}
			returns = append(returns, clock.Now().Sub(testStart))
			return reply(req, http.StatusOK, nil), nil
		})
		tr := NewTransport(next, Options{Clock: clock, Base: base, Rand: randFor(i)})
		resp, err := tr.RoundTrip(mustRequest(t, "GET", "http://example.test/", nil))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("client %d: %v, %v", i, resp, err)
		}
	}
	return returns
}

// histogram counts ds into buckets equal slices of [0, window).
func histogram(ds []time.Duration, window time.Duration, buckets int) []int {
	h := make([]int, buckets)
	for _, d := range ds {
		b := int(d * time.Duration(buckets) / window)
		b = min(max(b, 0), buckets-1)
		h[b]++
	}
	return h
}

// TestJitterSpreadsHerd shows why the backoff is jittered: 1,000 clients
// refused together come back spread evenly over the backoff window, while
// the same clients without jitter come back in a single spike.
func TestJitterSpreadsHerd(t *testing.T) {
	const (
		clients = 1000
		buckets = 20
		base    = time.Second
	)
	mean := float64(clients) / buckets

	jittered := herdReturns(t, clients, base, func(i int) func() float64 {
		return rand.New(rand.NewPCG(42, uint64(i))).Float64
	})
	h := histogram(jittered, base, buckets)
	for b, n := range h {
		// 50 expected per bucket; binomial spread is about ±7, so twice
		// the mean (or half of it) only fails if the spreading is broken.
		if float64(n) > 2*mean || float64(n) < mean/2 {
			t.Errorf("jittered: bucket %d holds %d returns, want within [%.0f, %.0f]; histogram %v", b, n, mean/2, 2*mean, h)
		}
	}
	for _, d := range jittered {
		if d < 0 || d > base {
			t.Fatalf("jittered return at %v, outside the window [0, %v]", d, base)
		}
	}

	synchronized := herdReturns(t, clients, base, func(int) func() float64 {
		return func() float64 { return 1 }
	})
	h = histogram(synchronized, base, buckets)
	peak := 0
	for _, n := range h {
		peak = max(peak, n)
	}
	if peak != clients {
		t.Errorf("without jitter the peak bucket holds %d returns, want all %d; histogram %v", peak, clients, h)
	}
	if float64(peak) <= 2*mean {
		t.Errorf("without jitter the peak %d is not a spike over the mean %.0f", peak, mean)
	}
}
