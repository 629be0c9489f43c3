package bench

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/didip/tollbooth/v7"
	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"

	sluicehttp "github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
)

// middlewares lists the contenders of BenchmarkMiddleware: each limits
// by client address, at hotRate per second, so every request is allowed
// and the benchmark measures the path an allowed request takes. handler
// is the bare handler, to subtract.
var middlewares = []struct {
	name  string
	build func(tb testing.TB, next http.Handler, perSecond int) http.Handler
}{
	{"handler", func(_ testing.TB, next http.Handler, _ int) http.Handler { return next }},
	{"sluice", func(tb testing.TB, next http.Handler, n int) http.Handler {
		set, err := policy.Load("bench.yaml", []byte(fmt.Sprintf(`
policies:
  - name: api
    key: ip
    limits: ["%d/s"]
`, n)))
		if err != nil {
			tb.Fatal(err)
		}
		return sluicehttp.Middleware(set, memory.New(memory.Options{}), sluicehttp.Options{})(next)
	}},
	{"go-limiter-httplimit", func(tb testing.TB, next http.Handler, n int) http.Handler {
		// The same rate per hour: go-limiter refills a bucket by
		// fillRate tokens per elapsed interval, which for a huge count per
		// second refills one token when a second ends, and a benchmark
		// crossing one would be refused.
		interval, tokens := time.Second, uint64(n)
		if n == hotRate {
			interval, tokens = time.Hour, uint64(n)*3600
		}
		st, err := memorystore.New(&memorystore.Config{Tokens: tokens, Interval: interval})
		if err != nil {
			tb.Fatal(err)
		}
		mw, err := httplimit.NewMiddleware(st, httplimit.IPKeyFunc())
		if err != nil {
			tb.Fatal(err)
		}
		return mw.Handle(next)
	}},
	{"throttled", func(tb testing.TB, next http.Handler, n int) http.Handler {
		st, err := memstore.NewCtx(1 << 16)
		if err != nil {
			tb.Fatal(err)
		}
		lim, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
			// throttled admits MaxBurst+1 at once.
			MaxRate: throttled.PerDuration(n, time.Second), MaxBurst: n - 1,
		})
		if err != nil {
			tb.Fatal(err)
		}
		h := &throttled.HTTPRateLimiterCtx{RateLimiter: lim, VaryBy: &throttled.VaryBy{RemoteAddr: true}}
		return h.RateLimit(next)
	}},
	{"tollbooth", func(_ testing.TB, next http.Handler, n int) http.Handler {
		lmt := tollbooth.NewLimiter(float64(n), nil).SetBurst(n).SetIPLookups([]string{"RemoteAddr"})
		return tollbooth.LimitHandler(lmt, next)
	}},
	{"httprate", func(_ testing.TB, next http.Handler, n int) http.Handler {
		// What the deprecated LimitByIP does: key by RemoteAddr, with IPv6
		// grouped by /64.
		byIP := func(r *http.Request) (string, error) {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			return httprate.CanonicalizeIP(host), err
		}
		return httprate.LimitBy(n, time.Second, byIP)(next)
	}},
}

// BenchmarkMiddleware compares HTTP rate limiting middleware on the
// allowed path: one client, a trivial handler, a fresh
// httptest.ResponseRecorder per request and one prebuilt request. Read
// each result against the handler line, which is the handler's own cost.
func BenchmarkMiddleware(b *testing.B) {
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	req := httptest.NewRequest("GET", "/items/42", nil)
	for _, m := range middlewares {
		b.Run(m.name, func(b *testing.B) {
			h := m.build(b, next, hotRate)
			// Every answer is checked, not only the last: a limiter that
			// refused for a moment (go-limiter at a refill boundary, above)
			// would otherwise be timed on its cheaper refusal path unseen.
			notOK, last := 0, 0
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					notOK, last = notOK+1, w.Code
				}
			}
			if notOK > 0 {
				b.Fatalf("%d of %d answers not 200 (the last %d): the limit must not refuse", notOK, b.N, last)
			}
		})
	}
}

// TestMiddlewaresLimit checks that every contender of BenchmarkMiddleware
// really limits, so that none wins by doing nothing: with a limit of two
// per second, the third request at once from one client is refused.
func TestMiddlewaresLimit(t *testing.T) {
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, m := range middlewares[1:] {
		h := m.build(t, next, 2)
		var codes []int
		for range 3 {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			codes = append(codes, w.Code)
		}
		if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
			t.Errorf("%s: statuses %v, want [200 200 429]", m.name, codes)
		}
	}
}
