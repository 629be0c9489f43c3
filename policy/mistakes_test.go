package policy

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// Mistakes that used to load as OK and do something else than the file
// says: each file must be refused, with the line and column of the
// mistake and words that say what to write instead.
func TestLoadRefusesWhatWouldNotDoAsWritten(t *testing.T) {
	tests := []struct {
		name      string
		yaml      string
		line, col int
		want      []string
	}{
		// Patterns in other routers' syntax match only their literal text.
		{"glob star", `
policies:
  - name: a
    match: "/api/*"
    limits: ["1/s"]
`, 4, 12, []string{`pattern "/api/*"`, "* is not a wildcard here", `write "/api/" for everything under /api/`, `"/api/{name}" for one segment`, "%2A"}},
		{"glob double star", `
policies:
  - name: a
    match: "GET /api/**"
    limits: ["1/s"]
`, 4, 12, []string{"* is not a wildcard here", `write "GET /api/" for everything under /api/`}},
		{"star inside a segment", `
policies:
  - name: a
    match: "/api/v*/users"
    limits: ["1/s"]
`, 4, 12, []string{"* is not a wildcard here", `write "/api/{name}/users"`, "a whole segment"}},
		{"Express parameter", `
policies:
  - name: a
    match: "/users/:id"
    limits: ["1/s"]
`, 4, 12, []string{":id is not a wildcard here", `write "/users/{id}"`, "%3A"}},
		{"Express parameter in a mapping", `
policies:
  - name: a
    match: {path: "/users/:id/posts"}
    limits: ["1/s"]
`, 4, 19, []string{`path "/users/:id/posts"`, `write "/users/{id}/posts"`}},
		{"angle parameter", `
policies:
  - name: a
    match: "api.example.com/api/<int:id>"
    limits: ["1/s"]
`, 4, 12, []string{"<int:id> is not a wildcard here", `write "api.example.com/api/{id}"`, "%3C"}},
		{"regular expression", `
policies:
  - name: a
    match: "^/re/.*$"
    limits: ["1/s"]
`, 4, 12, []string{"regular expression", "^ would be read as a host", `write "/re/" for everything under /re/`}},
		{"anchored regular expression in a mapping", `
policies:
  - name: a
    match: {path: "^/login$"}
    limits: ["1/s"]
`, 4, 19, []string{"regular expression", `write "/login"`}},

		// Headers a trusted proxy sets, which sluice serve removes from
		// every other peer's requests.
		{"plan header is the API key header", `
client_ip:
  trusted_proxies: [10.0.0.5]
plans:
  names: [free, pro]
  default: free
  api_key_header: X-API-Key
  header: X-API-Key
  api_keys: {pk_live_acme: pro}
policies:
  - name: api
    plans: {free: ["10/m"], pro: ["100/m"]}
`, 8, 11, []string{"plans.header X-API-Key is also plans.api_key_header (line 7)", "no client's X-API-Key would reach the upstream", "e.g. X-Plan"}},
		{"user header is the API key header", `
client_ip: {trusted_proxies: [10.0.0.5]}
user: {header: X-API-Key}
plans: {names: [free, pro], default: free, api_key_header: X-API-Key, api_keys: {pk_live_acme: pro}}
policies:
  - {name: api, key: user, plans: {free: ["10/m"], pro: ["100/m"]}}
`, 3, 16, []string{"user.header X-API-Key is also plans.api_key_header (line 4)", "no client's X-API-Key would reach the upstream"}},
		{"user header keyed from the client", `
client_ip: {trusted_proxies: [10.0.0.5]}
user: {header: X-User}
policies:
  - {name: api, key: "header:X-User", limits: ["10/m"]}
`, 3, 16, []string{"user.header X-User is also read from every client by policy \"api\" (line 5)", "key by user"}},
		{"plan header matched from the client", `
client_ip: {trusted_proxies: [10.0.0.5]}
plans: {names: [free, pro], default: free, header: X-Plan}
policies:
  - {name: api, match: {headers: [{name: x-plan, equals: pro}]}, plans: {free: ["10/m"], pro: ["100/m"]}}
`, 3, 52, []string{"plans.header X-Plan is also read from every client by policy \"api\" (line 5)", "limits per plan"}},
		{"user header is Authorization", `
client_ip: {trusted_proxies: [10.0.0.5]}
user: {header: Authorization}
policies:
  - {name: api, key: user, limits: ["10/m"]}
`, 3, 16, []string{"user.header Authorization is a credential clients send", "removes it from every other peer's request", "X-Auth-Request-User", "header:authorization"}},
		{"user header is Cookie", `
client_ip: {trusted_proxies: [10.0.0.5]}
user: {header: Cookie}
policies:
  - {name: api, key: user, limits: ["10/m"]}
`, 3, 16, []string{"user.header Cookie is a credential clients send"}},
		{"plan header is Proxy-Authorization", `
client_ip: {trusted_proxies: [10.0.0.5]}
plans: {names: [free, pro], default: free, header: Proxy-Authorization}
policies:
  - {name: api, plans: {free: ["10/m"], pro: ["100/m"]}}
`, 3, 52, []string{"plans.header Proxy-Authorization is a credential clients send", "api_key_header"}},

		// Messages that say what to do.
		{"tab indenting a list", "\npolicies:\n\t- name: a\n\t  limits: [1/s]\n",
			3, 1, []string{"invalid YAML: a tab", "indent with spaces"}},
		{"tab after spaces", "\npolicies:\n  - name: a\n    limits: [1/s]\n  \t\n",
			5, 3, []string{"invalid YAML: a tab", "indent with spaces"}},
		{"merge key", `
policies:
  - &a {name: a, limits: ["1/s"]}
  - <<: *a
    name: b
`, 4, 5, []string{"merge keys (<<) are not supported", "repeat the fields"}},
		{"cost above a fixed window's count", `
policies:
  - name: a
    cost: 4503599627370496
    limits: ["10000000000000/month"]
`, 5, 14, []string{"can never pass a request of cost 4503599627370496", "fixed_window has no burst", "raise its count to at least 4503599627370496 or lower the cost"}},
		{"method with a space", `
policies:
  - name: a
    match: {methods: ["BAD METHOD"]}
    limits: ["1/s"]
`, 4, 23, []string{`"BAD METHOD" is not a method`, "one token", "no spaces"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantFirstProblem(t, tt.yaml, tt.line, tt.col, tt.want) })
	}
}

