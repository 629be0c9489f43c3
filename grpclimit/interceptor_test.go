package grpclimit

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

const config = `
policies:
  - name: check
    match: /grpc.health.v1.Health/Check
    key: ip
    limits: ["2/m burst 2"]
  - name: watch
    match: /grpc.health.v1.Health/Watch
    key: "header:x-api-key"
    limits: ["1/m burst 1"]
`

// serve starts a real gRPC server with the health service on a loopback
// port, behind the limiter's interceptors, and returns a client.
func serve(t *testing.T, config string) healthpb.HealthClient {
	t.Helper()
	return serveStore(t, config, nil)
}

// serveStore is serve deciding against store, or an in-memory store if
// nil.
func serveStore(t *testing.T, config string, store sluice.Store) healthpb.HealthClient {
	t.Helper()
	l := limiterAt(t, config, store)
	return serveWith(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.Unary), grpc.ChainStreamInterceptor(l.Stream)})
}

// limiterAt loads config into a Limiter that decides against store, or an
// in-memory store if nil, on a fake clock that stands still.
func limiterAt(t *testing.T, config string, store sluice.Store) *Limiter {
	t.Helper()
	return limiterWith(t, config, store, Options{})
}

// limiterWith is limiterAt with options o, on its fake clock.
func limiterWith(t *testing.T, config string, store sluice.Store, o Options) *Limiter {
	t.Helper()
	set, err := policy.Load("test.yaml", []byte(config))
	if err != nil {
		t.Fatal(err)
	}
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	if store == nil {
		store = memory.New(memory.Options{Clock: clock})
	}
	o.Clock = clock
	return New(set, store, o)
}

// serveWith starts a real gRPC server made with opts (the interceptors
// under test), with the health service, on a loopback port, and returns a
// client dialed with dialOpts.
func serveWith(t *testing.T, opts []grpc.ServerOption, dialOpts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func TestUnaryRefusesAfterLimit(t *testing.T) {
	c := serve(t, config)
	ctx := context.Background()
	for i := range 2 {
		var md metadata.MD
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := md.Get("ratelimit-policy"); len(got) != 1 || got[0] != `"check";q=2;w=60` {
			t.Errorf("call %d: ratelimit-policy %q", i, got)
		}
	}
	// A refusal is trailers-only, as gRPC errors usually are, so that the
	// call is not committed and gRPC's own retries may retry it.
	var md, trailer metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md), grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", err)
	}
	if len(md) != 0 {
		t.Errorf("a refusal sent headers %v: the call is committed, and gRPC retries cannot retry it", md)
	}
	for k, want := range map[string]string{"retry-after": "30", "grpc-retry-pushback-ms": "30000", "ratelimit": `"check";r=0;t=30`} {
		if got := trailer.Get(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s trailer %q, want %q", k, got, want)
		}
	}
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.QuotaFailure:
			quota = d
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() != 30*time.Second {
		t.Errorf("RetryInfo %v, want a 30s delay", retry)
	}
	if quota == nil || len(quota.Violations) != 1 || quota.Violations[0].Subject != "policy:check" ||
		quota.Violations[0].Description != `rate limited by policy "check" (limit gcra 2/m burst 2)` {
		t.Errorf("QuotaFailure %v, want one violation of policy:check", quota)
	}
	if want := `rate limited by policy "check" (limit gcra 2/m burst 2); retry in 30s`; st.Message() != want {
		t.Errorf("message %q, want %q", st.Message(), want)
	}
}

// gRPC's own retries wait what the refusal says: a client whose retry
// policy lists RESOURCE_EXHAUSTED waits out grpc-retry-pushback-ms before
// its second attempt, where its own backoff would retry within a
// millisecond.
func TestNativeRetryWaitsPushback(t *testing.T) {
	// The server's clock stands still: every refusal says 80ms.
	l := limiterAt(t, `
policies:
  - {name: check, match: /grpc.health.v1.Health/Check, limits: ["fixed_window 1 per 80ms"]}
`, nil)
	var attempts atomic.Int32
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		attempts.Add(1)
		return h(ctx, req)
	}
	c := serveWith(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(count, l.Unary)},
		grpc.WithDefaultServiceConfig(`{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
		  "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
		    "backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`))
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{})
	took := time.Since(begin)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v, want ResourceExhausted after its retry", err)
	}
	if n := attempts.Load(); n != 3 {
		t.Errorf("the server saw %d attempts, want 3: one call, then one refused and retried", n)
	}
	if took < 80*time.Millisecond {
		t.Errorf("the retry came after %v, want at least the 80ms pushback", took)
	}
}

