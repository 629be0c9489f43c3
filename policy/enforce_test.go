package policy

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
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

// generation loads config as one generation of a reloaded configuration:
// an Enforcer on st, which every generation shares, as sluice serve
// shares its store.
func generation(t *testing.T, config string, st sluice.Store, clock rate.Clock, o Options) *Enforcer {
	t.Helper()
	set, err := Load("test.yaml", []byte(config))
	if err != nil {
		t.Fatal(err)
	}
	o.Clock = clock
	return NewEnforcer(set, st, o)
}

// sendFrom decides one request of method to target from client, with
// header fields given as name, value pairs, and returns its verdict.
func sendFrom(e *Enforcer, method, target, client string, header ...string) Verdict {
	r := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header, Client: netip.MustParsePrefix(client + "/32")})
	out.Done()
	return out.Verdict
}

// A reload that changes a window limit's count keeps what the window has
// admitted: a monthly quota raised from 3 to 4 after 3 were used has one
// left for the month, not 4 (lowering 10000 to 5000 after 9000 must not
// grant 5000 more). A bucket's state is measured in its rate and burst,
// so a changed bucket starts afresh; so does a renamed policy, whose name
// is in its keys.
func TestReloadKeepsWindowUsage(t *testing.T) {
	const quota = `
policies:
  - name: partner-quota
    key: header:x-api-key
    limits: ["LIMIT"]
`
	for _, tt := range []struct {
		what        string
		before      string // 3 requests pass under it
		after, name string
		passed      int // of 4 requests after the reload
	}{
		{"monthly quota raised", "3/month", "4/month", "partner-quota", 1},
		{"monthly quota lowered", "3/month", "2/month", "partner-quota", 0},
		{"daily quota raised", "3/d", "4/d", "partner-quota", 1},
		{"sliding_window raised", "sliding_window 3/h", "sliding_window 4/h", "partner-quota", 1},
		{"sliding_log raised", "sliding_log 3/h", "sliding_log 4/h", "partner-quota", 1},
		{"window changed", "3/month", "fixed_window 4 per 720h", "partner-quota", 4},
		{"bucket raised", "gcra 3/h", "gcra 4/h", "partner-quota", 4},
		{"token_bucket raised", "token_bucket 3/h", "token_bucket 4/h", "partner-quota", 4},
		{"policy renamed", "3/month", "3/month", "partner-monthly", 3},
	} {
		t.Run(tt.what, func(t *testing.T) {
			clock := ratetest.NewClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
			st := memory.New(memory.Options{Clock: clock})
			old := generation(t, strings.Replace(quota, "LIMIT", tt.before, 1), st, clock, Options{})
			for i := range 3 {
				if v := sendFrom(old, "GET", "/", "192.0.2.1", "X-API-Key", "pk_a"); v != Allow {
					t.Fatalf("request %d before the reload: %v", i+1, v)
				}
			}
			next := generation(t, strings.NewReplacer("LIMIT", tt.after, "partner-quota", tt.name).Replace(quota), st, clock, Options{})
			passed := 0
			for range 4 {
				if sendFrom(next, "GET", "/", "192.0.2.1", "X-API-Key", "pk_a") == Allow {
					passed++
				}
			}
			if passed != tt.passed {
				t.Errorf("%s -> %s: %d of 4 requests passed after the reload, want %d", tt.before, tt.after, passed, tt.passed)
			}
		})
	}
}

// A shadow policy is decided only for requests the enforcing policies let
// through: enforced beside them, all or nothing, it would not have counted
// the others, so reporting them would overstate what it refuses. Here a
// shadow 3/m beside an enforcing 1/m would refuse nothing.
func TestShadowSkipsRefusedRequests(t *testing.T) {
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rec := &keyRecorder{}
	e := generation(t, `
policies:
  - name: api
    limits: ["1/m"]
  - name: trial
    shadow: true
    limits: ["3/m"]
`, memory.New(memory.Options{Clock: clock}), clock, Options{Observer: rec})
	var got []Verdict
	for range 5 {
		got = append(got, sendFrom(e, "GET", "/", "192.0.2.1"))
	}
	if !slices.Equal(got, []Verdict{Allow, Refuse, Refuse, Refuse, Refuse}) {
		t.Fatalf("verdicts %v, want one allowed by api's 1/m", got)
	}
	shadow, refused := 0, 0
	for _, ev := range rec.events {
		if ev.Shadow {
			shadow++
			if !ev.Decision.Allowed {
				refused++
			}
		}
	}
	if shadow != 1 || refused != 0 {
		t.Errorf("shadow policy decided %d requests, refusing %d; want 1 (the one api let through), refusing none", shadow, refused)
	}
}