// What the refusals above must not catch: the literal characters, written
// as the messages advise, and the pattern syntax itself.
func TestLoadAcceptsPatternSyntax(t *testing.T) {
	for _, match := range []string{
		`"/a/%2A"`, `"/a/%3Aid"`, `"/v1/things:cancel"`, `"/files/{path...}"`,
		`"/api/"`, `"/api/{$}"`, `"GET /users/{id}"`, `"/price$5"`,
		`{path: /a, headers: [{name: X-A, equals: b}, {name: X-A, equals: c}]}`,
	} {
		if _, err := Load("sluice.yaml", []byte("policies:\n  - {name: a, match: "+match+", limits: [1/s]}\n")); err != nil {
			t.Errorf("match %s: %v", match, err)
		}
	}
}

// The refused patterns left what they named unlimited: each matched only
// its literal text. The pattern each message advises limits it.
func TestForeignPatternsRefusedForOnesThatLimit(t *testing.T) {
	for _, tt := range []struct{ pattern, path, instead string }{
		{"/api/*", "/api/users", "/api/"},
		{"/api/**", "/api/a/b", "/api/"},
		{"/api/v*/users", "/api/v2/users", "/api/{name}/users"},
		{"/users/:id", "/users/7", "/users/{id}"},
		{"/api/<id>", "/api/7", "/api/{id}"},
		{"^/re/.*$", "/re/x", "/re/"},
		{"^/login$", "/login", "/login"},
		// A literal * or :, written escaped, as the messages say.
		{"", "/a/*", "/a/%2A"},
		{"", "/a/:id", "/a/%3Aid"},
	} {
		file := func(pattern string) string {
			return "policies:\n  - {name: a, match: \"" + pattern + "\", limits: [\"1/m burst 1\"]}\n"
		}
		if tt.pattern != "" {
			_, err := Load("sluice.yaml", []byte(file(tt.pattern)))
			if err == nil {
				e := newTestEnforcer(t, file(tt.pattern))
				verdicts := []Verdict{get(e, tt.path), get(e, tt.path)}
				t.Errorf("match %q loads, and %s is unlimited (%v); want it refused, advising %q", tt.pattern, tt.path, verdicts, tt.instead)
				continue
			}
			if !strings.Contains(err.Error(), `"`+tt.instead+`"`) {
				t.Errorf("match %q: %v; want it to advise %q", tt.pattern, err, tt.instead)
			}
		}
		e := newTestEnforcer(t, file(tt.instead))
		if v1, v2 := get(e, tt.path), get(e, tt.path); v1 != Allow || v2 != Refuse {
			t.Errorf("match %q: %s twice is %v, %v; want allow, refuse", tt.instead, tt.path, v1, v2)
		}
	}
}

