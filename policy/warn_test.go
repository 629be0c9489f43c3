package policy

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// What the plan warning is about: a policy with limits per plan and no
// default limits decides nothing for a plan it does not list, nor for a
// request with no plan.
func TestWarnPlanWithoutLimitsIsUnlimited(t *testing.T) {
	e := newTestEnforcer(t, `
plans:
  names: [free, pro, team]
policies:
  - name: api
    plans:
      free: ["1/m burst 1"]
      pro: ["2/m burst 2"]
`)
	for _, tt := range []struct {
		plan    string
		allowed int // of 5 requests
	}{
		{"free", 1},
		{"pro", 2},
		{"team", 5},
		{"", 5},
	} {
		allowed := 0
		for range 5 {
			r := httptest.NewRequest("GET", "/", nil)
			out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header, Plan: tt.plan})
			out.Done()
			if out.Verdict == Allow {
				allowed++
			}
		}
		if allowed != tt.allowed {
			t.Errorf("plan %q: %d of 5 allowed, want %d", tt.plan, allowed, tt.allowed)
		}
	}
}

// What the key warning is about: a key with a part the request lacks does
// not apply, so a login keyed only by the account lets every request
// without one through.
func TestWarnKeyWithoutPartIsUnlimited(t *testing.T) {
	e := newTestEnforcer(t, loginByAccount)
	for _, tt := range []struct {
		body    string
		allowed int // of 5 requests
	}{
		{"username=alice&password=x", 1},
		{"password=x", 5},
	} {
		allowed := 0
		for range 5 {
			if v, _ := postForm(e, "/login", tt.body); v == Allow {
				allowed++
			}
		}
		if allowed != tt.allowed {
			t.Errorf("body %q: %d of 5 allowed, want %d", tt.body, allowed, tt.allowed)
		}
	}
}

// Why the key warning spares a policy another one backs: requests without
// the account are limited by the policy keyed by ip, with its own limits,
// and those with it by both.
func TestWarnKeyWithoutPartLimitedByAnother(t *testing.T) {
	const login = `
policies:
  - name: login-account
    match: "POST /login"
    key: form:username
    limits: ["1/m burst 1"]
  - name: login-ip
    match: "POST /login"
    key: ip
    limits: ["3/m burst 3"]
`
	for _, tt := range []struct {
		body    string
		allowed int // of 5 requests
	}{
		{"username=alice&password=x", 1},
		{"password=x", 3},
	} {
		e := newTestEnforcer(t, login)
		allowed := 0
		for range 5 {
			if v, _ := postForm(e, "/login", tt.body); v == Allow {
				allowed++
			}
		}
		if allowed != tt.allowed {
			t.Errorf("body %q: %d of 5 allowed, want %d", tt.body, allowed, tt.allowed)
		}
	}
}

// warning is what one warning must say, and where.
type warning struct {
	line, col int
	want      []string
}

