package httplimit

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func exampleEnv(t *testing.T) *env {
	t.Helper()
	data, err := os.ReadFile("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, string(data), Options{}, nil)
}

// violated wants r refused, its problem's violated-policies listing want,
// the names of the limits that refused as RateLimit-Policy names them: the
// first of them is the field's item.
func violated(t *testing.T, e *env, r req, want string) {
	t.Helper()
	w := e.do(r)
	if w.Code != 429 || !strings.Contains(w.Body.String(), `"violated-policies":[`+want+`]`) {
		t.Errorf("%+v: %d %s, want 429 violating %s", r, w.Code, w.Body, want)
	}
	first, _, _ := strings.Cut(want, ",")
	if p := w.Header().Get("RateLimit-Policy"); !strings.HasPrefix(p, first+";") {
		t.Errorf("%+v: RateLimit-Policy %q, want the item of %s, the first violated", r, p, first)
	}
}

// Anonymous clients are keyed by address and stricter than authenticated
// users, who are keyed by user and limited by plan.
func TestExampleAnonymousAndAuthenticated(t *testing.T) {
	e := exampleEnv(t)
	ip := "203.0.113.7:1"
	for i := range 10 {
		expect(t, fmt.Sprint("anonymous ", i), e.do(req{remote: ip}), 200, nil, nil)
	}
	violated(t, e, req{remote: ip}, `"anonymous.1"`) // of 5/s burst 10 and 1000/d
	// The same address, signed in: a free user gets a burst of 40.
	for i := range 40 {
		expect(t, fmt.Sprint("free user ", i), e.do(req{remote: ip, user: "u1"}), 200, nil, nil)
	}
	violated(t, e, req{remote: ip, user: "u1"}, `"authenticated"`)
	// Another user is not affected by u1, wherever they connect from.
	expect(t, "u2", e.do(req{remote: ip, user: "u2"}), 200, nil, nil)
	// A pro user, by API key, gets a burst of 400.
	pro := req{remote: ip, user: "u3", header: map[string]string{"X-API-Key": "pk_live_acme"}}
	for i := range 400 {
		if w := e.do(pro); w.Code != 200 {
			t.Fatalf("pro request %d: %d %s", i, w.Code, w.Body)
		}
	}
	violated(t, e, pro, `"authenticated"`)
}

// Search is stricter than the API as a whole.
func TestExampleSearchIsStricter(t *testing.T) {
	e := exampleEnv(t)
	for i := range 5 {
		expect(t, fmt.Sprint("search ", i), e.do(req{path: "/search?q=x"}), 200, nil, nil)
	}
	violated(t, e, req{path: "/search?q=x"}, `"expensive"`)
	expect(t, "elsewhere", e.do(req{path: "/items"}), 200, nil, nil)
}

// Login is limited per account across many addresses, and per address
// across many accounts.
func TestExampleLogin(t *testing.T) {
	e := exampleEnv(t)
	login := func(user, ip string) req {
		return req{method: "POST", path: "/login", remote: ip + ":1", body: "username=" + user + "&password=guess"}
	}
	for i := range 5 {
		expect(t, fmt.Sprint("alice from address ", i), e.do(login("alice", fmt.Sprintf("198.51.100.%d", i))), 200, nil, nil)
	}
	violated(t, e, login("alice", "198.51.100.200"), `"login"`)
	for i := range 5 {
		expect(t, fmt.Sprint("account ", i), e.do(login(fmt.Sprintf("user%d", i), "192.0.2.1")), 200, nil, nil)
	}
	violated(t, e, login("bob", "192.0.2.1"), `"login"`)
	// Bob from elsewhere is fine: the address was refused, not Bob.
	expect(t, "bob elsewhere", e.do(login("bob", "192.0.2.2")), 200, nil, nil)
}

// The partner's key has its own monthly quota, named in the file.
func TestExamplePartnerOverride(t *testing.T) {
	e := exampleEnv(t)
	e.do(req{user: "acme", header: map[string]string{"X-API-Key": "pk_live_acme"}})
	e.do(req{user: "other", header: map[string]string{"X-API-Key": "pk_live_other"}})
	var quotas []int64
	for _, ev := range e.observer.events {
		if ev.Policy.Name == "partner-quota" {
			quotas = append(quotas, ev.Decision.Limit)
		}
	}
	if fmt.Sprint(quotas) != "[1000000 10000]" {
		t.Errorf("monthly quotas %v, want [1000000 10000]", quotas)
	}
}

// A partner calling with its API key alone has no user, so the anonymous
// policy matches it too: its monthly quota is reachable only if anonymous
// leaves listed keys to partner-quota. At one request a second from one
// address, the partner passes the 1000 a day the address would be allowed
// without a key, while a client there without a key, or with one no plan
// lists, is still held to that address's limits.
func TestExamplePartnerWithoutUser(t *testing.T) {
	e := exampleEnv(t)
	ip := "203.0.113.7:1"
	partner := req{remote: ip, header: map[string]string{"X-API-Key": "pk_live_acme"}}
	anonymous := req{remote: ip}
	for i := range 1500 {
		if w := e.do(partner); w.Code != 200 {
			t.Fatalf("partner request %d: %d %s, want 200 (its 1000000/month)", i, w.Code, w.Body)
		}
		if i < 1000 {
			if w := e.do(anonymous); w.Code != 200 {
				t.Fatalf("anonymous request %d: %d %s, want 200 (of 1000/d)", i, w.Code, w.Body)
			}
		}
		e.clock.Advance(time.Second)
	}
	violated(t, e, anonymous, `"anonymous.2"`) // the address's 1000/d, spent by the client without a key
	made := req{remote: ip, header: map[string]string{"X-API-Key": "pk_live_made_up"}}
	violated(t, e, made, `"anonymous.2"`)
	// Another address without a key has its own burst of 10.
	other := req{remote: "198.51.100.9:1"}
	for i := range 10 {
		expect(t, fmt.Sprint("other address ", i), e.do(other), 200, nil, nil)
	}
	violated(t, e, other, `"anonymous.1"`)
}