// A call the limiter allows and its handler then fails (a backend blip)
// stays trailers-only, so that gRPC's own retries still retry it: the
// rate limit metadata goes with the headers only when the handler sends
// them, and otherwise with the trailers, where gRPC would send headers
// set before the failure in a frame of their own and the client take
// the call as committed. The retry, served, has the metadata in its
// headers.
func TestAllowedCallThatFailsIsRetried(t *testing.T) {
	l := limiterAt(t, `
policies:
  - {name: health, match: /grpc.health.v1.Health/, limits: ["100/m"]}
`, nil)
	var unaryTries, streamTries atomic.Int32
	blipUnary := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if unaryTries.Add(1) == 1 {
			return nil, status.Error(codes.Unavailable, "backend blip")
		}
		return h(ctx, req)
	}
	blipStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if streamTries.Add(1) == 1 {
			return status.Error(codes.Unavailable, "backend blip")
		}
		return h(srv, ss)
	}
	c := serveWith(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.Unary, blipUnary), grpc.ChainStreamInterceptor(l.Stream, blipStream)},
		grpc.WithDefaultServiceConfig(`{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
		  "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
		    "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`))
	const policyMD = `"health";q=100;w=60`

	var md metadata.MD
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md)); err != nil {
		t.Errorf("unary: %v after %d attempt(s), want the retry served", err, unaryTries.Load())
	} else if got := md.Get("ratelimit-policy"); len(got) != 1 || got[0] != policyMD {
		t.Errorf("unary: ratelimit-policy header %q, want %s", got, policyMD)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatalf("stream: %v after %d attempt(s), want the retry served", err, streamTries.Load())
	}
	md, err = s.Header()
	if got := md.Get("ratelimit-policy"); err != nil || len(got) != 1 || got[0] != policyMD {
		t.Errorf("stream: ratelimit-policy header %q (%v), want %s", got, err, policyMD)
	}
}

// Two Limiters chained, one for the whole server and one for a service:
// the inner one's refusal stays trailers-only, and so is retried after
// its pushback, because the outer one adds its metadata to the headers
// only of a call that is served. Both send their ratelimit item, in the
// trailers.
func TestChainedLimitersRefusalIsRetried(t *testing.T) {
	outer := limiterAt(t, `
policies:
  - {name: all, limits: ["1000/s"]}
`, nil)
	inner := limiterAt(t, `
policies:
  - {name: check, match: /grpc.health.v1.Health/Check, limits: ["fixed_window 1 per 80ms"]}
`, nil)
	var attempts atomic.Int32
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		attempts.Add(1)
		return h(ctx, req)
	}
	c := serveWith(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(count, outer.Unary, inner.Unary)},
		grpc.WithDefaultServiceConfig(`{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
		  "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
		    "backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`))
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	var header, trailer metadata.MD
	_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v, want ResourceExhausted after its retry", err)
	}
	if n := attempts.Load(); n != 3 {
		t.Errorf("the server saw %d attempts, want 3: one call, then one refused and retried", n)
	}
	if len(header) != 0 {
		t.Errorf("the refusal sent headers %v", header)
	}
	if got := trailer.Get("ratelimit"); len(got) != 2 {
		t.Errorf("ratelimit trailer %q, want the items of both limiters", got)
	}
}

func TestStreamKeyedByMetadata(t *testing.T) {
	c := serve(t, config)
	open := func(key string) error {
		ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key))
		defer cancel()
		s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	if err := open("k1"); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	if err := open("k1"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream of k1: %v, want ResourceExhausted", err)
	}
	if err := open("k2"); err != nil {
		t.Fatalf("k2 is not k1: %v", err)
	}
}

