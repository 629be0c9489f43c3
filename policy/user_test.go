package policy

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// The user section's header names the user only when a trusted proxy
// sends it, once: from any other peer it is the client's own word, and
// a header given twice has no one value the proxy surely wrote.
func TestUserOf(t *testing.T) {
	set, err := Load("f.yaml", []byte(`
client_ip: {trusted_proxies: [10.0.0.0/8]}
user: {header: x-auth-request-user}
policies:
  - {name: users, match: {authenticated: true}, key: user, limits: ["10/s"]}
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
		{"trusted proxy", "10.0.0.1:5000", []string{"alice"}, "alice"},
		{"untrusted peer", "192.0.2.1:5000", []string{"alice"}, ""},
		{"trusted proxy, no header", "10.0.0.1:5000", nil, ""},
		{"trusted proxy, empty header", "10.0.0.1:5000", []string{""}, ""},
		{"trusted proxy, header twice", "10.0.0.1:5000", []string{"alice", "bob"}, ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.peer
		if tt.values != nil {
			r.Header["X-Auth-Request-User"] = tt.values
		}
		if got := set.UserOf(r); got != tt.want {
			t.Errorf("%s: UserOf = %q, want %q", tt.what, got, tt.want)
		}
	}
	if h := set.UserHeader(); h != "X-Auth-Request-User" {
		t.Errorf("UserHeader = %q", h)
	}
}

// A file whose policies read the user, with no user section, serves every
// request as anonymous under sluice serve, which has no application to
// name users: a serve warning names those policies. An application that
// names users itself gets no warning (Warnings), and a file with a user
// section none.
func TestServeWarningUserWithoutSource(t *testing.T) {
	const policies = `
policies:
  - {name: anonymous, match: {authenticated: false}, key: ip, limits: ["5/s"]}
  - {name: users, match: {authenticated: true}, key: user, limits: ["50/s"]}
  - {name: search, match: "/search", keys: [ip, user], limits: ["2/s"]}
  - {name: all, limits: ["500/s"]}
`
	set, err := Load("f.yaml", []byte(policies))
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Warnings()) > 0 {
		t.Errorf("warnings for an application that names users:\n%s", lines(set.Warnings()))
	}
	sw := set.ServeWarnings()
	if len(sw) != 1 || sw[0].Line != 2 || !strings.Contains(sw[0].Message, `policies "anonymous", "users" and "search" key by user or match authenticated, but the file has no user section`) {
		t.Errorf("serve warnings:\n%s", lines(sw))
	}
	set, err = Load("f.yaml", []byte("client_ip: {trusted_proxies: [10.0.0.1]}\nuser: {header: X-Auth-Request-User}\n"+policies))
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Warnings())+len(set.ServeWarnings()) > 0 {
		t.Errorf("warnings with a user section:\n%s%s", lines(set.Warnings()), lines(set.ServeWarnings()))
	}
	// A user section no policy reads has no effect.
	set, err = Load("f.yaml", []byte("client_ip: {trusted_proxies: [10.0.0.1]}\nuser: {header: X-Auth-Request-User}\npolicies: [{name: all, limits: [\"500/s\"]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w := set.Warnings(); len(w) != 1 || w[0].Line != 2 || !strings.Contains(w[0].Message, "the user section has no effect") {
		t.Errorf("warnings of a user section no policy reads:\n%s", lines(w))
	}
}
