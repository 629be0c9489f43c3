package rls

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

const perMinute = `domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 20
`

func TestCountsDownThenOverLimit(t *testing.T) {
	h := newHarness(t, parse(t, perMinute), Options{})
	for want := uint32(19); ; want-- {
		resp := h.ask("api", desc("user", "alice"))
		// start is 30s into the minute: the window resets in 30s.
		h.expect(resp, ok, st{ok, 20, minute, want, 30})
		if want == 0 {
			break
		}
	}
	resp := h.ask("api", desc("user", "alice"))
	h.expect(resp, over, st{over, 20, minute, 0, 30})
	if cl := resp.GetStatuses()[0].GetCurrentLimit(); cl.GetRequestsPerUnit() != 20 || cl.GetUnit() != minute {
		t.Fatalf("current_limit %v, want {20, MINUTE}", cl)
	}

	// Time inside the window: the reset counts down, rounded up to whole
	// seconds as the reference reports it.
	h.clock.Advance(10*time.Second + 500*time.Millisecond)
	h.expect(h.ask("api", desc("user", "alice")), over, st{over, 20, minute, 0, 20})

	// Another user has a counter of its own.
	h.expect(h.ask("api", desc("user", "bob")), ok, st{ok, 20, minute, 19, 20})

	// The next window starts afresh, with a whole minute to go.
	h.clock.Advance(19*time.Second + 500*time.Millisecond)
	h.expect(h.ask("api", desc("user", "alice")), ok, st{ok, 20, minute, 19, 60})
}

func TestTwoDescriptorsEachHaveAStatus(t *testing.T) {
	const cfg = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 10}
`
	t.Run("reference: each descriptor on its own", func(t *testing.T) {
		h := newHarness(t, parse(t, cfg), Options{})
		both := func() *rlsv3.RateLimitResponse { return h.ask("api", desc("user", "u"), desc("path", "/p")) }
		h.expect(both(), ok, st{ok, 3, minute, 2, 30}, st{ok, 10, hour, 9, 3570})
		h.expect(both(), ok, st{ok, 3, minute, 1, 30}, st{ok, 10, hour, 8, 3570})
		h.expect(both(), ok, st{ok, 3, minute, 0, 30}, st{ok, 10, hour, 7, 3570})
		// The user is over: the request is over, and, as in the reference,
		// the path's limit still counts it.
		h.expect(both(), over, st{over, 3, minute, 0, 30}, st{ok, 10, hour, 6, 3570})
		h.expect(both(), over, st{over, 3, minute, 0, 30}, st{ok, 10, hour, 5, 3570})
	})
	t.Run("RefusedConsumeNothing: all or nothing", func(t *testing.T) {
		h := newHarness(t, parse(t, cfg), Options{RefusedConsumeNothing: true})
		both := func() *rlsv3.RateLimitResponse { return h.ask("api", desc("user", "u"), desc("path", "/p")) }
		for i := range 3 {
			h.expect(both(), ok, st{ok, 3, minute, uint32(2 - i), 30}, st{ok, 10, hour, uint32(9 - i), 3570})
		}
		// Refused: the path's budget is untouched.
		h.expect(both(), over, st{over, 3, minute, 0, 30}, st{ok, 10, hour, 7, 3570})
		h.expect(both(), over, st{over, 3, minute, 0, 30}, st{ok, 10, hour, 7, 3570})
		h.expect(h.ask("api", desc("path", "/p")), ok, st{ok, 10, hour, 6, 3570})
	})
	t.Run("either descriptor makes the request over", func(t *testing.T) {
		h := newHarness(t, parse(t, cfg), Options{})
		h.expect(h.askHits("api", 10, desc("path", "/q")), ok, st{ok, 10, hour, 0, 3570})
		h.expect(h.ask("api", desc("user", "v"), desc("path", "/q")), over, st{ok, 3, minute, 2, 30}, st{over, 10, hour, 0, 3570})
	})
}

func TestUnknownAndUnmatched(t *testing.T) {
	h := newHarness(t, parse(t, perMinute+`
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit: {unit: second, requests_per_unit: 300}
`), Options{})
	okNoLimit := st{code: ok}
	// An unknown domain is not an error: nothing is limited.
	h.expect(h.ask("nowhere", desc("user", "alice")), ok, okNoLimit)
	// A descriptor no limit matches, one that is shorter than the
	// configured path, and one that is longer (the reference's example 4).
	h.expect(h.ask("api", desc("team", "x"), desc("key", "value"), desc("user", "alice", "extra", "1")),
		ok, okNoLimit, okNoLimit, okNoLimit)
	h.expect(h.ask("api", desc("key", "value", "subkey", "anything")), ok, st{ok, 300, second, 299, 1})
	if ev := h.takeEvents(); len(ev) != 1 || ev[0].Key != "api.key_value.subkey" {
		t.Fatalf("events %+v, want one for api.key_value.subkey", ev)
	}

	for _, tt := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")}}},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "api"}},
	} {
		_, err := h.call(tt.req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: error %v, want InvalidArgument", tt.name, err)
		}
	}
}

func TestUnlimited(t *testing.T) {
	// The reference's example 5.
	h := newHarness(t, parse(t, `domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`), Options{})
	for range 3 {
		h.expect(h.askHits("internal", 1000, desc("ldap", "x"), desc("azure", "")), over,
			st{code: ok, remain: math.MaxUint32}, st{over, 100, minute, 0, 30})
	}
	if n := h.store.Len(); n != 1 { // azure's window; nothing for ldap
		t.Fatalf("store holds %d keys, want 1", n)
	}
	if ev := h.takeEvents(); len(ev) != 3 || ev[0].Key != "internal.azure" {
		t.Fatalf("events %+v: unlimited descriptors are not reported", ev)
	}
}

func TestShadowMode(t *testing.T) {
	// The reference's example 6.
	h := newHarness(t, parse(t, `domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`), Options{})
	a := func() *rlsv3.RateLimitResponse {
		return h.ask("example6", desc("service", "auth-service", "user", "user-a"))
	}
	b := func() *rlsv3.RateLimitResponse {
		return h.ask("example6", desc("service", "auth-service", "user", "user-b"))
	}
	for i := range 10 {
		h.expect(a(), ok, st{ok, 10, second, uint32(9 - i), 1})
	}
	h.takeEvents()
	// Over the limit, and OK all the same, with the limit's numbers.
	h.expect(a(), ok, st{ok, 10, second, 0, 1})
	ev := h.takeEvents()
	if len(ev) != 1 || !ev[0].Over || !ev[0].Shadow || ev[0].Key != "example6.service.user_user-a" {
		t.Fatalf("events %+v, want one over, in shadow mode", ev)
	}
	for range 20 {
		b()
	}
	h.expect(b(), over, st{over, 20, second, 0, 1})
	if ev := h.takeEvents(); !ev[len(ev)-1].Over || ev[len(ev)-1].Shadow {
		t.Fatalf("last event %+v, want over and enforced", ev[len(ev)-1])
	}
}

func TestReplaces(t *testing.T) {
	// The reference's example 7.
	h := newHarness(t, parse(t, `domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`), Options{})
	one := desc("key_1", "value_1", "user", "bkthomps")
	two := desc("key_2", "value_2", "user", "bkthomps")
	// Both together: only the replacing limit applies, and the replaced
	// one is left untouched.
	for i := range 10 {
		h.expect(h.ask("example7", one, two), ok, st{code: ok}, st{ok, 10, second, uint32(9 - i), 1})
	}
	h.expect(h.ask("example7", one, two), over, st{code: ok}, st{over, 10, second, 0, 1})
	// On its own, the named limit applies with its whole budget.
	for i := range 5 {
		h.expect(h.ask("example7", one), ok, st{ok, 5, second, uint32(4 - i), 1})
	}
	h.expect(h.ask("example7", one), over, st{over, 5, second, 0, 1})
}

func TestWildcards(t *testing.T) {
	h := newHarness(t, parse(t, `domain: files
