package grpclimit

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
)

// BenchmarkUnaryAllowed measures the allowed path of a unary call: one
// policy matching the method and keyed by peer address, a limit far above
// the load, a handler that does nothing. The call's context, with the
// metadata a grpc-go client sends, is built once, as the gRPC server
// builds it before the interceptors run.
func BenchmarkUnaryAllowed(b *testing.B) {
	set, err := policy.Load("bench.yaml", []byte(`
policies:
  - name: check
    match: /grpc.health.v1.Health/Check
    key: ip
    limits: ["1000000000/s"]
`))
	if err != nil {
		b.Fatal(err)
	}
	l := New(set, memory.New(memory.Options{}), Options{})
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4242}})
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(
		":authority", "api.example.com", "content-type", "application/grpc", "user-agent", "grpc-go/1.79.0"))
	ctx = grpc.NewContextWithServerTransportStream(ctx, headerSink{})
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Unary(ctx, nil, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}

// headerSink is the server transport stream of a call with no
// connection: it accepts the response metadata and sends nothing.
type headerSink struct{}

func (headerSink) Method() string                  { return "/grpc.health.v1.Health/Check" }
func (headerSink) SetHeader(md metadata.MD) error  { return nil }
func (headerSink) SendHeader(md metadata.MD) error { return nil }
func (headerSink) SetTrailer(md metadata.MD) error { return nil }
