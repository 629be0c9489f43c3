package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// userPolicies are anonymous clients stricter than signed-in users, as in
// examples/sluice.yaml; TRUSTED is the proxy trusted to name the user.
const userPolicies = `
client_ip: {trusted_proxies: [TRUSTED]}
user: {header: X-Auth-Request-User}
policies:
  - name: anonymous
    match: {authenticated: false}
    key: ip
    limits: ["1/m"]
  - name: authenticated
    match: {authenticated: true}
    key: user
    limits: ["100/m"]
`

// sluice serve names the user from the user section's header, set by an
// authentication proxy in front (oauth2-proxy, Traefik's forwardAuth,
// NGINX's auth_request), in the proxy and the check endpoint alike: from a
// trusted proxy the signed-in user's policy applies. From any other peer
// the header is the client's own word, and the request is anonymous.
func TestServeNamesUserFromTrustedProxy(t *testing.T) {
	for _, tt := range []struct {
		what    string
		trusted string
		want    []int // three requests through the proxy, then three checks
		policy  string
	}{
		{"trusted proxy", "127.0.0.1", []int{200, 200, 200, 200, 200, 200}, "authenticated"},
		{"untrusted peer", "192.0.2.1", []int{200, 429, 429, 429, 429, 429}, "anonymous"},
	} {
		t.Run(tt.what, func(t *testing.T) {
			up := newUpstream(t)
			ts := startServer(t, strings.Replace(userPolicies, "TRUSTED", tt.trusted, 1), Options{Upstream: up.URL})
			var got []int
			for range 3 {
				resp, _ := get(t, ts.Addrs().Proxy, "/orders", "X-Auth-Request-User", "alice")
				got = append(got, resp.StatusCode)
			}
			for range 3 {
				resp, _ := get(t, ts.Addrs().Check, "/check", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/orders", "X-Auth-Request-User", "alice")
				got = append(got, resp.StatusCode)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("as alice: %v, want %v", got, tt.want)
			}
			if n := ts.counter(`sluice_decisions_total{policy="` + tt.policy + `",result="allowed"}`); n == 0 {
				t.Errorf("the %s policy decided no request", tt.policy)
			}
		})
	}
}

// The upstream gets the user header only from the trusted proxy that set
// it: a client's own, which the policies do not believe, is not passed on
// for the upstream to believe either.
func TestProxyPassesUserHeaderFromTrustedProxyOnly(t *testing.T) {
	for _, tt := range []struct {
		trusted string
		want    string
	}{{"127.0.0.1", "alice"}, {"192.0.2.1", ""}} {
		seen := make(chan string, 1)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen <- r.Header.Get("X-Auth-Request-User")
		}))
		t.Cleanup(up.Close)
		ts := startServer(t, strings.Replace(userPolicies, "TRUSTED", tt.trusted, 1), Options{Upstream: up.URL})
		if resp, _ := get(t, ts.Addrs().Proxy, "/orders", "X-Auth-Request-User", "alice"); resp.StatusCode != 200 {
			t.Fatalf("trusting %s: %d", tt.trusted, resp.StatusCode)
		}
		if got := <-seen; got != tt.want {
			t.Errorf("trusting %s: the upstream saw user %q, want %q", tt.trusted, got, tt.want)
		}
	}
}

// A user header given twice, even through the trusted proxy, names no one
// to the policies (a proxy that adds its name after the client's own
// leaves the client's first), and the upstream gets neither.
func TestProxyDropsUserHeaderGivenTwice(t *testing.T) {
	seen := make(chan []string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Values("X-Auth-Request-User")
	}))
	t.Cleanup(up.Close)
	ts := startServer(t, strings.Replace(userPolicies, "TRUSTED", "127.0.0.1", 1), Options{Upstream: up.URL})
	req, err := http.NewRequest("GET", "http://"+ts.Addrs().Proxy+"/orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Add("X-Auth-Request-User", "mallory")
	req.Header.Add("X-Auth-Request-User", "alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := <-seen; len(got) != 0 {
		t.Errorf("the upstream saw users %q, want none", got)
	}
	if n := ts.counter(`sluice_decisions_total{policy="anonymous",result="allowed"}`); n != 1 {
		t.Errorf("the anonymous policy decided %v requests, want 1", n)
	}
}

// A file whose policies read the user, with no user section, serves every
// request as anonymous: sluice serve logs a warning naming those policies,
// at start and on every reload, until the section is added.
func TestServeWarnsUserWithoutSource(t *testing.T) {
	noUser := strings.Replace(strings.Replace(userPolicies, "user: {header: X-Auth-Request-User}\n", "", 1), "TRUSTED", "127.0.0.1", 1)
	ts := newServer(t, noUser, Options{})
	const want = `policies \"anonymous\" and \"authenticated\" key by user or match authenticated, but the file has no user section`
	warned := func() int {
		n := 0
		for _, l := range strings.Split(ts.logs.String(), "\n") {
			if strings.Contains(l, `level=WARN msg="policy file warning"`) && strings.Contains(l, want) {
				n++
			}
		}
		return n
	}
	if warned() != 1 {
		t.Fatalf("at start, no warning that the user policies never apply:\n%s", ts.logs.String())
	}
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if warned() != 2 {
		t.Errorf("at reload, no warning that the user policies never apply:\n%s", ts.logs.String())
	}
	writeFile(t, ts.dir, "sluice.yaml", strings.Replace(userPolicies, "TRUSTED", "127.0.0.1", 1))
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if warned() != 2 {
		t.Errorf("the warning is logged again with a user section")
	}
}