descriptors:
  - key: path
    value: /own/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /shared/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /own/special
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tenant
    value: "*"
    descriptors:
      - key: bucket
        value: b*
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 1}
`), Options{})
	ask := func(path string) st { return statusOf(h.ask("files", desc("path", path)).GetStatuses()[0]) }
	// Each value matching a plain wildcard has a counter of its own.
	for _, p := range []string{"/own/a", "/own/b"} {
		if got, want := ask(p), (st{ok, 2, minute, 1, 30}); got != want {
			t.Errorf("%s: %+v, want %+v", p, got, want)
		}
	}
	// An exact value wins over the wildcard.
	if got, want := ask("/own/special"), (st{ok, 5, minute, 4, 30}); got != want {
		t.Errorf("exact: %+v, want %+v", got, want)
	}
	// With share_threshold, every matching value spends from one counter.
	for i, p := range []string{"/shared/a", "/shared/b", "/shared/c"} {
		want := st{ok, 2, minute, uint32(1 - i), 30}
		if i == 2 {
			want = st{over, 2, minute, 0, 30}
		}
		if got := ask(p); got != want {
			t.Errorf("%s: %+v, want %+v", p, got, want)
		}
	}
	// A value that does not start with the prefix does not match.
	if got := ask("/other"); got != (st{code: ok}) {
		t.Errorf("/other: %+v, want no limit", got)
	}
	// Sharing applies to the entry that matched the shared wildcard only:
	// tenants still count apart.
	h.expect(h.ask("files", desc("tenant", "t1", "bucket", "b1")), ok, st{ok, 1, minute, 0, 30})
	h.expect(h.ask("files", desc("tenant", "t1", "bucket", "b2")), over, st{over, 1, minute, 0, 30})
	h.expect(h.ask("files", desc("tenant", "t2", "bucket", "b3")), ok, st{ok, 1, minute, 0, 30})
	ev := h.takeEvents()
	if got := ev[len(ev)-1].Key; got != "files.tenant_*.bucket_b*" {
		t.Errorf("stat key %q", got)
	}
}

func TestHitsAddend(t *testing.T) {
	h := newHarness(t, parse(t, perMinute), Options{})
	alice := func() *ratelimitv3.RateLimitDescriptor { return desc("user", "alice") }
	// The request's hits_addend applies to every descriptor.
	h.expect(h.askHits("api", 5, alice()), ok, st{ok, 20, minute, 15, 30})
	// A descriptor's own hits_addend overrides it.
	h.expect(h.askHits("api", 5, withHits(alice(), 3)), ok, st{ok, 20, minute, 12, 30})
	// An explicit 0 looks without spending.
	h.expect(h.askHits("api", 5, withHits(alice(), 0)), ok, st{ok, 20, minute, 12, 30})
	// 12 left: 12 pass, leaving the window exactly full; a check still
	// says OK, as the reference does when the count equals the limit.
	h.expect(h.ask("api", withHits(alice(), 12)), ok, st{ok, 20, minute, 0, 30})
	h.expect(h.ask("api", withHits(alice(), 0)), ok, st{ok, 20, minute, 0, 30})
	// One more is over, and from then on the reference's count is above
	// the limit: even a check is over until the window ends.
	h.expect(h.ask("api", alice()), over, st{over, 20, minute, 0, 30})
	h.expect(h.ask("api", withHits(alice(), 0)), over, st{over, 20, minute, 0, 30})
	h.clock.Advance(30 * time.Second)
	h.expect(h.ask("api", withHits(alice(), 0)), ok, st{ok, 20, minute, 20, 60})
}

func TestRefusedHitsCount(t *testing.T) {
	t.Run("reference", func(t *testing.T) {
		h := newHarness(t, parse(t, perMinute), Options{})
		h.expect(h.askHits("api", 15, desc("user", "a")), ok, st{ok, 20, minute, 5, 30})
		// 10 hits do not fit in the 5 left: refused, and still counted,
		// so that a single hit is refused too.
		h.expect(h.askHits("api", 10, desc("user", "a")), over, st{over, 20, minute, 0, 30})
		h.expect(h.ask("api", desc("user", "a")), over, st{over, 20, minute, 0, 30})
		// More hits than the limit can ever hold: over, and counted.
		h.expect(h.askHits("api", 21, desc("user", "b")), over, st{over, 20, minute, 0, 30})
		h.expect(h.ask("api", desc("user", "b")), over, st{over, 20, minute, 0, 30})
		// Post-hoc accounting, as gateways that report usage after the
		// response do: a check passes, the usage recorded afterwards
		// exceeds the budget, and the next check is refused.
		h.expect(h.ask("api", withHits(desc("user", "c"), 0)), ok, st{ok, 20, minute, 20, 30})
		h.expect(h.ask("api", withHits(desc("user", "c"), 35)), over, st{over, 20, minute, 0, 30})
		h.expect(h.ask("api", withHits(desc("user", "c"), 0)), over, st{over, 20, minute, 0, 30})
	})
	t.Run("RefusedConsumeNothing", func(t *testing.T) {
		h := newHarness(t, parse(t, perMinute), Options{RefusedConsumeNothing: true})
		h.expect(h.askHits("api", 15, desc("user", "a")), ok, st{ok, 20, minute, 5, 30})
		// Refused, and nothing spent: the 5 left are reported, and pass.
		h.expect(h.askHits("api", 10, desc("user", "a")), over, st{over, 20, minute, 5, 30})
		h.expect(h.askHits("api", 5, desc("user", "a")), ok, st{ok, 20, minute, 0, 30})
		h.expect(h.askHits("api", 21, desc("user", "b")), over, st{over, 20, minute, 20, 30})
		h.expect(h.ask("api", desc("user", "b")), ok, st{ok, 20, minute, 19, 30})
	})
}

func TestLimitOverride(t *testing.T) {
	h := newHarness(t, parse(t, perMinute), Options{})
	override := func(d *ratelimitv3.RateLimitDescriptor, n uint32, unit typev3.RateLimitUnit) *ratelimitv3.RateLimitDescriptor {
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
		return d
	}
	// The override replaces the configured 20/minute.
	for i := range 2 {
		h.expect(h.ask("api", override(desc("user", "alice"), 2, typev3.RateLimitUnit_SECOND)), ok, st{ok, 2, second, uint32(1 - i), 1})
	}
	h.expect(h.ask("api", override(desc("user", "alice"), 2, typev3.RateLimitUnit_SECOND)), over, st{over, 2, second, 0, 1})
	// The configured limit, of another unit, has its own counter.
	h.expect(h.ask("api", desc("user", "alice")), ok, st{ok, 20, minute, 19, 30})
	// An override of the same unit counts in the configured limit's
	// window, as the reference's key (descriptor and window start) has it:
	// 1 + 15 hits, and an override of 10 a minute is over.
	h.askHits("api", 15, desc("user", "alice"))
	h.expect(h.ask("api", override(desc("user", "alice"), 10, typev3.RateLimitUnit_MINUTE)), over, st{over, 10, minute, 0, 30})
	h.expect(h.ask("api", override(desc("user", "alice"), 30, typev3.RateLimitUnit_MINUTE)), ok, st{ok, 30, minute, 12, 30})
	// As in the reference, an override applies to a descriptor the
	// configuration does not know, as long as the domain is known.
	h.expect(h.ask("api", override(desc("anything", "x"), 7, typev3.RateLimitUnit_HOUR)), ok, st{ok, 7, hour, 6, 3570})
	h.expect(h.ask("elsewhere", override(desc("anything", "x"), 7, typev3.RateLimitUnit_HOUR)), ok, st{code: ok})
	// A multiplier widens the window: 10 minutes.
	d := override(desc("user", "bob"), 3, typev3.RateLimitUnit_MINUTE)
	d.Limit.UnitMultiplier = wrapperspb.UInt32(10)
	resp := h.ask("api", d)
	h.expect(resp, ok, st{ok, 3, minute, 2, 570})
	if m := resp.GetStatuses()[0].GetCurrentLimit().GetUnitMultiplier().GetValue(); m != 10 {
		t.Errorf("unit_multiplier %d, want 10", m)
	}
	_, err := h.call(&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		override(desc("user", "carol"), 1, typev3.RateLimitUnit_UNKNOWN),
	}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unknown unit: %v, want InvalidArgument", err)
	}
}

func TestZeroLimit(t *testing.T) {
	h := newHarness(t, parse(t, `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
