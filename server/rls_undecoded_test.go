package server

import (
	"bytes"
	"context"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// rawCodec sends a []byte as the message, as it is: a request no
// generated client would marshal.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }
func (rawCodec) Name() string                       { return "proto" }

// A call gRPC refuses before Envoy's service sees it (a value that is not
// UTF-8, which a proto3 string may not hold; a message over the
// listener's bound) is counted as a 400 of the grpc listener and logged,
// once a second: Envoy lets such a request through unlimited under
// failure_mode_deny: false, and nothing else would say so.
func TestEnvoyCallsRefusedUndecodedAreCounted(t *testing.T) {
	ts := startServer(t, "", Options{EnvoyConfigs: []string{"../examples/envoy/config"}})
	conn, err := grpc.NewClient(ts.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	request := func(value string) []byte {
		b, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: value}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	notUTF8 := bytes.Replace(request("AAAA"), []byte("AAAA"), []byte{0xff, 0xfe, 0xff, 0xfe}, 1)
	const badRequests = `sluice_requests_total{code="400",listener="grpc"}`
	before := ts.counter(badRequests)
	for i, c := range []struct {
		name string
		msg  []byte
		code codes.Code
	}{
		{"a value that is not UTF-8", notUTF8, codes.Internal},
		{"a message over the bound", request(strings.Repeat("a", grpcMaxRecvMsgSize)), codes.ResourceExhausted},
	} {
		var resp rlsv3.RateLimitResponse
		err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", c.msg, &resp, grpc.ForceCodec(rawCodec{}))
		if status.Code(err) != c.code {
			t.Fatalf("%s: %v, want %v", c.name, err, c.code)
		}
		eventually(t, c.name+": counted", func() bool { return ts.counter(badRequests) == before+i+1 })
	}
	// Decided calls are counted once, as before.
	c, _ := envoyClient(t, ts)
	ask(t, c, "edge", "remote_address", "203.0.113.7")
	if n := ts.counter(`sluice_requests_total{code="allowed",listener="grpc"}`); n != 1 {
		t.Errorf("a decided call counted %d times as allowed, want 1", n)
	}
	if n := ts.counter(badRequests); n != before+2 {
		t.Errorf("400s %d, want %d", n, before+2)
	}
	logs := ts.logs.String()
	if !strings.Contains(logs, "refused before it was decided") || !strings.Contains(logs, "UTF-8") {
		t.Errorf("the refusal is not logged:\n%s", logs)
	}
}
