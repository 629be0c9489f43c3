package rls

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestReferenceConfigFiles loads configuration files written in the
// reference service's format and checks each rule does what its comment
// says.
func TestReferenceConfigFiles(t *testing.T) {
	cfg, err := LoadFiles("testdata/edge.yaml", "testdata/messaging.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, Options{})

	// 20 a minute for each address.
	for range 20 {
		h.ask("edge", desc("remote_address", "10.1.2.3"))
	}
	h.expect(h.ask("edge", desc("remote_address", "10.1.2.3")), over, st{over, 20, minute, 0, 30})
	h.expect(h.ask("edge", desc("remote_address", "10.1.2.4")), ok, st{ok, 20, minute, 19, 30})

	// The blocked address, and the unlimited health checks.
	h.expect(h.ask("edge", desc("remote_address", "50.0.0.5")), over, st{over, 0, second, 0, 1})
	h.expect(h.askHits("edge", 1_000_000, desc("generic_key", "health")), ok, st{code: ok, remain: math.MaxUint32})

	// Searches by prefix, 5 a second per key; other paths share the
	// per-path default, counted per path.
	search := func(path string) *ratelimitv3.RateLimitDescriptor { return desc("api_key", "k1", "path", path) }
	h.expect(h.ask("edge", search("/v1/search?q=a")), ok, st{ok, 5, second, 4, 1})
	h.expect(h.ask("edge", search("/v1/search?q=b")), ok, st{ok, 5, second, 4, 1})
	h.expect(h.ask("edge", search("/v1/items")), ok, st{ok, 100, minute, 99, 30})

	// Downloads share one budget.
	h.expect(h.askHits("edge", 600, desc("path", "/files/a.pdf")), ok, st{ok, 1000, hour, 400, 3570})
	h.expect(h.askHits("edge", 500, desc("path", "/files/b.csv")), over, st{over, 1000, hour, 0, 3570})

	// The trial quota is in shadow mode: over it, and OK.
	for range 3 {
		h.ask("edge", desc("plan", "trial"))
	}
	h.takeEvents()
	h.expect(h.ask("edge", desc("plan", "trial")), ok, st{ok, 3, day, 0, 50370})
	if ev := h.takeEvents(); len(ev) != 1 || !ev[0].Over || !ev[0].Shadow {
		t.Errorf("trial events %+v", ev)
	}

	// The partner's limit replaces the per-path default it names.
	resp := h.ask("edge", search("/v1/items"), desc("partner", "acme", "path", "/v1/items"))
	h.expect(resp, ok, st{code: ok}, st{ok, 1000, minute, 999, 30})
	// Without the partner, the per-path default applies, untouched.
	h.expect(h.ask("edge", search("/v1/items")), ok, st{ok, 100, minute, 98, 30})

	// The README's example 2: marketing messages to a number, 5 a day, and
	// any messages to it, 100 a day, in one request.
	for i := range 5 {
		resp := h.ask("messaging", desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111"))
		h.expect(resp, ok, st{ok, 5, day, uint32(4 - i), 50370}, st{ok, 100, day, uint32(99 - i), 50370})
	}
	resp = h.ask("messaging", desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111"))
	h.expect(resp, over, st{over, 5, day, 0, 50370}, st{ok, 100, day, 94, 50370})
	h.expect(h.ask("messaging", desc("message_type", "marketing", "to_number", "2062222222")), ok, st{ok, 5, day, 4, 50370})
}

func TestStoreKeys(t *testing.T) {
	entries := func(kv ...string) []*ratelimitv3.RateLimitDescriptor_Entry { return desc(kv...).GetEntries() }
	got := storeKey("edge", entries("remote_address", "10.0.0.1", "path", "/v1/a b"), nil, "fixed_window_20_per_1m0s")
	if want := "rls:edge:remote_address=10.0.0.1|path=/v1/a%20b:fixed_window_20_per_1m0s"; got != want {
		t.Errorf("key %q, want %q", got, want)
	}
	got = storeKey("edge", entries("path", "/files/a"), []*node{{wildcard: true, prefix: "/files/"}}, "id")
	if want := "rls:edge:path*=/files/:id"; got != want {
		t.Errorf("shared key %q, want %q", got, want)
	}
	// A wildcard key's pattern is kept apart from a wildcard value's.
	got = storeKey("edge", entries("path", "/files/a"), []*node{{wildcard: true, anyKey: true, prefix: "/files/"}}, "id")
	if want := "rls:edge:path**=/files/:id"; got != want {
		t.Errorf("shared key of a wildcard key %q, want %q", got, want)
	}

	// Descriptors that differ never share a key, however their values
	// are made to look like the separators.
	distinct := [][]string{
		{"a", "b|c=d"},
		{"a", "b", "c", "d"},
		{"a", "b:c"},
		{"a", "b%7Cc=d"},
		{"a=b", "c"},
		{"a", "b=c"},
		{"a", "{tag}"},
		{"a", strings.Repeat("x", 65)},
		{"a", strings.Repeat("x", 65) + "y"},
		{"a", strings.Repeat("x", 64)},
	}
	seen := map[string][]string{}
	for _, kv := range distinct {
		k := storeKey("d", entries(kv...), nil, "id")
		if prev, dup := seen[k]; dup {
			t.Errorf("%q and %q share the key %q", prev, kv, k)
		}
		seen[k] = kv
		if strings.ContainsAny(k, "{}") {
			t.Errorf("key %q holds a hash tag brace from a client", k)
		}
	}

	// Client values are bounded: a long value is hashed, and so is a long
	// path of entries.
	long := storeKey("d", entries("a", strings.Repeat("v", 10_000)), nil, "id")
	if len(long) > 100 {
		t.Errorf("key for a 10kB value is %d bytes", len(long))
	}
	var kv []string
	for range 100 {
		kv = append(kv, "key", strings.Repeat("v", 60))
	}
	if k := storeKey("d", entries(kv...), nil, "id"); len(k) > maxKey {
		t.Errorf("key for 100 entries is %d bytes", len(k))
	}
}

func TestStatKeys(t *testing.T) {
	cfg := parse(t, `domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: c
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: e
    value: x*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: f
    value: exact
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: g
    value: pre*
    share_threshold: true
    descriptors:
      - key: h
        value_to_metric: true
        descriptors:
          - key: i
            detailed_metric: true
            rate_limit: {unit: second, requests_per_unit: 1}
  - key: j
    value: pre*
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	for _, tt := range []struct {
		d    *ratelimitv3.RateLimitDescriptor
		want string
	}{
		{desc("a", "1", "b", "2"), "d.a_1.b_2"},
		{desc("c", "3"), "d.c_3"},
		{desc("e", "xyz"), "d.e_x*"},
		{desc("f", "exact"), "d.f_exact"},
		// A shared wildcard keeps its pattern, even under detailed_metric.
		{desc("g", "prefix1", "h", "v", "i", "w"), "d.g_pre*.h_v.i_w"},
		{desc("j", "prefix2"), "d.j_prefix2"},
		// detailed_metric writes key_value for every entry, an empty
		// value included, as the reference does.
		{desc("k", ""), "d.k_"},
		{desc("c", ""), "d.c"},
	} {
		m, ok, err := cfg.lookup("d", tt.d, false)
		if err != nil || !ok {
			t.Fatalf("%v: no match (%v)", tt.d, err)
		}
		if m.stat != tt.want {
			t.Errorf("%v: stat %q, want %q", tt.d, m.stat, tt.want)
		}
	}
}

// TestCountingModeMatchesReferenceModel checks the default mode against a
// model of the reference's fixed window (redis/fixed_cache_impl.go with its
// defaults, limiter/base_limiter.go): per descriptor and window aligned to
// the epoch, the count grows by every request's hits, refused or not; a
// descriptor is OVER_LIMIT when its count is above the limit, with 0
// remaining, else OK with the limit less the count; the reset is the
// unit less now%unit, in whole seconds. The requests are random, of one
// to three descriptors (the same one may repeat), with shadow mode, a zero
// limit, checks of 0 hits and more hits than a limit holds.
func TestCountingModeMatchesReferenceModel(t *testing.T) {
	const cfgText = `domain: m
descriptors:
  - key: u
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: z
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
`
	h := newHarness(t, parse(t, cfgText), Options{})
	limits := map[string]uint32{"u": 5, "z": 0, "s": 3}
	units := map[string]int64{"u": 1, "z": 1, "s": 60}
	counts := map[string]uint64{} // key+window → count
	seed := uint64(12345)
	rnd := func(n uint64) uint64 {
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return seed % n
	}
	keys := []string{"u", "z", "s"}
	for step := range 3000 {
		if rnd(4) == 0 {
			h.clock.Advance(time.Duration(rnd(700)) * time.Millisecond)
		}
		n := 1 + int(rnd(3))
		var descs []*ratelimitv3.RateLimitDescriptor
		var want []st
		overall := ok
		now := h.clock.Now().Unix()
		for range n {
			k := keys[rnd(3)]
			v := []string{"a", "b"}[rnd(2)]
			d := desc(k, v)
			hits := uint64(1)
			switch rnd(4) {
			case 0:
				hits = 0
				d = withHits(d, 0)
			case 1:
				hits = rnd(8)
				d = withHits(d, hits)
			}
			descs = append(descs, d)
			lim, unit := limits[k], units[k]
			ck := fmt.Sprintf("%s=%s@%d", k, v, now/unit)
			counts[ck] += hits
			w := st{ok, lim, map[int64]rlsv3.RateLimitResponse_RateLimit_Unit{1: second, 60: minute}[unit], 0, unit - now%unit}
			if counts[ck] > uint64(lim) {
				if k != "s" {
					w.code, overall = over, over
				}
			} else {
				w.remain = lim - uint32(counts[ck])
			}
			want = append(want, w)
		}
		resp := h.ask("m", descs...)
		if resp.GetOverallCode() != overall {
			t.Fatalf("step %d: overall %v, want %v", step, resp.GetOverallCode(), overall)
		}
		for i, w := range want {
			if got := statusOf(resp.GetStatuses()[i]); got != w {
				t.Fatalf("step %d status %d (%v): %+v, want %+v", step, i, descs[i], got, w)
			}
		}
	}
}
