package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// upstream is a test upstream that records the forwarding headers it saw.
type upstream struct {
	*httptest.Server
	mu  sync.Mutex
	xff []string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.xff = append(u.xff, strings.Join(r.Header.Values("X-Forwarded-For"), ", ")+
			"|"+r.Header.Get("X-Forwarded-Host")+"|"+r.Header.Get("X-Real-Ip"))
		u.mu.Unlock()
		fmt.Fprintf(w, "upstream saw %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) last() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.xff) == 0 {
		return ""
	}
	return u.xff[len(u.xff)-1]
}

const untrustedPolicy = `
policies:
  - name: api
    key: ip
    limits: ["3/m"]
`

// A spoofed X-Forwarded-For from a client that is not a trusted proxy is
// neither passed on nor believed: the upstream sees the real peer alone,
// and every request counts against the real peer, whatever it claims.
func TestProxyDoesNotTrustSpoofedForwardedFor(t *testing.T) {
	up := newUpstream(t)
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL})
	for i := range 3 {
		resp, body := get(t, ts.Addrs().Proxy, "/items", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i), "X-Real-IP", "203.0.113.99", "X-Forwarded-Host", "evil.example")
		if resp.StatusCode != 200 || body != "upstream saw GET /items" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if got, want := resp.Header.Get("RateLimit"), fmt.Sprintf(`"api";r=%d;t=%d`, 2-i, 20*(i+1)); got != want {
			t.Errorf("request %d: RateLimit %q, want %q", i, got, want)
		}
		if got, want := up.last(), "127.0.0.1|"+ts.Addrs().Proxy+"|"; got != want {
			t.Errorf("upstream saw XFF|XFH|X-Real-IP %q, want %q", got, want)
		}
	}
	resp, body := get(t, ts.Addrs().Proxy, "/items", "X-Forwarded-For", "198.51.100.1")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "20" {
		t.Fatalf("4th request from one peer: %d, Retry-After %q; want 429 after 20s", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if !strings.Contains(body, `"violated-policies":["api"]`) {
		t.Errorf("refusal body %s", body)
	}
	if top := ts.top; top != nil {
		keys, _ := top.Top(1)
		if len(keys) != 1 || !strings.Contains(keys[0].Key, "ip=127.0.0.1}") {
			t.Errorf("top refused keys %+v, want the real peer's", keys)
		}
	}
}

// From a trusted proxy, the forwarding headers are passed on with this
// hop appended, and the client they name is the one counted.
func TestProxyTrustedForwardedFor(t *testing.T) {
	up := newUpstream(t)
	ts := startServer(t, `
client_ip: {trusted_proxies: [127.0.0.1]}
policies:
  - name: api
    key: ip
    limits: ["1/m"]
`, Options{Upstream: up.URL})
	for _, client := range []string{"203.0.113.1", "203.0.113.2"} {
		resp, _ := get(t, ts.Addrs().Proxy, "/", "X-Forwarded-For", client, "X-Forwarded-Host", "api.example")
		if resp.StatusCode != 200 {
			t.Fatalf("first request of %s: %d", client, resp.StatusCode)
		}
		if got, want := up.last(), client+", 127.0.0.1|api.example|"; got != want {
			t.Errorf("upstream saw %q, want %q", got, want)
		}
	}
	resp, _ := get(t, ts.Addrs().Proxy, "/", "X-Forwarded-For", "203.0.113.1")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("second request of 203.0.113.1: %d, want 429", resp.StatusCode)
	}
}

// An X-Forwarded-Host that comes twice from a trusted proxy names no one
// host: one that appends its own after the client's would let the client
// choose the host it is limited as (the first), and the upstream would
// be told the same. It is answered 400, as the check endpoint answers it.
func TestProxyRepeatedForwardedHostRefused(t *testing.T) {
	up := newUpstream(t)
	ts := startServer(t, `
client_ip: {trusted_proxies: [127.0.0.1]}
policies:
  - name: api
    match: "api.example.com/"
    key: ip
    limits: ["1/m"]
`, Options{Upstream: up.URL})
	req, err := http.NewRequest("GET", "http://"+ts.Addrs().Proxy+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "api.example.com"
	req.Header.Add("X-Forwarded-Host", "www.example.com") // the client's
	req.Header.Add("X-Forwarded-Host", "api.example.com") // the proxy's
	req.Header.Set("X-Forwarded-For", "203.0.113.1")
	resp, body := do(t, req)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "more than once") {
		t.Errorf("X-Forwarded-Host twice: %d %s, want 400 saying it came more than once", resp.StatusCode, body)
	}
	if got := up.last(); got != "" {
		t.Errorf("the upstream was asked: %q", got)
	}
	if n := ts.counter(`sluice_requests_total{code="400",listener="proxy"}`); n != 1 {
		t.Errorf("%d requests counted as 400, want 1", n)
	}
}

// A field the client names in Connection is for this hop only, and
// ReverseProxy drops it: the policies decide without it too, on the
// request the upstream gets. A client that sent a new X-API-Key each
// time, named in Connection, was keyed by it, while the upstream served
// it without one: it escaped the policy for requests without a key. One
// that names X-Forwarded-For drops its own claim, not the hop sluice
// appends.
func TestProxyConnectionFieldsNotDecided(t *testing.T) {
	saw := make(chan string, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		saw <- fmt.Sprintf("key %q, X-Forwarded-For %q, X-Forwarded-Host %q", r.Header.Get("X-Api-Key"), r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Host"))
	}))
	defer up.Close()
	ts := startServer(t, `
policies:
  - name: anonymous
    match:
      headers:
        - name: X-API-Key
          present: false
    key: ip
    limits: ["2/m"]
  - name: partner
    match:
      headers:
        - name: X-API-Key
          present: true
    key: "header:X-API-Key"
    limits: ["1000/m"]
`, Options{Upstream: up.URL})
	for i, want := range []int{200, 200, 429, 429} {
		resp, _ := rawRequest(t, ts.Addrs().Proxy, fmt.Sprintf(
			"GET /data HTTP/1.1\r\nHost: x\r\nX-API-Key: rotating-%d\r\nConnection: close, X-API-Key\r\n\r\n", i))
		if resp.StatusCode != want {
			t.Fatalf("request %d without a key at the upstream: %d, want %d (the anonymous policy allows 2 a minute)", i, resp.StatusCode, want)
		}
		if want == 200 {
			if got := <-saw; !strings.HasPrefix(got, `key "",`) {
				t.Errorf("request %d: the upstream saw %s, want no key", i, got)
			}
		}
	}
	resp, _ := rawRequest(t, ts.Addrs().Proxy, "GET / HTTP/1.1\r\nHost: x\r\nX-API-Key: k\r\nX-Forwarded-For: 203.0.113.9\r\nConnection: close, X-Forwarded-For, X-Forwarded-Host\r\n\r\n")
	if want := `key "k", X-Forwarded-For "127.0.0.1", X-Forwarded-Host "x"`; resp.StatusCode != 200 {
		t.Errorf("a request naming X-Forwarded-For in Connection: %d, want 200", resp.StatusCode)
	} else if got := <-saw; got != want {
		t.Errorf("a request naming X-Forwarded-For in Connection: the upstream saw %s, want %s", got, want)
	}
}

