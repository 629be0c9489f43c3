package policy_test

import (
	"fmt"

	"github.com/sluicehq/sluice/policy"
)

func ExampleLoad() {
	set, err := policy.Load("sluice.yaml", []byte(`
policies:
  - name: search
    match: "GET /search"
    key: ip
    limits: ["10/s burst 20", "5000/d"]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range set.Policy("search").Limits() {
		fmt.Println(l.Name, l.Limit, l.HeaderPolicy())
	}
	// Output:
	// search.1 gcra 10/s burst 20 "search.1";q=20;w=2
	// search.2 fixed_window 5000/d "search.2";q=5000;w=86400
}

// Every problem is reported at once, each with its line and column.
func ExampleLoad_errors() {
	_, err := policy.Load("sluice.yaml", []byte(`
policies:
  - name: search
    limt: ["10/s"]
  - name: login
    key: [acount]
    limits: ["5/m burst 0"]
`))
	fmt.Println(err)
	// Output:
	// sluice.yaml:4:5: unknown field "limt" in policy "search"; did you mean "limits"? (allowed: name, match, key, keys, fold_key, limits, plans, overrides, cost, shadow, on_store_error, max_delay, priority)
	// sluice.yaml:6:11: unknown key part "acount" (want one of ip, user, method, global, header:NAME, path:NAME, form:NAME)
	// sluice.yaml:7:14: invalid limit "5/m burst 0": burst: must be at least 1, got 0
}
