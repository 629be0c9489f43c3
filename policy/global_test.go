package policy

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// keyLog is a memory store that records the keys it is asked about.
type keyLog struct {
	*memory.Store
	keys []string
}

func (s *keyLog) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	s.keys = append(s.keys, untag(r.Key))
	return s.Store.Decide(ctx, r)
}

func (s *keyLog) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	for _, r := range reqs {
		s.keys = append(s.keys, untag(r.Key))
	}
	return s.Store.DecideAll(ctx, reqs, out)
}

// globalEnforcer loads config and returns an Enforcer deciding it in a
// keyLog on a fake clock.
func globalEnforcer(t *testing.T, config string) (*Enforcer, *keyLog) {
	t.Helper()
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	st := &keyLog{Store: memory.New(memory.Options{Clock: clock})}
	return generation(t, config, st, clock, Options{}), st
}

// A global key is one counter for every request the policy matches,
// whoever sends it and by whichever transport: the (N+1)th is refused,
// from an address, a user and a transport none of the first N had.
func TestGlobalKeyIsOneCounter(t *testing.T) {
	e, st := globalEnforcer(t, `
policies:
  - name: search
    key: global
    limits: ["3/m"]
`)
	httpReq := func(client, user string) *Request {
		r := httptest.NewRequest("GET", "/search", nil)
		return &Request{HTTP: r, Header: r.Header, Client: netip.MustParsePrefix(client + "/32"), User: user}
	}
	grpcReq := func(client, user string) *Request {
		r := httptest.NewRequest("POST", "/search.v1.Search/Query", nil)
		md := map[string][]string{"x-api-key": {client}}
		return &Request{HTTP: r, Metadata: md, Client: netip.MustParsePrefix(client + "/32"), User: user}
	}
	for i, step := range []struct {
		what string
		req  *Request
		want Verdict
	}{
		{"HTTP, anonymous", httpReq("192.0.2.1", ""), Allow},
		{"HTTP, another address and a user", httpReq("192.0.2.2", "alice"), Allow},
		{"gRPC, another address and user", grpcReq("198.51.100.7", "bob"), Allow},
		{"HTTP, a fourth address and user", httpReq("203.0.113.9", "carol"), Refuse},
		{"gRPC, a fifth address, anonymous", grpcReq("203.0.113.10", ""), Refuse},
	} {
		out := e.Enforce(context.Background(), step.req)
		out.Done()
		if out.Verdict != step.want {
			t.Errorf("step %d, %s: %v, want %v", i+1, step.what, out.Verdict, step.want)
		}
	}
	for _, k := range st.keys {
		if k != "sluice:search:global=" {
			t.Errorf("stored key %q, want sluice:search:global=", k)
		}
	}
	if len(st.keys) != 5 {
		t.Errorf("%d keys decided, want 5: %q", len(st.keys), st.keys)
	}
}

// keys: [global, ip] decides two counters, a total and one per address,
// all or nothing: an address over its own limit is refused while the
// total has room, and a fresh address is refused once the total is
// spent. The override on ip reaches the ip key alone: the total keeps
// the policy's limits.
func TestGlobalBesidePerClient(t *testing.T) {
	e, st := globalEnforcer(t, `
policies:
  - name: search
    match: "GET /search"
    keys: [global, ip]
    limits: ["3/m"]
    overrides:
      - when: {ip: 192.0.2.1}
        limits: ["1/m"]
`)
	for i, step := range []struct {
		client string
		want   Verdict
	}{
		{"192.0.2.1", Allow},
		{"192.0.2.1", Refuse}, // its own 1/m; the total, at 1, unspent
		{"192.0.2.2", Allow},
		{"192.0.2.3", Allow},  // the total at 3
		{"192.0.2.4", Refuse}, // a fresh address, the total spent
	} {
		st.keys = st.keys[:0]
		if got := sendFrom(e, "GET", "/search", step.client); got != step.want {
			t.Errorf("step %d, from %s: %v, want %v", i+1, step.client, got, step.want)
		}
		want := []string{"sluice:search:global=", "sluice:search:ip=" + step.client}
		if !slices.Equal(st.keys, want) {
			t.Errorf("step %d: keys %q, want %q", i+1, st.keys, want)
		}
	}
	if got := sendFrom(e, "GET", "/other", "192.0.2.9"); got != Allow {
		t.Errorf("a request the policy does not match: %v, want allow", got)
	}
}