// recordingTransport records the header of the request it is sent, and
// fails it.
type recordingTransport struct{ header http.Header }

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.header = r.Header
	return nil, errors.New("recorded")
}

// hopByHop leaves the header ReverseProxy forwards, so that the policies
// read what the upstream gets: checked against ReverseProxy itself, with
// what it removes (the fields Connection names, the hop-by-hop ones) and
// what it puts back (TE: trailers, and an upgrade's Connection and
// Upgrade).
func TestHopByHopAsReverseProxy(t *testing.T) {
	for _, h := range []http.Header{
		{"Accept": {"*/*"}},
		{"Connection": {"close, X-Api-Key"}, "X-Api-Key": {"k"}, "Accept": {"*/*"}},
		{"Connection": {"keep-alive", " UPGRADE ,x-a,"}, "Upgrade": {"websocket", "h2c"}, "X-A": {"1"}, "Keep-Alive": {"timeout=5"}},
		{"Connection": {"Upgrade"}, "Sec-Websocket-Key": {"x"}},
		{"Connection": {"upgrades"}, "Upgrade": {"websocket"}},
		{"Te": {"gzip, Trailers"}, "Trailer": {"X-Sum"}, "Proxy-Authorization": {"Basic eA=="}, "Proxy-Connection": {"keep-alive"}},
		{"Connection": {"te, Accept"}, "Te": {"trailers"}, "Accept": {"*/*"}},
		{"Te": {"trailers;q=1"}, "Transfer-Encoding": {"chunked"}},
	} {
		rt := &recordingTransport{}
		rp := &httputil.ReverseProxy{
			Rewrite:      func(pr *httputil.ProxyRequest) { pr.SetURL(&url.URL{Scheme: "http", Host: "upstream"}) },
			Transport:    rt,
			ErrorHandler: func(http.ResponseWriter, *http.Request, error) {},
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.Header = h.Clone()
		rp.ServeHTTP(httptest.NewRecorder(), r)
		delete(rt.header, "User-Agent") // ReverseProxy's, to send none
		if got := hopByHop(r).Header; fmt.Sprint(got) != fmt.Sprint(rt.header) {
			t.Errorf("%v: the policies read %v, the upstream gets %v", h, got, rt.header)
		}
		if fmt.Sprint(r.Header) != fmt.Sprint(h) {
			t.Errorf("%v: the request's own header became %v", h, r.Header)
		}
	}
}

// An upgrade to h2c would make the connection an HTTP/2 tunnel to the
// upstream, its requests never decided one by one: the proxy forwards the
// request as a plain one, without the h2c token, the Upgrade field when
// nothing is left in it, or HTTP2-Settings, and other protocols are
// upgraded as asked.
func TestProxyDropsH2CUpgrade(t *testing.T) {
	saw := make(chan string, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		saw <- fmt.Sprintf("Connection %q Upgrade %q HTTP2-Settings %q", r.Header.Values("Connection"), r.Header.Values("Upgrade"), r.Header.Values("Http2-Settings"))
	}))
	defer up.Close()
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL})
	for _, c := range []struct{ connection, upgrade, want string }{
		{"Upgrade, HTTP2-Settings", "h2c", `Connection [] Upgrade [] HTTP2-Settings []`},
		{"Upgrade", "H2C", `Connection [] Upgrade [] HTTP2-Settings []`},
	} {
		resp, _ := rawRequest(t, ts.Addrs().Proxy, "GET /api HTTP/1.1\r\nHost: x\r\nConnection: "+c.connection+
			"\r\nUpgrade: "+c.upgrade+"\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Errorf("Upgrade: %s: %d, want 200, served as a plain request", c.upgrade, resp.StatusCode)
			continue
		}
		if got := <-saw; got != c.want {
			t.Errorf("Upgrade: %s: the upstream saw %s, want %s", c.upgrade, got, c.want)
		}
	}
	// The header the policies read is the one forwarded.
	for _, c := range []struct{ in, want http.Header }{
		{http.Header{"Connection": {"Upgrade"}, "Upgrade": {"h2c, websocket"}}, http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}},
		{http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Http2-Settings": {"x"}}, http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}},
		{http.Header{"Connection": {"Upgrade"}, "Upgrade": {" h2c "}, "Http2-Settings": {"x"}}, http.Header{}},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header = c.in
		if got := hopByHop(r).Header; fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%v: forwarded as %v, want %v", c.in, got, c.want)
		}
	}
}

// Behind a trusted proxy, the policies match the host it forwarded the
// request for (X-Forwarded-Host), as the check endpoint does: the Host it
// sends may be sluice's own address (NGINX's default), which no policy
// on a host names. The upstream still gets the Host that came (with
// PreserveHost). From a peer not trusted, X-Forwarded-Host is no one's
// word: Host decides.
func TestProxyForwardedHost(t *testing.T) {
	saw := make(chan string, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		saw <- fmt.Sprintf("Host %q, X-Forwarded-Host %q", r.Host, r.Header.Get("X-Forwarded-Host"))
	}))
	defer up.Close()
	const policy = `
policies:
  - name: api
    match: "api.example.com/"
    key: ip
    limits: ["1/m"]
`
	trusted := startServer(t, "client_ip: {trusted_proxies: [127.0.0.1]}\n"+policy, Options{Upstream: up.URL, PreserveHost: true})
	untrusted := startServer(t, policy, Options{Upstream: up.URL, PreserveHost: true})
	for _, step := range []struct {
		ts          *testServer
		host, xfh   string
		status      int
		decided     bool
		upstreamSaw string
	}{
		{trusted, "sluice.internal", "api.example.com", 200, true, `Host "sluice.internal", X-Forwarded-Host "api.example.com"`},
		{trusted, "sluice.internal", "API.example.com.", 429, true, ""},
		{trusted, "api.example.com", "www.example.com", 200, false, `Host "api.example.com", X-Forwarded-Host "www.example.com"`},
		{untrusted, "sluice.internal", "api.example.com", 200, false, `Host "sluice.internal", X-Forwarded-Host "sluice.internal"`},
		{untrusted, "api.example.com", "www.example.com", 200, true, `Host "api.example.com", X-Forwarded-Host "api.example.com"`},
		{untrusted, "api.example.com", "", 429, true, ""},
	} {
		req := "GET /orders HTTP/1.1\r\nHost: " + step.host + "\r\nConnection: close\r\n"
		if step.xfh != "" {
			req += "X-Forwarded-Host: " + step.xfh + "\r\n"
		}
		resp, _ := rawRequest(t, step.ts.Addrs().Proxy, req+"\r\n")
		who := map[*testServer]string{trusted: "trusted", untrusted: "untrusted"}[step.ts]
		if decided := resp.Header.Get("Ratelimit") != ""; resp.StatusCode != step.status || decided != step.decided {
			t.Errorf("%s peer, Host %s, X-Forwarded-Host %q: %d, decided by the api policy: %v; want %d, %v",
				who, step.host, step.xfh, resp.StatusCode, decided, step.status, step.decided)
		}
		if resp.StatusCode == 200 {
			if got := <-saw; got != step.upstreamSaw {
				t.Errorf("%s peer, Host %s, X-Forwarded-Host %q: the upstream saw %s, want %s", who, step.host, step.xfh, got, step.upstreamSaw)
			}
		}
	}
}

