package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/policy"
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
