package server

import (
	"net/http"
	"testing"
	"time"
)

// grpc-message is percent-encoded as gRPC decodes it: printable ASCII
// but % as it is, every other byte as %XX (a UTF-8 letter byte by byte).
func TestGRPCMessage(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"rate limited; retry in 5s", "rate limited; retry in 5s"},
		{"100% used", "100%25 used"},
		{`policy "débit"`, `policy "d%C3%A9bit"`},
		{"a\nb\x7f~", "a%0Ab%7F~"},
	} {
		if got := grpcMessage(tt.in); got != tt.want {
			t.Errorf("grpcMessage(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// grpc-timeout is up to eight digits and a unit; anything else is no
// timeout.
func TestGRPCTimeout(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"S", 0}, {"10", 0}, {"1x", 0}, {"-1S", 0}, {"123456789S", 0},
		{"1H", time.Hour}, {"2M", 2 * time.Minute}, {"10S", 10 * time.Second},
		{"9999999m", 9999999 * time.Millisecond}, {"5u", 5 * time.Microsecond}, {"7n", 7},
	} {
		if got := grpcTimeout(tt.in); got != tt.want {
			t.Errorf("grpcTimeout(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// A gRPC call is application/grpc, alone or with a codec; gRPC-Web and
// other types are not.
func TestIsGRPC(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc": true, "application/grpc+proto": true, "Application/GRPC+json": true,
		"application/grpc;charset=utf-8": true,
		"application/grpc-web":           false, "application/grpc-web+proto": false, "application/grpcx": false,
		"application/json": false, "": false,
	} {
		r := &http.Request{ProtoMajor: 2, Header: http.Header{"Content-Type": {ct}}}
		if got := isGRPC(r); got != want {
			t.Errorf("isGRPC(%q) = %v, want %v", ct, got, want)
		}
		// gRPC is HTTP/2 only: over HTTP/1 the type is any client's to
		// claim, and would take its body out of --body-timeout's bound
		// and the request buffer, a slow client's way to hold a stream of
		// the upstream's for as long as it likes.
		r.ProtoMajor = 1
		if isGRPC(r) {
			t.Errorf("isGRPC(%q) over HTTP/1.1 = true, want false", ct)
		}
	}
}