func TestShedIsUnavailable(t *testing.T) {
	c := serve(t, `
concurrency:
  max_in_flight: 1
  shares: {low: 1%}
policies:
  - {name: health, match: /grpc.health.v1.Health/, priority: low}
`)
	// One slot, and low may use 1% of it: rounded up to one, so a single
	// call passes while nothing else is in flight.
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("alone: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil { // the stream is open and holds the slot
		t.Fatal(err)
	}
	_, err = c.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("while the stream holds the slot: %v, want Unavailable", err)
	}
}

// timingOut is a store whose every call fails as a Redis store's does when
// its own call timeout (CallTimeout) expires: with a wrapped
// context.DeadlineExceeded, while the caller's context is alive.
type timingOut struct{}

var errStoreTimeout = fmt.Errorf("redis store: %w", context.DeadlineExceeded)

func (timingOut) Decide(context.Context, rate.Request) (rate.Decision, error) {
	return rate.Decision{}, errStoreTimeout
}

func (timingOut) DecideAll(context.Context, []rate.Request, []rate.Decision) (rate.Decision, error) {
	return rate.Decision{}, errStoreTimeout
}

// A store that times out under on_store_error: closed makes the call
// UNAVAILABLE with a RetryInfo, as any other store failure: the store's
// own deadline is not the call's, and DEADLINE_EXCEEDED would tell the
// client that its deadline passed, which clients do not retry.
func TestStoreTimeoutIsUnavailable(t *testing.T) {
	c := serveStore(t, `
policies:
  - name: check
    match: /grpc.health.v1.Health/Check
    limits: ["2/m"]
    on_store_error: closed
`, timingOut{})
	var md metadata.MD
	_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Trailer(&md))
	st := status.Convert(err)
	if st.Code() != codes.Unavailable {
		t.Fatalf("store timed out: %v, want Unavailable", err)
	}
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if d, ok := d.(*errdetails.RetryInfo); ok {
			retry = d
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() != time.Second {
		t.Errorf("RetryInfo %v, want a 1s delay", retry)
	}
	if got := md.Get("retry-after"); len(got) != 1 || got[0] != "1" {
		t.Errorf("retry-after metadata %q, want 1", got)
	}
}

// A client that reaches the server over a Unix socket can bind its own
// end to any path, and the server then reads that path as the peer's
// address: a client bound to "10.0.0.1" must not pass for a trusted
// proxy, nor choose its ip key. Every Unix socket peer is one client with
// no address, and its forwarding metadata is not believed.
func TestUnixPeerNameIsNoAddress(t *testing.T) {
	l := limiterAt(t, `
client_ip: {trusted_proxies: [10.0.0.0/8]}
policies:
  - {name: check, match: /grpc.health.v1.Health/Check, key: ip, limits: ["1/m burst 1"]}
`, nil)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(l.Unary))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	t.Chdir(t.TempDir()) // the client binds a relative path
	lis, err := net.Listen("unix", "server.sock")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.UnixAddr{Name: "10.0.0.1", Net: "unix"}}
		return d.DialContext(ctx, "unix", "server.sock")
	}
	conn, err := grpc.NewClient("passthrough:///server.sock", grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := healthpb.NewHealthClient(conn)
	for i, client := range []string{"203.0.113.1", "203.0.113.2"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", client)
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		if want := []codes.Code{codes.OK, codes.ResourceExhausted}[i]; status.Code(err) != want {
			t.Fatalf("call %d, claiming to be %s: %v, want %v", i, client, err, want)
		}
	}
}

