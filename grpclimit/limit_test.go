package grpclimit

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// keyedServer serves the health service behind Limit's interceptors, on
// a fake clock, and returns a client and the limiter.
func keyedServer(t *testing.T, name string, key KeyFunc, o LimitOptions, store func(sluice.Store) sluice.Store, limits ...string) (healthpb.HealthClient, *sluice.Limiter) {
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
	var st sluice.Store = memory.New(memory.Options{Clock: clock})
	if store != nil {
		st = store(st)
	}
	l, err := sluice.NewLimiter(sluice.LimiterOptions{Name: name, Limits: ls, Store: st, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	k := Limit(l, key, o)
	return serveWith(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(k.Unary), grpc.ChainStreamInterceptor(k.Stream)}), l
}

// byAPIKey keys a call by its x-api-key metadata.
func byAPIKey(ctx context.Context, _ string) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md["x-api-key"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func withKey(key string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
}

// TestKeyedUnary: calls pass until the key's limit, with the ratelimit
// fields; then RESOURCE_EXHAUSTED with RetryInfo, QuotaFailure and the
// pushback; another key has its own quota; the limiter's own Allow sees
// the same state.
func TestKeyedUnary(t *testing.T) {
	c, l := keyedServer(t, "api", byAPIKey, LimitOptions{}, nil, "2/m burst 2")
	for i, want := range []string{`"api";r=1;t=30`, `"api";r=0;t=60`} {
		var hdr metadata.MD
		if _, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if got := hdr["ratelimit"]; len(got) != 1 || got[0] != want {
			t.Errorf("call %d: ratelimit %q, want %q", i+1, got, want)
		}
		if got := hdr["ratelimit-policy"]; len(got) != 1 || got[0] != `"api";q=2;w=60` {
			t.Errorf("call %d: ratelimit-policy %q", i+1, got)
		}
	}
	var trl metadata.MD
	_, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trl))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || st.Message() != `rate limited by "api" (limit gcra 2/m burst 2); retry in 30s` {
		t.Fatalf("third call: %v, want RESOURCE_EXHAUSTED", err)
	}
	if got := retryInfo(st); got != 30*time.Second {
		t.Errorf("RetryInfo %v, want 30s", got)
	}
	var subjects []string
	for _, d := range st.Details() {
		if qf, ok := d.(*errdetails.QuotaFailure); ok {
			for _, v := range qf.Violations {
				subjects = append(subjects, v.Subject)
			}
		}
	}
	if len(subjects) != 1 || subjects[0] != "policy:api" {
		t.Errorf("QuotaFailure subjects %q, want [policy:api]", subjects)
	}
	for k, want := range map[string]string{"retry-after": "30", "grpc-retry-pushback-ms": "30000", "ratelimit": `"api";r=0;t=30`} {
		if got := trl[k]; len(got) != 1 || got[0] != want {
			t.Errorf("trailer %s = %q, want %q", k, got, want)
		}
	}
	if _, err := c.Check(withKey("b"), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("another key: %v", err)
	}
	if d, err := l.Allow(context.Background(), "b"); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Errorf("Limiter.Allow on the interceptor's key: %+v, %v; want the last unit", d, err)
	}
}

