package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// envoyClient connects a generated client to the server's gRPC listener.
func envoyClient(t *testing.T, ts *testServer) (rlsv3.RateLimitServiceClient, healthpb.HealthClient) {
	t.Helper()
	conn, err := grpc.NewClient(ts.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn)
}

func ask(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, entries ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(entries); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Envoy's API on the server's gRPC listener, with the reference format of
// examples/envoy/config: 20 a minute, remaining 19 down to 0,
// then OVER_LIMIT.
func TestEnvoyRateLimitService(t *testing.T) {
	ts := startServer(t, "", Options{EnvoyConfigs: []string{"../examples/envoy/config"}, EnvoyHeaders: true})
	if a := ts.Addrs(); a.Proxy != "" || a.Check != "" || a.GRPC == "" {
		t.Fatalf("listeners %+v: want gRPC and admin only", a)
	}
	c, health := envoyClient(t, ts)
	for want := 19; want >= 0; want-- {
		resp := ask(t, c, "edge", "remote_address", "203.0.113.7")
		st := resp.Statuses[0]
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || st.LimitRemaining != uint32(want) {
			t.Fatalf("want OK with %d remaining, got %v", want, resp)
		}
	}
	resp := ask(t, c, "edge", "remote_address", "203.0.113.7")
	st := resp.Statuses[0]
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.LimitRemaining != 0 ||
		st.CurrentLimit.GetRequestsPerUnit() != 20 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("21st request: %v; want OVER_LIMIT, remaining 0, current_limit {20, MINUTE}", resp)
	}
	// The response carries Retry-After for Envoy to add to its 429.
	var retry string
	for _, h := range resp.ResponseHeadersToAdd {
		if strings.EqualFold(h.Key, "Retry-After") {
			retry = h.Value
		}
	}
	if retry != "30" {
		t.Errorf("Retry-After %q, want 30 (the window has 30s left)", retry)
	}
	if got := ts.metric(`sluice_decisions_total{policy="rls:edge",result="refused"}`); !strings.HasSuffix(got, " 1") {
		t.Errorf("metrics: %q", got)
	}
	// gRPC health, registered once by rls.Service.Register.
	hr, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlsv3.RateLimitService_ServiceDesc.ServiceName})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v, %v", hr, err)
	}
}

// Envoy's rate limit service answers as the reference does by default:
// no response headers, and a request refused by one descriptor still
// spends from the others. Options turn on the RateLimit fields and
// all-or-nothing decisions.
func TestEnvoyOptions(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(`domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 5}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	both := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "a", Value: "1"}}},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "b", Value: "1"}}},
	}}
	for _, tc := range []struct {
		name string
		o    Options
		// left is what b has left after two requests of both, the second
		// refused by a.
		left    uint32
		headers bool
	}{
		{"default", Options{}, 3, false},
		{"headers", Options{EnvoyHeaders: true}, 3, true},
		{"refused consume nothing", Options{EnvoyRefusedConsumeNothing: true}, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.EnvoyConfigs = []string{cfg}
			ts := startServer(t, "", tc.o)
			c, _ := envoyClient(t, ts)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var resp *rlsv3.RateLimitResponse
			for range 2 {
				var err error
				if resp, err = c.ShouldRateLimit(ctx, both); err != nil {
					t.Fatal(err)
				}
			}
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("second request: %v, want OVER_LIMIT", resp)
			}
			if got := len(resp.ResponseHeadersToAdd) > 0; got != tc.headers {
				t.Errorf("response_headers_to_add %v, want some: %v", resp.ResponseHeadersToAdd, tc.headers)
			}
			b := ask(t, c, "d", "b", "1")
			if got := b.Statuses[0].LimitRemaining; got != tc.left-1 {
				t.Errorf("b has %d left after a third request, want %d", got, tc.left-1)
			}
		})
	}
}

// A call larger than the gRPC listener takes (256 KiB) is refused by
// gRPC before it is decoded, which would cost some 25 times its size; a
// large call under it is decided.
func TestEnvoyMessageBound(t *testing.T) {
	ts := startServer(t, "", Options{EnvoyConfigs: []string{"../examples/envoy/config"}})
	c, _ := envoyClient(t, ts)
	call := func(size int) error {
		d := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
			{Key: "remote_address", Value: strings.Repeat("a", size)},
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		return err
	}
	if err := call(200 << 10); err != nil {
		t.Errorf("a 200 KiB call: %v, want it decided", err)
	}
	if err := call(300 << 10); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a 300 KiB call: %v, want ResourceExhausted", err)
	}
}

// The Envoy configuration reloads too, from a directory as a ConfigMap
// mounts it.
func TestEnvoyReload(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "edge.yaml", "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	ts := startServer(t, "", Options{EnvoyConfigs: []string{dir}})
	c, _ := envoyClient(t, ts)
	if r := ask(t, c, "edge", "k", "v"); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Fatalf("before: %v", r)
	}
	if err := os.WriteFile(cfg, []byte("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := ask(t, c, "edge", "k", "v"); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 {
		t.Fatalf("after the reload: %v", r)
	}
	// A broken file keeps the old limits.
	writeFile(t, dir, "zz.yaml", "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	err := ts.Reload(context.Background())
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "zz.yaml")+":4") {
		t.Fatalf("reload of a broken file: %v, want its file:line", err)
	}
	if r := ask(t, c, "edge", "k", "v"); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 {
		t.Fatalf("after a failed reload: %v", r)
	}
}
