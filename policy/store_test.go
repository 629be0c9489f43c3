package policy

import (
	"context"
	"errors"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store/memory"
)

func TestStoreSection(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want StoreConfig
	}{
		{"none", "", StoreConfig{}},
		{"redis", "store: {redis: \"redis://127.0.0.1:6379/0\", timeout: 80ms, deny_cache: false}\n",
			StoreConfig{Redis: "redis://127.0.0.1:6379/0", Timeout: 80 * time.Millisecond, NoDenyCache: true}},
		{"cluster", "store: {cluster: [\"10.0.0.1:6379\", \"10.0.0.2:6379\"]}\n",
			StoreConfig{Cluster: []string{"10.0.0.1:6379", "10.0.0.2:6379"}}},
		{"sentinel", "store: {sentinel: {master: mymaster, addrs: [\"10.0.0.1:26379\"]}}\n",
			StoreConfig{SentinelMaster: "mymaster", SentinelAddrs: []string{"10.0.0.1:26379"}}},
		{"memory", "store: {max_keys: 10_000}\n", StoreConfig{MaxKeys: 10000}},
		{"redis and max_keys", "store: {redis: \"redis://x\", max_keys: 5}\n", StoreConfig{Redis: "redis://x", MaxKeys: 5}},
	}
	for _, tt := range tests {
		set, err := Load("f.yaml", []byte(tt.yaml+"policies: [{name: a, limits: [\"1/s\"]}]\n"))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := set.Store(); !got.Equal(tt.want) {
			t.Errorf("%s: Store() = %+v, want %+v", tt.name, got, tt.want)
		}
		if set.Store().IsRedis() != (tt.name != "none" && tt.name != "memory") {
			t.Errorf("%s: IsRedis = %v", tt.name, set.Store().IsRedis())
		}
	}
}

func TestStoreSectionErrors(t *testing.T) {
	tests := []struct {
		yaml      string
		line, col int
		want      string
	}{
		{"store: {redis: \"http://x\"}\n", 1, 16, "want a redis://"},
		// rueidis reads an addr= without a port as the URL's own host on
		// 6379: the seed written would never be dialled.
		{"store: {redis: \"redis://a:7000?addr=c\"}\n", 1, 16, `addr="c" needs a port`},
		{"store: {redis: \"redis://a:7000?addr=c:7001&addr=d\"}\n", 1, 16, `addr="d" needs a port`},
		{"store: {redis: \"redis://a:7000?addr=[::1]\"}\n", 1, 16, `as in addr=[::1]:6379`},
		{"store: {redis: \"redis://x\", cluster: [\"a:1\"]}\n", 1, 1, "more than one"},
		{"store: {cluster: [\"10.0.0.1\"]}\n", 1, 19, `"10.0.0.1" is not host:port`},
		{"store: {sentinel: {master: m}}\n", 1, 19, "needs master"},
		{"store: {timeout: soon}\n", 1, 18, "duration"},
		{"store: {redis: \"redis://x\", deny_cach: true}\n", 1, 29, `did you mean "deny_cache"`},
		{"store: {max_keys: 0}\n", 1, 19, "between 1 and"},
		{"store: {max_keys: lots}\n", 1, 19, "whole number"},
	}
	for _, tt := range tests {
		_, err := Load("f.yaml", []byte(tt.yaml+"policies: [{name: a, limits: [\"1/s\"]}]\n"))
		var perr *Error
		if !errors.As(err, &perr) {
			t.Fatalf("%q: Load = %v, want an *Error", tt.yaml, err)
		}
		p := perr.Problems[0]
		if p.Line != tt.line || p.Column != tt.col || !strings.Contains(p.Message, tt.want) {
			t.Errorf("%q: %v, want %d:%d and %q", tt.yaml, p, tt.line, tt.col, tt.want)
		}
	}
}

type keyRecorder struct{ events []Event }

func (r *keyRecorder) Observe(_ context.Context, e Event) { r.events = append(r.events, e) }
func (r *keyRecorder) Shed(context.Context, Priority)     {}

// An Event names the key that refused: with two keys, the one over its
// limit, whichever comes first.
func TestEventKeyIsTheRefusingOne(t *testing.T) {
	set, err := Load("f.yaml", []byte(`
policies:
  - name: login
    keys: ["header:X-User", ip]
    limits: ["2/m"]
`))
	if err != nil {
		t.Fatal(err)
	}
	rec := &keyRecorder{}
	e := NewEnforcer(set, memory.New(memory.Options{}), Options{Observer: rec})
	try := func(user string) Verdict {
		r := httptest.NewRequest("POST", "/login", nil)
		r.Header.Set("X-User", user)
		out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header, Client: netip.MustParsePrefix("192.0.2.1/32")})
		out.Done()
		return out.Verdict
	}
	// Two users from one address: the address runs out first.
	got := []Verdict{try("ann"), try("bob"), try("cid")}
	if !slices.Equal(got, []Verdict{Allow, Allow, Refuse}) {
		t.Fatalf("verdicts %v", got)
	}
	last := rec.events[len(rec.events)-1]
	if last.Decision.Allowed || !strings.HasSuffix(untag(last.Key), "ip=192.0.2.1") {
		t.Errorf("refusal reported with key %q (allowed %v), want the ip key", last.Key, last.Decision.Allowed)
	}
}
