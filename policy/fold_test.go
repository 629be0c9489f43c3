package policy

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// loginPerAccount allows two logins a minute per account, keyed by the
// form field username; FOLD is fold_key's value.
const loginPerAccount = `
policies:
  - name: login
    match: "POST /login"
    key: form:username
    fold_key: FOLD
    limits: ["2/m burst 2"]
`

// An application that looks accounts up ignoring case and surrounding
// space serves these spellings as one account. With fold_key they share
// one counter, and the third attempt in the minute is refused; without
// it (the default) each spelling has its own counter, and a guesser
// spreads its attempts over them.
func TestFoldKeyOneAccount(t *testing.T) {
	spellings := []string{"Victim@Example.com", " victim@example.com", "VICTIM@EXAMPLE.COM"}
	for _, tt := range []struct {
		fold string
		want []Verdict // for each spelling, in turn
	}{
		{"true", []Verdict{Allow, Allow, Refuse}},
		{"false", []Verdict{Allow, Allow, Allow}},
	} {
		e := newTestEnforcer(t, strings.Replace(loginPerAccount, "FOLD", tt.fold, 1))
		for i, user := range spellings {
			v, _ := postForm(e, "/login", url.Values{"username": {user}, "password": {"guess"}}.Encode())
			if v != tt.want[i] {
				t.Errorf("fold_key: %s, attempt %d as %q: %v, want %v", tt.fold, i+1, user, v, tt.want[i])
			}
		}
	}
}

// fold_key folds the user, header: and path: parts as it does form:
// ones, and leaves ip and method as they are (grouped, upper-cased).
func TestFoldKeyParts(t *testing.T) {
	e := newTestEnforcer(t, `
policies:
  - name: per-user
    match: {path: "/u/{name}/", authenticated: true}
    keys: [user, "header:x-account", "path:name", [method, ip]]
    fold_key: true
    limits: ["1/m burst 1"]
`)
	type step struct {
		user, account, path, method, client string
		want                                Verdict
	}
	for i, s := range []step{
		{"Alice", "Bob", "/u/Carol/", "GET", "192.0.2.1", Allow},
		// Each folded part names the same key as before.
		{"alice ", "x1", "/u/x1/", "POST", "192.0.2.2", Refuse},
		{"x2", " BOB", "/u/x2/", "PUT", "192.0.2.3", Refuse},
		{"x3", "x3", "/u/%20CAROL/", "PATCH", "192.0.2.4", Refuse},
		// method and ip are parts of one key: get is GET, as before.
		{"x4", "x4", "/u/x4/", "get", "192.0.2.1", Refuse},
		{"x5", "x5", "/u/x5/", "DELETE", "192.0.2.5", Allow},
	} {
		r := httptest.NewRequest(s.method, s.path, nil)
		r.Header.Set("X-Account", s.account)
		out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header, User: s.user, Client: netip.MustParsePrefix(s.client + "/32")})
		out.Done()
		if out.Verdict != s.want {
			t.Errorf("step %d %+v: %v, want %v", i+1, s, out.Verdict, s.want)
		}
	}
}

// An override's value is folded as requests' values are, so it applies
// to the account whatever the spelling in the file or in the request.
func TestFoldKeyOverride(t *testing.T) {
	e := newTestEnforcer(t, `
policies:
  - name: login
    match: "POST /login"
    key: form:username
    fold_key: true
    limits: ["1/m burst 1"]
    overrides:
      - when: {form:username: Partner@Example.com}
        limits: ["3/m burst 3"]
`)
	for i, s := range []struct {
		user string
		want Verdict
	}{
		{"partner@example.com", Allow},
		{"PARTNER@example.com", Allow},
		{"partner@example.com ", Allow},
		{"partner@example.com", Refuse},
		{"other@example.com", Allow},
		{"Other@Example.com", Refuse},
	} {
		v, _ := postForm(e, "/login", url.Values{"username": {s.user}}.Encode())
		if v != s.want {
			t.Errorf("step %d, %q: %v, want %v", i+1, s.user, v, s.want)
		}
	}
}

// foldValue trims white space and lower-cases, Unicode letters included,
// and allocates only for a value it changes.
func TestFoldValue(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"victim@example.com", "victim@example.com"},
		{"Victim@Example.COM", "victim@example.com"},
		{" \tvictim@example.com\r\n", "victim@example.com"},
		{"\u00a0ÉLODIE\u2003", "élodie"},
		{"élodie", "élodie"},
		{"a b", "a b"},
		{"   ", ""},
	} {
		if got := foldValue(tt.in); got != tt.want {
			t.Errorf("foldValue(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	var sink string
	for _, v := range []string{"victim@example.com", "élodie"} {
		if n := testing.AllocsPerRun(100, func() { sink = foldValue(v) }); n != 0 {
			t.Errorf("foldValue(%q) allocates %v times, want 0", v, n)
		}
	}
	_ = sink
}

// fold_key on a policy whose keys have no part it folds is a warning.
func TestFoldKeyWithoutFoldablePart(t *testing.T) {
	set, err := Load("f.yaml", []byte(`
policies:
  - name: a
    key: [ip, method]
    fold_key: true
    limits: ["10/s"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if w := set.Warnings(); len(w) != 1 || w[0].Line != 5 || !strings.Contains(w[0].Message, `fold_key of policy "a" has no effect`) {
		t.Errorf("warnings:\n%s", lines(w))
	}
}