// A server with an unknown service handler (a gRPC proxy) sees the method
// names clients write, and "/pkg.Svc//M" or "/x/../pkg.Svc/M" are what a
// hop that cleans paths routes to /pkg.Svc/M. Policies must match them as
// that method: net/http's ServeMux answers an unclean path with a
// redirect, which matched no policy at all, not even one that matches
// every path.
func TestUncleanMethodMatchesCleanPolicy(t *testing.T) {
	set, err := policy.Load("test.yaml", []byte(`
policies:
  - {name: svc, match: /pkg.Svc/, limits: ["1/m burst 1"]}
  - {name: all, match: /, key: "header:x-k", limits: ["1/m burst 1"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	l := New(set, memory.New(memory.Options{}), Options{})
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(l.Stream),
		grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
			return status.Error(codes.Unimplemented, "forwarded")
		}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	call := func(method, k string) error {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-k", k)
		return conn.Invoke(ctx, method, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
	}
	if err := call("/pkg.Svc/M", "a"); status.Code(err) != codes.Unimplemented {
		t.Fatalf("first call: %v, want it forwarded", err)
	}
	if err := call("/other/M", "b"); status.Code(err) != codes.Unimplemented {
		t.Fatalf("first call of key b: %v, want it forwarded", err)
	}
	for _, m := range []string{"/pkg.Svc//M", "/pkg.Svc/./M", "/x/../pkg.Svc/M", "//pkg.Svc/M"} {
		if err := call(m, "c"); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%s: %v, want ResourceExhausted by policy svc", m, err)
		}
	}
	for _, m := range []string{"/other//M", "/other/./M/", "/other/M/.."} {
		if err := call(m, "b"); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%s of key b: %v, want ResourceExhausted by policy all", m, err)
		}
	}
}

// An interceptor that runs before the limiter may send the response
// headers itself (a request id, sent at once). The rate limit metadata
// can then no longer go with the headers, and goes with the trailers
// instead: a refused call must still tell when to retry.
func TestMetadataAfterHeadersSentGoesInTrailers(t *testing.T) {
	l := limiterAt(t, config, nil)
	id := metadata.Pairs("x-request-id", "r1")
	sendUnary := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := grpc.SendHeader(ctx, id); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
	sendStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := ss.SendHeader(id); err != nil {
			return err
		}
		return h(srv, ss)
	}
	c := serveWith(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(sendUnary, l.Unary), grpc.ChainStreamInterceptor(sendStream, l.Stream)})

	for i, want := range []string{"", "", "30"} {
		var header, trailer metadata.MD
		_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		if got := header.Get("x-request-id"); len(got) != 1 {
			t.Errorf("unary call %d: x-request-id %q: the interceptor did not send the headers", i, got)
		}
		if got := trailer.Get("ratelimit-policy"); len(got) != 1 || got[0] != `"check";q=2;w=60` {
			t.Errorf("unary call %d (%v): ratelimit-policy trailer %q", i, err, got)
		}
		if got := trailer.Get("retry-after"); want != "" && (len(got) != 1 || got[0] != want) {
			t.Errorf("unary call %d (%v): retry-after trailer %q, want %s", i, err, got, want)
		}
	}

	for i, want := range []string{"", "60"} {
		ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k"))
		s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); want != "" {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("stream %d: %v, want ResourceExhausted", i, err)
			}
			if got := s.Trailer().Get("retry-after"); len(got) != 1 || got[0] != want {
				t.Errorf("stream %d: retry-after trailer %q, want %s", i, got, want)
			}
		}
		cancel()
		// The first stream's trailers come only once it ends: its headers
		// and trailers are checked through the refused one.
	}
}

// A plan header is believed from a trusted peer only, over gRPC as over
// HTTP: a call from the trusted proxy gets the plan it names, one from
// any other peer the default.
func TestPlanHeaderFromTrustedPeer(t *testing.T) {
	l := limiterAt(t, `
client_ip: {trusted_proxies: [192.0.2.1]}
plans: {names: [free, pro], default: free, header: x-plan}
policies:
  - {name: api, key: "header:x-api-key", limits: ["1/m burst 1"], plans: {pro: ["3/m burst 3"]}}
`, nil)
	handler := func(context.Context, any) (any, error) { return nil, nil }
	allowed := func(peerIP net.IP, key string) int {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: peerIP, Port: 4242}})
		ctx = metadata.NewIncomingContext(ctx, metadata.MD{"x-plan": {"pro"}, "x-api-key": {key}})
		ctx = grpc.NewContextWithServerTransportStream(ctx, headerSink{})
		n := 0
		for range 5 {
			if _, err := l.Unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/pkg.Svc/M"}, handler); err == nil {
				n++
			}
		}
		return n
	}
	if n := allowed(net.IPv4(192, 0, 2, 1), "a"); n != 3 {
		t.Errorf("x-plan: pro from the trusted proxy: %d of 5 allowed, want the pro plan's 3", n)
	}
	if n := allowed(net.IPv4(203, 0, 113, 9), "b"); n != 1 {
		t.Errorf("x-plan: pro from a client: %d of 5 allowed, want the free plan's 1", n)
	}
}

// retryExhausted is the service config of a client whose retry policy
// lists RESOURCE_EXHAUSTED, with a backoff of its own far shorter than any
// refusal's wait.
const retryExhausted = `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
    "backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`

// retryInfo returns the retry delay of a status's RetryInfo, or -1 if it
// has none.
func retryInfo(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if d, ok := d.(*errdetails.RetryInfo); ok {
			return d.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

// gRPC's own retries sleep out the pushback and end only with the call's
// context: a refusal whose wait the call's deadline cannot cover must say
// not to retry (grpc-retry-pushback-ms: -1), or a client whose retry
// policy lists RESOURCE_EXHAUSTED sleeps until its deadline and fails
// with DEADLINE_EXCEEDED, the refusal's RetryInfo lost. Nor may a client
// with no deadline be parked for an hour's wait (past MaxPushback, a
// minute by default). Both get the refusal at once, with the true wait
// in its RetryInfo, after one attempt refused and none retried.
func TestRetryingClientGetsLongRefusalAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name, limit string
		deadline    time.Duration // 0: none
		wait        time.Duration // the RetryInfo's
	}{
		{"deadline before the wait", "1/m burst 1", 2 * time.Second, time.Minute},
		{"no deadline, an hour's wait", "1/h burst 1", 0, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := limiterAt(t, `
policies:
  - {name: check, match: /grpc.health.v1.Health/Check, limits: ["`+tc.limit+`"]}
`, nil)
			var attempts atomic.Int32
			count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				attempts.Add(1)
				return h(ctx, req)
			}
			c := serveWith(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(count, l.Unary)},
				grpc.WithDefaultServiceConfig(retryExhausted))
			if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
			// Before the fix the call would hang for the whole wait: give
			// up on it, without a deadline, after a few seconds.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.deadline > 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			guard := time.AfterFunc(5*time.Second, cancel)
			defer guard.Stop()
			var trailer metadata.MD
			_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
			st := status.Convert(err)
			if st.Code() != codes.ResourceExhausted {
				t.Fatalf("second call: %v, want ResourceExhausted at once", err)
			}
			if got := retryInfo(st); got != tc.wait {
				t.Errorf("RetryInfo delay %v, want the true wait, %v", got, tc.wait)
			}
			if got := trailer.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "-1" {
				t.Errorf("grpc-retry-pushback-ms %q, want -1", got)
			}
			if n := attempts.Load(); n != 2 {
				t.Errorf("the server saw %d attempts, want 2: one call, then one refused and not retried", n)
			}
		})
	}
}

