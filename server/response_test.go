package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// responsePolicy is a policy file with the given response section: one
// request a minute per X-Client, so that each client's second request is
// refused.
func responsePolicy(section string) string {
	return section + `
policies:
  - name: api
    key: header:X-Client
    limits: ["1/m"]
`
}

var (
	draftFields  = []string{"Ratelimit", "Ratelimit-Policy"}
	legacyFields = []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}
)

// responseEndpoints are where sluice serve answers for its policies: the proxy,
// and the check endpoints (Traefik's, answered as the client should see
// it; NGINX's, a 403 with the real status in X-Sluice-Status).
var responseEndpoints = []struct {
	name, path string
	proxy      bool
	nginx      bool
}{
	{"proxy", "/items", true, false},
	{"check", "/check", false, false},
	{"check/nginx", "/check/nginx", false, true},
}

// askAs sends client's request to an endpoint of ts.
func askAs(t *testing.T, ts *testServer, proxy bool, path, client string) (*http.Response, string) {
	t.Helper()
	addr := ts.Addrs().Check
	if proxy {
		addr = ts.Addrs().Proxy
	}
	return get(t, addr, path, "X-Client", client)
}

// checkFields reports which of fields resp has that it should not, and
// which it lacks that it should.
func checkFields(t *testing.T, what string, resp *http.Response, fields []string, want bool) {
	t.Helper()
	for _, f := range fields {
		if got := resp.Header.Get(f) != ""; got != want {
			t.Errorf("%s: %s present %v, want %v (%v)", what, f, got, want, resp.Header)
		}
	}
}

// problemType returns the type member of a problem body.
func problemType(t *testing.T, what, body string) string {
	t.Helper()
	var p struct{ Type *string }
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.Type == nil {
		t.Fatalf("%s: body %q is no problem with a type (%v)", what, body, err)
	}
	return *p.Type
}

// answers checks what one client's allowed request, then its refused
// one, are told at each endpoint: the header families sent (draft,
// legacy) and the 429's problem type. Retry-After goes with every
// refusal, whatever the families.
func answers(t *testing.T, ts *testServer, client string, draft, legacy bool, ptype string) {
	t.Helper()
	for _, ep := range responseEndpoints {
		c := client + "-" + ep.name
		resp, _ := askAs(t, ts, ep.proxy, ep.path, c)
		what := ep.name + " allowed"
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d, want 200", what, resp.StatusCode)
		}
		checkFields(t, what, resp, draftFields, draft)
		checkFields(t, what, resp, legacyFields, legacy)
		checkFields(t, what, resp, []string{"Retry-After"}, false)

		resp, body := askAs(t, ts, ep.proxy, ep.path, c)
		what = ep.name + " refused"
		switch {
		case ep.nginx && (resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Sluice-Status") != "429"):
			t.Fatalf("%s: %d, X-Sluice-Status %q; want 403 and 429", what, resp.StatusCode, resp.Header.Get("X-Sluice-Status"))
		case !ep.nginx && resp.StatusCode != http.StatusTooManyRequests:
			t.Fatalf("%s: %d, want 429", what, resp.StatusCode)
		}
		checkFields(t, what, resp, draftFields, draft)
		checkFields(t, what, resp, legacyFields, legacy)
		if got := resp.Header.Get("Retry-After"); got != "60" {
			t.Errorf("%s: Retry-After %q, want 60", what, got)
		}
		if !ep.nginx { // NGINX's answer has no body: NGINX writes its own
			if got := problemType(t, what, body); got != ptype {
				t.Errorf("%s: problem type %q, want %q", what, got, ptype)
			}
		}
	}
}