// TestKeyedStreamSeveralLimits: a stream is decided when it opens; with
// several limits the metadata reports the most restrictive, and the
// QuotaFailure names the limits that refused as name.N.
func TestKeyedStreamSeveralLimits(t *testing.T) {
	c, _ := keyedServer(t, "w", byAPIKey, LimitOptions{}, nil, "10/s", "fixed_window 1/h")
	ctx, cancel := context.WithCancel(withKey("a"))
	defer cancel()
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	hdr, _ := s.Header()
	if got := hdr["ratelimit-policy"]; len(got) != 1 || got[0] != `"w.2";q=1;w=3600` {
		t.Errorf("ratelimit-policy %q, want the hourly limit's", got)
	}
	s2, err := c.Watch(withKey("a"), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s2.Recv()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || err == io.EOF {
		t.Fatalf("second stream: %v, want RESOURCE_EXHAUSTED", err)
	}
	for _, d := range st.Details() {
		if qf, ok := d.(*errdetails.QuotaFailure); ok {
			if len(qf.Violations) != 1 || qf.Violations[0].Subject != "policy:w.2" {
				t.Errorf("QuotaFailure %v, want the hourly limit alone", qf.Violations)
			}
		}
	}
}

// TestKeyedStoreDown: a store that cannot decide fails the call with
// UNAVAILABLE and a RetryInfo, and the handler is not called.
func TestKeyedStoreDown(t *testing.T) {
	c, _ := keyedServer(t, "api", byAPIKey, LimitOptions{}, func(sluice.Store) sluice.Store { return timingOut{} }, "5/s")
	_, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || retryInfo(st) != time.Second {
		t.Errorf("store down: %v (RetryInfo %v), want UNAVAILABLE with a second's RetryInfo", err, retryInfo(st))
	}
}

// TestKeyedByPeer: without a trusted proxy the peer is the key, whatever
// forwarding header the client sends.
func TestKeyedByPeer(t *testing.T) {
	c, _ := keyedServer(t, "", ByPeer(nil), LimitOptions{NoHeaders: true}, nil, "1/m")
	var hdr metadata.MD
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	if len(hdr["ratelimit"]) != 0 {
		t.Errorf("NoHeaders: ratelimit %q sent", hdr["ratelimit"])
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", "198.51.100.7")
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second call from the same peer, claiming another address: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// TestKeyedSkip: skipped calls bypass the limiter.
func TestKeyedSkip(t *testing.T) {
	c, _ := keyedServer(t, "api", byAPIKey, LimitOptions{Skip: SkipServices("grpc.health.v1.Health")}, nil, "1/m")
	for i := range 3 {
		if _, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("skipped call %d: %v", i+1, err)
		}
	}
}

// TestKeyedLeakyBucket: a leaky_bucket's call waits for its turn on the
// limiter's clock before it is served.
func TestKeyedLeakyBucket(t *testing.T) {
	c, l := keyedServer(t, "shaped", byAPIKey, LimitOptions{}, nil, "leaky_bucket 2/s burst 4")
	start := l.Clock().Now()
	for i := range 3 {
		if _, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if waited := l.Clock().Now().Sub(start); waited != time.Second {
		t.Errorf("three calls at 2/s served after %v of waits, want 1s", waited)
	}
}

// TestKeyedOverFallback: over a sluice.Fallback whose store is down, a
// fail-closed refusal is UNAVAILABLE, not a quota's RESOURCE_EXHAUSTED,
// and a fail-open pass carries no quota it did not decide.
func TestKeyedOverFallback(t *testing.T) {
	for _, mode := range []sluice.FailureMode{sluice.FailClosed, sluice.FailOpen} {
		down := func(sluice.Store) sluice.Store {
			return sluice.NewFallback(timingOut{}, sluice.FallbackOptions{Mode: mode, Timeout: time.Millisecond})
		}
		c, _ := keyedServer(t, "api", byAPIKey, LimitOptions{}, down, "5/m")
		var hdr, trl metadata.MD
		_, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
		switch mode {
		case sluice.FailClosed:
			if st := status.Convert(err); st.Code() != codes.Unavailable || retryInfo(st) != time.Second || len(trl["ratelimit"]) != 0 {
				t.Errorf("fail closed: %v (RetryInfo %v, ratelimit %q), want UNAVAILABLE after a second and no quota", err, retryInfo(st), trl["ratelimit"])
			}
		default:
			if err != nil || len(hdr["ratelimit"]) != 0 {
				t.Errorf("fail open: %v, ratelimit %q; want served, with no quota", err, hdr["ratelimit"])
			}
		}
	}
}

// TestKeyedFailLocalReportsTheShare: over a FailLocal Fallback of 4
// instances, a call the local store decides gets the instance's share of
// the limit (25/m of 100/m) in its metadata, the quota its remaining
// counts down from, and in a refusal's message and QuotaFailure; one the
// primary decides gets the whole limit.
func TestKeyedFailLocalReportsTheShare(t *testing.T) {
	check := func(c healthpb.HealthClient, step, policy, item string) {
		t.Helper()
		var hdr metadata.MD
		if _, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if got := hdr["ratelimit-policy"]; len(got) != 1 || got[0] != policy {
			t.Errorf("%s: ratelimit-policy %q, want %q", step, got, policy)
		}
		if got := hdr["ratelimit"]; len(got) != 1 || got[0] != item {
			t.Errorf("%s: ratelimit %q, want %q", step, got, item)
		}
	}
	up := func(st sluice.Store) sluice.Store {
		return sluice.NewFallback(st, sluice.FallbackOptions{Mode: sluice.FailLocal, Instances: 4})
	}
	c, _ := keyedServer(t, "api", byAPIKey, LimitOptions{}, up, "100/m")
	check(c, "primary up", `"api";q=100;w=60`, `"api";r=99;t=1`)

	// The memory store on the fake clock is the local one.
	down := func(st sluice.Store) sluice.Store {
		return sluice.NewFallback(timingOut{}, sluice.FallbackOptions{Mode: sluice.FailLocal, Instances: 4, Local: st, Timeout: time.Millisecond})
	}
	c, _ = keyedServer(t, "api", byAPIKey, LimitOptions{}, down, "100/m")
	check(c, "primary down", `"api";q=25;w=60`, `"api";r=24;t=3`)
	for i := range 24 {
		if _, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d of the share: %v", i+2, err)
		}
	}
	var trl metadata.MD
	_, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trl))
	st := status.Convert(err)
	if want := `rate limited by "api" (limit gcra 25/m); retry in 3s`; st.Code() != codes.ResourceExhausted || st.Message() != want {
		t.Fatalf("the share spent: %v, want RESOURCE_EXHAUSTED: %s", err, want)
	}
	for _, d := range st.Details() {
		if qf, ok := d.(*errdetails.QuotaFailure); ok {
			if want := `rate limited by "api" (limit gcra 25/m)`; len(qf.Violations) != 1 || qf.Violations[0].Description != want {
				t.Errorf("QuotaFailure %v, want one violation: %s", qf.Violations, want)
			}
		}
	}
	for k, want := range map[string]string{"ratelimit-policy": `"api";q=25;w=60`, "ratelimit": `"api";r=0;t=3`} {
		if got := trl[k]; len(got) != 1 || got[0] != want {
			t.Errorf("the share spent: trailer %s = %q, want %q", k, got, want)
		}
	}
}