// An upstream that limits too keeps its items of the RateLimit lists,
// after sluice's, but its X-RateLimit- fields are replaced by sluice's:
// each holds one number, and a client that joins repeated fields (most
// do) read "2, 99", which it could not parse.
func TestProxyUpstreamRateLimitHeaders(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "100")
		w.Header().Set("X-RateLimit-Remaining", "99")
		w.Header().Set("X-RateLimit-Reset", "1")
		w.Header().Set("RateLimit", `"app";r=99;t=1`)
		w.Header().Set("RateLimit-Policy", `"app";q=100;w=1`)
	}))
	defer up.Close()
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL})
	resp, _ := get(t, ts.Addrs().Proxy, "/")
	for name, want := range map[string][]string{
		"X-Ratelimit-Limit":     {"3"},
		"X-Ratelimit-Remaining": {"2"},
		"X-Ratelimit-Reset":     {"20"},
		"Ratelimit":             {`"api";r=2;t=20`, `"app";r=99;t=1`},
		"Ratelimit-Policy":      {`"api";q=3;w=60`, `"app";q=100;w=1`},
	} {
		if got := resp.Header.Values(name); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

// An upstream that cannot be reached is answered 502, with a problem
// body and the rate limit headers of the decision that let the request
// through.
func TestProxyUpstreamDown(t *testing.T) {
	dead := "http://" + refusingAddr(t)
	ts := startServer(t, "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n", Options{Upstream: dead})
	resp, body := get(t, ts.Addrs().Proxy, "/")
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("Ratelimit") == "" {
		t.Errorf("upstream down: %d %v %q; want 502 problem+json with the RateLimit fields", resp.StatusCode, resp.Header, body)
	}
	// Every request fails: the log has one line a second, each counting
	// those it left out, not one a request.
	get(t, ts.Addrs().Proxy, "/")
	get(t, ts.Addrs().Proxy, "/")
	if n := strings.Count(ts.logs.String(), "upstream failed"); n != 1 {
		t.Errorf("3 failures in one instant logged %d lines, want 1:\n%s", n, ts.logs.String())
	}
	ts.clock.Advance(time.Second)
	get(t, ts.Addrs().Proxy, "/")
	if logs := ts.logs.String(); strings.Count(logs, "upstream failed") != 2 || !strings.Contains(logs, "not_logged=2") {
		t.Errorf("a second later: want a second line, with not_logged=2:\n%s", logs)
	}
}

// refusingAddr returns a loopback address that refuses connections for
// as long as the test runs: a TCP socket bound to it that never listens.
// The port, held, is no one else's to listen on or connect from, as a
// closed listener's may be by the time the proxy dials it.
func refusingAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// A request whose header fields pass MaxHeaderBytes (64 KiB unless set)
// is answered 431 without costing the server more than that; under the
// bound it is served, and the bound can be raised.
func TestMaxHeaderBytes(t *testing.T) {
	up := newUpstream(t)
	big := strings.Repeat("x", 80<<10)
	for _, tt := range []struct {
		max, size int
		want      int
	}{
		{0, 40 << 10, http.StatusOK},
		{0, 80 << 10, http.StatusRequestHeaderFieldsTooLarge},
		{128 << 10, 80 << 10, http.StatusOK},
	} {
		ts := startServer(t, "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n", Options{Upstream: up.URL, MaxHeaderBytes: tt.max})
		resp, _ := get(t, ts.Addrs().Proxy, "/", "X-Padding", big[:tt.size])
		if resp.StatusCode != tt.want {
			t.Errorf("MaxHeaderBytes %d, %d bytes of header: %d, want %d", tt.max, tt.size, resp.StatusCode, tt.want)
		}
	}
}

// A websocket handshake and its frames pass through: the proxy answers
// 101 and then copies bytes both ways.
func TestProxyWebsocket(t *testing.T) {
	ts := startServer(t, untrustedPolicy, Options{Upstream: wsUpstream(t).URL})
	conn, br, header := dialWebsocket(t, ts)
	if header.Get("Ratelimit") == "" {
		t.Fatalf("handshake: %v, want 101 with rate limit headers", header)
	}
	fmt.Fprintf(conn, "ping\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "echo: ping\n" {
		t.Fatalf("after the upgrade: %q, %v", line, err)
	}
}

// wsUpstream answers an upgrade, then echoes lines until it reads "bye".
func wsUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "want an upgrade", 400)
			return
		}
		conn, rw := switchProtocols(t, w)
		if conn == nil {
			return
		}
		defer conn.Close()
		for {
			line, err := rw.ReadString('\n')
			if err != nil || line == "bye\n" {
				return
			}
			rw.WriteString("echo: " + line)
			rw.Flush()
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// switchProtocols answers an upgrade to a websocket (101) and returns the
// connection, or nil after reporting why it cannot.
func switchProtocols(t *testing.T, w http.ResponseWriter) (net.Conn, *bufio.ReadWriter) {
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Error(err)
		return nil, nil
	}
	rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	rw.Flush()
	return conn, rw
}

// dialWebsocket opens a websocket through the proxy, and returns it and
// the handshake's response header.
func dialWebsocket(t *testing.T, ts *testServer) (net.Conn, *bufio.Reader, http.Header) {
	t.Helper()
	conn, err := net.Dial("tcp", ts.Addrs().Proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	return conn, br, resp.Header
}

// A chunk the upstream flushes reaches the client while the upstream is
// still writing: the proxy does not buffer (server-sent events work).
func TestProxyStreams(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		http.NewResponseController(w).Flush()
		<-release // until the client has the first event
		io.WriteString(w, "data: second\n\n")
	}))
	defer up.Close()
	defer close(release)
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL})

	resp, err := http.Get("http://" + ts.Addrs().Proxy + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() {
		line, _ := br.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if line != "data: first\n" {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first event did not arrive while the upstream was still writing")
	}
	release <- struct{}{}
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: second\n\n" {
		t.Errorf("rest %q", rest)
	}
}

