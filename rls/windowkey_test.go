package rls

import (
	"fmt"
	"slices"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// overrideOf gives d a limit override of n a unit, as Envoy sends one from
// route metadata.
func overrideOf(d *ratelimitv3.RateLimitDescriptor, n uint32, unit typev3.RateLimitUnit) *ratelimitv3.RateLimitDescriptor {
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
	return d
}

// A window's store key names what its state means, as rate.Limit.StateName
// does: a window's algorithm and period, whatever its count; a bucket's
// whole limit. The default mode's keys stay as they were: a fixed window's
// names its period alone, under a name of its own, and the other
// algorithms' their whole limit.
func TestStoreKeysOfEachMode(t *testing.T) {
	for _, tt := range []struct {
		limit           string
		counted, refuse string
	}{
		{"{unit: minute, requests_per_unit: 20}", "fixed_window_per_1m0s_counted", "fixed_window_per_1m0s"},
		{"{unit: minute, requests_per_unit: 20, unit_multiplier: 5}", "fixed_window_per_5m0s_counted", "fixed_window_per_5m0s"},
		{"{unit: minute, requests_per_unit: 20, algorithm: fixed_window}", "fixed_window_per_1m0s_counted", "fixed_window_per_1m0s"},
		{"{unit: minute, requests_per_unit: 0}", "fixed_window_per_1m0s_counted", "fixed_window_per_1m0s"},
		{"{unit: minute, requests_per_unit: 20, algorithm: sliding_window}", "sliding_window_20_per_1m0s", "sliding_window_per_1m0s"},
		{"{unit: hour, requests_per_unit: 20, algorithm: sliding_log}", "sliding_log_20_per_1h0m0s", "sliding_log_per_1h0m0s"},
		{"{unit: minute, requests_per_unit: 20, algorithm: gcra}", "gcra_20_per_1m0s", "gcra_20_per_1m0s"},
		{"{unit: minute, requests_per_unit: 20, algorithm: gcra, burst: 5}", "gcra_20_per_1m0s_burst_5", "gcra_20_per_1m0s_burst_5"},
		{"{unit: second, requests_per_unit: 20, algorithm: token_bucket, burst: 40}", "token_bucket_20_per_1s_burst_40", "token_bucket_20_per_1s_burst_40"},
	} {
		cfg := parse(t, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: "+tt.limit+"\n")
		for _, mode := range []struct {
			counting bool
			want     string
		}{{true, tt.counted}, {false, tt.refuse}} {
			m, found, err := cfg.lookup("api", desc("user", "a"), mode.counting)
			if err != nil || !found {
				t.Fatalf("%s: lookup: %v, %v", tt.limit, found, err)
			}
			if want := "rls:api:user=a:" + mode.want; m.key != want {
				t.Errorf("%s, counting %v: key %q, want %q", tt.limit, mode.counting, m.key, want)
			}
		}
	}
}

// With RefusedConsumeNothing, a window keeps what it counted when a reload
// lowers its count: a count above the new limit is a full window, not a
// fresh budget. A bucket's state is measured in its rate and burst, so a
// changed bucket starts afresh.
func TestConsumeNothingReloadKeepsAWindowsCount(t *testing.T) {
	cfgOf := func(alg string, n int) *Config {
		return parse(t, fmt.Sprintf("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: %d, algorithm: %s}\n", n, alg))
	}
	for _, alg := range []string{"fixed_window", "sliding_window", "sliding_log"} {
		t.Run(alg, func(t *testing.T) {
			h := newHarness(t, cfgOf(alg, 20), Options{RefusedConsumeNothing: true})
			if code := h.askHits("api", 15, desc("user", "a")).GetOverallCode(); code != ok {
				t.Fatalf("15 of 20: %v", code)
			}
			h.svc.SetConfig(cfgOf(alg, 10))
			if code := h.ask("api", desc("user", "a")).GetOverallCode(); code != over {
				t.Errorf("15 counted, lowered to 10, 1 hit: %v, want OVER_LIMIT", code)
			}
			// Raised again, only the difference passes.
			h.svc.SetConfig(cfgOf(alg, 18))
			if code := h.askHits("api", 3, desc("user", "a")).GetOverallCode(); code != ok {
				t.Errorf("15 counted, raised to 18, 3 hits: %v, want OK", code)
			}
			if code := h.ask("api", desc("user", "a")).GetOverallCode(); code != over {
				t.Errorf("18 counted of 18: %v, want OVER_LIMIT", code)
			}
			// A check spends nothing, and a look is never refused here: it
			// finds nothing left.
			h.svc.SetConfig(cfgOf(alg, 10))
			if s := statusOf(h.ask("api", withHits(desc("user", "a"), 0)).GetStatuses()[0]); s.code != ok || s.remain != 0 {
				t.Errorf("18 counted, lowered to 10, a check: %+v, want OK with 0 left", s)
			}
			if code := h.ask("api", desc("user", "a")).GetOverallCode(); code != over {
				t.Errorf("18 counted, lowered to 10, 1 hit: %v, want OVER_LIMIT", code)
			}
		})
	}
	for _, alg := range []string{"gcra", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			h := newHarness(t, cfgOf(alg, 20), Options{RefusedConsumeNothing: true})
			h.askHits("api", 20, desc("user", "a"))
			if code := h.ask("api", desc("user", "a")).GetOverallCode(); code != over {
				t.Fatalf("an empty bucket: %v, want OVER_LIMIT", code)
			}
			h.svc.SetConfig(cfgOf(alg, 10))
			h.expect(h.ask("api", desc("user", "a")), ok, st{ok, 10, minute, 9, 6})
		})
	}
}