// The pushback a refusal sends, by its wait, the call's deadline and
// MaxPushback: the wait in milliseconds when the client may sit it out,
// -1 (do not retry) when it is longer than MaxPushback (a minute by
// default, none when negative) or when the deadline ends first. The
// client here has no retry policy: it reads the trailer and goes.
func TestPushback(t *testing.T) {
	for _, tc := range []struct {
		limit       string
		deadline    time.Duration // 0: none
		maxPushback time.Duration
		want        string
	}{
		{"1/m burst 1", 0, 0, "60000"}, // a minute is no longer than the default
		{"1/h burst 1", 0, 0, "-1"},
		{"1/h burst 1", 0, -1, "3600000"},
		{"1/m burst 1", 0, 30 * time.Second, "-1"},
		{"1/m burst 1", 0, time.Minute, "60000"},
		{"1/m burst 1", time.Hour, 0, "60000"},
		{"1/m burst 1", 10 * time.Second, 0, "-1"},
		{"1/m burst 1", 10 * time.Second, -1, "-1"}, // no bound, but the deadline
		{"1/h burst 1", 2 * time.Hour, -1, "3600000"},
		{"fixed_window 1 per 80ms", 10 * time.Second, 0, "80"},
	} {
		name := fmt.Sprintf("%s/deadline %v/max %v", tc.limit, tc.deadline, tc.maxPushback)
		t.Run(name, func(t *testing.T) {
			l := limiterWith(t, `
policies:
  - {name: check, match: /grpc.health.v1.Health/Check, limits: ["`+tc.limit+`"]}
`, nil, Options{MaxPushback: tc.maxPushback})
			c := serveWith(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.Unary)})
			if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			var trailer metadata.MD
			_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("second call: %v, want ResourceExhausted", err)
			}
			if got := trailer.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != tc.want {
				t.Errorf("grpc-retry-pushback-ms %q, want %s", got, tc.want)
			}
		})
	}
}

