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
	// net/http answers plain HTTP on a TLS port and closes the connection
	// before it logs the failure, so the client's end says nothing of the
	// log. Stopping the server waits for every connection's end, which
	// comes after its log: then all 30 have been paced. The server's
	// clock, the test's, stands still: exactly one line goes through.
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(ts.logs.String(), "TLS handshake error"); n != 1 {
		t.Errorf("30 failed handshakes within one second logged %d lines, want 1", n)
	}
}