// With RefusedConsumeNothing, an override of the configured limit's unit
// counts in its window, as in the default mode and the reference: it is
// over once the window holds more than it allows, and what it admits the
// configured limit counts too. Refused, it spends nothing.
func TestConsumeNothingOverrideSharesTheWindow(t *testing.T) {
	h := newHarness(t, parse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 20}\n"), Options{RefusedConsumeNothing: true})
	h.expect(h.askHits("d", 18, desc("k", "v")), ok, st{ok, 20, hour, 2, 3570})
	for range 3 {
		h.expect(h.ask("d", overrideOf(desc("k", "v"), 3, typev3.RateLimitUnit_HOUR)), over, st{over, 3, hour, 0, 3570})
	}
	h.expect(h.ask("d", desc("k", "v")), ok, st{ok, 20, hour, 1, 3570})
	h.expect(h.ask("d", overrideOf(desc("k", "v"), 30, typev3.RateLimitUnit_HOUR)), ok, st{ok, 30, hour, 10, 3570})
	h.expect(h.ask("d", desc("k", "v")), over, st{over, 20, hour, 0, 3570})
	// Another unit is another window.
	h.expect(h.ask("d", overrideOf(desc("k", "v"), 3, typev3.RateLimitUnit_MINUTE)), ok, st{ok, 3, minute, 2, 30})
}

// Two descriptors of one request that count in one window under different
// limits (the configured one and an override) spend from one count: the
// request passes only if that count, with every hit of the request on it,
// stays within each limit, and a refused one spends nothing.
func TestConsumeNothingTwoLimitsOfOneWindowInOneRequest(t *testing.T) {
	cfg := parse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 20}\n")
	both := func(value string, configured, overridden uint64) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			withHits(desc("k", value), configured),
			withHits(overrideOf(desc("k", value), 3, typev3.RateLimitUnit_HOUR), overridden),
		}}
	}
	for _, order := range []string{"configured first", "override first"} {
		t.Run(order, func(t *testing.T) {
			h := newHarness(t, cfg, Options{RefusedConsumeNothing: true})
			call := func(value string, configured, overridden uint64) []st {
				t.Helper()
				req := both(value, configured, overridden)
				if order == "override first" {
					req.Descriptors[0], req.Descriptors[1] = req.Descriptors[1], req.Descriptors[0]
				}
				resp, err := h.call(req)
				if err != nil {
					t.Fatal(err)
				}
				var out []st
				for _, s := range resp.GetStatuses() {
					out = append(out, statusOf(s))
				}
				if order == "override first" {
					out[0], out[1] = out[1], out[0]
				}
				return append(out, st{code: resp.GetOverallCode()})
			}
			const value = "v"
			// 1 + 1 of 3: passes, and the override has 1 left.
			if got := call(value, 1, 1); got[2].code != ok || got[1] != (st{ok, 3, hour, 1, 3570}) {
				t.Errorf("1 and 1 hits of 3: %+v, want OK, the override with 1 left", got)
			}
			// 1 + 1 more would make 4 of 3: refused, nothing spent.
			if got := call(value, 1, 1); got[2].code != over || got[1].code != over {
				t.Errorf("1 and 1 more hits of 3: %+v, want the override OVER_LIMIT", got)
			}
			// Hits that can never pass together, though each fits its
			// own limit: over, and nothing spent.
			// The statuses say what is left without the request: of the
			// configured 20, 18; of the override's 3, 1, the 3 + 1 hits
			// being counted together on the window's 2.
			want := []st{{ok, 20, hour, 18, 3570}, {over, 3, hour, 1, 3570}, {code: over}}
			if got := call(value, 3, 1); !slices.Equal(got, want) {
				t.Errorf("3 and 1 hits of 3: %+v, want %+v", got, want)
			}
			h.expect(h.ask("d", overrideOf(desc("k", value), 3, typev3.RateLimitUnit_HOUR)), ok, st{ok, 3, hour, 0, 3570})
			h.expect(h.ask("d", desc("k", value)), ok, st{ok, 20, hour, 16, 3570})
		})
	}
}

