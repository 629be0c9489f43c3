package server

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// A connection to the gRPC listener is asked to go away at
// GRPCMaxConnectionAge, so that a gateway that reaches sluice through one
// address spreads its connections over instances added since.
func TestGRPCMaxConnectionAge(t *testing.T) {
	ts := startServer(t, "", Options{EnvoyConfigs: []string{"../examples/envoy/config"}, GRPCMaxConnectionAge: 200 * time.Millisecond})
	conn, err := grpc.NewClient(ts.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("the connection never became ready (%v)", s)
		}
	}
	if !conn.WaitForStateChange(ctx, connectivity.Ready) {
		t.Fatal("the connection was still open 10s after its 200ms age: no GOAWAY")
	}
}

// A client that pings an idle connection at an interval of Envoy's
// connection_keepalive kind is not told to go away (too_many_pings), as
// gRPC's default policy (no pings while idle, none within 5 minutes)
// would.
func TestGRPCIdlePingsKeepTheConnection(t *testing.T) {
	defer func(d time.Duration) { grpcMinPingInterval = d }(grpcMinPingInterval)
	grpcMinPingInterval = 20 * time.Millisecond
	ts := startServer(t, "", Options{EnvoyConfigs: []string{"../examples/envoy/config"}})
	c, err := net.Dial("tcp", ts.Addrs().GRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	var writing sync.Mutex // the reader acknowledges settings as pings go
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	goaway := make(chan string, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					writing.Lock()
					_ = fr.WriteSettingsAck()
					writing.Unlock()
				}
			case *http2.GoAwayFrame:
				goaway <- string(f.DebugData())
				return
			}
		}
	}()
	for i := range 6 {
		writing.Lock()
		err := fr.WritePing(false, [8]byte{byte(i)})
		writing.Unlock()
		if err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
		select {
		case msg := <-goaway:
			t.Fatalf("GOAWAY (%q) after %d pings 50ms apart on an idle connection", msg, i+1)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
