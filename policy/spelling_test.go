package policy

import (
	"context"
	"net/http/httptest"
	"testing"
)

// A host or a method the client spells its own way is the same host or
// method to the gateways and applications that serve it, and must count
// against the policy on it: otherwise the spelling is a way past it.
func TestHostAndMethodSpellings(t *testing.T) {
	const config = `
policies:
  - name: login
    match: POST API.Example.com/login
    key: ip
    limits: ["1/m"]
  - name: by-method
    match: {path: /m}
    key: [ip, method]
    limits: ["1/m"]
`
	e := newTestEnforcer(t, config)
	decide := func(method, host, path string) Verdict {
		r := httptest.NewRequest(method, "http://"+host+path, nil)
		r.Host = host
		out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
		out.Done()
		return out.Verdict
	}
	if v := decide("POST", "api.example.com", "/login"); v != Allow {
		t.Fatalf("first login: %v", v)
	}
	for _, tt := range []struct{ method, host string }{
		{"POST", "api.example.com"},
		{"POST", "API.EXAMPLE.COM"},
		{"POST", "api.example.com."},
		{"POST", "Api.Example.Com.:8443"},
		{"POST", "api.example.com:443"},
		{"post", "api.example.com"},
		{"Post", "API.example.com."},
	} {
		if v := decide(tt.method, tt.host, "/login"); v != Refuse {
			t.Errorf("%s %s/login after the one allowed: %v; want refuse", tt.method, tt.host, v)
		}
	}
	// Other hosts stay apart.
	for _, host := range []string{"api.example.com.evil", "example.com", "api.example.co"} {
		if v := decide("POST", host, "/login"); v != Allow {
			t.Errorf("POST %s/login: %v; want allow, no policy applies", host, v)
		}
	}

	// A key on the method counts post and POST together.
	if v := decide("POST", "a", "/m"); v != Allow {
		t.Fatalf("first POST /m: %v", v)
	}
	for _, m := range []string{"post", "pOsT"} {
		if v := decide(m, "a", "/m"); v != Refuse {
			t.Errorf("%s /m after POST /m: %v; want refuse, one counter", m, v)
		}
	}
}

func TestRoutedHost(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		same     bool
	}{
		{"api.example.com", "api.example.com", true},
		{"api.example.com:8080", "api.example.com:8080", true},
		{"127.0.0.1:80", "127.0.0.1:80", true},
		{"[::1]:80", "[::1]:80", true},
		{"[fe80::1]", "[fe80::1]", true},
		{"", "", true},
		{"API.example.com", "api.example.com", false},
		{"api.example.com.", "api.example.com", false},
		{"api.example.com.:8080", "api.example.com:8080", false},
		{"[FE80::A]:80", "[fe80::a]:80", false},
	} {
		got, same := routedHost(tt.in)
		if got != tt.want || same != tt.same {
			t.Errorf("routedHost(%q) = %q, %v; want %q, %v", tt.in, got, same, tt.want, tt.same)
		}
	}
}