// The built-in demo: no configuration at all, a demo upstream behind the
// demo policies.
func TestDemo(t *testing.T) {
	ts := startServer(t, "", Options{})
	for i := range 10 {
		resp, body := get(t, ts.Addrs().Proxy, "/hello")
		if resp.StatusCode != 200 || !strings.Contains(body, `"path":"/hello"`) {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	resp, _ := get(t, ts.Addrs().Proxy, "/hello")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("11th request: %d, want 429 (the demo allows 10 a minute)", resp.StatusCode)
	}
	// The server logs the hint once its listeners are up, which may be
	// after they have answered the requests above.
	eventually(t, "the log to say where to curl", func() bool {
		return strings.Contains(ts.logs.String(), "curl -i http://"+ts.Addrs().Proxy+"/hello")
	})
}

// A real upstream without a policy file is refused: the demo's limits
// (10 a minute) would otherwise throttle real traffic, its playground on,
// because a --config was left out or its variable was empty. The demo
// upstream, named, still runs the demo.
func TestUpstreamWithoutConfigRefused(t *testing.T) {
	o := Options{Upstream: "http://127.0.0.1:9", Listen: Off, CheckListen: Off, GRPCListen: Off, AdminListen: Off}
	if _, err := New(o); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "--config") {
		t.Errorf("an upstream and no policy file: %v, want ErrOptions asking for --config", err)
	}
	o.Upstream = UpstreamDemo
	s, err := New(o)
	if err != nil {
		t.Fatalf("the demo upstream and no policy file: %v, want the demo", err)
	}
	if !s.demo {
		t.Errorf("the demo upstream and no policy file: not the demo")
	}
}

// A policy keyed by a form field (the login example) reads the body to
// find the field, url-encoded or multipart (what a browser's fetch sends
// for a FormData, here with a file before the field); the upstream still
// gets the body whole, and the field keys the decision.
func TestProxyFormKeyForwardsBody(t *testing.T) {
	urlEncoded := func(user string) ([]byte, string) {
		return []byte("username=" + user + "&password=" + strings.Repeat("s", 40<<10)), // bigger than one copy buffer
			"application/x-www-form-urlencoded"
	}
	multipartForm := func(user string) ([]byte, string) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		f, _ := mw.CreateFormFile("avatar", "a.png")
		f.Write(bytes.Repeat([]byte{0xff}, 100<<10))
		mw.WriteField("username", user)
		mw.WriteField("password", "secret")
		mw.Close()
		return buf.Bytes(), mw.FormDataContentType()
	}
	for name, form := range map[string]func(user string) ([]byte, string){"url-encoded": urlEncoded, "multipart": multipartForm} {
		t.Run(name, func(t *testing.T) {
			bodies := make(chan []byte, 10)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				bodies <- b
			}))
			defer up.Close()
			ts := startServer(t, loginFormPolicy, Options{Upstream: up.URL})
			login := func(user string) int {
				t.Helper()
				sent, ct := form(user)
				req, err := http.NewRequest("POST", "http://"+ts.Addrs().Proxy+"/login", bytes.NewReader(sent))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", ct)
				resp, _ := do(t, req)
				if resp.StatusCode == 200 {
					select {
					case got := <-bodies:
						if !bytes.Equal(got, sent) {
							t.Fatalf("the upstream got a body of %d bytes starting %.40q, want the %d bytes sent", len(got), got, len(sent))
						}
					case <-time.After(5 * time.Second):
						t.Fatal("a 200 without the upstream being asked")
					}
				}
				return resp.StatusCode
			}
			if got := []int{login("alice"), login("alice"), login("alice"), login("bob")}; got[0] != 200 || got[1] != 200 || got[2] != 429 || got[3] != 200 {
				t.Fatalf("logins alice ×3, bob: %v, want [200 200 429 200]", got)
			}
			select {
			case got := <-bodies:
				t.Fatalf("the refused login reached the upstream (body %.40q)", got)
			default:
			}
		})
	}
}

// The forwarding headers of the X-Forwarded- family that sluice does not
// set itself (-Port, -Prefix, -Server, ...), the other fields upstreams
// read a client's address or URL from (Client-IP, True-Client-IP,
// X-Original-URL, ...) are a client's claim: dropped from an untrusted
// peer, and a trusted proxy's passed on. Any of them spelled with
// underscores, dots or other signs (which CGI-style servers and PHP read
// as the real one) is dropped from everyone: no proxy sends one, and a
// trusted proxy passes on a client's.
func TestProxyDropsUntrustedForwardingHeaders(t *testing.T) {
	seen := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header }))
	defer up.Close()
	claims := []string{
		"X-Forwarded-Port", "443",
		"X-Forwarded-Prefix", "/admin",
		"X-Forwarded-Server", "internal.example",
		"X-Forwarded-Ssl", "on",
		"X_Forwarded_For", "203.0.113.9",
		"X_Real_IP", "203.0.113.9",
		"X-Forwarded_Host", "evil.example",
		"X.Forwarded.For", "203.0.113.9",
		"X.Real.Ip", "203.0.113.9",
		"Client-IP", "203.0.113.9",
		"True-Client-IP", "203.0.113.9",
		"CF-Connecting-IP", "203.0.113.9",
		"X-Client-IP", "203.0.113.9",
		"X-Cluster-Client-IP", "203.0.113.9",
		"Fastly-Client-IP", "203.0.113.9",
		"X-Forwarded", "for=203.0.113.9",
		"Forwarded-For", "203.0.113.9",
		"X-Original-Forwarded-For", "203.0.113.9",
		"X-Original-URL", "/admin",
		"X-Rewrite-URL", "/admin",
	}
	send := func(ts *testServer) http.Header {
		t.Helper()
		if resp, _ := get(t, ts.Addrs().Proxy, "/", claims...); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return <-seen
	}

	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL})
	h := send(ts)
	for name := range h {
		if n := strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(name)); strings.HasPrefix(n, "x-forwarded") || strings.HasSuffix(n, "-ip") ||
			strings.HasSuffix(n, "forwarded-for") || strings.HasSuffix(n, "-url") || n == "forwarded" {
			switch name {
			case "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto": // sluice's own
			default:
				t.Errorf("an untrusted client's %s: %q reached the upstream", name, h[name])
			}
		}
	}
	if got := h.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For %q, want the peer", got)
	}

	trusted := startServer(t, strings.Replace(untrustedPolicy, "policies:", "client_ip: {trusted_proxies: [127.0.0.1]}\npolicies:", 1), Options{Upstream: up.URL})
	h = send(trusted)
	if h.Get("X-Forwarded-Port") != "443" || h.Get("X-Forwarded-Prefix") != "/admin" || h.Get("True-Client-Ip") != "203.0.113.9" {
		t.Errorf("a trusted proxy's X-Forwarded-Port, -Prefix and True-Client-IP not passed on: %v", h)
	}
	for name := range h {
		if strings.ContainsAny(name, "_.") {
			t.Errorf("%s: %q reached the upstream from a trusted proxy; no proxy sends it", name, h[name])
		}
	}
}

