package rls_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/rls"
	"github.com/sluicehq/sluice/store/memory"
)

// A configuration written for Envoy's reference rate limit service, served
// over gRPC the way Envoy calls it.
func ExampleNewService() {
	cfg, err := rls.Parse(rls.File{Name: "messaging.yaml", Data: []byte(`
domain: messaging
descriptors:
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 2
`)})
	if err != nil {
		log.Fatal(err)
	}
	// The clock is pinned at noon UTC so that the output does not change;
	// a server leaves Clock nil.
	clock := ratetest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	store := memory.New(memory.Options{Clock: clock})
	svc := rls.NewService(cfg, store, rls.Options{Clock: clock})

	srv := grpc.NewServer()
	svc.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)

	req := &rlsv3.RateLimitRequest{
		Domain: "messaging",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "to_number", Value: "2061111111"}},
		}},
	}
	for range 3 {
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		s := resp.GetStatuses()[0]
		fmt.Printf("%v: %d of %d per %v left, resets in %v\n", resp.GetOverallCode(),
			s.GetLimitRemaining(), s.GetCurrentLimit().GetRequestsPerUnit(),
			s.GetCurrentLimit().GetUnit(), s.GetDurationUntilReset().AsDuration())
	}
	// Output:
	// OK: 1 of 2 per DAY left, resets in 12h0m0s
	// OK: 0 of 2 per DAY left, resets in 12h0m0s
	// OVER_LIMIT: 0 of 2 per DAY left, resets in 12h0m0s
}

// Every problem in a configuration is reported with its file and line.
func ExampleParse() {
	_, err := rls.Parse(rls.File{Name: "config/edge.yaml", Data: []byte(`domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minutes
      requests_per_unit: 20
  - key: remote_address
    rate_limit:
      unlimited: true
      requests_per_unit: 5
`)})
	fmt.Println(err)
	// Output:
	// config/edge.yaml:5: invalid rate limit unit "minutes" (want second, minute, hour, day, week, month or year)
	// config/edge.yaml:7: duplicate descriptor key "remote_address" with no value (first at line 3)
	// config/edge.yaml:10: an unlimited limit takes no requests_per_unit
}
