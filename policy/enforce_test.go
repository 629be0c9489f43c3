package policy

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
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

// send decides a request of method to target with body, of Content-Type
// ct, as a server does before its handler, and returns the verdict and
// the request the handler then gets.
func send(e *Enforcer, method, target, ct string, body []byte) (Verdict, *http.Request) {
	r := httptest.NewRequest(method, target, bytes.NewReader(body))
	r.Header.Set("Content-Type", ct)
	out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
	out.Done()
	return out.Verdict, r
}

// postForm is send of a url-encoded form.
func postForm(e *Enforcer, target, body string) (Verdict, *http.Request) {
	return send(e, "POST", target, "application/x-www-form-urlencoded", []byte(body))
}

// A login keyed by account must be keyed by the account the handler
// sees, wherever the handler reads it from: a client that writes its
// login so that the key misses the account slips past the per-account
// limit. Each case is the second attempt on account victim in the
// minute, after a plain one.
func TestFormKeySeesTheHandlersAccount(t *testing.T) {
	for _, tt := range []struct {
		name, target, body string
		// read is how the handler reads the account.
		read func(r *http.Request) string
	}{
		// net/http keeps every well-formed field in PostForm when a
		// field is malformed (a bad escape, a semicolon).
		{"bad escape in the body", "/login", "username=victim&password=b&x=%zz", viaPostFormValue},
		{"semicolon in the body", "/login", "username=victim&password=c&x=1;2", viaPostFormValue},
		{"bad escape in the query", "/login?%zz", "username=victim&password=d", viaPostFormValue},
		// FormValue falls back to the query string. (A field in both is
		// given twice: see TestFormFieldGivenTwice.)
		{"account in the query", "/login?username=victim", "password=b", viaFormValue},
		{"account in the query, no body", "/login?username=victim", "", viaFormValue},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnforcer(t, loginByAccount)
			login := func(target, body string) (Verdict, string) {
				v, r := postForm(e, target, body)
				return v, tt.read(r)
			}
			if v, _ := login("/login", "username=victim&password=a"); v != Allow {
				t.Fatalf("first login: %v, want allow", v)
			}
			v, user := login(tt.target, tt.body)
			if user != "victim" {
				t.Fatalf("POST %s %q: the handler sees username %q, want victim", tt.target, tt.body, user)
			}
			if v != Refuse {
				t.Errorf("POST %s %q: %v, want refuse: the handler tries account victim a second time in the minute", tt.target, tt.body, v)
			}
		})
	}
}

func viaPostFormValue(r *http.Request) string { return r.PostFormValue("username") }
func viaFormValue(r *http.Request) string     { return r.FormValue("username") }

// downStore is a store that fails every call.
type downStore struct{}

func (downStore) Decide(context.Context, rate.Request) (rate.Decision, error) {
	return rate.Decision{}, errors.New("store down")
}

func (downStore) DecideAll(context.Context, []rate.Request, []rate.Decision) (rate.Decision, error) {
	return rate.Decision{}, errors.New("store down")
}

// A leaky_bucket shapes requests whether the shared store or the local
// fallback decides them: each waits its turn, rather than passing at
// once with its turn still ahead.
func TestLocalFallbackWaitsLeakyBucketTurn(t *testing.T) {
	set, err := Load("test.yaml", []byte(`
policies:
  - name: shaped
    limits: ["leaky_bucket 1/s burst 5"]
    max_delay: 10s
    on_store_error: local
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		store func(rate.Clock) sluice.Store
	}{
		{"store", func(c rate.Clock) sluice.Store { return memory.New(memory.Options{Clock: c}) }},
		{"local fallback", func(rate.Clock) sluice.Store { return downStore{} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			e := NewEnforcer(set, tt.store(clock), Options{Clock: clock})
			for i, want := range []time.Duration{0, time.Second, time.Second} {
				r := httptest.NewRequest("GET", "/", nil)
				out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
				out.Done()
				if out.Verdict != Allow || out.Waited != want {
					t.Errorf("request %d: %v after waiting %v, want allow after %v", i+1, out.Verdict, out.Waited, want)
				}
			}
		})
	}
}

// A plan the application assigns that plans.names does not list ("Pro"
// for pro, a plan added to billing but not yet to the file) is the
// default plan, as a plan header naming no plan is: it must not leave
// the request unlimited by a policy whose limits are all per plan.
func TestUnknownAssignedPlanIsDefault(t *testing.T) {
	e := newTestEnforcer(t, `
plans:
  names: [free, pro]
  default: free
policies:
  - name: api
    plans:
      free: ["1/m"]
      pro: ["100/m"]
`)
	for _, plan := range []string{"Pro", "enterprise"} {
		t.Run(plan, func(t *testing.T) {
			var got []Verdict
			for range 2 {
				r := httptest.NewRequest("GET", "/", nil)
				out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header, Plan: plan,
					Client: netip.MustParsePrefix("192.0.2." + strconv.Itoa(len(plan)) + "/32")})
				out.Done()
				got = append(got, out.Verdict)
			}
			if !slices.Equal(got, []Verdict{Allow, Refuse}) {
				t.Errorf("plan %q, two requests a minute: %v, want [allow refuse] (the free plan's 1/m)", plan, got)
			}
		})
	}
}
