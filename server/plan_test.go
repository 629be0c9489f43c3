package server

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// planPolicies give the enterprise plan far more than the default one;
// TRUSTED is the proxy trusted to name the plan in X-Plan.
const planPolicies = `
client_ip: {trusted_proxies: [TRUSTED]}
plans: {names: [free, enterprise], default: free, header: X-Plan}
policies:
  - name: api
    key: ip
    plans:
      free: ["1/m"]
      enterprise: ["100/m"]
`

// sluice serve reads plans.header by the user section's rule, in the proxy
// and the check endpoint alike: from a trusted proxy the plan it names
// applies. From any other peer the header is the client's own word, and
// the request has the default plan: no client names its own.
func TestServeBelievesPlanHeaderFromTrustedProxyOnly(t *testing.T) {
	for _, tt := range []struct {
		what    string
		trusted string
		want    []int // three requests through the proxy, then three checks
	}{
		{"trusted proxy", "127.0.0.1", []int{200, 200, 200, 200, 200, 200}},
		{"untrusted peer", "192.0.2.1", []int{200, 429, 429, 429, 429, 429}},
	} {
		t.Run(tt.what, func(t *testing.T) {
			up := newUpstream(t)
			ts := startServer(t, strings.Replace(planPolicies, "TRUSTED", tt.trusted, 1), Options{Upstream: up.URL})
			var got []int
			for range 3 {
				resp, _ := get(t, ts.Addrs().Proxy, "/orders", "X-Plan", "enterprise")
				got = append(got, resp.StatusCode)
			}
			for range 3 {
				resp, _ := get(t, ts.Addrs().Check, "/check", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/orders", "X-Plan", "enterprise")
				got = append(got, resp.StatusCode)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("as enterprise: %v, want %v", got, tt.want)
			}
		})
	}
}

// The upstream gets the plan header only from the trusted proxy that set
// it, once: a client's own, which the policies do not believe, is not
// passed on for the upstream to believe either.
func TestProxyPassesPlanHeaderFromTrustedProxyOnly(t *testing.T) {
	for _, tt := range []struct {
		trusted string
		values  []string
		want    []string
	}{
		{"127.0.0.1", []string{"enterprise"}, []string{"enterprise"}},
		{"192.0.2.1", []string{"enterprise"}, nil},
		{"127.0.0.1", []string{"free", "enterprise"}, nil},
	} {
		seen := make(chan []string, 1)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen <- r.Header.Values("X-Plan")
		}))
		t.Cleanup(up.Close)
		ts := startServer(t, strings.Replace(planPolicies, "TRUSTED", tt.trusted, 1), Options{Upstream: up.URL})
		req, err := http.NewRequest("GET", "http://"+ts.Addrs().Proxy+"/orders", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header["X-Plan"] = tt.values
		if resp, _ := do(t, req); resp.StatusCode != 200 {
			t.Fatalf("trusting %s: %d", tt.trusted, resp.StatusCode)
		}
		if got := <-seen; !slices.Equal(got, tt.want) {
			t.Errorf("trusting %s, X-Plan %q: the upstream saw %q, want %q", tt.trusted, tt.values, got, tt.want)
		}
	}
}

// CGI-style servers (and WSGI and Rack ones) read a header spelled with
// underscores, X_Auth_Request_User, as the header itself
// (HTTP_X_AUTH_REQUEST_USER): every spelling of the user and plan
// headers but their own is dropped, from a trusted proxy too, which sends
// none, so that the upstream cannot read a client's name or plan there.
func TestProxyDropsOtherSpellingsOfUserAndPlanHeaders(t *testing.T) {
	const config = `
client_ip: {trusted_proxies: [TRUSTED]}
user: {header: X-Auth-Request-User}
plans: {names: [free, enterprise], default: free, header: X-Plan}
policies:
  - {name: api, key: ip, limits: ["100/m"], plans: {enterprise: ["1000/m"]}}
  - {name: users, match: {authenticated: true}, key: user, limits: ["100/m"]}
`
	sent := map[string]string{
		"X-Auth-Request-User": "alice",
		"X_Auth_Request_User": "admin",
		"x-auth-request_user": "admin",
		"X-Plan":              "free",
		"X_Plan":              "enterprise",
		"x_PLAN":              "enterprise",
	}
	for _, tt := range []struct {
		trusted string
		want    map[string]string // the upstream's fields that fold to either name
	}{
		{"127.0.0.1", map[string]string{"X-Auth-Request-User": "alice", "X-Plan": "free"}},
		{"192.0.2.1", map[string]string{}},
	} {
		seen := make(chan http.Header, 1)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header }))
		t.Cleanup(up.Close)
		ts := startServer(t, strings.Replace(config, "TRUSTED", tt.trusted, 1), Options{Upstream: up.URL})
		req, err := http.NewRequest("GET", "http://"+ts.Addrs().Proxy+"/orders", nil)
		if err != nil {
			t.Fatal(err)
		}
		for name, v := range sent {
			req.Header[name] = []string{v} // as spelt
		}
		if resp, _ := do(t, req); resp.StatusCode != 200 {
			t.Fatalf("trusting %s: %d", tt.trusted, resp.StatusCode)
		}
		got := map[string]string{}
		for name, vs := range <-seen {
			switch strings.ToLower(strings.ReplaceAll(name, "_", "-")) {
			case "x-auth-request-user", "x-plan":
				got[name] = strings.Join(vs, ", ")
			}
		}
		if !maps.Equal(got, tt.want) {
			t.Errorf("trusting %s: the upstream got %v, want %v", tt.trusted, got, tt.want)
		}
	}
}

// The other spellings of a header a policy keys on or matches on, or of
// plans.api_key_header, are dropped too: X_Api_Key is no X-API-Key to the
// policies, so a request that sent it was counted under no key, and an
// upstream that reads it as the header (Puma, CGI) took the key.
func TestProxyDropsOtherSpellingsOfHeadersThePoliciesRead(t *testing.T) {
	seen := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header }))
	defer up.Close()
	ts := startServer(t, `
plans: {names: [free, partner], default: free, api_key_header: X-Partner-Key, api_keys: {pk1: partner}}
policies:
  - {name: per-key, match: {headers: [{name: X-Tenant, present: true}]}, key: "header:X-API-Key", limits: ["5/m"], plans: {partner: ["50/m"]}}
`, Options{Upstream: up.URL})
	req, err := http.NewRequest("GET", "http://"+ts.Addrs().Proxy+"/k", nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{
		"X-Api-Key": "k1", "X_Api_Key": "k2", "x-api_key": "k3", "X.Api.Key": "k4",
		"X-Tenant": "t", "X_Tenant": "t2",
		"X_Partner_Key": "pk1",
		"X-Other_Field": "kept",
	} {
		req.Header[name] = []string{v}
	}
	if resp, _ := do(t, req); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got := <-seen
	for name, v := range got {
		switch strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(name)) {
		case "x-api-key", "x-tenant", "x-partner-key":
			if strings.ContainsAny(name, "_.") {
				t.Errorf("%s: %q reached the upstream", name, v)
			}
		}
	}
	if got.Get("X-Api-Key") != "k1" || got.Get("X-Tenant") != "t" || got.Get("X-Other_Field") != "kept" {
		t.Errorf("the fields as the policies read them, or a field no policy reads, did not reach the upstream: %v", got)
	}
}