// A path with repeated slashes is decided as the clean path net/http's
// ServeMux redirects it to (what a policy's pattern means), and forwarded
// as it came: POST //login counts against the POST /login policy. One
// with . or .. segments is refused.
func TestProxyDecidesTheCleanPath(t *testing.T) {
	paths := make(chan string, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { paths <- r.URL.EscapedPath() }))
	defer up.Close()
	ts := startServer(t, `
policies:
  - name: login
    match: "POST /login"
    key: ip
    limits: ["3/m"]
`, Options{Upstream: up.URL})
	post := func(target string) int {
		t.Helper()
		conn, err := net.DialTimeout("tcp", ts.Addrs().Proxy, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, target := range []string{"//login"} {
		if got := post(target); got != 200 {
			t.Fatalf("POST %s: %d", target, got)
		}
		if got := <-paths; got != target {
			t.Errorf("the upstream got %q, want %q as sent", got, target)
		}
		if n := ts.counter(`sluice_decisions_total{policy="login",result="allowed"}`); n != i+1 {
			t.Errorf("POST %s not decided by the login policy (%d decisions, want %d)", target, n, i+1)
		}
	}
	for range 2 {
		if got := post("/login"); got != 200 {
			t.Fatalf("POST /login: %d", got)
		}
		<-paths
	}
	for _, target := range []string{"/login", "//login"} {
		if got := post(target); got != http.StatusTooManyRequests {
			t.Errorf("POST %s after three logins: %d, want 429", target, got)
		}
	}
	// A path with . or .. segments is refused: decided clean, it would go
	// on as it came, and an upstream that serves /secret/../x under
	// /secret/ would serve what no policy there decided.
	for _, target := range []string{"/a/../login", "/./login", "/secret/%2e%2E/x", "/secret/.%2e/x", "/x/..", "/%2E/login"} {
		if got := post(target); got != http.StatusBadRequest {
			t.Errorf("POST %s: %d, want 400", target, got)
		}
	}
	for _, target := range []string{"/a..b/login", "/.well-known/x", "/v1.2/x", "/x%2e"} {
		if got := post(target); got != 200 {
			t.Errorf("POST %s: %d, want 200: no dot segment", target, got)
		}
		<-paths
	}
}

// A client that stops sending its body has its request cut after
// BodyTimeout, rather than hold its goroutine and the upstream's
// connection for as long as it likes; so does one whose body a form key
// reads before the decision. A body sent whole is not cut, however long
// the upstream then takes to answer.
func TestProxyBodyTimeout(t *testing.T) {
	const idle = 200 * time.Millisecond
	read := make(chan error, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		read <- err
		if err != nil {
			http.Error(w, "body cut", http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/slow" {
			select {
			case <-time.After(3 * idle): // an upstream slower than the idle bound
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "done")
	}))
	defer up.Close()
	ts := startServer(t, `
policies:
  - name: login
    match: "POST /login"
    key: form:username
    limits: ["10/m"]
  - name: once
    match: "POST /once"
    key: ip
    limits: ["1/h"]
`, Options{Upstream: up.URL, BodyTimeout: idle, RequestBuffer: -1}) // streamed: the upstream reads the body

	// stalled sends the headers and the start of a body, then nothing,
	// and returns the status the proxy answers and how long it took.
	stalled := func(path, contentType string) (string, time.Duration) {
		t.Helper()
		c, err := net.Dial("tcp", ts.Addrs().Proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: 100\r\n\r\nusername=al", path, contentType)
		c.SetReadDeadline(time.Now().Add(20 * idle))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil && line == "" {
			return "no answer: " + err.Error(), time.Since(start)
		}
		return strings.TrimSpace(line), time.Since(start)
	}
	// Forwarded: the upstream reads the body as it comes.
	if status, took := stalled("/upload", "text/plain"); status != "HTTP/1.1 408 Request Timeout" || took > 10*idle {
		t.Errorf("a stalled body to the upstream: %q after %v, want 408 after about %v", status, took, idle)
	}
	if err := <-read; err == nil {
		t.Error("the upstream read a stalled body without an error")
	}
	// Read by the form key before the decision.
	if status, took := stalled("/login", "application/x-www-form-urlencoded"); status != "HTTP/1.1 408 Request Timeout" || took > 10*idle {
		t.Errorf("a stalled login body: %q after %v, want 408 after about %v", status, took, idle)
	}

	// Refused before anything reads the body: net/http reads the rest of
	// it before it answers (to keep the connection), and a client that
	// sends no more must not hold the answer, and the connection, for
	// ever.
	resp, err := http.Post("http://"+ts.Addrs().Proxy+"/once", "text/plain", strings.NewReader("all of it"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-read
	if status, took := stalled("/once", "text/plain"); status != "HTTP/1.1 429 Too Many Requests" || took > 10*idle {
		t.Errorf("a stalled body refused unread: %q after %v, want 429 within about %v", status, took, idle)
	}

	// A whole body, and an upstream that answers after three idle bounds.
	resp, err = http.Post("http://"+ts.Addrs().Proxy+"/slow", "text/plain", strings.NewReader("all of it"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "done" {
		t.Errorf("a slow upstream after a whole body: %d %q, want 200 done", resp.StatusCode, body)
	}
}

// A body that cannot be read (a malformed chunk) is the client's fault:
// 400, where the proxy answered 502 as if the upstream had failed.
func TestProxyMalformedBody(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "body cut", http.StatusBadRequest)
			return
		}
		io.WriteString(w, "done")
	}))
	defer up.Close()
	for _, timeout := range []time.Duration{0, -1} { // the default bound, and none
		ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL, BodyTimeout: timeout})
		c, err := net.Dial("tcp", ts.Addrs().Proxy)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if got := strings.TrimSpace(line); got != "HTTP/1.1 400 Bad Request" {
			t.Errorf("BodyTimeout %v: a malformed chunked body: %q (%v), want 400", timeout, got, err)
		}
	}
}

// Over HTTP/2 as over HTTP/1.1: a stalled body is cut with 408, and a
// body sent whole is not, however long the upstream takes to answer or
// to take the body. (A stream's deadline is a timer that fires whether
// its body is being read or not.)
func TestProxyBodyTimeoutHTTP2(t *testing.T) {
	const idle = 200 * time.Millisecond
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" { // slow to take the body: the proxy's writes to it block
			r.Body.Read(make([]byte, 1))
			time.Sleep(4 * idle)
		}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, "body cut", http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/slow" {
			time.Sleep(3 * idle)
		}
		io.WriteString(w, "done")
	}))
	defer up.Close()
	ca := newCA(t)
	crt, key := ca.serverFiles(t.TempDir(), 1)
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL, TLSCert: crt, TLSKey: key, BodyTimeout: idle})
	c := httpsClient(t, ca.pool)
	post := func(path string, body io.Reader) (string, time.Duration) {
		t.Helper()
		start := time.Now()
		resp, err := c.Post("https://"+ts.Addrs().Proxy+path, "application/octet-stream", body)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s: %s, want HTTP/2", path, resp.Proto)
		}
		return fmt.Sprintf("%d %s", resp.StatusCode, b), time.Since(start)
	}

	pr, pw := io.Pipe()
	defer pw.Close()
	go io.WriteString(pw, "the start of a body, then nothing")
	if got, took := post("/upload", pr); !strings.HasPrefix(got, "408 ") || took > 10*idle {
		t.Errorf("a stalled body: %q after %v, want 408 after about %v", got, took, idle)
	}
	if got, _ := post("/slow", strings.NewReader("all of it")); got != "200 done" {
		t.Errorf("a slow upstream after a whole body: %q, want 200 done", got)
	}
	// More than the socket buffers hold, so that the proxy waits on the
	// upstream, not on the client, for longer than idle.
	if got, _ := post("/busy", bytes.NewReader(make([]byte, 8<<20))); got != "200 done" {
		t.Errorf("an upstream slow to take a body sent whole: %q, want 200 done", got)
	}
}

