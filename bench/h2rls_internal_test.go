package bench

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The lean client's tests run it against grpc-go's server, in this
// process, with a fake rate limit service whose answers each test picks.

// fakeRLS is a rate limit service answering each call with answer.
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	answer func(ctx context.Context, value string) (*rlsv3.RateLimitResponse, error)
}

// ShouldRateLimit checks that req is what the lean client sends and
// passes its entry's value to answer.
func (f *fakeRLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	d := req.GetDescriptors()
	if req.GetDomain() != "bench" || len(d) != 1 || len(d[0].GetEntries()) != 1 || d[0].GetEntries()[0].GetKey() != "remote_address" {
		return nil, status.Errorf(codes.InvalidArgument, "unexpected request %v", req)
	}
	return f.answer(ctx, d[0].GetEntries()[0].GetValue())
}

// startFakeRLS serves a fakeRLS with answer on a loopback port until the
// test ends, and returns its address and server.
func startFakeRLS(t *testing.T, answer func(ctx context.Context, value string) (*rlsv3.RateLimitResponse, error), opts ...grpc.ServerOption) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(srv, &fakeRLS{answer: answer})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), srv
}

// dialLean dials the lean client to addr until the test ends.
func dialLean(t *testing.T, addr string, keys []string) *leanRLS {
	t.Helper()
	l, err := dialLeanRLS(addr, keys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	return l
}

// okAnswer is the answer the check wants: OK, under a limit of 1000000.
func okAnswer() *rlsv3.RateLimitResponse {
	return &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code:           rlsv3.RateLimitResponse_OK,
			CurrentLimit:   &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1000000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
			LimitRemaining: 999999,
		}},
	}
}

// okOrHold answers OK at once, except to the value "hold": that call
// waits for the end of its context, after saying so on held.
func okOrHold(held chan<- struct{}) func(ctx context.Context, value string) (*rlsv3.RateLimitResponse, error) {
	return func(ctx context.Context, value string) (*rlsv3.RateLimitResponse, error) {
		if value == "hold" {
			held <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return okAnswer(), nil
	}
}

// leanTestKeys returns n (at least 3) keys: client addresses, an empty
// one, a non-ASCII one and a long one.
func leanTestKeys(n int) []string {
	keys := clientAddrs(n)
	keys[0], keys[1], keys[2] = "", "ünïcödé ☃ 😀", strings.Repeat("long.", 60)
	return keys
}

// hexOf is how the fakes echo a key in metadata, whose values must be
// printable ASCII.
func hexOf(s string) string { return hex.EncodeToString([]byte(s)) }

// receive waits up to 10 seconds for a value on ch, and fails the test
// without one.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s after 10s", what)
		panic("unreachable")
	}
}

// TestRLSLeanCallConcurrent has every caller make calls at once, and
// checks that the server decoded each request's key and that each answer
// reached the caller that asked: the fake echoes the key in a header.
func TestRLSLeanCallConcurrent(t *testing.T) {
	keys := leanTestKeys(1000)
	addr, _ := startFakeRLS(t, func(ctx context.Context, value string) (*rlsv3.RateLimitResponse, error) {
		grpc.SetHeader(ctx, metadata.Pairs("x-key", hexOf(value)))
		return okAnswer(), nil
	})
	l := dialLean(t, addr, keys)
	allCallers(t, l, 200, func(c int, i int64) error {
		if got, want := fieldValue(l.streams[c].header, "x-key"), hexOf(keys[i%int64(len(keys))]); got != want {
			return fmt.Errorf("the server saw key %s; want %s", got, want)
		}
		return nil
	})
}