// A catch-all policy, under a concurrency limit of one call, and a Limiter
// that skips the health service: health checks, unary and streamed, pass
// however many, count nowhere and take no slot, while other methods are
// decided as before, and so is a spelling of another method that starts
// as a health one (a server with an unknown service handler sees it, and
// a hop that cleans paths routes it to /pkg.Svc/M).
func TestSkippedCallsBypassTheLimiter(t *testing.T) {
	l := limiterWith(t, `
concurrency: {max_in_flight: 1}
policies:
  - {name: api, limits: ["1/m burst 1"]}
`, nil, Options{Skip: SkipServices("grpc.health.v1.Health")})
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(l.Unary), grpc.ChainStreamInterceptor(l.Stream),
		grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
			return status.Error(codes.Unimplemented, "forwarded")
		}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := healthpb.NewHealthClient(conn)

	// Two streams held open: were they counted, the second would be
	// refused, and either would hold the one slot.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 2 {
		s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Errorf("Watch %d: %v, want it skipped", i, err)
			continue
		}
		if md, _ := s.Header(); len(md.Get("ratelimit")) != 0 {
			t.Errorf("Watch %d: ratelimit header %q, want none for a skipped call", i, md.Get("ratelimit"))
		}
	}
	for i := range 3 {
		var header metadata.MD
		if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header)); err != nil {
			t.Fatalf("Check %d: %v, want it skipped", i, err)
		}
		if got := header.Get("ratelimit"); len(got) != 0 {
			t.Errorf("Check %d: ratelimit header %q, want none for a skipped call", i, got)
		}
	}
	call := func(method string) error {
		return conn.Invoke(context.Background(), method, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
	}
	if err := call("/pkg.Svc/M"); status.Code(err) != codes.Unimplemented {
		t.Fatalf("first call of another method: %v, want it forwarded", err)
	}
	for _, m := range []string{"/pkg.Svc/M", "/grpc.health.v1.Health/../pkg.Svc/M", "//grpc.health.v1.Health/Check"} {
		if err := call(m); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%s: %v, want ResourceExhausted by the catch-all", m, err)
		}
	}
}

// SkipServices skips a service's methods by their exact names only: any
// other spelling may mean another method to a hop that cleans paths, and
// is left to the policies, which decide it as that method.
func TestSkipServices(t *testing.T) {
	skip := SkipServices("grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection")
	for _, tc := range []struct {
		method string
		want   bool
	}{
		{"/grpc.health.v1.Health/Check", true},
		{"/grpc.health.v1.Health/Watch", true},
		{"/grpc.health.v1.Health/List", true},
		{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", true},
		{"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", false},
		{"/grpc.health.v1.HealthX/Check", false},
		{"/grpc.health.v1/Health/Check", false},
		{"/grpc.health.v1.Health", false},
		{"/grpc.health.v1.Health/", false},
		{"/grpc.health.v1.Health/Check/", false},
		{"grpc.health.v1.Health/Check", false},
		{"//grpc.health.v1.Health/Check", false},
		{"/grpc.health.v1.Health//Check", false},
		{"/grpc.health.v1.Health/./Check", false},
		{"/grpc.health.v1.Health/..", false},
		{"/grpc.health.v1.Health/%2e%2e", false},
		{"/grpc.health.v1.Health/../pkg.Svc/M", false},
		{"/grpc.health.v1.Health/Check;x", false},
		{"/GRPC.HEALTH.V1.HEALTH/Check", false},
		{"", false},
	} {
		if got := skip(context.Background(), tc.method); got != tc.want {
			t.Errorf("%q: skipped %v, want %v", tc.method, got, tc.want)
		}
	}
	for _, bad := range []string{"", "/grpc.health.v1.Health/", "grpc.health.v1.Health/Check", "grpc..Health", ".", ".."} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("SkipServices(%q) did not panic: it would skip nothing", bad)
				}
			}()
			SkipServices(bad)
		}()
	}
}
