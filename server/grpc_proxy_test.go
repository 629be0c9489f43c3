package server

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcService is the upstream of the gRPC tests. UnaryCall answers with
// the payload it was sent, or, for a call whose metadata has "hang",
// sends nothing until the call ends; FullDuplexCall echoes each message
// as it comes.
type grpcService struct {
	testgrpc.UnimplementedTestServiceServer
	calls  atomic.Int64  // the UnaryCalls that reached it
	opened chan struct{} // if not nil, told of each FullDuplexCall as it begins
}

func (s *grpcService) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.calls.Add(1)
	if md, _ := metadata.FromIncomingContext(ctx); len(md["hang"]) > 0 {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &testgrpc.SimpleResponse{Payload: req.GetPayload()}, nil
}

func (s *grpcService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	if s.opened != nil {
		s.opened <- struct{}{}
	}
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// grpcUpstream starts a gRPC server of svc on loopback, over TLS with a
// certificate of ca, or in plaintext with ca nil, and returns its URL for
// Options.Upstream: https:// or h2c://.
func grpcUpstream(t *testing.T, ca *testCA, svc *grpcService) string {
	t.Helper()
	var opts []grpc.ServerOption
	scheme := "h2c://"
	if ca != nil {
		c, k := ca.leaf(10, false)
		cert, err := tls.X509KeyPair([]byte(c), []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
		scheme = "https://"
	}
	srv := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(srv, svc)
	l := localListener(t)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return scheme + l.Addr().String()
}

// grpcProxy starts sluice on policy and o in front of upstream, with TLS
// on its proxy listener when ca is not nil (the upstream, if https://,
// trusted by ca too), and returns it with a client of the test service
// through it, made with opts.
func grpcProxy(t *testing.T, ca *testCA, policy, upstream string, o Options, opts ...grpc.DialOption) (*testServer, testgrpc.TestServiceClient) {
	t.Helper()
	o.Upstream = upstream
	creds := insecure.NewCredentials()
	if ca != nil {
		o.TLSCert, o.TLSKey = ca.serverFiles(t.TempDir(), 2)
		creds = credentials.NewTLS(&tls.Config{RootCAs: ca.pool})
	}
	ts := newServer(t, policy, o)
	if strings.HasPrefix(upstream, "https://") {
		ts.trans.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: ca.pool}
		ts.grpcTrans.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: ca.pool}
	}
	ts.run()
	conn, err := grpc.NewClient("passthrough:///"+ts.Addrs().Proxy, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return ts, testgrpc.NewTestServiceClient(conn)
}

// unary makes a UnaryCall of payload, within 10 seconds, and returns its
// error and the metadata of its trailer, where a trailers-only answer's
// metadata is.
func unary(c testgrpc.TestServiceClient, payload string, md ...string) (metadata.MD, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	var trailer metadata.MD
	res, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte(payload)}}, grpc.Trailer(&trailer))
	if err == nil && string(res.GetPayload().GetBody()) != payload {
		return trailer, status.Errorf(codes.DataLoss, "answered %q, want %q", res.GetPayload().GetBody(), payload)
	}
	return trailer, err
}

// echo sends payload on a FullDuplexCall and waits up to 5 seconds for it
// to come back.
func echo(t *testing.T, stream testgrpc.TestService_FullDuplexCallClient, payload string) {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		if err := stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte(payload)}}); err != nil {
			got <- err
			return
		}
		res, err := stream.Recv()
		if err == nil && string(res.GetPayload().GetBody()) != payload {
			err = status.Errorf(codes.DataLoss, "echoed %q, want %q", res.GetPayload().GetBody(), payload)
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("echo of %q: %v", payload, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("echo of %q: no reply within 5s", payload)
	}
}

// A call the policies refuse reaches a gRPC client as RESOURCE_EXHAUSTED,
// as grpclimit answers it, with a RetryInfo and grpc-retry-pushback-ms of
// the wait and the rate limit fields as metadata: it was UNAVAILABLE (an
// HTTP 429 with a problem body, to gRPC), which a retry policy retries at
// once, so that one call on an exhausted key became five refused
// attempts. A pushback the call's deadline would end first is -1, do not
// retry. It is counted as a 429, once.
func TestGRPCProxyRefusal(t *testing.T) {
	ca := newCA(t)
	svc := &grpcService{}
	const retrying = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "retryPolicy": {
		"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.01s", "backoffMultiplier": 1,
		"retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]}}]}`
	ts, c := grpcProxy(t, ca, "policies: [{name: api, key: ip, limits: [\"1/m\"]}]\n", grpcUpstream(t, ca, svc), Options{},
		grpc.WithDefaultServiceConfig(retrying))
	if _, err := unary(c, "first"); err != nil {
		t.Fatalf("the first call: %v", err)
	}
	var md metadata.MD
	var err error
	ts.countedOnce("a refused call, with a retry policy", "429", func() { md, err = unary(c, "second") })
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "api") {
		t.Fatalf("a refused call: %v, want RESOURCE_EXHAUSTED naming the policy", err)
	}
	if n := svc.calls.Load(); n != 1 {
		t.Errorf("the upstream got %d calls, want 1", n)
	}
	retryAfter, perr := strconv.Atoi(strings.Join(md["retry-after"], ","))
	if perr != nil || retryAfter <= 0 || len(md["ratelimit"]) == 0 || len(md["ratelimit-policy"]) == 0 {
		t.Errorf("a refusal's metadata: %v, want retry-after, ratelimit and ratelimit-policy", md)
	}
	if got := md["grpc-retry-pushback-ms"]; len(got) != 1 || got[0] != "-1" {
		t.Errorf("a refusal longer than the call's 10s deadline: grpc-retry-pushback-ms %q, want -1", got)
	}
	var info *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			info = ri
		}
	}
	if info == nil || info.GetRetryDelay().AsDuration() != time.Duration(retryAfter)*time.Second {
		t.Errorf("a refusal's details: %v, want a RetryInfo of %ds", st.Details(), retryAfter)
	}
	if ct := md["content-type"]; len(ct) != 1 || ct[0] != "application/grpc" || len(md["cache-control"]) > 0 {
		t.Errorf("a refusal's metadata: %v, want application/grpc and no problem+json fields", md)
	}

	// Without a deadline, the pushback is the wait (a client without
	// the retry policy, which would sleep it out).
	conn, err := grpc.NewClient("passthrough:///"+ts.Addrs().Proxy, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var trailer metadata.MD
	_, err = testgrpc.NewTestServiceClient(conn).UnaryCall(context.Background(), &testgrpc.SimpleRequest{}, grpc.Trailer(&trailer))
	want := strconv.Itoa(retryAfter * 1000)
	if got := trailer["grpc-retry-pushback-ms"]; status.Code(err) != codes.ResourceExhausted || len(got) != 1 || got[0] != want {
		t.Errorf("a refusal with no deadline: %v, grpc-retry-pushback-ms %q, want RESOURCE_EXHAUSTED and %s", err, got, want)
	}
}