// The loader refuses what global cannot mean, at the line of the part,
// saying what to write instead.
func TestGlobalKeyRefused(t *testing.T) {
	for _, tt := range []struct {
		name      string
		yaml      string
		line, col int
		want      []string
	}{
		{"combined in key", `
policies:
  - name: search
    key: [ip, global]
    limits: ["1/s"]
`, 4, 15, []string{"global", "adds nothing", "keys: [global, ip]", "drop global"}},
		{"combined in a key of keys", `
policies:
  - name: search
    keys:
      - user
      - [global, method, ip]
    limits: ["1/s"]
`, 6, 10, []string{"adds nothing", "keys: [global, [ip, method]]", "drop global"}},
		{"with an argument", `
policies:
  - name: search
    key: "global:x"
    limits: ["1/s"]
`, 4, 10, []string{`key part "global" takes no argument`}},
		{"override on global", `
policies:
  - name: search
    keys: [global, ip]
    limits: ["1/s"]
    overrides:
      - when: {global: x}
        limits: ["2/s"]
`, 7, 16, []string{"override on global", "every request", "limits"}},
		{"override on global, no global key", `
policies:
  - name: search
    key: ip
    limits: ["1/s"]
    overrides:
      - when: {global: ""}
        limits: ["2/s"]
`, 7, 16, []string{"override on global"}},
		{"misspelt", `
policies:
  - name: search
    key: globl
    limits: ["1/s"]
`, 4, 10, []string{`did you mean "global"?`, "want one of ip, user, method, global, header:NAME"}},
	} {
		t.Run(tt.name, func(t *testing.T) { wantFirstProblem(t, tt.yaml, tt.line, tt.col, tt.want) })
	}
}

// Every request has a global key: a policy keyed by it leaves no request
// unlimited, and limits every request of a policy beside it on the same
// route whose key some requests lack. fold_key has nothing to fold on it.
func TestGlobalKeyWarnings(t *testing.T) {
	for _, tt := range []struct {
		name string
		yaml string
		want []string // each in a warning, in order; none when empty
	}{
		{"alone", `
policies:
  - {name: search, match: "GET /search", key: global, limits: ["1000/s"]}
`, nil},
		{"beside a key some requests lack", `
policies:
  - {name: login-account, match: "POST /login", key: "form:username", limits: ["5/15m"]}
  - {name: login-all, match: "POST /login", key: global, limits: ["100/s"]}
`, nil},
		{"beside user in keys", `
policies:
  - {name: api, keys: [global, user], limits: ["100/s"]}
`, nil},
		{"fold_key", `
policies:
  - {name: search, key: global, fold_key: true, limits: ["1000/s"]}
`, []string{"fold_key of policy \"search\" has no effect"}},
	} {
		set, err := Load("f.yaml", []byte(tt.yaml))
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		var got []string
		for _, w := range set.Warnings() {
			got = append(got, w.Message)
		}
		if len(got) != len(tt.want) {
			t.Errorf("%s: warnings %q, want %d", tt.name, got, len(tt.want))
			continue
		}
		for i := range got {
			if !strings.Contains(got[i], tt.want[i]) {
				t.Errorf("%s: warning %q lacks %q", tt.name, got[i], tt.want[i])
			}
		}
	}
}

// A global key of a policy with limits per plan is a total per plan: the
// pro plan's traffic spends none of the free plan's total, whatever the
// algorithm (a window's stored state would otherwise be shared by every
// plan's limit of its period).
func TestGlobalKeyPerPlan(t *testing.T) {
	for _, alg := range []string{"fixed_window", "sliding_window", "gcra"} {
		e, st := globalEnforcer(t, `
plans: {names: [free, pro], default: free}
policies:
  - name: api
    key: global
    plans:
      free: ["`+alg+` 3 per 1m"]
      pro: ["`+alg+` 100 per 1m"]
`)
		req := func(plan string) *Request {
			r := httptest.NewRequest("GET", "/", nil)
			return &Request{HTTP: r, Header: r.Header, Client: netip.MustParsePrefix("192.0.2.1/32"), Plan: plan}
		}
		for range 5 {
			out := e.Enforce(context.Background(), req("pro"))
			out.Done()
		}
		out := e.Enforce(context.Background(), req("free"))
		out.Done()
		if out.Verdict != Allow {
			t.Errorf("%s: the free plan's first request after 5 of pro: %v, want Allow; keys %q", alg, out.Verdict, st.keys)
		}
		if last := st.keys[len(st.keys)-1]; last != "sluice:api:global=free" {
			t.Errorf("%s: the free plan's key %q, want sluice:api:global=free", alg, last)
		}
	}
}