// In the default mode a window's count is shared by the limits of its
// unit, but each limit asks for it with room for 2×its limit+1 hits: past
// that, hits it refuses are not counted, where the reference counts them,
// and a larger limit of the window can admit where the reference would
// refuse. Nothing passes beyond the larger limit's count.
func TestCountedOverrideCountsRefusedHitsWithinItsRoom(t *testing.T) {
	h := newHarness(t, parse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 20}\n"), Options{})
	// 18 counted is past 2×3+1: the override's refused hits add nothing,
	// and the configured limit has 1 left (the reference, at 22, is over).
	h.expect(h.askHits("d", 18, desc("k", "v")), ok, st{ok, 20, hour, 2, 3570})
	for range 3 {
		h.expect(h.ask("d", overrideOf(desc("k", "v"), 3, typev3.RateLimitUnit_HOUR)), over, st{over, 3, hour, 0, 3570})
	}
	h.expect(h.ask("d", desc("k", "v")), ok, st{ok, 20, hour, 1, 3570})
	// From 5, the override's refused hits count up to 7, its room: 2 of
	// 3. The reference would be at 8, and refuse 13 more.
	h.expect(h.askHits("d", 5, desc("k", "w")), ok, st{ok, 20, hour, 15, 3570})
	for range 3 {
		h.expect(h.ask("d", overrideOf(desc("k", "w"), 3, typev3.RateLimitUnit_HOUR)), over, st{over, 3, hour, 0, 3570})
	}
	h.expect(h.askHits("d", 13, desc("k", "w")), ok, st{ok, 20, hour, 0, 3570})
	h.expect(h.ask("d", desc("k", "w")), over, st{over, 20, hour, 0, 3570})
}

// Three limits of one window in one request, each with one hit, on an
// empty window: admitted, each reports what is left of it with all three
// hits on the window, 3 of them: 17 of 20, 0 of 3, 7 of 10. Decided
// largest first, the larger ones reported only the hits before theirs.
func TestConsumeNothingThreeLimitsOfOneWindowRemaining(t *testing.T) {
	cfg := parse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 20}\n")
	h := newHarness(t, cfg, Options{RefusedConsumeNothing: true})
	resp, err := h.call(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("k", "v"),
		overrideOf(desc("k", "v"), 3, typev3.RateLimitUnit_HOUR),
		overrideOf(desc("k", "v"), 10, typev3.RateLimitUnit_HOUR),
	}})
	if err != nil {
		t.Fatal(err)
	}
	var got []st
	for _, s := range resp.GetStatuses() {
		got = append(got, statusOf(s))
	}
	want := []st{{ok, 20, hour, 17, 3570}, {ok, 3, hour, 0, 3570}, {ok, 10, hour, 7, 3570}}
	if resp.GetOverallCode() != ok || !slices.Equal(got, want) {
		t.Errorf("%v %+v, want OK %+v", resp.GetOverallCode(), got, want)
	}
}