// A full-duplex call gets its replies as it sends, with request buffering
// on (the default): the proxy read its body to 64 KiB or its end, while
// the client waited for a reply, until --body-timeout. Nor does
// --body-timeout cut a stream its client is silent on: a gRPC call's
// time is the client's deadline.
func TestGRPCProxyBidiStream(t *testing.T) {
	const idle = 100 * time.Millisecond
	ca := newCA(t)
	_, c := grpcProxy(t, ca, "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n", grpcUpstream(t, ca, &grpcService{}),
		Options{BodyTimeout: idle})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, stream, "one")
	// No event to wait for: the stream must outlive the body timeout.
	time.Sleep(4 * idle)
	echo(t, stream, "two")
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("the end of the stream: %v, want io.EOF", err)
	}
}

// gRPC passes in plaintext both ways: the proxy listener takes HTTP/2
// with prior knowledge, and an h2c:// upstream is spoken to in it. The
// listener took the preface for an HTTP/1 request and answered 405, and
// an http:// upstream got HTTP/1.1, which a gRPC server refuses.
func TestGRPCProxyPlaintext(t *testing.T) {
	ts, c := grpcProxy(t, nil, "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n", grpcUpstream(t, nil, &grpcService{}), Options{})
	ts.countedOnce("a unary call", "allowed", func() {
		if _, err := unary(c, "plain"); err != nil {
			t.Errorf("a unary call in plaintext: %v", err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, stream, "plain")

	down, c := grpcProxy(t, nil, "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n", "h2c://"+refusingAddr(t), Options{})
	down.countedOnce("an h2c upstream down", "502", func() {
		if _, err := unary(c, "x"); status.Code(err) != codes.Unavailable {
			t.Errorf("an h2c upstream down: %v, want UNAVAILABLE", err)
		}
	})
}

// The proxy's own answers to a gRPC call are gRPC's: an upstream that
// cannot be reached is UNAVAILABLE (it was UNAVAILABLE, and unreadable:
// "unexpected HTTP status code"), counted as a 502. One that does not
// answer within --upstream-timeout is not cut: a gRPC call's bound is its
// client's deadline, and a call that reaches it is the client's own
// DEADLINE_EXCEEDED, counted as allowed, as any request whose client
// gave up on it.
func TestGRPCProxyUpstreamFailures(t *testing.T) {
	ca := newCA(t)
	const policy = "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n"
	down, c := grpcProxy(t, ca, policy, "https://"+refusingAddr(t), Options{})
	down.countedOnce("the upstream down", "502", func() {
		if _, err := unary(c, "x"); status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "the upstream failed to answer" {
			t.Errorf("the upstream down: %v, want UNAVAILABLE, the upstream failed", err)
		}
	})
	hung, c := grpcProxy(t, ca, policy, grpcUpstream(t, ca, &grpcService{}), Options{UpstreamTimeout: 200 * time.Millisecond})
	hung.countedOnce("the upstream hung", "allowed", func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "hang", "1")
		_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if status.Code(err) != codes.DeadlineExceeded || strings.Contains(status.Convert(err).Message(), "upstream did not answer") {
			t.Errorf("the upstream hung: %v, want DEADLINE_EXCEEDED at the client's deadline", err)
		}
		eventually(t, "the proxy's handler to return", func() bool { return hung.serving.Load() == 0 })
	})
	if logs := hung.logs.String(); strings.Contains(logs, "upstream failed") {
		t.Errorf("a call its client gave up on was logged as an upstream failure:\n%s", logs)
	}
}

// A call shed by the concurrency limit is UNAVAILABLE, as grpclimit
// answers it, counted as a 503: an open stream holds its slot for its
// life.
func TestGRPCProxyShed(t *testing.T) {
	ca := newCA(t)
	const policy = `
concurrency:
  max_in_flight: 1
  shares: {low: 100%, normal: 100%, critical: 100%}
policies:
  - {name: api, limits: ["1000/s"]}
`
	ts, c := grpcProxy(t, ca, policy, grpcUpstream(t, ca, &grpcService{}), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, stream, "held")
	ts.countedOnce("a call with a stream open", "503", func() {
		md, err := unary(c, "x")
		if status.Code(err) != codes.Unavailable || len(md["grpc-retry-pushback-ms"]) != 1 {
			t.Errorf("a call with a stream open: %v %v, want UNAVAILABLE with a pushback", err, md)
		}
	})
}
