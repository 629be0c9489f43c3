package policy

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// newTestEnforcer loads config and returns an Enforcer deciding it in
// memory on a fake clock.
func newTestEnforcer(t *testing.T, config string) *Enforcer {
	t.Helper()
	set, err := Load("test.yaml", []byte(config))
	if err != nil {
		t.Fatal(err)
	}
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	return NewEnforcer(set, memory.New(memory.Options{Clock: clock}), Options{Clock: clock})
}

// A login form with a malformed field still names its account to the
// handler (net/http keeps every well-formed field in PostForm), so it
// must still be keyed by that account: a client that adds a bad escape or
// a semicolon must not slip past the per-account limit.
func TestFormKeyDespiteMalformedFields(t *testing.T) {
	e := newTestEnforcer(t, `
policies:
  - name: login
    match: "POST /login"
    key: form:username
    limits: ["1/m burst 1"]
`)
	login := func(target, body string) (Verdict, string) {
		r := httptest.NewRequest("POST", target, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
		out.Done()
		return out.Verdict, r.PostFormValue("username")
	}
	if v, _ := login("/login", "username=victim&password=a"); v != Allow {
		t.Fatalf("first login: %v, want allow", v)
	}
	for _, tt := range []struct{ target, body string }{
		{"/login", "username=victim&password=b&x=%zz"},
		{"/login", "username=victim&password=c&x=1;2"},
		{"/login?%zz", "username=victim&password=d"},
	} {
		v, user := login(tt.target, tt.body)
		if user != "victim" {
			t.Fatalf("POST %s %q: the handler sees username %q, want victim", tt.target, tt.body, user)
		}
		if v != Refuse {
			t.Errorf("POST %s %q: %v, want refuse: the handler tries account victim a second time in the minute", tt.target, tt.body, v)
		}
	}
}

// A handler that reads r.FormValue takes a field from the query string
// when the body has none: the key must read it there too, or a client
// could name its account in the URL past the per-account limit. A field
// in the body comes first, as it does for FormValue.
func TestFormKeyFromQueryString(t *testing.T) {
	e := newTestEnforcer(t, `
policies:
  - name: login
    match: "POST /login"
    key: form:username
    limits: ["1/m burst 1"]
`)
	login := func(target, body string) (Verdict, string) {
		r := httptest.NewRequest("POST", target, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
		out.Done()
		return out.Verdict, r.FormValue("username")
	}
	if v, _ := login("/login", "username=victim&password=a"); v != Allow {
		t.Fatalf("first login: %v, want allow", v)
	}
	for _, tt := range []struct{ target, body string }{
		{"/login?username=victim", "password=b"},
		{"/login?username=victim", ""},
		{"/login?username=someone-else", "username=victim&password=c"},
	} {
		v, user := login(tt.target, tt.body)
		if user != "victim" {
			t.Fatalf("POST %s %q: the handler sees username %q, want victim", tt.target, tt.body, user)
		}
		if v != Refuse {
			t.Errorf("POST %s %q: %v, want refuse: the handler tries account victim a second time in the minute", tt.target, tt.body, v)
		}
	}
}
