package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/rls"
)

// liveRow is a policy's row of GET /api/live, read apart from package
// dashboard's types so that the test reads the JSON as any client does.
type liveRow struct {
	Passed        int64 `json:"passed"`
	Refused       int64 `json:"refused"`
	ShadowRefused int64 `json:"shadow_refused"`
}

// liveRows returns the rows of a live snapshot's JSON by policy.
func liveRows(t *testing.T, body []byte) map[string]liveRow {
	t.Helper()
	var lv struct {
		Policies []struct {
			Policy string `json:"policy"`
			liveRow
		} `json:"policies"`
	}
	if err := json.Unmarshal(body, &lv); err != nil {
		t.Fatalf("live JSON %s: %v", body, err)
	}
	out := map[string]liveRow{}
	for _, p := range lv.Policies {
		out[p.Policy] = p.liveRow
	}
	return out
}

// The live view shows a shadow policy's would-be refusals, what trying a
// policy in shadow is for, apart from the refusals clients got: a trial
// at 2/m that six requests cross passes all six, four of which it would
// have refused. /metrics counts them as before.
func TestLiveShadowRefusals(t *testing.T) {
	up := newUpstream(t)
	ts := startServer(t, `
policies:
  - name: api
    key: ip
    limits: ["10/m"]
  - name: trial
    shadow: true
    key: ip
    limits: ["2/m"]
`, Options{Upstream: up.URL})
	for i := range 6 {
		if got := ts.status("/"); got != 200 {
			t.Fatalf("request %d: %d, want 200", i+1, got)
		}
	}
	ts.wantMetrics("after 6 requests",
		`sluice_decisions_total{policy="trial",result="allowed"} 2`,
		`sluice_decisions_total{policy="trial",result="shadow_refused"} 4`,
		`sluice_decisions_total{policy="api",result="allowed"} 6`,
		`sluice_requests_total{code="allowed",listener="proxy"} 6`,
	)
	admin := ts.Addrs().Admin
	_, body := get(t, admin, "/api/live?seconds=60")
	rows := liveRows(t, []byte(body))
	if got, want := rows["trial"], (liveRow{Passed: 6, ShadowRefused: 4}); got != want {
		t.Errorf("live trial %+v, want %+v: all passed, 4 the shadow policy would have refused", got, want)
	}
	if got, want := rows["api"], (liveRow{Passed: 6}); got != want {
		t.Errorf("live api %+v, want %+v", got, want)
	}
	_, svg := get(t, admin, "/api/live.svg?seconds=60")
	for _, want := range []string{
		`data-policy="trial" data-passed="6" data-refused="0" data-shadow-refused="4"`,
		"4 would refuse",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("the live picture lacks %q", want)
		}
	}
}

// A row counts its own policy's decisions: with the demo policies, six
// requests to /search and twelve to /hello from one client have api
// (10/m) allow 13, three of which search refused, whole, so that api's
// limit counted none of them. The live view says "allowed" by the row's
// policy, not "passed", as /metrics' sluice_decisions_total does, and
// both keep counting so; sluice_requests_total says what clients got.
func TestLiveRowsCountTheirPolicy(t *testing.T) {
	up := newUpstream(t)
	ts := startServer(t, string(DemoConfig), Options{Upstream: up.URL})
	// Each path's first n requests pass, the others are refused.
	for _, step := range []struct {
		path     string
		requests int
		n        int
	}{{"/search", 6, 3}, {"/hello", 12, 7}} {
		for i := range step.requests {
			want := 200
			if i >= step.n {
				want = 429
			}
			if got := ts.status(step.path); got != want {
				t.Fatalf("%s %d: %d, want %d", step.path, i+1, got, want)
			}
		}
	}
	ts.wantMetrics("after the requests",
		`sluice_decisions_total{policy="api",result="allowed"} 13`,
		`sluice_decisions_total{policy="api",result="refused"} 5`,
		`sluice_decisions_total{policy="search",result="allowed"} 3`,
		`sluice_decisions_total{policy="search",result="refused"} 3`,
		`sluice_requests_total{code="allowed",listener="proxy"} 10`,
		`sluice_requests_total{code="429",listener="proxy"} 8`,
	)
	admin := ts.Addrs().Admin
	_, body := get(t, admin, "/api/live?seconds=60")
	rows := liveRows(t, []byte(body))
	if got, want := rows["api"], (liveRow{Passed: 13, Refused: 5}); got != want {
		t.Errorf("live api %+v, want %+v, as sluice_decisions_total counts it", got, want)
	}
	_, svg := get(t, admin, "/api/live.svg?seconds=60")
	for _, want := range []string{"13 allowed", "a request that one policy allowed may have been refused by another"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the live picture lacks %q", want)
		}
	}
	if strings.Contains(svg, "13 passed</text>") {
		t.Error(`the live picture says api "13 passed": its clients got 10 answers in all`)
	}
}

// Envoy's shadow descriptors count in their domain's row as a policy's
// do: over their limit, they pass, and show as would-be refusals.
func TestObserveRLSShadowLive(t *testing.T) {
	s, _ := observedServer(t)
	for _, e := range []rls.Event{
		{Domain: "d"},
		{Domain: "d", Over: true},
		{Domain: "d", Shadow: true},
		{Domain: "d", Over: true, Shadow: true},
		{Domain: "d", Over: true, Shadow: true},
	} {
		s.observeRLS(e)
	}
	b, err := json.Marshal(s.dash.Live(60))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := liveRows(t, b)[rlsName("d")], (liveRow{Passed: 4, Refused: 1, ShadowRefused: 2}); got != want {
		t.Errorf("live %s %+v, want %+v", rlsName("d"), got, want)
	}
	keys, total := s.top.Top(-1)
	if total != 1 || len(keys) != 1 {
		t.Errorf("/debug/top %v of %d, want the one refusal", keys, total)
	}
}
