package server

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate/ratetest"
)

// start is 30 seconds into a minute: fixed windows of a minute have 30s
// left, whatever the test does.
var start = time.Date(2026, 3, 2, 10, 0, 30, 0, time.UTC)

// testServer is a Server running in-process on loopback ports of its own,
// with a fake clock and its logs captured.
type testServer struct {
	*Server
	t      *testing.T
	clock  *ratetest.Clock
	dir    string
	cancel context.CancelFunc
	done   chan error
	logs   *syncBuffer
}

// localListener listens on a free loopback port.
func localListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// writeFile writes content to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	// Write and rename, as editors and config management do, so that a
	// watcher polling meanwhile never reads half a file.
	p := filepath.Join(dir, name)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// startServer starts a server on o, after writing policy (if not empty)
// to a file of its own and giving every listener a free port. It stops
// when the test ends.
func startServer(t *testing.T, policy string, o Options) *testServer {
	t.Helper()
	ts := newServer(t, policy, o)
	ts.run()
	return ts
}

// newServer is startServer without Run: the server is built (its
// configuration loaded, its listeners open) but serves nothing until run
// is called.
func newServer(t *testing.T, policy string, o Options) *testServer {
	t.Helper()
	ts := &testServer{t: t, clock: ratetest.NewClock(start), dir: t.TempDir(), logs: &syncBuffer{}}
	if policy != "" {
		o.ConfigFile = writeFile(t, ts.dir, "sluice.yaml", policy)
	}
	if o.Clock == nil {
		o.Clock = ts.clock
	}
	if o.WatchInterval == 0 {
		o.WatchInterval = -1
	}
	o.Logger = slog.New(slog.NewTextHandler(ts.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, l := range []*net.Listener{&o.ProxyListener, &o.CheckListener, &o.GRPCListener, &o.AdminListener} {
		if *l == nil {
			*l = localListener(t)
		}
	}
	srv, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts.Server = srv
	t.Cleanup(func() {
		if ts.cancel != nil {
			ts.stop()
		} else {
			for _, l := range srv.lis.all() {
				l.Close()
			}
			srv.st.close()
		}
		if t.Failed() {
			t.Logf("server log:\n%s", ts.logs.String())
		}
	})
	return ts
}

// run runs the server until the test ends.
func (ts *testServer) run() {
	ctx, cancel := context.WithCancel(context.Background())
	ts.cancel, ts.done = cancel, make(chan error, 1)
	go func() { ts.done <- ts.Server.Run(ctx) }()
}

// stop stops the server and returns what Run returned.
func (ts *testServer) stop() error {
	ts.cancel()
	select {
	case err := <-ts.done:
		ts.done <- err // for a second call
		return err
	case <-time.After(10 * time.Second):
		ts.t.Fatal("the server did not stop within 10s")
		return nil
	}
}

// get sends a request to base+path and returns the response with its body
// read.
func get(t *testing.T, base, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return do(t, req)
}

// sendRaw sends req, as it goes on the wire, to addr on a connection of
// its own, closed as the test ends, and returns a reader of what comes
// back.
func sendRaw(t *testing.T, addr, req string) *bufio.Reader {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return bufio.NewReader(c)
}

// rawRequest sends req, one HTTP/1.1 request as it goes on the wire, to
// addr on a connection of its own, and returns the response with its body
// read: for what net/http's client would not send as it is (Connection
// naming other fields, a Host of the test's choosing).
func rawRequest(t *testing.T, addr, req string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(sendRaw(t, addr, req), nil)
	if err != nil {
		t.Fatalf("reading the response to %.40q: %v", req, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of the response to %.40q: %v", req, err)
	}
	return resp, string(b)
}

func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// metric returns the line of /metrics that starts with prefix, or "".
func (ts *testServer) metric(prefix string) string {
	ts.t.Helper()
	_, body := get(ts.t, ts.Addrs().Admin, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

// eventually polls cond every 5ms for up to 5s: for what happens on
// another goroutine (a file watch), never for the passing of time.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
