package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
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