// An override's value is put in the form its part has in keys: a method
// in upper case (keys count post and POST as one), a path:NAME value in
// lower case under paths.ignore_case. Written otherwise it would load and
// never apply.
func TestOverrideValueInKeyForm(t *testing.T) {
	for _, tt := range []struct {
		what, config, method, target string
	}{
		{"method", `
policies:
  - name: api
    key: [ip, method]
    limits: ["1/m"]
    overrides:
      - when: {method: post, ip: 192.0.2.1}
        limits: ["100/m"]
`, "POST", "/"},
		{"path under ignore_case", `
paths: {ignore_case: true}
policies:
  - name: users
    match: "/users/{name}"
    key: path:name
    limits: ["1/m"]
    overrides:
      - when: {"path:name": Bob}
        limits: ["100/m"]
`, "GET", "/users/BOB"},
	} {
		t.Run(tt.what, func(t *testing.T) {
			clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			e := generation(t, tt.config, memory.New(memory.Options{Clock: clock}), clock, Options{})
			got := []Verdict{sendFrom(e, tt.method, tt.target, "192.0.2.1"), sendFrom(e, tt.method, tt.target, "192.0.2.1")}
			if !slices.Equal(got, []Verdict{Allow, Allow}) {
				t.Errorf("two requests the override names: %v, want [allow allow] (its 100/m)", got)
			}
		})
	}
}

// A method key counts HEAD as GET, as a policy on GET matches HEAD too:
// a client alternating the two has the limit once, not twice. Other
// methods keep counters of their own, and an override on HEAD names GET.
func TestMethodKeyHeadIsGet(t *testing.T) {
	e := newTestEnforcer(t, `
policies:
  - name: api
    key: [ip, method]
    limits: ["2/m"]
    overrides:
      - when: {method: head, ip: 192.0.2.9}
        limits: ["3/m"]
`)
	steps := []struct {
		method, from string
		want         Verdict
	}{
		{"GET", "192.0.2.1", Allow},
		{"HEAD", "192.0.2.1", Allow},
		{"head", "192.0.2.1", Refuse}, // GET's counter: 2 of 2 spent
		{"GET", "192.0.2.1", Refuse},
		{"POST", "192.0.2.1", Allow}, // a counter of its own
		{"GET", "192.0.2.9", Allow},  // the override's 3/m
		{"HEAD", "192.0.2.9", Allow},
		{"GET", "192.0.2.9", Allow},
		{"HEAD", "192.0.2.9", Refuse},
	}
	for i, s := range steps {
		if got := sendFrom(e, s.method, "/", s.from); got != s.want {
			t.Errorf("step %d, %s from %s: %v, want %v", i, s.method, s.from, got, s.want)
		}
	}
}

// A key takes the limits of the first override that names it: a narrower
// override written before a broader one applies to its keys, and the
// broader one to the rest. (The other order is refused at load: the
// narrower one would never apply.)
func TestOverrideFirstMatchWins(t *testing.T) {
	e := newTestEnforcer(t, `
policies:
  - name: api
    key: [ip, header:x-user]
    limits: ["1/m"]
    overrides:
      - when: {ip: 192.0.2.1, "header:x-user": alice}
        limits: ["3/m"]
      - when: {"header:x-user": alice}
        limits: ["2/m"]
`)
	for _, tt := range []struct {
		client, user string
		passed       int // of 4 requests in the minute
	}{
		{"192.0.2.1", "alice", 3},
		{"192.0.2.2", "alice", 2},
		{"192.0.2.1", "bob", 1},
	} {
		passed := 0
		for range 4 {
			if sendFrom(e, "GET", "/", tt.client, "X-User", tt.user) == Allow {
				passed++
			}
		}
		if passed != tt.passed {
			t.Errorf("%s from %s: %d of 4 passed, want %d", tt.user, tt.client, passed, tt.passed)
		}
	}
}

// A shadow policy's refusals are logged at most once a second, each line
// saying how many it left out since the one before: a flood of refusals
// must not flood the log.
func TestShadowRefusalsLoggedOnceASecond(t *testing.T) {
	var buf bytes.Buffer
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	e := generation(t, `
policies:
  - {name: dry, shadow: true, limits: ["1/h"]}
`, memory.New(memory.Options{Clock: clock}), clock, Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n") }
	for range 5 { // 1 passes, 4 would be refused: 1 line, 3 left out
		if v := sendFrom(e, "GET", "/", "192.0.2.1"); v != Allow {
			t.Fatalf("a shadow policy refused: %v", v)
		}
	}
	if l := lines(); len(l) != 1 || !strings.Contains(l[0], "shadow policy would refuse") || !strings.Contains(l[0], "not_logged=0") {
		t.Fatalf("log after 4 refusals in one instant:\n%s\nwant one line, with not_logged=0", buf.String())
	}
	clock.Advance(999 * time.Millisecond)
	sendFrom(e, "GET", "/", "192.0.2.1")
	if l := lines(); len(l) != 1 {
		t.Fatalf("a second line within the second:\n%s", buf.String())
	}
	clock.Advance(time.Millisecond)
	sendFrom(e, "GET", "/", "192.0.2.1")
	if l := lines(); len(l) != 2 || !strings.Contains(l[1], "not_logged=4") {
		t.Fatalf("log a second after the first line:\n%s\nwant a second line, with not_logged=4", buf.String())
	}
}
