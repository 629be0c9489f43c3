package server

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// proxyCodes returns the sluice_requests_total series of the proxy
// listener, by code.
func (ts *testServer) proxyCodes() map[string]float64 {
	ts.t.Helper()
	_, body := get(ts.t, ts.Addrs().Admin, "/metrics")
	out := map[string]float64{}
	for line := range strings.SplitSeq(body, "\n") {
		series, value, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(series, "sluice_requests_total{") || !strings.Contains(series, `listener="proxy"`) {
			continue
		}
		_, code, _ := strings.Cut(series, `code="`)
		code, _, _ = strings.Cut(code, `"`)
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			ts.t.Fatalf("%q: %v", line, err)
		}
		out[code] = v
	}
	return out
}

// countedOnce checks that a request, sent by send, was counted once in
// sluice_requests_total{listener="proxy"}, under code, and nowhere else.
func (ts *testServer) countedOnce(what, code string, send func()) {
	ts.t.Helper()
	before := ts.proxyCodes()
	send()
	after := ts.proxyCodes()
	want := maps.Clone(before)
	want[code]++
	if !maps.Equal(after, want) {
		ts.t.Errorf("%s: sluice_requests_total{listener=\"proxy\"} went from %v to %v, want one more under %q", what, before, after, code)
	}
}

// The answers the proxy makes itself once the policies let a request
// through are counted under their status, not as allowed: an upstream
// that cannot be reached (502), that does not answer within
// UpstreamTimeout (504), a body that stops arriving (408) or cannot be
// read (400), read whole before the upstream is asked or streamed to it.
// A response the upstream began and broke off is the upstream's answer,
// its status gone to the client: allowed. Each request counts once.
func TestRequestsTotalProxyOwnAnswers(t *testing.T) {
	const bound = 100 * time.Millisecond
	policy := "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n"

	down := startServer(t, policy, Options{Upstream: "http://" + refusingAddr(t)})
	down.wantMetrics("at start",
		`sluice_requests_total{code="allowed",listener="proxy"} 0`,
		`sluice_requests_total{code="400",listener="proxy"} 0`,
		`sluice_requests_total{code="408",listener="proxy"} 0`,
		`sluice_requests_total{code="502",listener="proxy"} 0`,
		`sluice_requests_total{code="504",listener="proxy"} 0`,
	)
	for i := range 2 {
		down.countedOnce("the upstream down", "502", func() {
			if resp, _ := get(t, down.Addrs().Proxy, "/"); resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("request %d, the upstream down: %d, want 502", i+1, resp.StatusCode)
			}
		})
	}

	release := make(chan struct{})
	defer close(release)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		case "/cut": // a status, part of a streamed body, and the connection closed
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "0123456789")
			w.(http.Flusher).Flush()
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, "body cut", http.StatusBadRequest)
			return
		}
		io.WriteString(w, "done")
	}))
	defer up.Close()
	const (
		stalled   = "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabcde"
		malformed = "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n"
	)
	raw := func(ts *testServer, what, req string, want int) func() {
		return func() {
			if resp, _ := rawRequest(t, ts.Addrs().Proxy, req); resp.StatusCode != want {
				t.Fatalf("%s: %d, want %d", what, resp.StatusCode, want)
			}
		}
	}
	for _, buffer := range []int{0, -1} { // read whole first; streamed to the upstream
		ts := startServer(t, policy, Options{Upstream: up.URL, UpstreamTimeout: bound, BodyTimeout: bound, RequestBuffer: buffer})
		ts.countedOnce("an upstream that answers", "allowed", func() {
			if resp, body := get(t, ts.Addrs().Proxy, "/"); resp.StatusCode != 200 || body != "done" {
				t.Fatalf("an upstream that answers: %d %q", resp.StatusCode, body)
			}
		})
		ts.countedOnce("an upstream past UpstreamTimeout", "504", func() {
			if resp, _ := get(t, ts.Addrs().Proxy, "/hang"); resp.StatusCode != http.StatusGatewayTimeout {
				t.Fatalf("an upstream past UpstreamTimeout: %d, want 504", resp.StatusCode)
			}
		})
		ts.countedOnce("a body that stops, buffer "+strconv.Itoa(buffer), "408", raw(ts, "a body that stops", stalled, http.StatusRequestTimeout))
		ts.countedOnce("a malformed body, buffer "+strconv.Itoa(buffer), "400", raw(ts, "a malformed body", malformed, http.StatusBadRequest))
		ts.countedOnce("a response the upstream broke off", "allowed", func() {
			resp, err := http.Get("http://" + ts.Addrs().Proxy + "/cut")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if _, err := io.ReadAll(resp.Body); resp.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("a response the upstream broke off: %d, %v; want 200 and a body cut short", resp.StatusCode, err)
			}
		})
	}
}