// Each case is a file that loads, and the warnings it must give, in the
// order of the file; none for a file whose every request is limited.
func TestWarnings(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		warns []warning
	}{
		// Plans.
		{"plan not listed", `
plans:
  names: [free, pro, team]
  default: free
policies:
  - name: api
    plans:
      free: ["10/m"]
      pro: ["100/m"]
`, []warning{{7, 5, []string{`policy "api" has no default limits and none for plan "team": `, "not limited by it"}}}},
		{"default plan not listed", `
plans:
  names: [free, pro]
  default: free
policies:
  - name: api
    plans: {pro: ["100/m"]}
`, []warning{{7, 5, []string{`policy "api"`, `none for plan "free" (plans.default)`}}}},
		{"no default plan", `
client_ip: {trusted_proxies: [10.0.0.1]}
plans:
  names: [free, pro]
  header: X-Plan
policies:
  - name: api
    plans: {free: ["10/m"], pro: ["100/m"]}
`, []warning{
			// The plan header, believed from the trusted proxy alone as
			// the user header is, needs no warning of its own.
			{8, 5, []string{`policy "api"`, "none for requests with no plan (plans has no default)"}},
		}},
		{"several gaps", `
plans:
  names: [free, pro, team]
policies:
  - name: api
    limits: []
    plans: {pro: ["100/m"]}
`, []warning{{7, 5, []string{`none for plan "free", plan "team" and requests with no plan`}}}},
		{"default limits", `
plans:
  names: [free, pro, team]
policies:
  - name: api
    limits: ["10/m"]
    plans: {pro: ["100/m"]}
`, nil},
		{"every plan listed, one unlimited on purpose", `
plans:
  names: [free, pro, enterprise]
  default: free
policies:
  - name: api
    plans: {free: ["10/m"], pro: ["100/m"], enterprise: []}
`, nil},
		{"plans no policy uses", `
plans:
  names: [free, pro]
  api_key_header: X-API-Key
  api_keys: {k1: pro}
policies:
  - name: api
    limits: ["10/m"]
`, []warning{{2, 1, []string{"no policy gives limits per plan", "the plans section has no effect"}}}},

		// Keys a request may lack.
		{"form field alone", `
policies:
  - name: login
    match: "POST /login"
    key: form:username
    limits: ["5/m"]
`, []warning{{5, 10, []string{`policy "login" does not limit requests without form:username`, "as in keys: [form:username, ip]",
			"or a policy keyed by ip that matches the same requests"}}}},
		{"form field beside ip", `
policies:
  - name: login
    match: "POST /login"
    keys: [form:username, ip]
    limits: ["5/m"]
`, nil},
		// Another policy may limit the requests without the part: one
		// that matches them all, enforces, and has a key each has.
		{"form field, and ip in a policy of its own", `
policies:
  - name: login-account
    match: "POST /login"
    key: form:username
    limits: ["5/15m"]
  - name: login-ip
    match: "POST /login"
    key: ip
    limits: ["20/15m"]
`, nil},
		{"form field, and ip in a policy of its own with the same limits", `
policies:
  - name: login-account
    match: "POST /login"
    key: form:username
    limits: ["5/15m"]
  - name: login-ip
    match: {path: /login, methods: [POST]}
    limits: ["5/15m"]
`, nil},
		{"form field, and ip over every request", `
policies:
  - name: login-account
    match: {path: /login, methods: [POST], headers: [{name: Content-Type, present: true}]}
    key: form:username
    limits: ["5/15m"]
  - name: everything
    limits: ["100/m"]
`, nil},
		{"form field, and ip in a shadow policy", `
policies:
  - name: login-account
    match: "POST /login"
    key: form:username
    limits: ["5/15m"]
  - name: login-ip
    match: "POST /login"
    limits: ["20/15m"]
    shadow: true
`, []warning{{5, 10, []string{`policy "login-account" does not limit requests without form:username`}}}},
		{"form field, and ip on other requests", `
policies:
  - name: login-account
    match: "POST /login"
    key: form:username
    limits: ["5/15m"]
  - name: signup-ip
    match: "POST /signup"
    limits: ["20/15m"]
`, []warning{{5, 10, []string{`policy "login-account" does not limit requests without form:username`}}}},
		{"form field, and ip on some of its requests", `
policies:
  - name: login-account
    match: "POST /login"
    key: form:username
    limits: ["5/15m"]
  - name: login-ip
    match:
      path: /login
      methods: [POST]
      headers: [{name: X-Captcha, present: true}]
    limits: ["20/15m"]
  - name: login-page
    match: "GET /login"
    limits: ["20/15m"]
`, []warning{{5, 10, []string{`policy "login-account" does not limit requests without form:username`}}}},
		{"form field, and a key requests may lack too", `
policies:
  - name: login-account
    match: "POST /login"
    key: form:username
    limits: ["5/15m"]
  - name: login-user
    match: "POST /login"
    key: user
    limits: ["20/15m"]
`, []warning{
			{5, 10, []string{`policy "login-account" does not limit requests without form:username`}},
			{9, 10, []string{`policy "login-user" does not limit requests without user`}},
		}},
		{"form field, and ip for some plans", `
plans:
  names: [free, pro]
  default: free
policies:
  - name: login-account
    match: "POST /login"
    key: form:username
    limits: ["5/15m"]
  - name: login-ip
    match: "POST /login"
    plans: {free: ["20/15m"]}
`, []warning{
			{8, 10, []string{`policy "login-account" does not limit requests without form:username`}},
			{12, 5, []string{`policy "login-ip" has no default limits and none for plan "pro"`}},
		}},
		{"user without authenticated", `
policies:
  - name: api
    key: user
    limits: ["5/m"]
`, []warning{{4, 10, []string{`policy "api" does not limit requests without user`, "authenticated: true"}}}},
		{"user, authenticated", `
policies:
  - name: api
    match: {authenticated: true}
    key: user
    limits: ["5/m"]
`, nil},
		{"every key optional", `
policies:
  - name: api
    keys: [user, "header:X-API-Key"]
    limits: ["5/m"]
`, []warning{{4, 5, []string{`policy "api" does not limit requests without user and header:x-api-key`, "keys: [user, header:x-api-key, ip]", "name: X-Api-Key, present: true"}}}},
		{"header guaranteed", `
policies:
  - name: partner
    match:
      headers: [{name: x-api-key, present: true}]
    key: "header:X-API-Key"
    limits: ["5/m"]
`, nil},
		{"header equal to a value", `
policies:
  - name: partner
    match:
      headers: [{name: X-Tenant, equals: acme}]
    key: [ip, "header:x-tenant"]
    limits: ["5/m"]
`, nil},
		{"combined key with an optional part", `
policies:
  - name: api
    key: [ip, user]
    limits: ["5/m"]
`, []warning{{4, 10, []string{"without user", "keys: [[ip, user], ip]"}}}},
		{"path wildcard", `
policies:
  - name: export
    match: "GET /export/{id}"
    key: "path:id"
    limits: ["5/m"]
`, nil},
		{"path wildcard that may be empty", `
policies:
  - name: files
    match: "GET /files/{name...}"
    key: "path:name"
    limits: ["5/m"]
`, []warning{{5, 10, []string{`policy "files" does not limit requests without path:name`, "{name...} is empty"}}}},
		{"priority only", `
policies:
  - name: analytics
    match: /analytics/
    priority: low
`, nil},

		// Keys that never apply.
		{"user of anonymous requests", `
policies:
  - name: anon
    match: {authenticated: false}
    key: user
    limits: ["5/m"]
`, []warning{{5, 10, []string{`key user of policy "anon" never applies`, "authenticated: false", "the policy limits nothing"}}}},
		{"header the match excludes, beside ip", `
policies:
  - name: keyless
    match:
      headers: [{name: X-API-Key, present: false}]
    keys: [ip, "header:x-api-key"]
    limits: ["5/m"]
`, []warning{{6, 16, []string{`key header:x-api-key of policy "keyless" never applies`, "without X-Api-Key"}}}},

		// Priorities: only enforcing policies classify requests.
		{"shadow policy with a priority", `
policies:
  - name: payments
    match: "POST /payments"
    limits: ["1/s"]
    shadow: true
    priority: critical
`, []warning{{7, 15, []string{`policy "payments" is a shadow policy: its priority critical classifies nothing`}}}},

		// Client addresses.
		{"every address trusted", `
client_ip:
  trusted_proxies: [10.0.0.0/8, 0.0.0.0/0, "::/0"]
policies:
  - {name: api, limits: ["5/m"]}
`, []warning{
			{3, 33, []string{"trusted proxy 0.0.0.0/0 spans much of the Internet", "X-Forwarded-For"}},
			{3, 44, []string{"trusted proxy ::/0"}},
		}},
		{"private start, public end", `
client_ip:
  trusted_proxies: [10.0.0.0/7]
policies:
  - {name: api, limits: ["5/m"]}
`, []warning{{3, 21, []string{"trusted proxy 10.0.0.0/7 spans much of the Internet"}}}},
		{"private and proxy ranges trusted", `
client_ip:
  trusted_proxies: [10.0.0.0/8, "fc00::/7", 173.245.48.0/20, "2400:cb00::/32", 127.0.0.1]
  header: X-Real-IP
policies:
  - {name: api, limits: ["5/m"]}
`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Load("f.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			got := set.Warnings()
			if len(got) != len(tt.warns) {
				t.Fatalf("%d warnings, want %d:\n%s", len(got), len(tt.warns), lines(got))
			}
			for i, w := range tt.warns {
				g := got[i]
				if g.File != "f.yaml" || g.Line != w.line || g.Column != w.col {
					t.Errorf("warning %d at %s:%d:%d, want f.yaml:%d:%d: %s", i, g.File, g.Line, g.Column, w.line, w.col, g.Message)
				}
				for _, s := range w.want {
					if !strings.Contains(g.Message, s) {
						t.Errorf("warning %d %q lacks %q", i, g.Message, s)
					}
				}
			}
		})
	}
}

// The configuration files sluice ships load without a warning: each is a
// file people copy.
func TestWarnNoneInShippedFiles(t *testing.T) {
	for _, f := range []string{"../examples/sluice.yaml", "../server/demo.yaml"} {
		set, err := LoadFile(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if w := set.Warnings(); len(w) > 0 {
			t.Errorf("%s has warnings:\n%s", f, lines(w))
		}
		if w := set.ServeWarnings(); len(w) > 0 {
			t.Errorf("%s has warnings under sluice serve:\n%s", f, lines(w))
		}
	}
}

func lines(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintln(&b, p)
	}
	return b.String()
}