// get decides a GET of path from one client.
func get(e *Enforcer, path string) Verdict {
	r := httptest.NewRequest("GET", path, nil)
	out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header, Client: netip.MustParsePrefix("192.0.2.1/32")})
	out.Done()
	return out.Verdict
}

// A plan or user header that clients send too loaded, and sluice serve
// then removed every client's copy of it (the header is believed, and
// passed on, only from a trusted proxy): the upstream got no API key, no
// Authorization, from anyone.
func TestClientHeaderAsProxyHeaderRefused(t *testing.T) {
	for _, tt := range []struct {
		name, yaml, header, value string
	}{
		{"plans.header is the API key header", `
client_ip: {trusted_proxies: [10.0.0.5]}
plans: {names: [free, pro], default: free, api_key_header: X-API-Key, header: X-API-Key, api_keys: {pk_live_acme: pro}}
policies:
  - {name: api, plans: {free: ["10/m"], pro: ["100/m"]}}
`, "X-API-Key", "pk_live_acme"},
		{"user.header is Authorization", `
client_ip: {trusted_proxies: [10.0.0.5]}
user: {header: Authorization}
policies:
  - {name: api, key: user, limits: ["10/m"]}
`, "Authorization", "Bearer abc"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Load("sluice.yaml", []byte(tt.yaml))
			if err == nil {
				r := httptest.NewRequest("GET", "/", nil) // from 192.0.2.1, untrusted
				r.Header.Set(tt.header, tt.value)
				// sluice serve removes the plan and user headers where
				// these return "" (see server's reverseProxy).
				t.Fatalf("loaded; a client's %s: %s would reach the upstream without it (PlanHeaderOf %q, UserOf %q)",
					tt.header, tt.value, set.PlanHeaderOf(r), set.UserOf(r))
			}
			if !strings.Contains(err.Error(), tt.header) {
				t.Errorf("Load = %v, want it to name %s", err, tt.header)
			}
		})
	}
}

// present: true asks for a value: a blank one (empty, or spaces and tabs
// alone) is none. HTTP/1.1 hands a server "X-Key:   " as empty, while
// HTTP/2 and gRPC hand it the spaces as sent, so a client over HTTP/2
// that sent blanks was taken for one with a key: it escaped the anonymous
// limit (present: false), and each spelling of blank keyed a counter of
// its own.
func TestBlankHeaderIsNoValue(t *testing.T) {
	const file = `
policies:
  - name: per-key
    match: {path: /a, headers: [{name: X-Key, present: true}]}
    key: "header:X-Key"
    limits: ["100/m"]
  - name: anonymous
    match: {path: /a, headers: [{name: X-Key, present: false}]}
    key: ip
    limits: ["1/m burst 1"]
`
	client := netip.MustParsePrefix("192.0.2.1/32")
	for _, tt := range []struct {
		name   string
		values []string // one request per value, from one client
		grpc   bool
	}{
		{"HTTP/1.1 empty", []string{"", ""}, false},
		{"HTTP/2 spaces", []string{" ", "  "}, false},
		{"HTTP/2 tab", []string{"\t", "\t"}, false},
		{"gRPC spaces", []string{" ", " \t"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnforcer(t, file)
			var got []Verdict
			for _, v := range tt.values {
				r := httptest.NewRequest("GET", "/a", nil)
				in := &Request{HTTP: r, Client: client}
				if tt.grpc {
					in.Metadata = map[string][]string{"x-key": {v}}
				} else {
					r.Header["X-Key"] = []string{v}
					in.Header = r.Header
				}
				out := e.Enforce(context.Background(), in)
				out.Done()
				got = append(got, out.Verdict)
			}
			if got[0] != Allow || got[1] != Refuse {
				t.Errorf("verdicts %v, want allow, refuse: blank X-Key values are the anonymous limit's, 1/m per address", got)
			}
		})
	}
}