// inFlightTransport answers a request at once, leaving a read of its
// body in flight, as net/http's transports may: they write a body from a
// goroutine of their own, which may outlive the handler. read ends when
// that read does.
type inFlightTransport struct {
	reading chan struct{} // a deadline was set (see deadlineRecorder)
	// sets is how many deadlines are set once the read has started: over
	// HTTP/1 one as the proxy takes the body, then the read's.
	sets int
	read chan error
}

func (ft *inFlightTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	go func() {
		_, err := r.Body.Read(make([]byte, 8))
		ft.read <- err
	}()
	for range ft.sets {
		<-ft.reading
	}
	return &http.Response{StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// deadlineRecorder is a ResponseWriter that takes read deadlines and
// counts those set after its handler returned.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	reading  chan struct{}
	returned atomic.Bool
	late     atomic.Int32
}

func (d *deadlineRecorder) SetReadDeadline(t time.Time) error {
	if d.returned.Load() {
		d.late.Add(1)
	} else if !t.IsZero() {
		select {
		case d.reading <- struct{}{}:
		default:
		}
	}
	return nil
}

// A read of the body that ends after its handler returned moves no
// deadline: the connection may be serving the next request, and
// net/http's HTTP/2 ResponseWriter panics when used after its handler.
func TestProxyBodyReadAfterHandler(t *testing.T) {
	for _, major := range []int{1, 2} {
		ts := newServer(t, untrustedPolicy, Options{Upstream: "http://upstream.invalid", RequestBuffer: -1}) // the transport reads the body
		ft := &inFlightTransport{reading: make(chan struct{}, 2), sets: 3 - major, read: make(chan error, 1)}
		ts.trans = ft
		if err := ts.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		pr, pw := io.Pipe()
		r := httptest.NewRequest("POST", "/upload", pr)
		r.ProtoMajor = major
		w := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder(), reading: ft.reading}
		ts.serveProxy(w, r)
		w.returned.Store(true)
		pw.Close() // the body's end reaches the read in flight
		if err := <-ft.read; err != io.EOF {
			t.Fatalf("HTTP/%d: the read in flight: %v, want EOF", major, err)
		}
		if w.Code != 200 || w.late.Load() != 0 {
			t.Errorf("HTTP/%d: %d, %d deadlines set after the handler returned, want 200 and none", major, w.Code, w.late.Load())
		}
	}
}

// Informational responses pass through: an upstream's 100 Continue and
// 103 Early Hints reach the client with their own fields, and the final
// response keeps the rate limit headers. (ReverseProxy writes a 1xx with
// every header set so far, then clears them all.)
func TestProxyInformational(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.Copy(io.Discard, r.Body) // sends 100 Continue
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL})
	var got []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got = append(got, fmt.Sprintf("%d Link=%q RateLimit=%q", code, h.Get("Link"), h.Get("Ratelimit")))
		return nil
	}}
	req, err := http.NewRequest("POST", "http://"+ts.Addrs().Proxy+"/upload", strings.NewReader("a body"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Expect", "100-continue")
	resp, body := do(t, req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	// The 100 may come twice: net/http's server sends its own as the
	// transport reads the body, and may do so before ReverseProxy relays
	// the upstream's (both goroutines are net/http's). Any number of them
	// is valid HTTP; what matters is that none carries the rate limit
	// headers. (With the body buffered, net/http's 100 comes first, as
	// sluice reads the body before it asks the upstream.)
	want := []string{`100 Link="" RateLimit=""`, `103 Link="</style.css>; rel=preload" RateLimit=""`}
	got = slices.Compact(slices.Sorted(slices.Values(got)))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("informational responses:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if resp.StatusCode != 200 || body != "ok" || resp.Header.Get("Ratelimit") != `"api";r=2;t=20` || resp.Header.Get("Link") != "" {
		t.Errorf("final response: %d %q, RateLimit %q, Link %q; want 200 ok with the rate limit headers", resp.StatusCode, body, resp.Header.Get("Ratelimit"), resp.Header.Get("Link"))
	}
}

// trailerBody is a request body that sets its request's trailer as it
// ends, as a client computing a checksum would.
type trailerBody struct {
	io.Reader
	trailer http.Header
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF {
		b.trailer.Set("X-Checksum", "7")
	}
	return n, err
}

func (b *trailerBody) Close() error { return nil }

// Trailers pass through both ways: a client's request trailer reaches the
// upstream with its value, and an upstream's response trailer reaches
// the client.
func TestProxyTrailers(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-Upstream-Sum")
		fmt.Fprintf(w, "%s, trailer %q", b, r.Trailer.Get("X-Checksum"))
		w.Header().Set("X-Upstream-Sum", "42")
	}))
	defer up.Close()
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL})
	req, err := http.NewRequest("POST", "http://"+ts.Addrs().Proxy+"/upload", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Trailer = http.Header{"X-Checksum": nil}
	req.Body, req.ContentLength = &trailerBody{Reader: strings.NewReader("abc"), trailer: req.Trailer}, -1
	resp, body := do(t, req)
	if resp.StatusCode != 200 || body != `abc, trailer "7"` {
		t.Errorf("the upstream answered %d %q, want 200 abc with the trailer 7", resp.StatusCode, body)
	}
	if got := resp.Trailer.Get("X-Upstream-Sum"); got != "42" {
		t.Errorf("the client got the response trailer %q, want 42", got)
	}
}

// The upstream gets the Accept-Encoding the client sent, and nothing
// when it sent none: net/http's transport would ask for gzip and undo
// it, so a client that asked for no encoding got the body re-framed,
// without its Content-Length, and the upstream paid for compressing.
func TestProxyDoesNotAskForCompression(t *testing.T) {
	const doc = "a document the upstream would rather send compressed"
	asked := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- r.Header.Get("Accept-Encoding")
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			io.WriteString(w, doc)
			return
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		io.WriteString(zw, doc)
		zw.Close()
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(buf.Bytes())
	}))
	defer up.Close()
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL})
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + ts.Addrs().Proxy + "/doc")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ae := <-asked; ae != "" {
		t.Errorf("the upstream was sent Accept-Encoding %q; the client sent none", ae)
	}
	if string(body) != doc || resp.ContentLength != int64(len(doc)) || resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("the client got %q, Content-Length %d, Content-Encoding %q; want the document with its length", body, resp.ContentLength, resp.Header.Get("Content-Encoding"))
	}
}

