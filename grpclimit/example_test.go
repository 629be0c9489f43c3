package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// A gRPC server whose health checks each client may call twice a minute:
// the third call is refused with RESOURCE_EXHAUSTED, and says when to
// come back.
func Example() {
	set, err := policy.Load("policies.yaml", []byte(`
policies:
  - name: health
    match: /grpc.health.v1.Health/Check
    key: ip
    limits: ["2/m burst 2"]
`))
	if err != nil {
		log.Fatal(err)
	}
	l := grpclimit.New(set, memory.New(memory.Options{}), grpclimit.Options{})
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(l.Unary), grpc.ChainStreamInterceptor(l.Stream))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		var header, trailer metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		if err != nil {
			fmt.Println(status.Code(err), "retry-after:", trailer.Get("retry-after"))
			continue
		}
		fmt.Println("OK", "ratelimit-policy:", header.Get("ratelimit-policy"))
	}
	// Output:
	// OK ratelimit-policy: ["health";q=2;w=60]
	// OK ratelimit-policy: ["health";q=2;w=60]
	// ResourceExhausted retry-after: [30]
}

// A server with a policy on every method, whose health checks (a
// Kubernetes gRPC probe's, say) must pass whatever the clients do: the
// health service is skipped, and its calls count nowhere.
func ExampleSkipServices() {
	set, err := policy.Load("policies.yaml", []byte(`
policies:
  - {name: api, key: ip, limits: ["1/m burst 1"]}
`))
	if err != nil {
		log.Fatal(err)
	}
	l := grpclimit.New(set, memory.New(memory.Options{}), grpclimit.Options{
		Skip: grpclimit.SkipServices(healthpb.Health_ServiceDesc.ServiceName),
	})
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(l.Unary), grpc.ChainStreamInterceptor(l.Stream))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// OK
	// OK
}

// A unary interceptor keyed by metadata: each x-api-key has its own
// counter. The calls here go straight to l.Unary with the context a
// server would give them: incoming metadata, the peer, and a transport
// stream that receives the response metadata (mdSink, declared below).
func ExampleLimiter_Unary() {
	set, err := policy.Load("policies.yaml", []byte(`
policies:
  - name: per-key
    match: {headers: [{name: x-api-key, present: true}]}
    key: "header:x-api-key"
    limits: ["2/m"]
`))
	if err != nil {
		log.Fatal(err)
	}
	clock := ratetest.NewClock(time.Date(2100, 1, 4, 12, 0, 0, 0, time.UTC)) // a server leaves Clock nil
	l := grpclimit.New(set, memory.New(memory.Options{Clock: clock}), grpclimit.Options{Options: policy.Options{Clock: clock}})
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.v1.Orders/List"}
	handler := func(context.Context, any) (any, error) { return "orders", nil }

	for _, key := range []string{"pk_acme", "pk_acme", "pk_acme", "pk_initech"} {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 50000}})
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-api-key", key))
		sink := &mdSink{}
		ctx = grpc.NewContextWithServerTransportStream(ctx, sink)
		if _, err := l.Unary(ctx, nil, info, handler); err != nil {
			fmt.Println(key, status.Code(err), "trailer retry-after:", sink.trailer.Get("retry-after"))
			continue
		}
		fmt.Println(key, codes.OK, "header ratelimit:", sink.header.Get("ratelimit"))
	}
	// Output:
	// pk_acme OK header ratelimit: ["per-key";r=1;t=30]
	// pk_acme OK header ratelimit: ["per-key";r=0;t=60]
	// pk_acme ResourceExhausted trailer retry-after: [30]
	// pk_initech OK header ratelimit: ["per-key";r=1;t=30]
}

// mdSink stands in for the transport stream a server puts in the context
// of each call; it keeps the metadata the interceptor sets.
type mdSink struct{ header, trailer metadata.MD }

func (s *mdSink) Method() string { return "/shop.v1.Orders/List" }

func (s *mdSink) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}

func (s *mdSink) SendHeader(md metadata.MD) error { return s.SetHeader(md) }

func (s *mdSink) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// A limiter built in Go, without a policy file: each API key may call
// twice a minute.
func ExampleLimit() {
	lim, err := rate.ParseLimit("2/m")
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "api", Limits: []rate.Limit{lim}})
	if err != nil {
		log.Fatal(err)
	}
	byAPIKey := func(ctx context.Context, _ string) string {
		md, _ := metadata.FromIncomingContext(ctx)
		return strings.Join(md.Get("x-api-key"), ",")
	}
	k := grpclimit.Limit(limiter, byAPIKey, grpclimit.LimitOptions{})
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(k.Unary), grpc.ChainStreamInterceptor(k.Stream))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k1")
	for range 3 {
		var header metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		if err != nil {
			fmt.Println(status.Code(err), status.Convert(err).Message())
			continue
		}
		fmt.Println("OK", "ratelimit:", header.Get("ratelimit"))
	}
	// Output:
	// OK ratelimit: ["api";r=1;t=30]
	// OK ratelimit: ["api";r=0;t=60]
	// ResourceExhausted rate limited by "api" (limit gcra 2/m); retry in 30s
}