// pollConfig is one poll of the configuration files' watcher, as Run's
// makes it: a test that calls it knows the poll happened.
func (ts *testServer) pollConfig() { ts.watch.poll(ts.configChanged) }

// A reload by SIGHUP (Reload) puts what it read in force for the
// watcher too: the watcher's next polls see no change, and reload
// nothing again, whether the files loaded or not (a failure is counted
// and logged once). A later change is the watcher's to reload.
func TestReloadBySIGHUPIsNotReloadedByTheWatcher(t *testing.T) {
	up := newUpstream(t)
	// Run's watcher never polls within the test: the test polls.
	ts := startServer(t, limit3, Options{Upstream: up.URL, WatchInterval: time.Hour})
	reloads := func(when, success, failure string) {
		t.Helper()
		ts.wantMetrics(when,
			`sluice_config_reloads_total{result="success"} `+success,
			`sluice_config_reloads_total{result="failure"} `+failure)
	}
	polls := func() {
		for range 3 {
			ts.pollConfig()
		}
	}
	writeFile(t, ts.dir, "sluice.yaml", strings.Replace(limit3, "3/m", "10/m", 1))
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	polls()
	reloads("a good file by SIGHUP, then three polls", "1", "0")

	writeFile(t, ts.dir, "sluice.yaml", "policies:\n  - name: api\n    limits: [\"3/fortnight\"]\n")
	if err := ts.Reload(context.Background()); !errors.Is(err, ErrConfig) {
		t.Fatalf("Reload of a bad file: %v, want ErrConfig", err)
	}
	polls()
	reloads("a bad file by SIGHUP, then three polls", "1", "1")
	if n := strings.Count(ts.logs.String(), "reload failed"); n != 1 {
		t.Errorf("one bad file logged %d failures, want 1:\n%s", n, ts.logs.String())
	}

	// A change after the SIGHUP is the watcher's: once, as it settles.
	writeFile(t, ts.dir, "sluice.yaml", strings.Replace(limit3, "3/m", "1/m", 1))
	polls()
	reloads("a change after the SIGHUP, then three polls", "2", "1")
	if got := []int{ts.status("/"), ts.status("/")}; got[1] != 429 {
		t.Fatalf("after the watcher's reload: %v, want the new 1/m", got)
	}
}

// The TLS files too: a SIGHUP's reload of a rotated certificate is not
// reloaded again by their watcher, and sluice_tls_reloads_total counts
// one.
func TestTLSReloadBySIGHUPIsNotReloadedByTheWatcher(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	crt, key := ca.serverFiles(dir, 1)
	ts := startServer(t, checkPolicy, Options{TLSCert: crt, TLSKey: key, WatchInterval: time.Hour})
	ca.serverFiles(dir, 2)
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		ts.tlsWatch.poll(ts.tlsChanged)
	}
	ts.wantMetrics("a rotation by SIGHUP, then three polls",
		`sluice_tls_reloads_total{result="success"} 1`,
		`sluice_tls_reloads_total{result="failure"} 0`)
	if got := serial(t, ts.Addrs().Check, ca.pool); got != "2" {
		t.Errorf("serial %s after the reload, want 2", got)
	}
}
