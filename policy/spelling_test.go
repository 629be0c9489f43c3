package policy

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/urlpath"
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

// A pattern's method ends at a space or a tab, as ServeMux reads it: a
// policy on "POST<tab>/login" limits POST /login, and nothing else.
func TestPatternMethodSeparator(t *testing.T) {
	for _, pattern := range []string{`POST /login`, `POST\t/login`, `POST \t /login`, `POST\t\t/login`} {
		t.Run(pattern, func(t *testing.T) {
			e := newTestEnforcer(t, `
policies:
  - name: login
    match: "`+pattern+`"
    limits: ["1/m"]
`)
			var got []Verdict
			for _, method := range []string{"GET", "POST", "GET", "POST"} {
				got = append(got, sendFrom(e, method, "/login", "192.0.2.1"))
			}
			if want := []Verdict{Allow, Allow, Allow, Refuse}; !slices.Equal(got, want) {
				t.Errorf("GET, POST, GET, POST /login: %v, want %v (1/m on POST alone)", got, want)
			}
		})
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
		{"[fe80::1]", "fe80::1", false},
		{"fe80::1", "fe80::1", true},
		{"FE80::A", "fe80::a", false},
		{"[fe80::a%25en0]:80", "[fe80::a%25en0]:80", true},
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

// An IPv6 address is a host too. ServeMux compares [2001:db8::1] with its
// brackets when the request names no port, and without them once it cuts
// the port off: a policy on the address counts both, whatever the case
// of its hex digits and however the pattern writes it.
func TestIPv6HostSpellings(t *testing.T) {
	for _, host := range []string{"[2001:db8::a]", "2001:db8::a", "[2001:DB8::A]", "2001:DB8::A"} {
		t.Run(host, func(t *testing.T) {
			e := newTestEnforcer(t, `
policies:
  - name: v6
    match: {host: "`+host+`", path: /login}
    key: ip
    limits: ["1/m"]
`)
			decide := func(h string) Verdict {
				r := httptest.NewRequest("GET", "/login", nil)
				r.Host = h
				out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
				out.Done()
				return out.Verdict
			}
			if v := decide("[2001:db8::a]"); v != Allow {
				t.Fatalf("first request: %v", v)
			}
			for _, h := range []string{"[2001:db8::a]", "[2001:db8::a]:8443", "[2001:DB8::A]", "[2001:DB8::A]:443"} {
				if v := decide(h); v != Refuse {
					t.Errorf("Host %s after the one allowed: %v; want refuse", h, v)
				}
			}
			if v := decide("[2001:db8::b]:8443"); v != Allow {
				t.Errorf("Host [2001:db8::b]:8443: %v; want allow, no policy applies", v)
			}
		})
	}
}

// ServeMux matches a request's host without its port: a pattern's host
// written with one would match no request, and limit nothing.
func TestPatternHostWithPort(t *testing.T) {
	for _, tt := range []struct {
		match string
		line  int
	}{
		{`"api.example.com:8443/login"`, 4},
		{`"POST API.example.com.:443/login"`, 4},
		{`{path: /login, host: "api.example.com:8443"}`, 4},
		{`{host: "[2001:db8::1]:443", path: /}`, 4},
		{"\n      path: /login\n      host: api.example.com:80", 6},
	} {
		_, err := Load("f.yaml", []byte(`
policies:
  - name: p
    match: `+tt.match+`
    key: ip
    limits: ["1/m"]
`))
		var perr *Error
		if !errors.As(err, &perr) || len(perr.Problems) != 1 || perr.Problems[0].Line != tt.line || !strings.Contains(perr.Problems[0].Message, "port") {
			t.Errorf("match: %s: Load = %v; want one problem on line %d about the port", tt.match, err, tt.line)
		}
	}
}

// A request whose path and host are already as the patterns match them
// is matched as it is, without a copy.
func TestRoutedCleanRequestAllocatesNothing(t *testing.T) {
	for _, host := range []string{"api.example.com", "api.example.com:8443", "127.0.0.1:80", "[2001:db8::1]:443", ""} {
		r := httptest.NewRequest("POST", "/pkg.Service/Method", nil)
		r.Host = host
		if n := testing.AllocsPerRun(100, func() {
			if routed(r, urlpath.Options{}) != r {
				t.Fatalf("Host %q: routed copies the request", host)
			}
		}); n != 0 {
			t.Errorf("Host %q: %v allocations, want none", host, n)
		}
	}
}