// Behind a Unix socket the peer has no IP address, and net/http's
// RemoteAddr is the path the peer bound its end to, which it chooses: it
// is never written into X-Forwarded-For. A trusted proxy's chains (with
// trust_unix_sockets) are passed on; an untrusted peer's are dropped.
func TestProxyUnixSocketPeer(t *testing.T) {
	seen := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- fmt.Sprintf("X-Forwarded-For %q, Forwarded %q", r.Header.Values("X-Forwarded-For"), r.Header.Values("Forwarded"))
	}))
	defer up.Close()
	for _, tc := range []struct {
		trust bool
		want  string
	}{
		{false, `X-Forwarded-For [], Forwarded []`},
		{true, `X-Forwarded-For ["203.0.113.7"], Forwarded ["for=203.0.113.7"]`},
	} {
		dir := t.TempDir()
		l, err := net.Listen("unix", dir+"/sluice.sock")
		if err != nil {
			t.Fatal(err)
		}
		ts := startServer(t, fmt.Sprintf("client_ip: {trust_unix_sockets: %v}\n", tc.trust)+untrustedPolicy,
			Options{Upstream: up.URL, ProxyListener: l})
		// The client names its end of the socket as an address of its
		// choosing, port included.
		c, err := net.DialUnix("unix", &net.UnixAddr{Name: dir + "/10.0.0.1:80", Net: "unix"}, l.Addr().(*net.UnixAddr))
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.7\r\nForwarded: for=203.0.113.7\r\nConnection: close\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		c.Close()
		if got := <-seen; resp.StatusCode != 200 || got != tc.want {
			t.Errorf("trust_unix_sockets %v: %d, the upstream saw %s; want 200 and %s", tc.trust, resp.StatusCode, got, tc.want)
		}
		ts.stop()
	}
}

// A client that shuts its sending side once its request is sent (nc -N,
// scripted clients) has its request canceled by net/http, which reads
// the end of its stream as the client going away. It must not be told
// that the request succeeded: the proxy answered an empty 200 when the
// upstream had answered nothing.
func TestProxyClientHalfClose(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then net/http watches for the proxy going away
		select {
		case <-r.Context().Done(): // the proxy gave up on it
		case <-time.After(5 * time.Second):
			t.Error("the proxy did not cancel the upstream request")
		}
	}))
	defer up.Close()
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL})
	c, err := net.Dial("tcp", ts.Addrs().Proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if status, _, _ := strings.Cut(string(got), "\r\n"); strings.HasPrefix(status, "HTTP/1.1 2") {
		t.Errorf("a canceled request was answered %q (%v)", status, err)
	}
}

// An upstream that accepts the request and does not answer is answered
// 504 after UpstreamTimeout, as NGINX's proxy_read_timeout would, where
// the request waited for as long as its client did; one that answers in
// time streams for as long as it takes.
func TestProxyUpstreamTimeout(t *testing.T) {
	const bound = 200 * time.Millisecond
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		time.Sleep(2 * bound) // headers in time, then a slow body
		io.WriteString(w, "done")
	}))
	defer up.Close()
	defer close(release)
	ts := startServer(t, "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n", Options{Upstream: up.URL, UpstreamTimeout: bound})
	start := time.Now()
	resp, body := get(t, ts.Addrs().Proxy, "/hang")
	if took := time.Since(start); resp.StatusCode != http.StatusGatewayTimeout || took > 20*bound ||
		resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("RateLimit") == "" {
		t.Errorf("a hung upstream: %d after %v, %v %q; want 504 problem+json with the RateLimit fields after about %v", resp.StatusCode, took, resp.Header, body, bound)
	}
	if resp, body := get(t, ts.Addrs().Proxy, "/slow-body"); resp.StatusCode != 200 || body != "done" {
		t.Errorf("a slow body after headers in time: %d %q, want 200 done", resp.StatusCode, body)
	}
}

// CONNECT asks for a tunnel the proxy does not open: 405 from sluice,
// where it reached the upstream and came back 502, with a warning logged
// for each. So does PRI, HTTP/2's preface read as an HTTP/1 request,
// which went on to the upstream as PRI /%2A.
func TestProxyConnect(t *testing.T) {
	up := newUpstream(t)
	ts := startServer(t, "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n", Options{Upstream: up.URL})
	for _, req := range []string{
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
		"PRI * HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		c, err := net.Dial("tcp", ts.Addrs().Proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, req)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		if strings.TrimSpace(line) != "HTTP/1.1 405 Method Not Allowed" {
			t.Errorf("%.8s: %q, want 405", req, line)
		}
	}
	if strings.Contains(ts.logs.String(), "upstream failed") {
		t.Errorf("CONNECT logged an upstream failure:\n%s", ts.logs.String())
	}
}

// A client that stops reading its response has it cut after SendTimeout,
// and the upstream's with it, rather than hold its goroutine, a buffer
// and the upstream's connection for as long as it likes; over HTTP/2 as
// over HTTP/1.1. A response that keeps moving is not cut, nor an event
// stream the upstream is silent on for longer, nor a websocket idle for
// longer. (An HTTP/2 stream's write deadline is a timer that fires
// whether it is being written or not.)
func TestProxySendTimeout(t *testing.T) {
	const idle = 200 * time.Millisecond
	ended := make(chan error, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/endless": // more than any buffer holds, until the proxy gives up
			chunk := make([]byte, 32<<10)
			for {
				if _, err := w.Write(chunk); err != nil {
					ended <- err
					return
				}
			}
		case "/events":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: first\n\n")
			http.NewResponseController(w).Flush()
			time.Sleep(3 * idle)
			io.WriteString(w, "data: second\n\n")
		}
	}))
	defer up.Close()
	ca := newCA(t)
	crt, key := ca.serverFiles(t.TempDir(), 1)
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		o := Options{Upstream: up.URL, SendTimeout: idle}
		scheme, c := "http://", http.DefaultClient
		if proto == "HTTP/2.0" {
			o.TLSCert, o.TLSKey = crt, key
			scheme, c = "https://", httpsClient(t, ca.pool)
		}
		ts := startServer(t, "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n", o)

		resp, err := c.Get(scheme + ts.Addrs().Proxy + "/endless")
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		if resp.Proto != proto {
			t.Fatalf("%s: the response came over %s", proto, resp.Proto)
		}
		select { // the client reads nothing of the body
		case <-ended:
		case <-time.After(25 * idle):
			t.Errorf("%s: the upstream was still writing %v after its client stopped reading", proto, 25*idle)
		}
		resp.Body.Close()
		eventually(t, "the proxy's handler to return", func() bool { return ts.serving.Load() == 0 })

		resp, err = c.Get(scheme + ts.Addrs().Proxy + "/events")
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "data: first\n\ndata: second\n\n" || err != nil {
			t.Errorf("%s: an event stream silent for longer than SendTimeout: %q, %v; want both events", proto, body, err)
		}
		ts.stop()
	}

	ts := startServer(t, untrustedPolicy, Options{Upstream: wsUpstream(t).URL, SendTimeout: idle})
	conn, br, _ := dialWebsocket(t, ts)
	time.Sleep(3 * idle)
	fmt.Fprintf(conn, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo: ping\n" {
		t.Errorf("a websocket idle for longer than SendTimeout: %q, %v", line, err)
	}

	// A websocket whose client reads nothing of what the upstream sends
	// is cut as a response is, and the upstream's connection with it.
	ws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _ := switchProtocols(t, w)
		if conn == nil {
			return
		}
		defer conn.Close()
		chunk := make([]byte, 32<<10)
		for {
			if _, err := conn.Write(chunk); err != nil {
				ended <- err
				return
			}
		}
	}))
	defer ws.Close()
	dialWebsocket(t, startServer(t, untrustedPolicy, Options{Upstream: ws.URL, SendTimeout: idle})) // and read nothing
	select {
	case <-ended:
	case <-time.After(25 * idle):
		t.Errorf("the upstream of a websocket was still writing %v after its client stopped reading", 25*idle)
	}
}

