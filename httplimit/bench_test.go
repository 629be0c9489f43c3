package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/policy"
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
	b.Run("handler-alone", func(b *testing.B) {
		b.ReportAllocs()
		next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
		for b.Loop() {
			next.ServeHTTP(httptest.NewRecorder(), req)
		}
	})
}