// Header conditions that no request meets at once.
func TestWarnContradictoryHeaderConditions(t *testing.T) {
	for _, tt := range []struct {
		name string
		yaml string
		warn *warning
	}{
		{"present and absent", `
policies:
  - name: a
    match:
      path: /a
      headers:
        - {name: X-A, present: true}
        - {name: x-a, present: false}
    limits: ["1/s"]
`, &warning{8, 11, []string{`header conditions of policy "a" on X-A contradict each other`, "present: false here and present: true at line 7", "matches no request"}}},
		{"equal and absent", `
policies:
  - name: a
    match:
      path: /a
      headers:
        - {name: X-A, equals: v}
        - {name: X-A, present: false}
    limits: ["1/s"]
`, &warning{8, 11, []string{"present: false here and equals: v at line 7", "matches no request"}}},
		{"absent and equal", `
policies:
  - name: a
    match:
      path: /a
      headers:
        - {name: X-A, present: false}
        - {name: X-A, equals: v}
    limits: ["1/s"]
`, &warning{8, 11, []string{"equals: v here and present: false at line 7"}}},
		{"present and equal agree", `
policies:
  - name: a
    match:
      path: /a
      headers:
        - {name: X-A, present: true}
        - {name: X-A, equals: v}
    limits: ["1/s"]
`, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Load("f.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			got := set.Warnings()
			if tt.warn == nil {
				if len(got) > 0 {
					t.Fatalf("warnings:\n%s", lines(got))
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d warnings, want 1:\n%s", len(got), lines(got))
			}
			if got[0].Line != tt.warn.line || got[0].Column != tt.warn.col {
				t.Errorf("warning at %d:%d, want %d:%d: %s", got[0].Line, got[0].Column, tt.warn.line, tt.warn.col, got[0].Message)
			}
			for _, s := range tt.warn.want {
				if !strings.Contains(got[0].Message, s) {
					t.Errorf("warning %q lacks %q", got[0].Message, s)
				}
			}
		})
	}
}

// A header value's leading and trailing spaces and tabs are no part of
// it, as HTTP/1.1 servers read it: over HTTP/2 and gRPC, which pass them
// on, " k" and "k\t" are the key k, not a fresh counter each (a client
// could otherwise pass its limit by spacing its key, where an upstream
// that trims takes every spelling for the same key), and match
// equals: k. The plan an API key names is found the same way.
func TestHeaderValueSpacesAreNoPart(t *testing.T) {
	const file = `
plans:
  names: [free, pro]
  default: free
  api_key_header: X-API-Key
  api_keys: {pk_live_acme: pro}
policies:
  - name: per-key
    match: {path: /a, headers: [{name: X-Key, equals: k}]}
    key: "header:X-Key"
    limits: ["2/m burst 2"]
  - name: per-plan
    match: /p
    key: ip
    plans:
      free: ["1/m burst 1"]
      pro: ["3/m burst 3"]
`
	client := netip.MustParsePrefix("192.0.2.1/32")
	for _, grpc := range []bool{false, true} {
		e := newTestEnforcer(t, file)
		ask := func(path, name, v string) Verdict {
			r := httptest.NewRequest("GET", path, nil)
			in := &Request{HTTP: r, Client: client}
			if grpc {
				in.Metadata = map[string][]string{strings.ToLower(name): {v}}
			} else {
				r.Header.Set(name, v) // as sent: Set keeps the spaces
				in.Header = r.Header
			}
			out := e.Enforce(context.Background(), in)
			out.Done()
			return out.Verdict
		}
		var got []Verdict
		for _, v := range []string{"k", " k", "k\t", "  k  "} {
			got = append(got, ask("/a", "X-Key", v))
		}
		if !slices.Equal(got, []Verdict{Allow, Allow, Refuse, Refuse}) {
			t.Errorf("gRPC %v: X-Key k, then spaced: %v, want allow, allow, refuse, refuse (one counter of 2)", grpc, got)
		}
		got = got[:0]
		for range 4 {
			got = append(got, ask("/p", "X-API-Key", " pk_live_acme "))
		}
		if !slices.Equal(got, []Verdict{Allow, Allow, Allow, Refuse}) {
			t.Errorf("gRPC %v: a spaced API key: %v, want the pro plan's 3 of 4", grpc, got)
		}
	}
}

// A wildcard written without its opening brace is literal text to
// ServeMux, which no request has: refused, naming the pattern to write.
func TestPatternMissingItsOpeningBrace(t *testing.T) {
	for _, tt := range []struct{ match, want string }{
		{"GET /files/name...}", `write "GET /files/{name...}"`},
		{"/users/id}/posts", `write "/users/{id}/posts"`},
		{"/a/...}", `write "/a/{name...}"`},
	} {
		_, err := Load("p.yaml", []byte("policies:\n  - name: p\n    match: \""+tt.match+"\"\n    limits: [\"10/s\"]\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "p.yaml:3") {
			t.Errorf("match %q: %v; want an error at p.yaml:3 saying %s", tt.match, err, tt.want)
		}
	}
	if _, err := Load("p.yaml", []byte("policies:\n  - name: p\n    match: \"/a/{name...}\"\n    limits: [\"10/s\"]\n")); err != nil {
		t.Errorf("a wildcard written whole: %v", err)
	}
}
