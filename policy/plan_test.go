package policy

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// A request's plan: the application's (Request.Plan), else the one its
// API key maps to, else the one plans.header names, else plans.default.
// The plan header is believed only from a trusted proxy that gives it
// once, as the user section's header is: from any other peer it is the
// client's own word, and any client could ask for the best plan. An API
// key plans.api_keys does not list names no plan, and the header decides.
// In HTTP and in gRPC metadata.
func TestPlanOf(t *testing.T) {
	set, err := Load("f.yaml", []byte(`
client_ip: {trusted_proxies: [127.0.0.1]}
plans:
  names: [free, pro, enterprise]
  default: free
  header: X-Plan
  api_key_header: X-API-Key
  api_keys: {k-pro: pro}
policies:
  - {name: api, limits: ["1/s"], plans: {enterprise: ["100/s"]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	const (
		trusted   = "127.0.0.1:5000"
		untrusted = "127.0.0.2:5000"
	)
	for _, tt := range []struct {
		what   string
		peer   string
		header map[string][]string
		plan   string // Request.Plan
		want   string
	}{
		{"nothing", trusted, nil, "", "free"},
		{"header from a trusted proxy", trusted, map[string][]string{"X-Plan": {"enterprise"}}, "", "enterprise"},
		{"header from an untrusted peer", untrusted, map[string][]string{"X-Plan": {"enterprise"}}, "", "free"},
		{"header given twice", trusted, map[string][]string{"X-Plan": {"enterprise", "enterprise"}}, "", "free"},
		{"header naming no plan", trusted, map[string][]string{"X-Plan": {"platinum"}}, "", "free"},
		{"API key", untrusted, map[string][]string{"X-Api-Key": {"k-pro"}}, "", "pro"},
		{"API key before the header", trusted, map[string][]string{"X-Api-Key": {"k-pro"}, "X-Plan": {"enterprise"}}, "", "pro"},
		{"unknown API key, header from a trusted proxy", trusted, map[string][]string{"X-Api-Key": {"k-nope"}, "X-Plan": {"enterprise"}}, "", "enterprise"},
		{"unknown API key, header from an untrusted peer", untrusted, map[string][]string{"X-Api-Key": {"k-nope"}, "X-Plan": {"enterprise"}}, "", "free"},
		{"application before all", untrusted, map[string][]string{"X-Api-Key": {"k-pro"}}, "enterprise", "enterprise"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.peer
		md := map[string][]string{}
		for k, vs := range tt.header {
			r.Header[k] = vs
			md[strings.ToLower(k)] = vs
		}
		if got := set.planOf(&Request{HTTP: r, Header: r.Header, Plan: tt.plan}); got != tt.want {
			t.Errorf("%s: plan %q, want %q", tt.what, got, tt.want)
		}
		if got := set.planOf(&Request{HTTP: r, Metadata: md, Plan: tt.plan}); got != tt.want {
			t.Errorf("%s, gRPC: plan %q, want %q", tt.what, got, tt.want)
		}
	}
}

// PlanHeaderOf reads plans.header by UserOf's rule: only from a trusted
// proxy, and only given once.
func TestPlanHeaderOf(t *testing.T) {
	set, err := Load("f.yaml", []byte(`
client_ip: {trusted_proxies: [10.0.0.0/8]}
plans: {names: [free, pro], default: free, header: x-plan}
policies:
  - {name: api, limits: ["1/s"], plans: {pro: ["10/s"]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		what   string
		peer   string
		values []string
		want   string
	}{
		{"trusted proxy", "10.0.0.1:5000", []string{"pro"}, "pro"},
		{"trusted proxy, a plan not listed", "10.0.0.1:5000", []string{"platinum"}, "platinum"},
		{"untrusted peer", "192.0.2.1:5000", []string{"pro"}, ""},
		{"trusted proxy, no header", "10.0.0.1:5000", nil, ""},
		{"trusted proxy, header twice", "10.0.0.1:5000", []string{"pro", "free"}, ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.peer
		if tt.values != nil {
			r.Header["X-Plan"] = tt.values
		}
		if got := set.PlanHeaderOf(r); got != tt.want {
			t.Errorf("%s: PlanHeaderOf = %q, want %q", tt.what, got, tt.want)
		}
	}
	if h := set.PlanHeader(); h != "X-Plan" {
		t.Errorf("PlanHeader = %q", h)
	}
}
