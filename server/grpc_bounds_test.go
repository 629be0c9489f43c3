package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// StreamingOutputCall sends a message of each ResponseParameters, after
// its IntervalUs: a server stream whose first message comes late, as a
// subscription's does.
func (s *grpcService) StreamingOutputCall(req *testgrpc.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	for i, p := range req.GetResponseParameters() {
		select {
		case <-time.After(time.Duration(p.GetIntervalUs()) * time.Microsecond):
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: []byte{byte('a' + i)}}}); err != nil {
			return err
		}
	}
	return nil
}

// A server stream may be silent past --upstream-timeout before its first
// message: grpc-go sends a response's header fields with its first
// message, and the transport's bound on the wait for them cut the call
// with DEADLINE_EXCEEDED, "the upstream did not answer in time". A gRPC
// call's bound is its client's deadline. Over h2c:// and https:// alike.
func TestGRPCProxyServerStreamSilentPastUpstreamTimeout(t *testing.T) {
	const bound = 200 * time.Millisecond
	for _, tls := range []bool{false, true} {
		var ca *testCA
		if tls {
			ca = newCA(t)
		}
		ts, c := grpcProxy(t, ca, "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n", grpcUpstream(t, ca, &grpcService{}),
			Options{UpstreamTimeout: bound})
		ts.countedOnce("a server stream silent past the upstream timeout", "allowed", func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{ResponseParameters: []*testgrpc.ResponseParameters{
				{IntervalUs: int32(500 * time.Millisecond / time.Microsecond)}, {},
			}})
			if err != nil {
				t.Fatal(err)
			}
			var got string
			for {
				res, err := stream.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Errorf("TLS %v: the stream after %q: %v", tls, got, err)
					return
				}
				got += string(res.GetPayload().GetBody())
			}
			if got != "ab" {
				t.Errorf("TLS %v: the stream brought %q, want \"ab\"", tls, got)
			}
		})
	}
}

// A request that claims to be a gRPC call is one only where gRPC can pass:
// to an http:// upstream, spoken to in HTTP/1.1, it is an ordinary
// request, its body buffered and bounded by --body-timeout, and answered
// in HTTP. An HTTP/2 client that claimed application/grpc and sent no body
// held an HTTP/1.1 connection to the upstream for as long as it liked.
func TestGRPCProxyClaimToHTTP1Upstream(t *testing.T) {
	const idle = 200 * time.Millisecond
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(up.Close)
	ts := startServer(t, "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n", Options{Upstream: up.URL, BodyTimeout: idle})
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	req, err := http.NewRequest("POST", "http://"+ts.Addrs().Proxy+"/grpc.testing.TestService/UnaryCall", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	ts.countedOnce("a claimed gRPC call whose body never comes", "408", func() {
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("a claimed gRPC call whose body never comes: %v, want a 408", err)
			return
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("Grpc-Status") != "" {
			t.Errorf("a claimed gRPC call whose body never comes: %d %v, want an HTTP 408 problem", resp.StatusCode, resp.Header)
		}
	})
	if n := reached.Load(); n != 0 {
		t.Errorf("the upstream got %d requests, want none", n)
	}
}

// The gRPC calls to an https:// upstream go in HTTP/2 or not at all: one
// that offers only HTTP/1.1 fails them (UNAVAILABLE, counted 502), where
// a claimed call, exempt from --body-timeout, held an HTTP/1.1 connection
// to it.
func TestGRPCProxyHTTPSUpstreamWithoutH2(t *testing.T) {
	ca := newCA(t)
	c, k := ca.leaf(11, false)
	cert, err := tls.X509KeyPair([]byte(c), []byte(k))
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		io.Copy(io.Discard, r.Body)
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	up.StartTLS()
	t.Cleanup(up.Close)
	ts, client := grpcProxy(t, ca, "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n", up.URL, Options{})
	ts.countedOnce("a gRPC call to an upstream without h2", "502", func() {
		if _, err := unary(client, "x"); status.Code(err) != codes.Unavailable {
			t.Errorf("a gRPC call to an upstream without h2: %v, want UNAVAILABLE", err)
		}
	})
	if n := reached.Load(); n != 0 {
		t.Errorf("the upstream got %d requests in HTTP/1.1, want none", n)
	}
}

// A client that goes away during a gRPC call whose body is still open
// (a stream the upstream has not answered yet) is counted as any request
// whose client went away, allowed, and logged as nothing: the transport's
// error is then its body's (the stream reset), which was answered as the
// upstream's failure, a 502 and a warning.
func TestGRPCProxyClientGoneMidStream(t *testing.T) {
	svc := &grpcService{opened: make(chan struct{}, 1)}
	ts, c := grpcProxy(t, nil, "policies: [{name: api, key: ip, limits: [\"1000/m\"]}]\n", grpcUpstream(t, nil, svc), Options{})
	for i := range 10 {
		ts.countedOnce("a stream its client left", "allowed", func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if _, err := c.FullDuplexCall(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-svc.opened:
			case <-time.After(5 * time.Second):
				t.Fatalf("stream %d: the upstream never saw it", i)
			}
			cancel()
			eventually(t, "the proxy's handler to return", func() bool { return ts.serving.Load() == 0 })
		})
	}
	if logs := ts.logs.String(); strings.Contains(logs, "upstream failed") {
		t.Errorf("streams their clients left were logged as upstream failures:\n%s", logs)
	}
}

// proxyError aborts, and logs nothing, for a request whose client has
// gone, whatever the transport's error: a stream's reset reaches the
// transport as its body's failure, not as the context's.
func TestProxyErrorClientGone(t *testing.T) {
	ts := newServer(t, "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n", Options{Upstream: "h2c://upstream.invalid"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest("POST", "/grpc.testing.TestService/FullDuplexCall", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Errorf("proxyError for a client gone: recovered %v, want http.ErrAbortHandler", p)
			}
		}()
		ts.proxyError(w, r, errors.New("client disconnected"))
	}()
	if w.Code != http.StatusOK || w.Body.Len() > 0 {
		t.Errorf("proxyError for a client gone answered %d %q, want nothing", w.Code, w.Body)
	}
	if logs := ts.logs.String(); strings.Contains(logs, "upstream failed") {
		t.Errorf("a client gone was logged as an upstream failure:\n%s", logs)
	}
}
