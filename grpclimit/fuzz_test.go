package grpclimit

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
)

// FuzzUnary sends arbitrary calls (method name, :authority, metadata,
// peer) through policies that read every part of them. It checks that
// Unary never panics, and that a call it does not serve fails with the
// limiter's codes only.
func FuzzUnary(f *testing.F) {
	set, err := policy.Load("f.yaml", []byte(`
client_ip: {trusted_proxies: [0.0.0.0/0, "::/0"], header: Forwarded}
plans: {names: [free, pro], default: free, header: x-plan}
policies:
  - {name: a, match: "/pkg.Svc/{m}", key: [ip, "header:x-api-key", "path:m", method], limits: ["2/m"]}
  - {name: b, match: "api.example.com/", key: ["header:x-k", "form:f"], limits: ["2/m"], max_delay: 1s}
  - {name: c, key: user, limits: ["3/m"], plans: {pro: ["5/m"]}}
`))
	if err != nil {
		f.Fatal(err)
	}
	l := New(set, memory.New(memory.Options{}), Options{Identify: func(ctx context.Context) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md["x-user"]; len(v) > 0 {
			return v[0]
		}
		return ""
	}})
	f.Add("/pkg.Svc/M", "api.example.com", "k", "for=1.2.3.4", "tcp", "1.2.3.4:5", "free")
	f.Add("//pkg.Svc/../M", "API.EXAMPLE.COM.", "", `for="[::1]:80"`, "unix", "10.0.0.1", "pro")
	f.Add("", "[::1", "\x00\xff", "for=", "", "", "")
	handler := func(context.Context, any) (any, error) { return nil, nil }
	f.Fuzz(func(t *testing.T, method, authority, key, fwd, network, addr, plan string) {
		ctx := context.Background()
		if network != "" {
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: strAddr{network, addr}})
		} else if addr != "" {
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(addr)}})
		}
		ctx = metadata.NewIncomingContext(ctx, metadata.MD{
			":authority": {authority}, "x-api-key": {key}, "x-k": {key, fwd}, "forwarded": {fwd, key},
			"x-plan": {plan}, "x-user": {key},
		})
		ctx = grpc.NewContextWithServerTransportStream(ctx, headerSink{})
		for range 4 { // so that the limits refuse some
			_, err := l.Unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, handler)
			if c := status.Code(err); c != codes.OK && c != codes.ResourceExhausted && c != codes.Unavailable {
				t.Fatalf("%v, want a refusal or nothing", err)
			}
		}
	})
}

// strAddr is a peer address of any network and text.
type strAddr struct{ network, s string }

func (a strAddr) Network() string { return a.network }
func (a strAddr) String() string  { return a.s }
