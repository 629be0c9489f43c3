package policy

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// A form field named as Rails and PHP name a nested one (user[email])
// keys a policy as any other: its name is no header token, but a form's
// names are whatever its page wrote.
func TestFormKeyBracketedName(t *testing.T) {
	decide := keysOf(t, `
policies:
  - name: login
    match: "POST /session"
    key: "form:user[email]"
    limits: ["1/m burst 1"]
`)
	login := func(email string) (Verdict, string) {
		body := url.Values{"user[email]": {email}, "user[password]": {"x"}}.Encode()
		r := httptest.NewRequest("POST", "/session", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		v, keys := decide(&Request{HTTP: r, Header: r.Header})
		return v, keys["login"]
	}
	v, key := login("a@example.com")
	if v != Allow || !strings.HasSuffix(key, ":form:user[email]=a@example.com") {
		t.Fatalf("first login: %v, key %q; want allow, keyed by the field's value", v, key)
	}
	if v, _ := login("a@example.com"); v != Refuse {
		t.Errorf("second login of one account: %v, want refuse", v)
	}
	if v, _ := login("b@example.com"); v != Allow {
		t.Errorf("another account: %v, want allow", v)
	}
}

// Brackets are a form field's alone: a header's name, or a wildcard's, is
// a token, and one with brackets would never match; it is refused.
func TestBracketedNameRefusedOutsideForms(t *testing.T) {
	for _, key := range []string{"header:x[y]", "path:id[0]"} {
		_, err := Load("test.yaml", []byte(`
policies:
  - name: p
    match: "GET /items/{id}"
    key: "`+key+`"
    limits: ["1/s"]
`))
		if err == nil || !strings.Contains(err.Error(), "invalid name") {
			t.Errorf("key %s: %v, want an invalid name refused", key, err)
		}
	}
}
