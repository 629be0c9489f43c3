package metrics_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
)

// An Observer wired into httplimit.Middleware counts each request's
// decision as sluice serve would: a client's second request in the
// minute is refused, and counted so, under the policy's name and not the
// client's address.
func ExampleObserver() {
	set, err := policy.Load("sluice.yaml", []byte(`
policies:
  - name: api
    key: ip
    limits: ["1/m"]
`))
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry() // in a program, the one /metrics serves
	obs, err := metrics.NewObserver(reg)
	if err != nil {
		log.Fatal(err)
	}
	obs.Declare(set)
	limit := httplimit.Middleware(set, memory.New(memory.Options{}), httplimit.Options{
		Options: policy.Options{Observer: obs},
	})
	h := limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Println(w.Code)
	}

	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			fmt.Printf("%s{%s} %g\n", mf.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue())
		}
	}
	// Output:
	// 200
	// 429
	// sluice_decisions_total{policy="api",result="allowed"} 1
	// sluice_decisions_total{policy="api",result="refused"} 1
	// sluice_decisions_total{policy="api",result="throttled"} 0
	// sluice_decisions_total{policy="api",result="unavailable"} 0
	// sluice_fallback_decisions_total{policy="api"} 0
	// sluice_shed_total{priority="critical"} 0
	// sluice_shed_total{priority="low"} 0
	// sluice_shed_total{priority="normal"} 0
}
