package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate/ratetest"
)

// What net/http reports of a connection a client made fail (a TLS
// handshake) is paced; anything else it logs (a handler's panic and its
// stack) goes through whole, however many handshakes failed that second.
func TestServerLogPacesOnlyConnections(t *testing.T) {
	var buf bytes.Buffer
	w := newServerLog(slog.New(slog.NewTextHandler(&buf, nil)), ratetest.NewClock(time.Unix(1_800_000_000, 0)))
	w.Write([]byte("http: TLS handshake error from 127.0.0.1:1: EOF\n"))
	w.Write([]byte("http: TLS handshake error from 127.0.0.1:2: EOF\n"))
	w.Write([]byte("http: panic serving 127.0.0.1:3: boom\ngoroutine 7 [running]:\n"))
	out := buf.String()
	if n := strings.Count(out, "TLS handshake error"); n != 1 {
		t.Errorf("%d handshake lines in one second, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "panic serving") || !strings.Contains(out, "goroutine 7") {
		t.Errorf("the panic and its stack were not logged:\n%s", out)
	}
}