// The response section chooses the header families sent and the 429's
// problem type, at the proxy and the check endpoints alike.
func TestResponseSection(t *testing.T) {
	const ptype = "https://example.com/problems/rate-limited"
	for _, tt := range []struct {
		name, section string
		draft, legacy bool
		ptype         string
	}{
		{"default", "", true, true, "about:blank"},
		{"both written", "response: {headers: [draft, legacy]}", true, true, "about:blank"},
		{"none", "response: {headers: []}", false, false, "about:blank"},
		{"legacy", "response: {headers: [legacy]}", false, true, "about:blank"},
		{"draft", "response: {headers: [draft]}", true, false, "about:blank"},
		{"problem type", "response: {problem_type: \"" + ptype + "\"}", true, true, ptype},
		{"none, with a problem type", "response: {headers: [], problem_type: \"" + ptype + "\"}", false, false, ptype},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t)
			ts := startServer(t, responsePolicy(tt.section), Options{Upstream: up.URL})
			answers(t, ts, "c", tt.draft, tt.legacy, tt.ptype)
		})
	}
}

// A reload's response section applies from the next request on, and the
// counters stay: a client allowed under the old section is refused, as
// the new one says, on its next request.
func TestResponseReload(t *testing.T) {
	const ptype = "tag:example.com,2026:rate-limited"
	up := newUpstream(t)
	ts := startServer(t, responsePolicy(""), Options{Upstream: up.URL})
	answers(t, ts, "before", true, true, "about:blank")

	resp, _ := askAs(t, ts, true, "/items", "across")
	checkFields(t, "allowed before the reload", resp, slices.Concat(draftFields, legacyFields), true)
	writeFile(t, ts.dir, "sluice.yaml", responsePolicy("response: {headers: [], problem_type: \""+ptype+"\"}"))
	if err := ts.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	resp, body := askAs(t, ts, true, "/items", "across")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "60" {
		t.Fatalf("the client's second request, after the reload: %d, Retry-After %q; want 429 and 60", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	checkFields(t, "refused after the reload", resp, slices.Concat(draftFields, legacyFields), false)
	if got := problemType(t, "refused after the reload", body); got != ptype {
		t.Errorf("refused after the reload: problem type %q, want %q", got, ptype)
	}
	answers(t, ts, "after", false, false, ptype)

	writeFile(t, ts.dir, "sluice.yaml", responsePolicy("response: {headers: [legacy]}"))
	if err := ts.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	answers(t, ts, "legacy", false, true, "about:blank")

	// A section that does not load keeps the one in force.
	writeFile(t, ts.dir, "sluice.yaml", responsePolicy("response: {headers: [none]}"))
	if err := ts.Reload(t.Context()); err == nil || !strings.Contains(err.Error(), `unknown header family "none"`) {
		t.Fatalf("Reload = %v, want the unknown family", err)
	}
	answers(t, ts, "kept", false, true, "about:blank")
}

// Behind NGINX (examples/nginx.conf), headers: [] sends the client no
// rate limit fields either: the recipe copies the check's fields with
// add_header, which sends nothing for a field the check left out (an
// empty variable). Retry-After still comes with the refusal.
func TestResponseNoHeadersThroughNginx(t *testing.T) {
	nginx := findNginx(t)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "app: %s %s", r.Method, r.URL.Path)
	}))
	defer app.Close()
	ts := startServer(t, `
client_ip: {trusted_proxies: [127.0.0.1]}
response: {headers: []}
policies:
  - name: api
    key: ip
    limits: ["1/m"]
`, Options{})
	base, stop := startNginx(t, nginx, ts.Addrs().Check, strings.TrimPrefix(app.URL, "http://"))
	defer stop()
	fields := slices.Concat(draftFields, legacyFields)
	resp, body := get(t, base, "/items")
	if resp.StatusCode != http.StatusOK || body != "app: GET /items" {
		t.Fatalf("first request through NGINX: %d %q", resp.StatusCode, body)
	}
	checkFields(t, "allowed through NGINX", resp, slices.Concat(fields, []string{"Retry-After"}), false)
	resp, body = get(t, base, "/items")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "60" {
		t.Fatalf("second request through NGINX: %d, Retry-After %q, body %q; want 429 with Retry-After 60", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	checkFields(t, "refused through NGINX", resp, fields, false)
	for name, v := range resp.Header {
		if strings.Contains(strings.ToLower(name), "ratelimit") {
			t.Errorf("refused through NGINX: %s: %q, want no rate limit field", name, v)
		}
	}
}
