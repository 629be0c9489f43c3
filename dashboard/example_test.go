package dashboard_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/rate/ratetest"
)

// Mount the dashboard on an admin mux, record decisions as a server
// would, and read them back from the live endpoint.
func Example() {
	clock := ratetest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)) // nil in production: the system clock
	d := dashboard.New(dashboard.Options{Clock: clock})
	admin := http.NewServeMux()
	admin.Handle("/dashboard/", http.StripPrefix("/dashboard", d))

	for i := range 12 {
		d.Record("api", i < 10) // the 11th and 12th requests are refused
	}
	clock.Advance(time.Second)
	d.Record("login", true)

	rec := httptest.NewRecorder()
	admin.ServeHTTP(rec, httptest.NewRequest("GET", "/dashboard/api/live?seconds=2", nil))
	var live dashboard.Live
	if err := json.NewDecoder(rec.Body).Decode(&live); err != nil {
		panic(err)
	}
	for _, p := range live.Policies {
		fmt.Printf("%-5s passed %2d, refused %d, per second %v\n", p.Policy, p.Passed, p.Refused, p.PerSecond)
	}
	// Output:
	// api   passed 10, refused 2, per second [{1767268800 10 2} {1767268801 0 0}]
	// login passed  1, refused 0, per second [{1767268800 0 0} {1767268801 1 0}]
}

// Run a simulation as the playground does: POST api/sim with a built-in
// scenario, narrowed to two algorithms and one setup.
func Example_simulation() {
	d := dashboard.New(dashboard.Options{})
	req := httptest.NewRequest("POST", "/api/sim", strings.NewReader(
		`{"scenario": "flood", "algorithms": ["fixed_window", "gcra"], "setups": ["own-counters"]}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, req)
	var res dashboard.SimResponse
	if err := json.NewDecoder(rec.Body).Decode(&res); err != nil {
		panic(err)
	}
	fmt.Printf("%s, limit %s, %d requests\n", res.Scenario, res.Limit, res.Requests)
	for _, r := range res.Results {
		fmt.Printf("%-12s %s: %d passed, %d refused\n", r.Algorithm, r.Setup, r.Passed, r.Refused)
	}
	// Output:
	// flood, limit 10 per 10s, 100 requests
	// fixed_window own-counters: 30 passed, 70 refused
	// gcra         own-counters: 57 passed, 43 refused
}
