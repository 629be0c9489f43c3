package policy

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/urlpath"
)

// NGINX, Apache and Tomcat decode an encoded unreserved character (%2e
// is a dot) before they resolve dot segments, and serve /x/%2e%2e/login
// and /%2e/login as /login: a policy on POST /login decides them. An
// encoded reserved character stays so: %2F is no slash.
func TestEncodedDotSegments(t *testing.T) {
	decide := keysOf(t, `
policies:
  - name: login
    match: "POST /login"
    key: ip
    limits: ["100/m"]
`)
	for _, tt := range []struct {
		path    string
		decided bool
	}{
		{"/login", true},
		{"/x/%2e%2e/login", true},
		{"/x/%2E%2E/login", true},
		{"/x/.%2e/login", true},
		{"/%2e/login", true},
		{"/%2e%2e/login", true},
		{"/%6Cogin", true},
		{"/a%2Fb/%2e%2e/login", true}, // a%2Fb is one segment
		{"/x/%252e%252e/login", false},
		{"/x%2F%2e%2e%2Flogin", false}, // one segment, x/../login
	} {
		r := httptest.NewRequest("POST", tt.path, nil)
		_, keys := decide(&Request{HTTP: r, Header: r.Header})
		if _, ok := keys["login"]; ok != tt.decided {
			t.Errorf("POST %s: decided by the policy on POST /login: %v, want %v", tt.path, ok, tt.decided)
		}
	}
}

// The paths section names the spellings of a path the application
// serves as the path itself: in any case (Express's default router,
// ASP.NET Core), with or without a final slash (the same), with
// ;parameters in its segments (Tomcat, Jetty). Without it, they are
// other paths, as to net/http's ServeMux.
func TestPathsSection(t *testing.T) {
	const policies = `
policies:
  - name: login
    match: "POST /login"
    key: ip
    limits: ["100/m"]
  - name: api
    match: "/api/"
    key: ip
    limits: ["100/m"]
  - name: users
    match: "GET /users/{id}"
    key: path:id
    limits: ["100/m"]
  - name: reports
    match: "GET /Reports/{Name}/{$}"
    key: path:Name
    limits: ["100/m"]
  - name: files
    match: "GET /files/{rest...}"
    key: ip
    limits: ["100/m"]
  - name: admin
    match: "GET /%41dmin"
    key: ip
    limits: ["100/m"]
`
	with := keysOf(t, `
paths:
  ignore_case: true
  ignore_trailing_slash: true
  ignore_path_parameters: true
`+policies)
	without := keysOf(t, policies)
	for _, tt := range []struct {
		method, path  string
		with, without string // the policy that decides and how its key ends, or ""
	}{
		{"POST", "/login", "login", "login"},
		{"POST", "/LOGIN", "login", ""},
		{"POST", "/Login/", "login", ""},
		{"POST", "/login/", "login", ""},
		{"POST", "/login;jsessionid=1", "login", ""},
		{"POST", "/login/;jsessionid=1", "login", ""},
		{"POST", "/x/..;/login", "login", ""},
		{"POST", "/login%3Bx", "", ""}, // an encoded ; is no parameter
		{"POST", "/loginx", "", ""},
		{"POST", "/login/x", "", ""},
		{"GET", "/api", "api", ""}, // ServeMux redirects /api to the subtree
		{"GET", "/API/v1", "api", ""},
		{"GET", "/api/v1/", "api", "api"},
		{"GET", "/users/bob", "users path:id=bob", "users path:id=bob"},
		{"GET", "/users/BOB", "users path:id=bob", "users path:id=BOB"},
		{"GET", "/users/bob/", "users path:id=bob", ""},
		{"GET", "/users/bob;v=2", "users path:id=bob", "users path:id=bob;v=2"},
		{"GET", "/users/bob/x", "", ""},
		{"GET", "/reports/Q1/", "reports path:Name=q1", ""},
		{"GET", "/REPORTS/q1", "reports path:Name=q1", ""},
		{"GET", "/Reports/Q1/", "reports path:Name=q1", "reports path:Name=Q1"},
		{"GET", "/files", "files", ""},
		{"GET", "/files/a/b/", "files", "files"},
		// An escaped letter in a pattern is the letter (%41 is A), in
		// lower case under ignore_case, as it is in requests' paths.
		{"GET", "/Admin", "admin", "admin"},
		{"GET", "/admin", "admin", ""},
		{"GET", "/ADMIN", "admin", ""},
		{"GET", "/%41dmin", "admin", "admin"},
		{"GET", "/%61dmin", "admin", ""},
	} {
		r := httptest.NewRequest(tt.method, "http://x"+tt.path, nil)
		for _, d := range []struct {
			name   string
			decide func(*Request) (Verdict, map[string]string)
			want   string
		}{{"with paths", with, tt.with}, {"without", without, tt.without}} {
			_, keys := d.decide(&Request{HTTP: r, Header: r.Header})
			got := ""
			for p, k := range keys {
				got = p
				if name, end, ok := strings.Cut(d.want, " "); ok && name == p {
					if !strings.HasSuffix(k, ":"+end) {
						got += " key " + k
					} else {
						got = d.want
					}
				}
			}
			if len(keys) > 1 || got != d.want {
				t.Errorf("%s %s, %s: decided by %q (%d policies), want %q", tt.method, tt.path, d.name, got, len(keys), d.want)
			}
		}
	}
}

