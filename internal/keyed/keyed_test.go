package keyed

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// failing is a store that cannot decide, as a Redis that is gone.
type failing struct{}

var errGone = errors.New("store unreachable")

func (failing) Decide(context.Context, rate.Request) (rate.Decision, error) {
	return rate.Decision{}, errGone
}

func (failing) DecideAll(context.Context, []rate.Request, []rate.Decision) (rate.Decision, error) {
	return rate.Decision{}, errGone
}

func limiter(t *testing.T, store func(clock rate.Clock) sluice.Store, limits ...string) *sluice.Limiter {
	t.Helper()
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	var ls []rate.Limit
	for _, s := range limits {
		l, err := rate.ParseLimit(s)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	l, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "api", Limits: ls, Store: store(clock), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A local decision is reported with the shares of the limits, under their
// names; a limit too small to divide is its own share. The store's own
// decisions, and a Fallback that divides nothing, report the limits.
func TestDecideLocalQuotas(t *testing.T) {
	for _, c := range []struct {
		name      string
		store     func(rate.Clock) sluice.Store
		source    sluice.Source
		policies  []string // of out.Quotas
		sameAsOwn []bool   // out.Quotas[i] == k.Quotas[i]
	}{
		{"memory", func(clock rate.Clock) sluice.Store { return memory.New(memory.Options{Clock: clock}) },
			sluice.SourcePrimary, []string{`"api.1";q=100;w=60`, `"api.2";q=1;w=3600`}, []bool{true, true}},
		{"primary up", func(clock rate.Clock) sluice.Store {
			return sluice.NewFallback(memory.New(memory.Options{Clock: clock}), sluice.FallbackOptions{Mode: sluice.FailLocal, Instances: 4, Clock: clock})
		}, sluice.SourcePrimary, []string{`"api.1";q=100;w=60`, `"api.2";q=1;w=3600`}, []bool{true, true}},
		{"primary down", func(clock rate.Clock) sluice.Store {
			return sluice.NewFallback(failing{}, sluice.FallbackOptions{Mode: sluice.FailLocal, Instances: 4, Clock: clock})
		}, sluice.SourceLocal, []string{`"api.1";q=25;w=60`, `"api.2";q=1;w=14400`}, []bool{false, false}},
		{"one instance", func(clock rate.Clock) sluice.Store {
			return sluice.NewFallback(failing{}, sluice.FallbackOptions{Mode: sluice.FailLocal, Clock: clock})
		}, sluice.SourceLocal, []string{`"api.1";q=100;w=60`, `"api.2";q=1;w=3600`}, []bool{true, true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := New(limiter(t, c.store, "100/m", "fixed_window 1/h"))
			out, err := k.Decide(context.Background(), "a", 0)
			if err != nil || out.Source != c.source {
				t.Fatalf("Decide: %+v, %v; want decided by %v", out, err, c.source)
			}
			if len(out.Quotas) != len(c.policies) {
				t.Fatalf("%d quotas, want %d", len(out.Quotas), len(c.policies))
			}
			for i, q := range out.Quotas {
				if q.HeaderPolicy() != c.policies[i] || q.Name != k.Quotas[i].Name || (q == k.Quotas[i]) != c.sameAsOwn[i] {
					t.Errorf("quota %d: %s named %q (the limiter's own: %v), want %s named %q (%v)",
						i, q.HeaderPolicy(), q.Name, q == k.Quotas[i], c.policies[i], k.Quotas[i].Name, c.sameAsOwn[i])
				}
			}
		})
	}
}

// A request allowed by one limit in a store that says nothing of who
// decided costs no allocation beyond the limiter's own Allow: that path is
// every request's.
func TestDecideOneLimitAllocates(t *testing.T) {
	l := limiter(t, func(clock rate.Clock) sluice.Store { return memory.New(memory.Options{Clock: clock}) }, "1000000/s")
	k := New(l)
	ctx := context.Background()
	allow := testing.AllocsPerRun(100, func() { _, _ = l.Allow(ctx, "a") })
	if n := testing.AllocsPerRun(100, func() { _, _ = k.Decide(ctx, "a", 0) }); n != allow {
		t.Errorf("Decide allocates %v times, Allow %v: want the same", n, allow)
	}
}

// A Quota's headers state each limit's rate under its name, which they
// write as the refusals do, escapes aside: a burst smaller than the count
// is no smaller rate.
func TestQuotaHeaders(t *testing.T) {
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := sluice.NewLimiter(sluice.LimiterOptions{Name: `a "b"`, Clock: clock,
		Limits: []rate.Limit{rate.MustParseLimit("100/s burst 10"), rate.MustParseLimit("fixed_window 1000/d")}})
	if err != nil {
		t.Fatal(err)
	}
	k := New(l)
	for i, want := range []struct{ name, policy, limit string }{
		{`a "b".1`, `"a \"b\".1";q=100;w=1`, "10"},
		{`a "b".2`, `"a \"b\".2";q=1000;w=86400`, "1000"},
	} {
		q := k.Quotas[i]
		if q.Name != want.name || q.HeaderPolicy() != want.policy || q.HeaderLimit() != want.limit {
			t.Errorf("quota %d: %q, %s, limit %s; want %q, %s, limit %s", i, q.Name, q.HeaderPolicy(), q.HeaderLimit(), want.name, want.policy, want.limit)
		}
	}
}