// A Location that names the upstream itself, as an upstream builds it
// from the Host it gets (its own name, by default), reaches the client as
// the path to ask sluice for, as NGINX's proxy_redirect default rewrites
// it: passed on, it sent clients to an address they cannot reach, or
// that they should not know. Any other Location is passed on as it is,
// and so is one whose path would read as another host's (//evil).
func TestProxyRelocatesUpstreamRedirects(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", strings.ReplaceAll(r.URL.Query().Get("to"), "{host}", r.Host))
		w.WriteHeader(http.StatusFound)
	}))
	defer up.Close()
	host := strings.TrimPrefix(up.URL, "http://")
	for _, tc := range []struct {
		target, location, want string
	}{
		{up.URL, "http://{host}/dir/?a=1#top", "/dir/?a=1#top"},
		{up.URL, "HTTP://" + strings.ToUpper(host) + "/x", "/x"},
		{up.URL, "http://{host}", "/"},
		{up.URL, "http://{host}?q=1", "/?q=1"},
		{up.URL, "http://{host}//evil.example/", "http://" + host + "//evil.example/"},
		{up.URL, `http://{host}/\evil.example/`, `http://` + host + `/\evil.example/`},
		// Browsers drop tabs and newlines from a URL: /<tab>/evil is //evil.
		{up.URL, "http://{host}/\t/evil.example/", "http://" + host + "/\t/evil.example/"},
		{up.URL, "http://{host}/\t\\evil.example/", "http://" + host + "/\t\\evil.example/"},
		{up.URL, "https://{host}/x", "https://" + host + "/x"},
		{up.URL, "http://{host}0/x", "http://" + host + "0/x"},
		{up.URL, "http://user@{host}/x", "http://user@" + host + "/x"},
		{up.URL, "http://other.example/x", "http://other.example/x"},
		{up.URL, "/relative", "/relative"},
		{up.URL + "/api/", "http://{host}/api/x?q", "/x?q"},
		{up.URL + "/api", "http://{host}/api", "/"},
		{up.URL + "/api", "http://{host}/apix", "http://" + host + "/apix"},
		{up.URL + "/api", "http://{host}/other", "http://" + host + "/other"},
	} {
		ts := startServer(t, untrustedPolicy, Options{Upstream: tc.target})
		resp, _ := rawRequest(t, ts.Addrs().Proxy, "GET /?to="+url.QueryEscape(tc.location)+" HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
		if got := resp.Header.Get("Location"); resp.StatusCode != http.StatusFound || got != tc.want {
			t.Errorf("upstream %s answering Location %q: %d, Location %q; want %q", tc.target, tc.location, resp.StatusCode, got, tc.want)
		}
		ts.stop()
	}
}

// A request body of up to RequestBuffer bytes is read whole before the
// upstream is asked, as NGINX's proxy_request_buffering does: a client
// that trickles its body holds its own connection, not one of the
// upstream's (nor a worker of an upstream that serves one request per
// worker). A larger body streams as it comes, and so does every body
// with the buffer off. A small chunked body reaches the upstream with
// its length.
func TestProxyRequestBuffer(t *testing.T) {
	entered := make(chan string, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- fmt.Sprintf("%d %q", r.ContentLength, r.TransferEncoding)
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d bytes", len(b))
	}))
	defer up.Close()
	// send writes the request's head and the first part of its body,
	// reports whether the upstream was asked within wait, before the rest
	// came, then sends the rest and returns the answer's body. (A wait
	// long enough for a loaded machine where the upstream should be
	// asked; a short one where it should not, which a slow machine can
	// only make pass.)
	send := func(ts *testServer, wait time.Duration, head, first, rest string) (bool, string) {
		t.Helper()
		c, err := net.Dial("tcp", ts.Addrs().Proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprint(c, head+first)
		early := false
		select {
		case <-entered:
			early = true
		case <-time.After(wait):
		}
		fmt.Fprint(c, rest)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !early {
			<-entered
		}
		return early, string(b)
	}
	post := func(n int) string {
		return fmt.Sprintf("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", n)
	}
	small := startServer(t, untrustedPolicy, Options{Upstream: up.URL, RequestBuffer: 1 << 10})
	if early, body := send(small, 300*time.Millisecond, post(10), "abcde", "fghij"); early || body != "10 bytes" {
		t.Errorf("a 10-byte body in halves, buffer 1 KiB: upstream asked before the body was whole: %v; answer %q", early, body)
	}
	big := strings.Repeat("x", 2<<10)
	if early, body := send(small, 5*time.Second, post(len(big)+5), big, "12345"); !early || body != fmt.Sprint(len(big)+5, " bytes") {
		t.Errorf("a body past the buffer: upstream asked at once: %v, want true; answer %q", early, body)
	}
	// Chunked and small: forwarded with its length.
	chunked := "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
	c, err := net.Dial("tcp", small.Addrs().Proxy)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(c, chunked+"5\r\nabcde\r\n0\r\n\r\n")
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a small chunked body: %v %v", resp, err)
	}
	c.Close()
	if got := <-entered; got != `5 []` {
		t.Errorf("a small chunked body reached the upstream as %s, want its length and no chunking", got)
	}
	off := startServer(t, untrustedPolicy, Options{Upstream: up.URL, RequestBuffer: -1})
	if early, _ := send(off, 5*time.Second, post(10), "abcde", "fghij"); !early {
		t.Errorf("buffer off: the upstream was not asked before the body was whole")
	}
	// A body that stops is answered 408 by sluice; the upstream never
	// hears of it.
	stalls := startServer(t, untrustedPolicy, Options{Upstream: up.URL, BodyTimeout: 200 * time.Millisecond})
	resp, _ := rawRequest(t, stalls.Addrs().Proxy, post(10)+"abcde")
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a buffered body that stops: %d, want 408", resp.StatusCode)
	}
	select {
	case got := <-entered:
		t.Errorf("the upstream was asked (%s) for a body that never came whole", got)
	default:
	}
}
