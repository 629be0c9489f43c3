package retry_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/retry"
)

// A client that is refused once, told to retry at once, and then served.
func ExampleClient() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "hello")
	}))
	defer srv.Close()

	client := retry.Client(retry.Options{
		// A zero jitter keeps this example's output fixed; leave Rand nil
		// in real code.
		Rand: func() float64 { return 0 },
		OnRetry: func(i retry.RetryInfo) {
			fmt.Printf("attempt %d refused with %d; retrying in %v\n", i.Attempt, i.StatusCode, i.Wait)
		},
	})
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	// Output:
	// attempt 1 refused with 429; retrying in 0s
	// 200 hello
}

// The backoff window doubles with each attempt up to Cap. A Rand that
// always returns 1 shows the top of each window; a real Rand picks
// uniformly inside it.
func ExampleTransport_Backoff() {
	t := retry.NewTransport(nil, retry.Options{Rand: func() float64 { return 1 }})
	for attempt := 1; attempt <= 10; attempt++ {
		fmt.Println(attempt, t.Backoff(attempt))
	}
	// Output:
	// 1 100ms
	// 2 200ms
	// 3 400ms
	// 4 800ms
	// 5 1.6s
	// 6 3.2s
	// 7 6.4s
	// 8 12.8s
	// 9 25.6s
	// 10 30s
}

func ExampleParseRetryAfter() {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, v := range []string{"120", "Tue, 01 Jan 2030 12:00:30 GMT", "-1", "soon"} {
		d, ok := retry.ParseRetryAfter(v, now)
		fmt.Println(d, ok)
	}
	// Output:
	// 2m0s true
	// 30s true
	// 0s false
	// 0s false
}

func ExampleParseRateLimit() {
	h := http.Header{}
	h.Set("RateLimit", `"burst";r=3;t=2, "daily";r=900`)
	h.Set("RateLimit-Policy", `"burst";q=10;w=2, "daily";q=1000;w=86400`)
	for _, q := range retry.ParseRateLimit(h, time.Now()) {
		fmt.Printf("%s: %d left, reset in %v\n", q.Policy, q.Remaining, q.Reset)
	}
	// Output:
	// burst: 3 left, reset in 2s
	// daily: 900 left, reset in 24h0m0s
}