`), Options{})
	h.expect(h.ask("edge", withHits(desc("remote_address", "50.0.0.5"), 0)), ok, st{ok, 0, second, 0, 1})
	h.expect(h.ask("edge", desc("remote_address", "50.0.0.5")), over, st{over, 0, second, 0, 1})
	h.expect(h.ask("edge", withHits(desc("remote_address", "50.0.0.5"), 0)), over, st{over, 0, second, 0, 1})
	h.expect(h.ask("edge", desc("remote_address", "50.0.0.1")), ok, st{ok, 10, second, 9, 1})
}

func TestSetConfigKeepsUnchangedCounters(t *testing.T) {
	perMinuteOf := func(n int) *Config {
		return parse(t, fmt.Sprintf("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", n))
	}
	h := newHarness(t, parse(t, perMinute), Options{})
	for range 5 {
		h.ask("api", desc("user", "alice"))
	}
	// The same limit, reloaded (with a new descriptor beside it): the
	// counter carries on.
	h.svc.SetConfig(parse(t, perMinute+"  - key: team\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	h.expect(h.ask("api", desc("user", "alice")), ok, st{ok, 20, minute, 14, 30})
	// The reference keys a window by descriptor and window start, not by
	// limit: a changed requests_per_unit keeps the window's count (6
	// hits, 7 with this one).
	h.svc.SetConfig(perMinuteOf(30))
	h.expect(h.ask("api", desc("user", "alice")), ok, st{ok, 30, minute, 23, 30})
	// So a limit lowered mid-window below the count is over at once, not
	// a fresh budget: 15 hits, then 10 a minute.
	h.svc.SetConfig(perMinuteOf(20))
	h.askHits("api", 15, desc("user", "bob"))
	h.svc.SetConfig(perMinuteOf(10))
	h.expect(h.ask("api", desc("user", "bob")), over, st{over, 10, minute, 0, 30})
	// A changed unit is another window.
	h.svc.SetConfig(parse(t, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"))
	h.expect(h.ask("api", desc("user", "bob")), ok, st{ok, 10, hour, 9, 3570})
	// A domain removed from the configuration limits nothing.
	h.svc.SetConfig(parse(t, "domain: other\n"))
	h.expect(h.ask("api", desc("user", "alice")), ok, st{code: ok})
	h.svc.SetConfig(nil)
	h.expect(h.ask("api", desc("user", "alice")), ok, st{code: ok})

	// With RefusedConsumeNothing too, a window's key names its algorithm
	// and period, not its count: a limit lowered below the window's count
	// is over at once, and lowering it again grants nothing either; a
	// raised one admits the difference, and no more.
	h = newHarness(t, parse(t, perMinute), Options{RefusedConsumeNothing: true})
	h.expect(h.askHits("api", 15, desc("user", "alice")), ok, st{ok, 20, minute, 5, 30})
	h.svc.SetConfig(perMinuteOf(10))
	h.expect(h.ask("api", desc("user", "alice")), over, st{over, 10, minute, 0, 30})
	h.svc.SetConfig(perMinuteOf(5))
	h.expect(h.ask("api", desc("user", "alice")), over, st{over, 5, minute, 0, 30})
	h.svc.SetConfig(perMinuteOf(20))
	h.expect(h.askHits("api", 6, desc("user", "alice")), over, st{over, 20, minute, 5, 30})
	h.expect(h.askHits("api", 5, desc("user", "alice")), ok, st{ok, 20, minute, 0, 30})
	h.expect(h.ask("api", desc("user", "alice")), over, st{over, 20, minute, 0, 30})
	// The next window counts from zero under the lowered limit.
	h.svc.SetConfig(perMinuteOf(10))
	h.clock.Advance(30 * time.Second)
	h.expect(h.ask("api", desc("user", "alice")), ok, st{ok, 10, minute, 9, 60})
}

func TestGCRAExtension(t *testing.T) {
	h := newHarness(t, parse(t, `domain: api
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 10
      algorithm: gcra   # a sluice extension
      burst: 2