// allCallers has every caller c make perCaller calls i at once, through
// l, and checks each answer with check; it fails t with every caller's
// first failure.
func allCallers(t *testing.T, l *leanRLS, perCaller int, check func(c int, i int64) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, loadCallers)
	for c := range loadCallers {
		wg.Go(func() {
			for j := range perCaller {
				i := int64(c*perCaller + j)
				err := l.do(ctx, c, i)
				if err == nil {
					err = check(c, i)
				}
				if err != nil {
					errs <- fmt.Errorf("caller %d, call %d: %w", c, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestRLSLeanCallCheck checks that an answer passes the check only when it
// is OK with exactly one status under the configured limit, whatever
// other fields it has.
func TestRLSLeanCallCheck(t *testing.T) {
	withExtras := okAnswer()
	withExtras.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: "x-ratelimit-limit", Value: "1000000"}}
	withExtras.RawBody = []byte("raw")
	withExtras.Statuses[0].DurationUntilReset = durationpb.New(time.Second)
	overLimit := okAnswer()
	overLimit.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	overLimit.Statuses[0].Code = rlsv3.RateLimitResponse_OVER_LIMIT
	limit20 := okAnswer()
	limit20.Statuses[0].CurrentLimit.RequestsPerUnit = 20
	twoStatuses := okAnswer()
	twoStatuses.Statuses = append(twoStatuses.Statuses, okAnswer().Statuses[0])
	noStatus := okAnswer()
	noStatus.Statuses = nil
	noLimit := okAnswer()
	noLimit.Statuses[0].CurrentLimit = nil

	for _, tc := range []struct {
		name   string
		answer *rlsv3.RateLimitResponse
		ok     bool
	}{
		{"ok", okAnswer(), true},
		{"ok with fields the check skips", withExtras, true},
		{"over limit", overLimit, false},
		{"limit 20", limit20, false},
		{"two statuses", twoStatuses, false},
		{"no status", noStatus, false},
		{"no current limit", noLimit, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := startFakeRLS(t, func(context.Context, string) (*rlsv3.RateLimitResponse, error) { return tc.answer, nil })
			l := dialLean(t, addr, []string{"198.18.0.1"})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := l.do(ctx, 0, 0)
			switch {
			case tc.ok && err != nil:
				t.Errorf("%v: %v; want no error", tc.answer, err)
			case !tc.ok && (err == nil || !strings.Contains(err.Error(), "want OK under the configured limit")):
				t.Errorf("%v: error %v; want the check to fail", tc.answer, err)
			}
		})
	}
}

// TestRLSLeanCallStatus checks that a gRPC error comes back with its
// status and its message, percent-decoded.
func TestRLSLeanCallStatus(t *testing.T) {
	const msg = "boom: 100% ☃"
	addr, _ := startFakeRLS(t, func(context.Context, string) (*rlsv3.RateLimitResponse, error) {
		return nil, status.Error(codes.Unavailable, msg)
	})
	l := dialLean(t, addr, []string{"198.18.0.1"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for c := range 2 { // the first on a new connection, the second not
		err := l.do(ctx, c*rlsConns, 0)
		if err == nil || !strings.Contains(err.Error(), "grpc-status 14 (Unavailable): "+msg) {
			t.Errorf("call %d: error %v; want grpc-status 14 (Unavailable) and %q", c, err, msg)
		}
	}
}

// TestRLSLeanCallServerStops stops the server with every caller's call in
// flight, and checks that they all fail promptly, and later calls at
// once.
func TestRLSLeanCallServerStops(t *testing.T) {
	held := make(chan struct{}, loadCallers)
	addr, srv := startFakeRLS(t, okOrHold(held))
	l := dialLean(t, addr, []string{"hold"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, loadCallers)
	for c := range loadCallers {
		go func() { errs <- l.do(ctx, c, 0) }()
	}
	for range loadCallers {
		receive(t, held, "call in flight")
	}
	start := time.Now()
	srv.Stop()
	for range loadCallers {
		if err := receive(t, errs, "error from a call in flight"); err == nil || ctx.Err() != nil {
			t.Fatalf("a call in flight when the server stopped: error %v", err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("calls in flight failed %v after the server stopped", d)
	}
	for c := range loadCallers {
		start := time.Now()
		err := l.do(ctx, c, 0)
		if d := time.Since(start); err == nil || d > time.Second {
			t.Fatalf("caller %d after the server stopped: error %v after %v; want an error at once", c, err, d)
		}
	}
}

// TestRLSLeanCallGoAway stops the server gracefully with a call in
// flight: the call completes, and calls after the GOAWAY fail at once.
func TestRLSLeanCallGoAway(t *testing.T) {
	held, release := make(chan struct{}, 1), make(chan struct{})
	addr, srv := startFakeRLS(t, func(ctx context.Context, value string) (*rlsv3.RateLimitResponse, error) {
		if value == "hold" {
			held <- struct{}{}
			<-release
		}
		return okAnswer(), nil
	})
	l := dialLean(t, addr, []string{"hold", "198.18.0.1"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	heldErr := make(chan error, 1)
	go func() { heldErr <- l.do(ctx, 0, 0) }()
	receive(t, held, "call in flight")
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()

	// Caller rlsConns shares the held call's connection. Until its reader
	// has read the GOAWAY, calls still succeed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := l.do(ctx, rlsConns, 1)
		if err != nil {
			if !strings.Contains(err.Error(), "GOAWAY") {
				t.Fatalf("after GracefulStop: %v; want an error naming GOAWAY", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("calls still succeed 10s after GracefulStop")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if err := l.do(ctx, rlsConns, 1); err == nil || time.Since(start) > 100*time.Millisecond {
		t.Errorf("a call after GOAWAY: error %v after %v; want an error at once", err, time.Since(start))
	}
	close(release)
	if err := receive(t, heldErr, "answer to the call in flight"); err != nil {
		t.Errorf("the call in flight before GOAWAY: %v", err)
	}
	receive(t, stopped, "end of GracefulStop")
}

// TestRLSLeanCallCancel cancels a call the server holds: it returns at
// once, the server sees it cancelled (RST_STREAM), and the caller's next
// calls succeed.
func TestRLSLeanCallCancel(t *testing.T) {
	held := make(chan struct{}, 1)
	addr, _ := startFakeRLS(t, func(ctx context.Context, value string) (*rlsv3.RateLimitResponse, error) {
		if value == "hold" {
			<-ctx.Done()
			held <- struct{}{} // here, only once the server saw the cancellation
			return nil, ctx.Err()
		}
		return okAnswer(), nil
	})
	l := dialLean(t, addr, []string{"hold", "198.18.0.1"})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := l.do(ctx, 0, 0); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("a held call with a deadline of 100ms: error %v after %v", err, time.Since(start))
	}
	receive(t, held, "cancellation on the server")
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 10 {
		if err := l.do(ctx, 0, 1); err != nil {
			t.Fatalf("after a cancelled call: %v", err)
		}
	}
}

// TestRLSLeanCallMaxStreams checks that a call beyond the server's
// SETTINGS_MAX_CONCURRENT_STREAMS fails, saying so.
func TestRLSLeanCallMaxStreams(t *testing.T) {
	held := make(chan struct{}, 2)
	addr, _ := startFakeRLS(t, okOrHold(held), grpc.MaxConcurrentStreams(2))
	l := dialLean(t, addr, []string{"hold", "198.18.0.1"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := l.do(ctx, 0, 1); err != nil { // the server's SETTINGS come before its answer
		t.Fatal(err)
	}
	holdCtx, release := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range []int{0, rlsConns} { // both on the first connection
		wg.Go(func() { l.do(holdCtx, c, 0) })
	}
	receive(t, held, "first call in flight")
	receive(t, held, "second call in flight")
	if err := l.do(ctx, 2*rlsConns, 1); err == nil || !strings.Contains(err.Error(), "allows 2 streams") {
		t.Errorf("a third call on a connection allowing 2: error %v", err)
	}
	release()
	wg.Wait()
}

// TestRLSLeanCallHPACK sends answers whose header fields need the
// server's HPACK dynamic table: fields of hundreds of bytes that recur
// across calls, which grpc-go's encoder adds to its table of 4096 bytes,
// evicts as it fills and refers to by index when they come again, and in
// some answers a field larger than a frame, sent in CONTINUATION frames.
// Every field must decode to what the server sent.
func TestRLSLeanCallHPACK(t *testing.T) {
	keys := leanTestKeys(12)
	pad := func(v string, n int) string { return strings.Repeat(hexOf(v)+".", n/(2*len(v)+1)+1)[:n] }
	huge := func(v string) bool { return len(v) > 0 && v[len(v)-1] == '7' }
	addr, _ := startFakeRLS(t, func(ctx context.Context, value string) (*rlsv3.RateLimitResponse, error) {
		md := metadata.Pairs("x-key", hexOf(value), "x-pad", pad(value+"p", 300))
		if huge(value) {
			md.Append("x-huge", pad(value+"h", 40_000))
		}
		grpc.SetHeader(ctx, md)
		grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", pad(value+"t", 500)))
		return okAnswer(), nil
	})
	l := dialLean(t, addr, keys)
	allCallers(t, l, 50, func(c int, i int64) error {
		v, s := keys[i%int64(len(keys))], &l.streams[c]
		hugeWant := ""
		if huge(v) {
			hugeWant = pad(v+"h", 40_000)
		}
		if fieldValue(s.header, "x-key") != hexOf(v) || fieldValue(s.header, "x-pad") != pad(v+"p", 300) ||
			fieldValue(s.header, "x-huge") != hugeWant || fieldValue(s.trailer, "x-trailer") != pad(v+"t", 500) {
			return fmt.Errorf("key %q: fields decoded as\n%v\n%v", v, s.header, s.trailer)
		}
		return nil
	})
}

// TestRLSLeanRequestBlocks checks the request header blocks: decoded in
// turn by one decoder, as the server does, the first and every next block
// give the same fields; every field but :path is named by its index in
// next; and a real server sees them on every call, its deadline included.
func TestRLSLeanRequestBlocks(t *testing.T) {
	const addr = "127.0.0.1:8081"
	want := []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: rlsPath}, {Name: ":authority", Value: addr},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		{Name: "grpc-timeout", Value: fmt.Sprintf("%dS", int64(loadTimeout/time.Second))},
		{Name: "user-agent", Value: "sluice-bench"},
	}
	first, next := requestBlocks(addr)
	dec := hpack.NewDecoder(4096, nil)
	for i, block := range [][]byte{first, next, next, next} {
		got, err := dec.DecodeFull(block)
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("block %d decodes as\n%v\nwant\n%v", i, got, want)
		}
	}
	// :path's literal (one byte of name index, one of length, the
	// Huffman-coded path), then one byte for each other field.
	if pathLen := 2 + int(hpack.HuffmanEncodeLength(rlsPath)); len(next) != pathLen+len(want)-1 {
		t.Errorf("next is %d bytes; want %d: every field but :path indexed", len(next), pathLen+len(want)-1)
	}

	keys := leanTestKeys(8)
	addr2, _ := startFakeRLS(t, func(ctx context.Context, value string) (*rlsv3.RateLimitResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if _, ok := ctx.Deadline(); !ok || !slices.Contains(md.Get("user-agent"), "sluice-bench") {
			return nil, status.Errorf(codes.InvalidArgument, "no deadline, or user-agent %q", md.Get("user-agent"))
		}
		return okAnswer(), nil
	})
	allCallers(t, dialLean(t, addr2, keys), 20, func(int, int64) error { return nil })
}

// TestAppendHPACKInt checks the integer encoding against RFC 7541's
// examples (C.1) and the prefix's flag bits.
func TestAppendHPACKInt(t *testing.T) {
	for _, c := range []struct {
		n     uint
		flags byte
		v     uint64
		want  []byte
	}{
		{5, 0, 10, []byte{0x0a}},
		{5, 0, 1337, []byte{0x1f, 0x9a, 0x0a}},
		{8, 0, 42, []byte{0x2a}},
		{7, 0x80, 126, []byte{0xfe}},
		{7, 0x80, 127, []byte{0xff, 0x00}},
		{4, 0x10, 15 + 128, []byte{0x1f, 0x80, 0x01}},
	} {
		if got := appendHPACKInt([]byte{0xaa}, c.n, c.flags, c.v); !slices.Equal(got, append([]byte{0xaa}, c.want...)) {
			t.Errorf("%d with a %d-bit prefix, flags %#x: % x; want aa % x", c.v, c.n, c.flags, got, c.want)
		}
	}
}

// TestRLSLeanRequestEncoding checks the request written by hand against
// the generated code's idea of it, for values of every length class and
// alphabet.
func TestRLSLeanRequestEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("az09.:-_ éß☃😀𝄞\x00\x7f")
	values := []string{"", "198.18.0.1", strings.Repeat("x", 127), strings.Repeat("y", 128), strings.Repeat("☃", 5000)}
	for range 300 {
		r := make([]rune, rng.IntN(300))
		for i := range r {
			r[i] = alphabet[rng.IntN(len(alphabet))]
		}
		values = append(values, string(r))
	}
	for _, v := range values {
		var got rlsv3.RateLimitRequest
		if err := proto.Unmarshal(appendRateLimitRequest(nil, v), &got); err != nil {
			t.Errorf("%q: %v", v, err)
			continue
		}
		want := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: v}}},
		}}
		if !proto.Equal(&got, want) {
			t.Errorf("%q: decodes as %v; want %v", v, &got, want)
		}
	}
}

// TestRLSLeanResponseParsing checks the answer read by hand against
// answers the generated code writes, with fields the check skips.
func TestRLSLeanResponseParsing(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		resp := &rlsv3.RateLimitResponse{
			OverallCode: rlsv3.RateLimitResponse_Code(rng.IntN(3)),
			RawBody:     make([]byte, rng.IntN(200)),
		}
		want := rlsAnswer{code: resp.OverallCode, statuses: rng.IntN(4)}
		for k := range want.statuses {
			st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(rng.IntN(3)), LimitRemaining: rng.Uint32()}
			if rng.IntN(4) > 0 {
				st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: "n", RequestsPerUnit: rng.Uint32(), Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}
			}
			if k == 0 {
				want.limit = st.CurrentLimit.GetRequestsPerUnit()
			}
			resp.Statuses = append(resp.Statuses, st)
		}
		b, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := parseRateLimitResponse(b); err != nil || got != want {
			t.Errorf("%v: read as %+v, %v; want %+v", resp, got, err, want)
		}
	}
	if _, err := parseRateLimitResponse([]byte{0x12, 0x05, 0x08}); err == nil {
		t.Error("a truncated answer: no error")
	}
}
