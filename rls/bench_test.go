package rls

import (
	"context"
	"strconv"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/store/memory"
)

// BenchmarkShouldRateLimit measures a request with two descriptors
// against the memory store, called directly (no gRPC): the cost this
// package adds to the store's; headers is the reference's counting with
// the RateLimit headers sluice serve adds.
func BenchmarkShouldRateLimit(b *testing.B) {
	cfg, err := LoadFiles("testdata/messaging.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct {
		name string
		opts Options
	}{{"reference", Options{}}, {"consume_nothing", Options{RefusedConsumeNothing: true}}, {"headers", Options{Headers: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			svc := NewService(cfg, memory.New(memory.Options{}), mode.opts)
			reqs := make([]*rlsv3.RateLimitRequest, 1024)
			for i := range reqs {
				n := strconv.Itoa(2060000000 + i)
				reqs[i] = &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitv3.RateLimitDescriptor{
					desc("message_type", "marketing", "to_number", n), desc("to_number", n),
				}}
			}
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
