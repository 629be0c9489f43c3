package policy

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/store/memory"
)

// overridePolicy returns a policy keyed by ip and header:x-user with n
// overrides, each on one user.
func overridePolicy(n int) string {
	var b strings.Builder
	b.WriteString("policies:\n  - name: api\n    key: [ip, header:x-user]\n    limits: [\"1000000000/s\"]\n")
	if n > 0 {
		b.WriteString("    overrides:\n")
	}
	for i := range n {
		fmt.Fprintf(&b, "      - when: {\"header:x-user\": user%d}\n        limits: [\"%d/s\"]\n", i, 1000+i)
	}
	return b.String()
}

// BenchmarkOverrideLookup decides a request whose key no override names,
// under 0, 1,000 and 10,000 overrides: finding a key's override must not
// scan them.
func BenchmarkOverrideLookup(b *testing.B) {
	for _, n := range []int{0, 1000, 10000} {
		set, err := Load("bench.yaml", []byte(overridePolicy(n)))
		if err != nil {
			b.Fatal(err)
		}
		e := NewEnforcer(set, memory.New(memory.Options{}), Options{})
		b.Run(fmt.Sprintf("overrides=%d", n), func(b *testing.B) {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-User", "nobody")
			req := &Request{HTTP: r, Header: r.Header, Client: netip.MustParsePrefix("192.0.2.1/32")}
			b.ReportAllocs()
			for b.Loop() {
				out := e.Enforce(context.Background(), req)
				out.Done()
			}
		})
	}
}

// BenchmarkOverrideLoad loads a policy of 1,000 and of 10,000 overrides:
// checking that each can apply must not compare it with every earlier one.
func BenchmarkOverrideLoad(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		file := []byte(overridePolicy(n))
		b.Run(fmt.Sprintf("overrides=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := Load("bench.yaml", file); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A key gets the limits of the first override that names it, whichever
// of the key's parts each override names: an override on ip alone,
// written before one on the user alone, wins for a key with both values.
func TestOverrideFirstThatNamesTheKeyWins(t *testing.T) {
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
      - when: {ip: 192.0.2.1}
        limits: ["4/m"]
      - when: {"header:x-user": bob}
        limits: ["5/m"]
      - when: {ip: 192.0.2.2, "header:x-user": carol}
        limits: ["6/m"]
`)
	for _, tt := range []struct {
		client, user string
		passed       int // of 8 requests in the minute
	}{
		{"192.0.2.1", "alice", 3}, // the first names both parts
		{"192.0.2.2", "alice", 2},
		{"192.0.2.1", "bob", 4}, // ip's override comes before bob's
		{"192.0.2.2", "bob", 5},
		{"192.0.2.1", "carol", 4},
		{"192.0.2.2", "carol", 6},
		{"192.0.2.3", "carol", 1}, // carol's override needs its ip too
		{"192.0.2.3", "dave", 1},
	} {
		passed := 0
		for range 8 {
			if sendFrom(e, "GET", "/", tt.client, "X-User", tt.user) == Allow {
				passed++
			}
		}
		if passed != tt.passed {
			t.Errorf("%s from %s: %d of 8 passed, want %d", tt.user, tt.client, passed, tt.passed)
		}
	}
}

// An override applies to each key of a policy that has its parts: keys:
// [ip, header:x-user] limits the two apart, and an override on the user
// applies to the user's key alone.
func TestOverrideAppliesToTheKeyWithItsParts(t *testing.T) {
	e := newTestEnforcer(t, `
policies:
  - name: api
    keys: [ip, header:x-user]
    limits: ["2/m"]
    overrides:
      - when: {"header:x-user": alice}
        limits: ["5/m"]
`)
	passed := 0
	for range 8 {
		if sendFrom(e, "GET", "/", "192.0.2.1", "X-User", "alice") == Allow {
			passed++
		}
	}
	if passed != 2 { // the ip key keeps its 2/m
		t.Errorf("alice from one address: %d of 8 passed, want 2", passed)
	}
	passed = 0
	for i := range 8 {
		if sendFrom(e, "GET", "/", fmt.Sprintf("192.0.2.%d", 10+i), "X-User", "alice") == Allow {
			passed++
		}
	}
	if passed != 3 { // 5/m, 2 of which the first address took
		t.Errorf("alice from fresh addresses: %d of 8 passed, want 3", passed)
	}
}

// A policy of 10,000 overrides loads, each named key gets its own, and
// one that could never apply is still refused, naming the first override
// that makes it so.
func TestTenThousandOverridesLoad(t *testing.T) {
	file := overridePolicy(10000) + `      - when: {"header:x-user": user42, ip: 192.0.2.1}
        limits: ["1/s"]
      - when: {ip: 192.0.2.1}
        limits: ["1/s"]
      - when: {ip: 192.0.2.1, "header:x-user": nobody}
        limits: ["1/s"]
`
	_, err := Load("test.yaml", []byte(file))
	if err == nil {
		t.Fatal("loaded; want the overrides after user42's and ip's refused")
	}
	// Line 6 is user0's override; user42's is 42 overrides, 84 lines, on.
	for _, want := range []string{
		"test.yaml:20006:", "override at line 90",
		"test.yaml:20010:", "override at line 20008",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if n := strings.Count(err.Error(), "never applies"); n != 2 {
		t.Errorf("%d overrides refused, want 2: %v", n, err)
	}

	e := newTestEnforcer(t, strings.ReplaceAll(overridePolicy(10000), `limits: ["1000000000/s"]`, `limits: ["1/m"]`))
	for _, tt := range []struct {
		user   string
		passed int
	}{{"user9999", 3}, {"user0", 3}, {"nobody", 1}} {
		passed := 0
		for range 3 {
			if sendFrom(e, "GET", "/", "192.0.2.1", "X-User", tt.user) == Allow {
				passed++
			}
		}
		if passed != tt.passed {
			t.Errorf("%s: %d of 3 passed, want %d", tt.user, passed, tt.passed)
		}
	}
}