`), Options{})
	// A burst of 2, then one every 100ms.
	h.expect(h.ask("api", desc("user", "a")), ok, st{ok, 10, second, 1, 1})
	h.expect(h.ask("api", desc("user", "a")), ok, st{ok, 10, second, 0, 1})
	h.expect(h.ask("api", desc("user", "a")), over, st{over, 10, second, 0, 1})
	h.clock.Advance(100 * time.Millisecond)
	h.expect(h.ask("api", desc("user", "a")), ok, st{ok, 10, second, 0, 1})
	// A refused request consumes nothing, even in the reference's mode:
	// the next token arrives on time.
	h.expect(h.ask("api", desc("user", "a")), over, st{over, 10, second, 0, 1})
	h.clock.Advance(100 * time.Millisecond)
	h.expect(h.ask("api", desc("user", "a")), ok, st{ok, 10, second, 0, 1})
}

func TestHeaders(t *testing.T) {
	h := newHarness(t, parse(t, `domain: api
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: minute, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
`), Options{Headers: true})
	headers := func(resp *rlsv3.RateLimitResponse) map[string]string {
		m := map[string]string{}
		for _, hv := range resp.GetResponseHeadersToAdd() {
			m[hv.GetKey()] = hv.GetValue()
		}
		return m
	}
	resp := h.ask("api", desc("user", "u"), desc("path", "/p"), desc("trial", "t"))
	got := headers(resp)
	want := map[string]string{
		"RateLimit-Policy": `"per-user";q=2;w=60, "api.path";q=100;w=3600`,
		"RateLimit":        `"per-user";r=1;t=30, "api.path";r=99;t=3570`,
	}
	if len(got) != len(want) || got["RateLimit-Policy"] != want["RateLimit-Policy"] || got["RateLimit"] != want["RateLimit"] {
		t.Fatalf("headers %q, want %q", got, want)
	}
	h.ask("api", desc("user", "u"))
	h.clock.Advance(5*time.Second + 200*time.Millisecond)
	got = headers(h.ask("api", desc("user", "u")))
	if got["Retry-After"] != "25" || got["RateLimit"] != `"per-user";r=0;t=25` {
		t.Fatalf("headers when over: %q", got)
	}
	// A limit named by several descriptors of a request is reported
	// once, by the one nearest to refusing: the one over it, else the one
	// with least left.
	h.ask("api", desc("user", "v"))
	got = headers(h.ask("api", desc("user", "w"), desc("user", "v"), desc("path", "/p")))
	if got["RateLimit"] != `"per-user";r=0;t=25, "api.path";r=98;t=3565` || got["RateLimit-Policy"] != `"per-user";q=2;w=60, "api.path";q=100;w=3600` {
		t.Errorf("headers of a limit named twice: %q", got)
	}
	got = headers(h.ask("api", desc("user", "x"), desc("user", "u")))
	if got["RateLimit"] != `"per-user";r=0;t=25` || got["Retry-After"] != "25" {
		t.Errorf("headers of a limit named twice, the second over it: %q", got)
	}
	// Without the option, no headers.
	plain := newHarness(t, parse(t, perMinute), Options{})
	if hs := plain.ask("api", desc("user", "x")).GetResponseHeadersToAdd(); len(hs) != 0 {
		t.Fatalf("headers without the option: %v", hs)
	}
}

// A request refused by a descriptor it can never pass (more hits than
// the limit holds, or a limit of zero) gets no Retry-After, in either
// mode: no wait would let it through. Its RateLimit fields still say
// where the limits stand.
func TestHeadersNoRetryAfterForWhatNeverPasses(t *testing.T) {
	cfg := `domain: api
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: minute, requests_per_unit: 2}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: burst
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: gcra}
`
	for _, consumeNothing := range []bool{false, true} {
		h := newHarness(t, parse(t, cfg), Options{Headers: true, RefusedConsumeNothing: consumeNothing})
		for _, c := range []struct {
			name string
			desc *ratelimitv3.RateLimitDescriptor
		}{
			{"more hits than the limit", withHits(desc("user", "a"), 3)},
			{"a limit of zero", desc("zero", "z")},
			{"more hits than the burst", withHits(desc("burst", "b"), 4)},
		} {
			resp := h.ask("api", desc("user", "b"), c.desc)
			if resp.GetOverallCode() != over {
				t.Fatalf("RefusedConsumeNothing=%v, %s: %v, want OVER_LIMIT", consumeNothing, c.name, resp.GetOverallCode())
			}
			var fields []string
			for _, hv := range resp.GetResponseHeadersToAdd() {
				fields = append(fields, hv.GetKey())
			}
			if slices.Contains(fields, "Retry-After") || !slices.Contains(fields, "RateLimit") {
				t.Errorf("RefusedConsumeNothing=%v, %s: fields %v, want RateLimit and no Retry-After", consumeNothing, c.name, fields)
			}
		}
		// Over a limit it can pass once the window resets: Retry-After.
		h.ask("api", desc("user", "c"))
		h.ask("api", desc("user", "c"))
		resp := h.ask("api", desc("user", "c"))
		found := false
		for _, hv := range resp.GetResponseHeadersToAdd() {
			found = found || hv.GetKey() == "Retry-After"
		}
		if !found {
			t.Errorf("RefusedConsumeNothing=%v: no Retry-After for a request that passes after the reset", consumeNothing)
		}
	}
}

func TestHealth(t *testing.T) {
	h := newHarness(t, nil, Options{})
	hc := healthpb.NewHealthClient(h.conn)
	// "ratelimit" is the name Envoy's reference service reports under, which
	// a gateway's grpc_health_check or a Kubernetes grpc probe may name.
	names := []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"}
	for _, svc := range names {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v, %v", svc, resp, err)
		}
	}
	h.svc.Health().Shutdown()
	for _, svc := range names {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("health of %q after Shutdown: %v, %v", svc, resp, err)
		}
	}
}

// TestConcurrentRequestsAdmitExactlyTheLimit sends many requests at once
// for one descriptor: exactly the limit pass, whichever mode.
func TestConcurrentRequestsAdmitExactlyTheLimit(t *testing.T) {
	for _, consumeNothing := range []bool{false, true} {
		h := newHarness(t, parse(t, perMinute), Options{RefusedConsumeNothing: consumeNothing})
		var passed atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 10 {
					resp, err := h.call(&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "x")}})
					if err != nil {
						t.Error(err)
						return
					}
					if resp.GetOverallCode() == ok {
						passed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if n := passed.Load(); n != 20 {
			t.Errorf("RefusedConsumeNothing=%v: %d of 80 passed, want 20", consumeNothing, n)
		}
	}
}

func TestNegativeHitsSpendNothing(t *testing.T) {
	h := newHarness(t, parse(t, perMinute), Options{})
	h.expect(h.askHits("api", 4, desc("user", "a")), ok, st{ok, 20, minute, 16, 30})
	d := withHits(desc("user", "a"), 3)
	d.IsNegativeHits = true
	h.expect(h.ask("api", d), ok, st{ok, 20, minute, 16, 30})
}

// countingStore counts the calls a Service makes to its store.
type countingStore struct {
	sluice.Store
	calls atomic.Int64
}

func (c *countingStore) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	c.calls.Add(1)
	return c.Store.Decide(ctx, r)
}

func (c *countingStore) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	c.calls.Add(1)
	return c.Store.DecideAll(ctx, reqs, out)
}

// In the reference's mode a request costs one store call, whether it
// passes or not: a refused request is counted by the call that refuses
// it, with no second write that could land in another window.
func TestCountingStoreCalls(t *testing.T) {
	clock := ratetest.NewClock(start)
	cs := &countingStore{Store: memory.New(memory.Options{Clock: clock})}
	svc := NewService(parse(t, perMinute), cs, Options{Clock: clock})
	ask := func(hits uint64) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
			Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("user", "a"), hits)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetOverallCode()
	}
	for _, step := range []struct {
		hits  uint64
		code  rlsv3.RateLimitResponse_Code
		calls int64
	}{
		{19, ok, 1},
		{0, ok, 1},   // a check
		{2, over, 1}, // counted, and over
		{1, over, 1},
		{0, over, 1},
		{50, over, 1}, // more than the window holds
	} {
		before := cs.calls.Load()
		if code := ask(step.hits); code != step.code {
			t.Errorf("%d hits: %v, want %v", step.hits, code, step.code)
		}
		if n := cs.calls.Load() - before; n != step.calls {
			t.Errorf("%d hits: %d store calls, want %d", step.hits, n, step.calls)
		}
	}
}

// Descriptors with the same key are asked for together, for the sum of
// their hits, when RefusedConsumeNothing is set. Hits too many to add up
// are over the limit like any other: a call that fails instead is let
// through by Envoy unless failure_mode_deny is set.
func TestHugeHitsAreOverTheLimit(t *testing.T) {
	for _, consumeNothing := range []bool{false, true} {
		h := newHarness(t, parse(t, perMinute), Options{RefusedConsumeNothing: consumeNothing})
		resp, err := h.call(&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			withHits(desc("user", "a"), 1<<62), withHits(desc("user", "a"), 1<<62), withHits(desc("user", "a"), math.MaxUint64),
		}})
		if err != nil {
			t.Fatalf("RefusedConsumeNothing=%v: %v, want OVER_LIMIT", consumeNothing, err)
		}
		// Counted, the window is spent; otherwise nothing is.
		left := uint32(0)
		if consumeNothing {
			left = 20
		}
		want := st{over, 20, minute, left, 30}
		h.expect(resp, over, want, want, want)
	}
}

// slowStore answers after a round trip: the clock moves on by delay while
// each decision comes back, as it does for a store across the network.
type slowStore struct {
	sluice.Store
	clock *ratetest.Clock
	delay time.Duration
}

func (s *slowStore) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	d, err := s.Store.Decide(ctx, r)
	s.clock.Advance(s.delay)
	return d, err
}

// A refusal decided just before its window ends still counts in that
// window only, as the reference counts it under the key of the window the
// request came in. The next window starts afresh, even when the store's
// answer comes back after it has begun.
func TestRefusalAtTheEndOfAWindowSparesTheNext(t *testing.T) {
	clock := ratetest.NewClock(start)
	store := &slowStore{Store: memory.New(memory.Options{Clock: clock}), clock: clock, delay: 2 * time.Millisecond}
	svc := NewService(parse(t, perMinute), store, Options{Clock: clock})
	ask := func(user string, hits uint64) st {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
			Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("user", user), hits)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return statusOf(resp.GetStatuses()[0])
	}
	check := func(what string, got, want st) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %+v, want %+v", what, got, want)
		}
	}
	check("15 hits", ask("a", 15), st{ok, 20, minute, 5, 30})
	// With time to spare, a refusal counts: even a check is over after it.
	check("15 hits", ask("c", 15), st{ok, 20, minute, 5, 30})
	check("10 more", ask("c", 10), st{over, 20, minute, 0, 30})
	check("a check", ask("c", 0), st{over, 20, minute, 0, 30})
	// 1ms before the minute ends, 10 more do not fit; the answer comes
	// back in the next minute.
	clock.Set(start.Add(29*time.Second + 999*time.Millisecond))
	check("10 more at the end", ask("a", 10), st{over, 20, minute, 0, 1})
	check("20 in the next minute", ask("a", 20), st{ok, 20, minute, 0, 60})

	// More hits than the window holds, at the end of a window nothing has
	// touched.
	clock.Set(start.Add(89*time.Second + 999*time.Millisecond))
	check("25 at the end", ask("b", 25), st{over, 20, minute, 0, 1})
	check("20 in the next minute", ask("b", 20), st{ok, 20, minute, 0, 60})
}

// hiccupStore holds back its n-th call (counting from 1) by spike before
// it is decided, as a GC pause or a slow Redis does: the call reaches the
// store that much later on the clock.
type hiccupStore struct {
	sluice.Store
	clock *ratetest.Clock
	n     int
	spike time.Duration
	calls int
}

func (s *hiccupStore) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	s.calls++
	if s.calls == s.n {
		s.clock.Advance(s.spike)
	}
	return s.Store.Decide(ctx, r)
}

// A refusal just before a window ends counts in that window only, however
// late the store hears of what follows it. If it took a second write to
// count the refused hits, that write could reach the store after the
// window ended and spend the next window's budget, and the client would
// be refused for the whole of it (a day, for a unit of day). Here the
// call after the refusal is held back 20ms, past the end of the minute.
func TestRefusalSpendsNothingFromTheNextWindow(t *testing.T) {
	clock := ratetest.NewClock(start)
	store := &hiccupStore{Store: memory.New(memory.Options{Clock: clock}), clock: clock, n: 3, spike: 20 * time.Millisecond}
	svc := NewService(parse(t, perMinute), store, Options{Clock: clock})
	ask := func(hits uint64) st {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
			Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("user", "a"), hits)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return statusOf(resp.GetStatuses()[0])
	}
	for _, step := range []struct {
		at   time.Duration // since start, which is 30s into the minute
		hits uint64
		want st
	}{
		{0, 1, st{ok, 20, minute, 19, 30}},
		{29*time.Second + 990*time.Millisecond, 20, st{over, 20, minute, 0, 1}},
		// The next minute: all 20 are there.
		{30*time.Second + 10*time.Millisecond, 5, st{ok, 20, minute, 15, 60}},
		{80 * time.Second, 1, st{ok, 20, minute, 14, 10}},
	} {
		clock.Set(start.Add(step.at))
		if got := ask(step.hits); got != step.want {
			t.Errorf("at %v, %d hits: %+v, want %+v", step.at, step.hits, got, step.want)
		}
	}
}

// A Go caller (not the wire) can send nil messages, and any client long
// values: nil descriptors and entries match nothing, and a value of 1MB is
// decided like any other, under a key of bounded length.
func TestOddDescriptors(t *testing.T) {
	h := newHarness(t, parse(t, perMinute), Options{Headers: true})
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		nil,
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{nil}},
		desc("user", strings.Repeat("x", 1<<20)),
		// An override applies in a known domain, entries or not.
		{Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND}},
	}}
	resp, err := h.svc.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	h.expect(resp, ok, st{code: ok}, st{code: ok}, st{ok, 20, minute, 19, 30}, st{ok, 1, second, 0, 1})
	for _, e := range h.takeEvents() {
		if len(e.StoreKey) > 200 {
			t.Errorf("store key of %d bytes", len(e.StoreKey))
		}
	}
}

// A request may carry up to DefaultMaxDescriptors descriptors. In the
// reference's mode each is its own store call, one after the other (the
// reference sends them to Redis in one pipeline).
func TestEachDescriptorIsAStoreCall(t *testing.T) {
	clock := ratetest.NewClock(start)
	cs := &countingStore{Store: memory.New(memory.Options{Clock: clock})}
	svc := NewService(parse(t, perMinute), cs, Options{Clock: clock})
	const n = DefaultMaxDescriptors
	req := &rlsv3.RateLimitRequest{Domain: "api"}
	for i := range n {
		req.Descriptors = append(req.Descriptors, desc("user", fmt.Sprint(i)))
	}
	resp, err := svc.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetStatuses()) != n || cs.calls.Load() != n {
		t.Errorf("%d statuses and %d store calls for %d descriptors", len(resp.GetStatuses()), cs.calls.Load(), n)
	}
}

// A request of more descriptors than Options.MaxDescriptors is refused
// before any is decided: one gRPC message holds hundreds of thousands,
// each a store call, a store key and a status.
func TestTooManyDescriptors(t *testing.T) {
	for _, tt := range []struct {
		max, n  int
		refused bool
	}{
		{0, DefaultMaxDescriptors, false},
		{0, DefaultMaxDescriptors + 1, true},
		{3, 3, false},
		{3, 4, true},
		{-1, DefaultMaxDescriptors + 1, false},
	} {
		for _, consumeNothing := range []bool{false, true} {
			clock := ratetest.NewClock(start)
			cs := &countingStore{Store: memory.New(memory.Options{Clock: clock})}
			svc := NewService(parse(t, perMinute), cs, Options{Clock: clock, MaxDescriptors: tt.max, RefusedConsumeNothing: consumeNothing})
			req := &rlsv3.RateLimitRequest{Domain: "api"}
			for i := range tt.n {
				req.Descriptors = append(req.Descriptors, desc("user", fmt.Sprint(i)))
			}
			resp, err := svc.ShouldRateLimit(context.Background(), req)
			name := fmt.Sprintf("MaxDescriptors %d, %d descriptors, RefusedConsumeNothing=%v", tt.max, tt.n, consumeNothing)
			if !tt.refused {
				if err != nil || len(resp.GetStatuses()) != tt.n {
					t.Errorf("%s: %d statuses, %v; want %d", name, len(resp.GetStatuses()), err, tt.n)
				}
				continue
			}
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("%s: %v, want InvalidArgument", name, err)
			}
			if c := cs.calls.Load(); c != 0 {
				t.Errorf("%s: %d store calls, want none", name, c)
			}
		}
	}
}

// downStore fails every call, as a store whose server is gone.
type downStore struct{}

func (downStore) Decide(context.Context, rate.Request) (rate.Decision, error) {
	return rate.Decision{}, errors.New("connection refused")
}

func (downStore) DecideAll(context.Context, []rate.Request, []rate.Decision) (rate.Decision, error) {
	return rate.Decision{}, errors.New("connection refused")
}

// A Fallback deciding locally, on one of 4 instances, gives each its share
// of a limit in either mode: a quarter, rounded down, in each window.
func TestFallbackSharesTheLimit(t *testing.T) {
	for _, consumeNothing := range []bool{false, true} {
		for _, tt := range []struct{ limit, share int }{{5, 1}, {6, 1}, {10, 2}, {20, 5}, {21, 5}} {
			clock := ratetest.NewClock(start)
			fb := sluice.NewFallback(downStore{}, sluice.FallbackOptions{Mode: sluice.FailLocal, Instances: 4, Clock: clock})
			cfg := parse(t, fmt.Sprintf("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: %d}\n", tt.limit))
			svc := NewService(cfg, fb, Options{Clock: clock, RefusedConsumeNothing: consumeNothing})
			for i := range tt.share + 1 {
				resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
					Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")},
				})
				if err != nil {
					t.Fatal(err)
				}
				want := st{ok, uint32(tt.limit), second, uint32(tt.share - 1 - i), 1}
				if i == tt.share {
					want = st{over, uint32(tt.limit), second, 0, 1}
				}
				if got := statusOf(resp.GetStatuses()[0]); got != want {
					t.Errorf("RefusedConsumeNothing=%v, %d a second, request %d: %+v, want %+v", consumeNothing, tt.limit, i+1, got, want)
				}
			}
		}
	}
}

// While the store is down every call fails: the log has one warning a
// second, each counting those it left out, not one a call.
func TestStoreFailuresLoggedOnceASecond(t *testing.T) {
	var buf bytes.Buffer
	clock := ratetest.NewClock(start)
	cfg := parse(t, perMinute)
	svc := NewService(cfg, downStore{}, Options{Clock: clock, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	call := func() {
		_, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
			Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")},
		})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("a call on a down store: %v, want Unavailable", err)
		}
	}
	for range 3 {
		call()
	}
	if n := strings.Count(buf.String(), "store could not decide"); n != 1 {
		t.Fatalf("3 failures in one instant logged %d lines, want 1:\n%s", n, buf.String())
	}
	clock.Advance(time.Second)
	call()
	if logs := buf.String(); strings.Count(logs, "store could not decide") != 2 || !strings.Contains(logs, "not_logged=2") {
		t.Fatalf("a second later: want a second line, with not_logged=2:\n%s", logs)
	}
}

// A descriptor whose key ends in "*" and has no value is a wildcard over
// the entry's "key_value", as the reference reads it: key "*" matches any
// entry, and key "user*" any entry whose key starts with "user". It is
// tried in file order with the value wildcards, after an exact match and
// before a key alone.
func TestKeyWildcards(t *testing.T) {
	h := newHarness(t, parse(t, `domain: kw
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: "*"
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: user*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: a_b*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: username
    value: root
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: userx
    rate_limit: {unit: minute, requests_per_unit: 9}
