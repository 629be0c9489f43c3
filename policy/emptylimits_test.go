package policy

import (
	"fmt"
	"testing"
)

// An override written limits: [] leaves the keys it names unlimited, as a
// plan written [] leaves its plan: the partner a file means to exempt
// must not fall back, unannounced, to the policy's default limits.
func TestOverrideEmptyListLeavesKeyUnlimited(t *testing.T) {
	e := newTestEnforcer(t, `
policies:
  - name: api
    match: {headers: [{name: X-API-Key, present: true}]}
    key: header:x-api-key
    limits: ["3/month"]
    overrides:
      - when: {"header:x-api-key": abc}
        limits: []
`)
	for i := range 10 {
		if got := sendFrom(e, "GET", "/", "192.0.2.1", "X-API-Key", "abc"); got != Allow {
			t.Fatalf("request %d with the exempt key: %v, want allow (the override's [])", i, got)
		}
	}
	var got []Verdict
	for range 4 {
		got = append(got, sendFrom(e, "GET", "/", "192.0.2.1", "X-API-Key", "other"))
	}
	if fmt.Sprint(got) != fmt.Sprint([]Verdict{Allow, Allow, Allow, Refuse}) {
		t.Errorf("another key: %v, want 3 allowed of the default 3/month, then refused", got)
	}
}

// Limits left null or empty, as by a template, are no limits written: in
// an override or under a plan they would leave keys or a plan unlimited
// with no word. Only an explicit [] says so on purpose. A policy whose
// every list is [] limits nothing, and is refused as one with no limits.
func TestEmptyLimitsRefused(t *testing.T) {
	const head = `plans:
  names: [free, pro]
  default: free
policies:
  - name: api
    key: header:x-api-key
`
	tests := []struct {
		name string
		yaml string
		line int
		col  int
		want []string
	}{
		{"override limits null", head + `    limits: ["3/month"]
    overrides:
      - when: {"header:x-api-key": abc}
        limits: ~
`, 10, 9, []string{"an override of", "no limits written", "[]"}},
		{"override limits empty", head + `    limits: ["3/month"]
    overrides:
      - when: {"header:x-api-key": abc}
        limits:
`, 10, 9, []string{"an override of", "no limits written", "[]"}},
		{"override limits null in flow", head + `    limits: ["3/month"]
    overrides: [{when: {"header:x-api-key": abc}, limits: null}]
`, 8, 51, []string{"an override of", "[]"}},
		{"plan left empty", head + `    limits: ["3/month"]
    plans:
      pro:
`, 9, 7, []string{`plan "pro"`, "no limits written", "[]"}},
		{"plan null", head + `    plans:
      free: ["3/month"]
      pro: ~
`, 9, 7, []string{`plan "pro"`, "no limits written", "[]"}},
		{"plan null in flow", head + `    plans: {free: ["3/month"], pro: null}
`, 7, 32, []string{`plan "pro"`, "[]"}},
		{"every list empty on purpose", head + `    plans: {free: [], pro: []}
    overrides:
      - when: {"header:x-api-key": abc}
        limits: []
`, 5, 5, []string{`policy "api" has no limits`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantFirstProblem(t, tt.yaml, tt.line, tt.col, tt.want) })
	}
}

// An explicit [] loads, under a plan and in an override alike.
func TestEmptyListLoads(t *testing.T) {
	set, err := Load("sluice.yaml", []byte(`
plans:
  names: [free, pro]
  default: free
policies:
  - name: api
    key: header:x-api-key
    limits: ["3/month"]
    plans: {pro: []}
    overrides:
      - when: {"header:x-api-key": abc}
        limits: []
`))
	if err != nil {
		t.Fatal(err)
	}
	if ls, ok := set.Policy("api").PlanLimits("pro"); !ok || len(ls) != 0 {
		t.Errorf("plan pro: %v, %v; want listed with no limits", ls, ok)
	}
}