// The paths section is decoded strictly: unknown fields, values that are
// not booleans, and a pattern that ignore_path_parameters makes match
// nothing are refused with their line.
func TestPathsSectionErrors(t *testing.T) {
	for _, tt := range []struct {
		yaml string
		line int
		want string
	}{
		{"paths:\n  ignore_cases: true\n", 2, `did you mean "ignore_case"?`},
		{"paths:\n  ignore_trailing_slash: yes please\n", 2, "must be true or false"},
		{"paths: [ignore_case]\n", 1, "paths must be a mapping"},
		{"paths:\n  ignore_path_parameters: true\n", 8, "would match no request"},
	} {
		_, err := Load("f.yaml", []byte(tt.yaml+`policies:
  - name: p
    key: ip
    limits: ["1/m"]
  - name: q
    match: "/a;b"
    limits: ["1/m"]
`))
		var perr *Error
		if !errors.As(err, &perr) || len(perr.Problems) != 1 || perr.Problems[0].Line != tt.line || !strings.Contains(perr.Problems[0].Message, tt.want) {
			t.Errorf("%q: Load = %v; want one problem on line %d with %q", tt.yaml, err, tt.line, tt.want)
		}
	}
}

// Every request's path is matched in its form; one already so, as most
// are, is matched as it is, without a copy, whatever the paths section.
func TestRoutedAllocatesNothingWithPaths(t *testing.T) {
	o := urlpath.Options{FoldCase: true, StripParams: true, DecodeSlash: true}
	for _, path := range []string{"/login", "/api/v1/", "/users/42?x=1", "/pkg.service/method"} {
		r := httptest.NewRequest("POST", path, nil)
		r.Host = "api.example.com"
		if n := testing.AllocsPerRun(100, func() {
			if routed(r, o) != r {
				t.Fatalf("%s: routed copies the request", path)
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations, want none", path, n)
		}
	}
}

// TestDecodeSlash: with paths.decode_slash, an escaped slash is a slash,
// as NGINX serves it and gorilla/mux and gin route it: /api%2Fsecret is
// decided as /api/secret, which without it no policy on /api/secret
// decides while such an application serves it there.
func TestDecodeSlash(t *testing.T) {
	_, err := Load("f.yaml", []byte("paths: {decode_slash: true}\npolicies:\n  - {name: p, match: \"/a%2Fb\", limits: [\"1/m\"]}\n"))
	var perr *Error
	if !errors.As(err, &perr) || perr.Problems[0].Line != 3 || !strings.Contains(perr.Problems[0].Message, "would match no request") {
		t.Errorf("a pattern with %%2F under decode_slash: Load = %v; want refused on line 3", err)
	}

	const policies = `
policies:
  - {name: secret, match: "GET /api/secret", key: ip, limits: ["100/m"]}
  - {name: users, match: "GET /users/{id}", key: path:id, limits: ["100/m"]}
  - {name: files, match: "GET /files/{name}", key: path:name, limits: ["100/m"]}
`
	with := keysOf(t, "paths: {decode_slash: true}\n"+policies)
	without := keysOf(t, policies)
	for _, tt := range []struct {
		path          string
		with, without string // the policy that decides, or ""
	}{
		{"/api/secret", "secret", "secret"},
		{"/api%2Fsecret", "secret", ""},
		{"/api%2fsecret", "secret", ""},
		{"/x%2F..%2Fapi/secret", "secret", ""},
		{"/users%2F7", "users", ""},
		{"/files/a%2Fb", "", "files"}, // two segments to such an application
		{"/api%252Fsecret", "", ""},
	} {
		r := httptest.NewRequest("GET", "http://x"+tt.path, nil)
		for _, d := range []struct {
			name   string
			decide func(*Request) (Verdict, map[string]string)
			want   string
		}{{"with decode_slash", with, tt.with}, {"without", without, tt.without}} {
			_, keys := d.decide(&Request{HTTP: r, Header: r.Header})
			got := ""
			for p := range keys {
				got = p
			}
			if len(keys) > 1 || got != d.want {
				t.Errorf("%s %s: decided by %v, want %q", d.name, tt.path, keys, d.want)
			}
		}
	}
}
