package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// While the proxy drains, the admin listener still answers: /readyz says
// 503, as probes and load balancers should read it, and /metrics serves.
func TestShutdownReadyzAnswers503(t *testing.T) {
	up, entered, release := heldUpstream(t)
	defer close(release)
	ts := startServer(t, limit3, Options{Upstream: up})
	go http.Get("http://" + ts.Addrs().Proxy + "/slow")
	<-entered
	ts.cancel()
	eventually(t, "the drain to begin", func() bool { return ts.draining.Load() })
	resp, err := http.Get("http://" + ts.Addrs().Admin + "/readyz")
	if err != nil {
		t.Fatalf("/readyz during the drain: %v, want 503", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), "shutting down") {
		t.Errorf("/readyz during the drain: %d %q, want 503 shutting down", resp.StatusCode, b)
	}
	if got := ts.metric("sluice_inflight_requests"); got != "sluice_inflight_requests 1" {
		t.Errorf("/metrics during the drain: %q", got)
	}
}

// A websocket open at shutdown is a request in flight: it gets the
// shutdown timeout to end, and is cut (both ends closed) at the timeout,
// where http.Server.Shutdown forgets hijacked connections at once.
func TestShutdownWaitsForUpgradedConnections(t *testing.T) {
	up := wsUpstream(t)
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL})
	conn, br, _ := dialWebsocket(t, ts)
	ts.cancel()
	eventually(t, "the drain to begin", func() bool { return ts.draining.Load() })
	select {
	case err := <-ts.done:
		ts.done <- err
		t.Fatal("Run returned with a websocket open, long before the shutdown timeout")
	case <-time.After(100 * time.Millisecond):
	}
	fmt.Fprintf(conn, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo: ping\n" {
		t.Fatalf("the websocket during the drain: %q %v", line, err)
	}
	// The client ends it: the upstream closes, then the client.
	fmt.Fprintf(conn, "bye\n")
	if _, err := br.ReadString('\n'); err != io.EOF {
		t.Fatalf("the websocket after bye: %v, want EOF", err)
	}
	conn.Close()
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}

	// One that does not end is cut at the timeout.
	ts = startServer(t, untrustedPolicy, Options{Upstream: up.URL, ShutdownTimeout: 200 * time.Millisecond})
	_, br, _ = dialWebsocket(t, ts)
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadString('\n'); err != io.EOF {
		t.Errorf("the websocket after the shutdown timeout: %v, want it closed (EOF)", err)
	}
	if !strings.Contains(ts.logs.String(), "requests still open at the shutdown timeout (websockets, other upgrades) were cut") {
		t.Error("the cut websocket was not logged")
	}
}

// A client watching the gRPC health (grpc-go's client-side health
// checking) hears NOT_SERVING at shutdown, and its watch ends: it does
// not hold GracefulStop for the whole shutdown timeout.
func TestShutdownEndsHealthWatch(t *testing.T) {
	ts := startServer(t, "", Options{EnvoyConfigs: []string{"../examples/envoy/config"}, ShutdownTimeout: time.Minute})
	_, hc := envoyClient(t, ts)
	w, err := hc.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v", r, err)
	}
	ts.cancel()
	if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch at shutdown: %v %v, want NOT_SERVING", r, err)
	}
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ts.logs.String(), "were cut") {
		t.Error("the health watch was cut at the timeout instead of ended")
	}
}

// With a ShutdownDelay, the server goes on serving new requests for that
// long once Run's context ends, /readyz saying 503 meanwhile: a
// Kubernetes pod is still sent traffic for a few seconds after SIGTERM,
// and a listener closed at once refuses it. Then it drains and stops.
func TestShutdownDelayKeepsServing(t *testing.T) {
	ts := startServer(t, limit3, Options{ShutdownDelay: 300 * time.Millisecond})
	ts.cancel()
	eventually(t, "the drain to begin", func() bool { return ts.draining.Load() })
	resp, err := http.Get("http://" + ts.Addrs().Check + "/check")
	if err != nil {
		t.Fatalf("a request during the delay: %v, want it served", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a request during the delay: %d, want 200", resp.StatusCode)
	}
	if resp, err := http.Get("http://" + ts.Addrs().Admin + "/readyz"); err != nil || resp.StatusCode != 503 {
		t.Errorf("/readyz during the delay: %v %v, want 503", resp, err)
	} else {
		resp.Body.Close()
	}
	select {
	case err := <-ts.done:
		ts.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop after its delay")
	}
	if _, err := http.Get("http://" + ts.Addrs().Check + "/check"); err == nil {
		t.Error("the check listener still answers after the delay and the drain")
	}
}
