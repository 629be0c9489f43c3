package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

func ExampleMiddleware() {
	set, err := policy.Load("sluice.yaml", []byte(`
policies:
  - name: api
    key: ip
    limits: ["2/m burst 2"]
`))
	if err != nil {
		log.Fatal(err)
	}
	limit := httplimit.Middleware(set, memory.New(memory.Options{}), httplimit.Options{})
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d RateLimit-Policy: %s, remaining %s, Retry-After: %q\n", w.Code,
			w.Header().Get("RateLimit-Policy"), w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit-Policy: "api";q=2;w=60, remaining 1, Retry-After: ""
	// 200 RateLimit-Policy: "api";q=2;w=60, remaining 0, Retry-After: ""
	// 429 RateLimit-Policy: "api";q=2;w=60, remaining 0, Retry-After: "30"
}

// An authentication middleware in front of the limiter names the user, so
// that policies can key by it (key: user) and tell anonymous requests
// (match: {authenticated: false}) from signed-in ones.
func ExampleWithUser() {
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if user, _, ok := r.BasicAuth(); ok { // check the password in real code
				r = r.WithContext(httplimit.WithUser(r.Context(), user))
			}
			next.ServeHTTP(w, r)
		})
	}
	set, err := policy.Load("sluice.yaml", []byte(`
policies:
  - {name: anonymous, match: {authenticated: false}, key: ip, limits: ["1/m"]}
  - {name: users, match: {authenticated: true}, key: user, limits: ["100/m"]}
`))
	if err != nil {
		log.Fatal(err)
	}
	limit := httplimit.Middleware(set, memory.New(memory.Options{}), httplimit.Options{})
	h := auth(limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))

	for _, user := range []string{"", "", "ada", "ada"} {
		r := httptest.NewRequest("GET", "/", nil)
		if user != "" {
			r.SetBasicAuth(user, "secret")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "anonymous";q=1;w=60
	// 429 "anonymous";q=1;w=60
	// 200 "users";q=100;w=60
	// 200 "users";q=100;w=60
}

// Each API key has its own counter: key: header:X-API-Key keys a request
// by the header's value. A request without the header has no such key,
// so the match sends it to a policy keyed by address instead.
func ExampleMiddleware_apiKey() {
	set, err := policy.Load("sluice.yaml", []byte(`
policies:
  - name: per-key
    match: {headers: [{name: X-API-Key, present: true}]}
    key: header:X-API-Key
    limits: ["2/m"]
  - name: anonymous
    match: {headers: [{name: X-API-Key, present: false}]}
    key: ip
    limits: ["1/m"]
`))
	if err != nil {
		log.Fatal(err)
	}
	clock := ratetest.NewClock(time.Date(2100, 1, 4, 12, 0, 0, 0, time.UTC)) // a program leaves Clock nil
	limit := httplimit.Middleware(set, memory.New(memory.Options{Clock: clock}),
		httplimit.Options{Options: policy.Options{Clock: clock}})
	h := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	for _, key := range []string{"pk_acme", "pk_acme", "pk_acme", "pk_initech", ""} {
		r := httptest.NewRequest("GET", "/v1/orders", nil)
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%-12q %d RateLimit: %s, Retry-After: %q\n", key, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// "pk_acme"    200 RateLimit: "per-key";r=1;t=30, Retry-After: ""
	// "pk_acme"    200 RateLimit: "per-key";r=0;t=60, Retry-After: ""
	// "pk_acme"    429 RateLimit: "per-key";r=0;t=30, Retry-After: "30"
	// "pk_initech" 200 RateLimit: "per-key";r=1;t=30, Retry-After: ""
	// ""           200 RateLimit: "anonymous";r=0;t=60, Retry-After: ""
}

// Behind a reverse proxy every request comes from the proxy's address.
// With the proxy in client_ip.trusted_proxies, the client is the address
// the proxy wrote in X-Forwarded-For; a request from anywhere else is
// keyed by its own address, whatever header it sends.
func ExampleMiddleware_trustedProxy() {
	set, err := policy.Load("sluice.yaml", []byte(`
client_ip:
  trusted_proxies: [10.0.0.0/8]
policies:
  - name: per-client
    key: ip
    limits: ["1/m"]
`))
	if err != nil {
		log.Fatal(err)
	}
	clock := ratetest.NewClock(time.Date(2100, 1, 4, 12, 0, 0, 0, time.UTC)) // a program leaves Clock nil
	limit := httplimit.Middleware(set, memory.New(memory.Options{Clock: clock}),
		httplimit.Options{Options: policy.Options{Clock: clock}})
	h := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	for _, c := range []struct{ peer, xff string }{
		{"10.0.0.5:41000", "203.0.113.7"},  // through the proxy
		{"10.0.0.5:41002", "203.0.113.7"},  // the same client again
		{"10.0.0.5:41004", "198.51.100.2"}, // another client, through the same proxy
		{"192.0.2.9:5000", "203.0.113.99"}, // straight in, naming a fresh address
		{"192.0.2.9:5002", "203.0.113.98"}, // and another
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		r.Header.Set("X-Forwarded-For", c.xff)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("from %-15s for %-13s %d RateLimit: %s\n", c.peer, c.xff, w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// from 10.0.0.5:41000  for 203.0.113.7   200 RateLimit: "per-client";r=0;t=60
	// from 10.0.0.5:41002  for 203.0.113.7   429 RateLimit: "per-client";r=0;t=60
	// from 10.0.0.5:41004  for 198.51.100.2  200 RateLimit: "per-client";r=0;t=60
	// from 192.0.2.9:5000  for 203.0.113.99  200 RateLimit: "per-client";r=0;t=60
	// from 192.0.2.9:5002  for 203.0.113.98  429 RateLimit: "per-client";r=0;t=60
}

// A limiter built in Go, without a policy file: 2 requests a minute per
// client address.
func ExampleLimit() {
	lim, err := rate.ParseLimit("2/m")
	if err != nil {
		log.Fatal(err)
	}
	l, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "api", Limits: []rate.Limit{lim}})
	if err != nil {
		log.Fatal(err)
	}
	limit := httplimit.Limit(l, httplimit.ByClientIP(nil), httplimit.LimitOptions{})
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d RateLimit: %s, Retry-After: %q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit: "api";r=1;t=30, Retry-After: ""
	// 200 RateLimit: "api";r=0;t=60, Retry-After: ""
	// 429 RateLimit: "api";r=0;t=30, Retry-After: "30"
}