`), Options{})
	// Any nested entry matches "*", each value counted on its own.
	h.expect(h.ask("kw", desc("tenant", "acme", "user", "u1")), ok, st{ok, 5, minute, 4, 30})
	h.expect(h.ask("kw", desc("tenant", "acme", "path", "/x")), ok, st{ok, 5, minute, 4, 30})
	h.expect(h.ask("kw", desc("tenant", "acme", "user", "u1")), ok, st{ok, 5, minute, 3, 30})
	// "user*" catches keys starting with "user"; an exact key_value wins,
	// and the wildcard, earlier in the file, wins over a key alone.
	h.expect(h.ask("kw", desc("user_id", "42")), ok, st{ok, 3, minute, 2, 30})
	h.expect(h.ask("kw", desc("username", "")), ok, st{ok, 3, minute, 2, 30})
	h.expect(h.ask("kw", desc("username", "root")), ok, st{ok, 7, minute, 6, 30})
	h.expect(h.ask("kw", desc("userx", "1")), ok, st{ok, 3, minute, 2, 30})
	if got := statusOf(h.ask("kw", desc("use", "r")).GetStatuses()[0]); got != (st{code: ok}) {
		t.Errorf("use=r: %+v, want no limit", got)
	}
	// "a_b*" matches the key_value "a_b...": the key a with a value
	// starting with b, or a key starting with a_b. Shared, each entry key
	// counts once for all its matching values.
	h.expect(h.ask("kw", desc("a", "b1")), ok, st{ok, 1, minute, 0, 30})
	h.expect(h.ask("kw", desc("a", "b2")), over, st{over, 1, minute, 0, 30})
	h.expect(h.ask("kw", desc("a_bc", "z")), ok, st{ok, 1, minute, 0, 30})
	if got := statusOf(h.ask("kw", desc("a", "c")).GetStatuses()[0]); got != (st{code: ok}) {
		t.Errorf("a=c: %+v, want no limit", got)
	}
	ev := h.takeEvents()
	if got := ev[len(ev)-1].Key; got != "kw.a_b*" {
		t.Errorf("stat key %q, want kw.a_b*", got)
	}
}

// deadlineStore fails every call as a remote store does whose caller's
// deadline passed while it waited: context.DeadlineExceeded, wrapped.
type deadlineStore struct{}

func (deadlineStore) Decide(context.Context, rate.Request) (rate.Decision, error) {
	return rate.Decision{}, fmt.Errorf("redis store: %w", context.DeadlineExceeded)
}

func (deadlineStore) DecideAll(context.Context, []rate.Request, []rate.Decision) (rate.Decision, error) {
	return rate.Decision{}, fmt.Errorf("redis store: %w", context.DeadlineExceeded)
}

// lateContext is a context whose deadline has passed and whose timer has
// yet to say so, as a store's client may see it first: Err is still nil.
type lateContext struct{ context.Context }

func (lateContext) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// A store that fails at the caller's own deadline fails the call with
// DEADLINE_EXCEEDED, not UNAVAILABLE, and logs no store failure: the
// caller's time ran out, the store did not fail. Its client may report
// the deadline before the context's timer fires.
func TestCallersDeadlineIsNotAStoreFailure(t *testing.T) {
	var buf bytes.Buffer
	svc := NewService(parse(t, perMinute), deadlineStore{}, Options{Clock: ratetest.NewClock(start), Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	_, err := svc.ShouldRateLimit(lateContext{context.Background()}, &rlsv3.RateLimitRequest{
		Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")},
	})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("the caller's deadline passed: %v, want DeadlineExceeded", err)
	}
	if strings.Contains(buf.String(), "store could not decide") {
		t.Errorf("the caller's deadline logged as a store failure:\n%s", buf.String())
	}
	// A deadline of the store's own, before the caller's: the store failed.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if _, err := svc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")},
	}); status.Code(err) != codes.Unavailable {
		t.Errorf("the store's own timeout: %v, want Unavailable", err)
	}
}

// earlyContext is a context whose deadline is always 1ms away and whose
// timer never fires: a store's client reported the deadline that moment
// before it, as the Redis client may.
type earlyContext struct{ context.Context }

func (earlyContext) Deadline() (time.Time, bool) { return time.Now().Add(time.Millisecond), true }

// A store that reports the caller's deadline a moment before it passes,
// behind a Fallback that fails with an error, is the caller's deadline in
// both: the Fallback counts no failure of the store, and the call fails
// with DEADLINE_EXCEEDED, logging no store failure, as when the deadline
// has passed.
func TestCallersDeadlineJustBeforeItPasses(t *testing.T) {
	var buf bytes.Buffer
	f := sluice.NewFallback(deadlineStore{}, sluice.FallbackOptions{Mode: sluice.FailError, Clock: ratetest.NewClock(start)})
	svc := NewService(parse(t, perMinute), f, Options{Clock: ratetest.NewClock(start), Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	for _, rcn := range []bool{false, true} {
		svc.opts.RefusedConsumeNothing = rcn
		_, err := svc.ShouldRateLimit(earlyContext{context.Background()}, &rlsv3.RateLimitRequest{
			Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")},
		})
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("RefusedConsumeNothing %v: the store reported the caller's deadline 1ms early: %v, want DeadlineExceeded", rcn, err)
		}
	}
	if st := f.Stats(); st.Failures != 0 || st.Down {
		t.Errorf("fallback stats %+v: the caller's deadline counted against the store", st)
	}
	if strings.Contains(buf.String(), "store could not decide") {
		t.Errorf("the caller's deadline logged as a store failure:\n%s", buf.String())
	}
}