// TestKeyedMaxDelayBucket: under a gcra limit with a MaxDelay, a call
// past the burst waits for its unit on the limiter's clock and is served,
// its ratelimit reset counted from when it goes ahead; one whose unit
// comes later than MaxDelay is refused at once.
func TestKeyedMaxDelayBucket(t *testing.T) {
	c, l := keyedServer(t, "api", byAPIKey, LimitOptions{MaxDelay: 90 * time.Second}, nil, "gcra 1/m burst 1")
	start := l.Clock().Now()
	for i := range 2 {
		var hdr metadata.MD
		if _, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if got := hdr["ratelimit"]; len(got) != 1 || !strings.HasSuffix(got[0], ";t=60") {
			t.Errorf("call %d: ratelimit %q, want the bucket full 60s after it goes ahead", i+1, got)
		}
	}
	if waited := l.Clock().Now().Sub(start); waited != time.Minute {
		t.Errorf("two calls at 1/m served after %v of waits, want 1m", waited)
	}
	before := l.Clock().Now()
	l.Clock().(*ratetest.Clock).Advance(-time.Minute) // with the others: its unit two minutes away
	_, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{})
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted {
		t.Errorf("a unit past MaxDelay: %v, want RESOURCE_EXHAUSTED", err)
	}
	if now := l.Clock().Now(); !now.Equal(before.Add(-time.Minute)) {
		t.Errorf("the refused call waited %v", now.Sub(before.Add(-time.Minute)))
	}
}
