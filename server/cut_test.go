package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// manyPolicy limits nothing the tests below send.
const manyPolicy = "policies:\n  - {name: api, key: ip, limits: [\"100/m\"]}\n"

// blockingUpstream answers /ws with a websocket that echoes, and holds
// every other request until the test ends, telling entered of each.
func blockingUpstream(t *testing.T) (url string, entered chan struct{}) {
	t.Helper()
	entered = make(chan struct{}, 16)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			conn, rw := switchProtocols(t, w)
			if conn == nil {
				return
			}
			defer conn.Close()
			for {
				line, err := rw.ReadString('\n')
				if err != nil {
					return
				}
				rw.WriteString("echo: " + line)
				rw.Flush()
			}
		}
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); up.Close() })
	return up.URL, entered
}

// waitEntered waits for n requests to reach the upstream.
func waitEntered(t *testing.T, entered chan struct{}, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d requests reached the upstream", i, n)
		}
	}
}

// Plain requests cut at the shutdown timeout are logged as such, with
// how many, and not as websockets: the handlers of the connections just
// closed are still running, but they upgraded nothing.
func TestShutdownLogsCutRequests(t *testing.T) {
	up, entered := blockingUpstream(t)
	ts := startServer(t, manyPolicy, Options{Upstream: up, ShutdownTimeout: 300 * time.Millisecond})
	for range 4 {
		go http.Get("http://" + ts.Addrs().Proxy + "/slow")
	}
	waitEntered(t, entered, 4)
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	logs := ts.logs.String()
	if !strings.Contains(logs, `msg="requests still in flight at the shutdown timeout were cut" requests=4`) {
		t.Error("the cut requests were not logged with their number, 4")
	}
	if strings.Contains(logs, "websockets") {
		t.Error("plain requests were logged as websockets")
	}
}

// A websocket and a plain request open at the timeout are each logged
// under their own kind, one each.
func TestShutdownLogsCutUpgradesApart(t *testing.T) {
	up, entered := blockingUpstream(t)
	ts := startServer(t, manyPolicy, Options{Upstream: up, ShutdownTimeout: 300 * time.Millisecond})
	dialWebsocket(t, ts)
	go http.Get("http://" + ts.Addrs().Proxy + "/slow")
	waitEntered(t, entered, 1)
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	logs := ts.logs.String()
	for _, want := range []string{
		`msg="requests still in flight at the shutdown timeout were cut" requests=1`,
		`msg="requests still open at the shutdown timeout (websockets, other upgrades) were cut" requests=1`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %s", want)
		}
	}
}
