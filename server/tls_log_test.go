package server

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// Connections that fail their TLS handshake (a load balancer's TCP check
// that connects and closes, plain HTTP sent to the TLS port, a scan) are
// logged at most once a second, with how many were left out: logged one
// line each, a client chose how much log the server wrote.
func TestTLSHandshakeErrorsPaced(t *testing.T) {
	ca := newCA(t)
	crt, key := ca.serverFiles(t.TempDir(), 1)
	ts := startServer(t, checkPolicy, Options{TLSCert: crt, TLSKey: key})
	addr := ts.Addrs().Check
	for range 30 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		io.Copy(io.Discard, c) // until the server closes it
		c.Close()
	}
	// The server logs a handshake's failure as its connection ends, which
	// the client saw first: wait for the first line, then let the others
	// come.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(ts.logs.String(), "TLS handshake error") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if n := strings.Count(ts.logs.String(), "TLS handshake error"); n < 1 || n > 2 {
		t.Errorf("30 failed handshakes in well under a second logged %d lines, want 1 (or 2 across a second)", n)
	}
}
