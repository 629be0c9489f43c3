package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/ratefield"
)

// isGRPC reports whether r is a gRPC call: an HTTP/2 request whose
// Content-Type is application/grpc, or application/grpc+ a codec (proto,
// json). gRPC-Web (application/grpc-web...) is not: its clients read HTTP
// statuses. Nor is an HTTP/1 request, whatever its type: gRPC needs
// HTTP/2, and over HTTP/1 the type would be any client's to claim, taking
// its body out of the request buffer and of --body-timeout's bound.
func isGRPC(r *http.Request) bool {
	if r.ProtoMajor != 2 {
		return false
	}
	const ct = "application/grpc"
	v := r.Header.Get("Content-Type")
	if len(v) < len(ct) || !strings.EqualFold(v[:len(ct)], ct) {
		return false
	}
	return len(v) == len(ct) || v[len(ct)] == '+' || v[len(ct)] == ';'
}

// grpcAnswer is the ResponseWriter under the policies of a gRPC call
// through the proxy: it turns an answer of sluice's own (a refusal, a
// shed call, a failed store, the proxy's 400, 408, 502 and 504) into
// gRPC's, as grpclimit answers, and lets the upstream's through as it
// comes. A gRPC client reads only HTTP 200 with application/grpc: a 429
// with a problem body reached it as UNAVAILABLE, which retry policies
// retry at once, its Retry-After unseen. The answer is trailers-only,
// as gRPC's errors are: one HEADERS frame that ends the stream, with
// grpc-status, grpc-message and grpc-status-details-bin, and every field
// sluice set (the rate limit fields, Retry-After) as metadata; gRPC's
// own retries (gRFC A6) retry only a call with no headers before its
// status. The problem body goes, its detail kept as the message.
//
// It sits under answer, which counts the HTTP status sluice chose
// (sluice_requests_total code 429, 502...), and reads answer's passed
// to tell the upstream's response from sluice's. The status and body
// are held until finish: net/http takes a response's header fields as
// WriteHeader is called, and the message is in the body, written after.
type grpcAnswer struct {
	http.ResponseWriter
	a       *answer
	timeout time.Duration // the call's grpc-timeout; 0 for none
	status  int           // sluice's own answer, held; 0 for none
	body    bytes.Buffer  // its problem body, up to 4 KiB
}

// newGRPCAnswer returns the grpcAnswer of a, for the call r.
func newGRPCAnswer(a *answer, r *http.Request) *grpcAnswer {
	return &grpcAnswer{ResponseWriter: a.ResponseWriter, a: a, timeout: grpcTimeout(r.Header.Get("Grpc-Timeout"))}
}

func (g *grpcAnswer) WriteHeader(code int) {
	switch {
	case g.status != 0:
	case g.a.passed || code < 400:
		g.ResponseWriter.WriteHeader(code)
	default:
		g.status = code
	}
}

func (g *grpcAnswer) Write(p []byte) (int, error) {
	if g.status == 0 {
		return g.ResponseWriter.Write(p)
	}
	if n := 4<<10 - g.body.Len(); n > 0 {
		g.body.Write(p[:min(len(p), n)])
	}
	return len(p), nil
}

// Unwrap returns the ResponseWriter underneath, for
// http.ResponseController: the upstream's flushes go to it.
func (g *grpcAnswer) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// finish writes sluice's own answer, held, as gRPC's. The handler calls
// it as it returns.
func (g *grpcAnswer) finish() {
	if g.status == 0 {
		return
	}
	h := g.ResponseWriter.Header()
	var problem struct{ Detail string }
	msg := http.StatusText(g.status)
	if json.Unmarshal(g.body.Bytes(), &problem) == nil && problem.Detail != "" {
		msg = problem.Detail
	}
	st := status.New(grpcCode(g.status), msg)
	if ra, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64); err == nil && ra > 0 {
		wait := time.Duration(ra) * time.Second
		h.Set("Grpc-Retry-Pushback-Ms", g.pushback(wait))
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
			st = d
		}
	}
	if len(st.Proto().GetDetails()) > 0 {
		if b, err := proto.Marshal(st.Proto()); err == nil {
			h.Set("Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString(b))
		}
	}
	delete(h, "Content-Length") // of the problem body, which goes
	delete(h, "Cache-Control")
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(int(st.Code())))
	h.Set("Grpc-Message", grpcMessage(msg))
	// With no body, net/http sends the header fields in one HEADERS
	// frame that ends the stream: a trailers-only response.
	g.ResponseWriter.WriteHeader(http.StatusOK)
}

// pushback returns the grpc-retry-pushback-ms of a wait, as grpclimit
// sends it (ratefield.Pushback), bounded by the call's grpc-timeout:
// net/http sets no deadline from it. Retry-After is in whole seconds,
// rounded up, so the pushback is too.
func (g *grpcAnswer) pushback(wait time.Duration) string {
	return ratefield.Pushback(wait, ratefield.DefaultMaxPushback, g.timeout, g.timeout > 0)
}

// grpcCode returns the gRPC code of an answer of sluice's, by its HTTP
// status. A refusal is RESOURCE_EXHAUSTED and a shed call or a failed
// store UNAVAILABLE, as grpclimit answers them; an upstream that cannot
// be reached is UNAVAILABLE (as grpc-go reads a 502), one that could not
// be connected to in time DEADLINE_EXCEEDED (Options.UpstreamTimeout
// bounds a gRPC call's connecting, not its answer: see newGRPCTransport).
// A request sluice will not decide
// (400: . or .. segments, a repeated X-Forwarded-Host) is
// INVALID_ARGUMENT, the client's to fix, where grpc-go reads a 400 as
// INTERNAL, a server's fault; a body that stopped arriving (408) is
// CANCELLED, the call ended for its client's silence, where grpc-go reads
// UNKNOWN (a gRPC call's body is not bounded by Options.BodyTimeout, so
// the proxy answers it no 408 now). CONNECT and PRI (405) are
// UNIMPLEMENTED, as grpc-go reads a 404.
func grpcCode(httpStatus int) codes.Code {
	switch httpStatus {
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusRequestTimeout:
		return codes.Canceled
	case http.StatusMethodNotAllowed:
		return codes.Unimplemented
	}
	return codes.Unknown
}

// grpcMessage percent-encodes msg as gRPC's grpc-message requires: every
// byte outside printable ASCII, and %, as %XX.
func grpcMessage(msg string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= ' ' && c <= '~' && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}

// grpcTimeout returns the duration of a grpc-timeout value (up to eight
// digits and a unit: H, M, S, m, u, n), or 0 if it is not one.
func grpcTimeout(v string) time.Duration {
	if len(v) < 2 || len(v) > 9 {
		return 0
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	switch v[len(v)-1] {
	case 'H':
		return time.Duration(n) * time.Hour
	case 'M':
		return time.Duration(n) * time.Minute
	case 'S':
		return time.Duration(n) * time.Second
	case 'm':
		return time.Duration(n) * time.Millisecond
	case 'u':
		return time.Duration(n) * time.Microsecond
	case 'n':
		return time.Duration(n)
	}
	return 0
}
