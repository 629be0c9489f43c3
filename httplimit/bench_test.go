package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/memory"
)

const benchConfig = `
policies:
  - name: api
    key: ip
    limits: ["1000000000/s"]
`

// BenchmarkAllowed measures the allowed path: one policy keyed by client
// address, a limit far above the load, a handler that does nothing.
func BenchmarkAllowed(b *testing.B) {
	set, err := policy.Load("bench.yaml", []byte(benchConfig))
	if err != nil {
		b.Fatal(err)
	}
	store := memory.New(memory.Options{})
	h := Middleware(set, store, Options{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest("GET", "/items/1", nil)
	b.Run("middleware", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h.ServeHTTP(httptest.NewRecorder(), req)
		}
	})
	// Limit over a Limiter of two limits behind a Fallback: the path that
	// asks the store for each limit's decision and who decided.
	lims := []rate.Limit{rate.MustParseLimit("1000000000/s"), rate.MustParseLimit("fixed_window 1000000000/h")}
	l, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "api", Limits: lims, Store: sluice.NewFallback(memory.New(memory.Options{}), sluice.FallbackOptions{})})
	if err != nil {
		b.Fatal(err)
	}
	limited := Limit(l, ByClientIP(nil), LimitOptions{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	b.Run("limit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			limited.ServeHTTP(httptest.NewRecorder(), req)
		}
	})
	b.Run("handler-alone", func(b *testing.B) {
		b.ReportAllocs()
		next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
		for b.Loop() {
			next.ServeHTTP(httptest.NewRecorder(), req)
		}
	})
}
