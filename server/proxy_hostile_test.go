package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// hostilePolicy trusts TRUSTED to name the user and keys on X-API-Key, so
// that a request's trailer can try to speak for both.
const hostilePolicy = `
client_ip: {trusted_proxies: [TRUSTED]}
user: {header: X-Auth-Request-User}
policies:
  - name: keyed
    key: "header:X-API-Key"
    limits: ["100/m"]
`

// seenTrailer is what a test upstream saw of a request's trailer: the
// names announced in its Trailer field, and the fields that came after
// the body, as "Name=value" sorted.
type seenTrailer struct {
	body      string
	announced []string
	fields    []string
}

// trailerUpstream is an upstream that reports what it saw of each
// request's trailer.
func trailerUpstream(t *testing.T) (*httptest.Server, chan seenTrailer) {
	seen := make(chan seenTrailer, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s seenTrailer
		for name := range r.Trailer { // before the body: what was announced
			s.announced = append(s.announced, name)
		}
		b, _ := io.ReadAll(r.Body)
		s.body = string(b)
		for name, vv := range r.Trailer {
			for _, v := range vv {
				s.fields = append(s.fields, name+"="+v)
			}
		}
		slices.Sort(s.announced)
		slices.Sort(s.fields)
		seen <- s
	}))
	t.Cleanup(up.Close)
	return up, seen
}

// A request's trailer reaches the upstream through the filter its header
// goes through, with the fields no trailer may carry (framing, routing,
// credentials) dropped, those the policies read dropped in any spelling
// (they decided the request before its trailer came), and only the fields
// announced in its Trailer field. From an untrusted peer the forwarding
// fields go too; a trusted proxy's pass, as in its header. So it goes
// whether the body was buffered or streamed.
func TestProxyFiltersRequestTrailer(t *testing.T) {
	const req = "POST /t HTTP/1.1\r\nHost: x\r\n" +
		"Trailer: X-Checksum, X-Auth-Request-User, X_Auth_Request_User, X-Api-Key, X-Forwarded-For, X-Real-IP, Forwarded, Host, Authorization, Cookie, X-Forwarded-Prefix\r\n" +
		"Transfer-Encoding: chunked\r\n\r\n" +
		"3\r\nabc\r\n0\r\n" +
		"X-Checksum: 7\r\n" +
		"X-Auth-Request-User: admin\r\n" +
		"X_Auth_Request_User: admin\r\n" +
		"X-API-Key: someone-else\r\n" +
		"X-Forwarded-For: 6.6.6.6\r\n" +
		"X-Real-IP: 6.6.6.6\r\n" +
		"Forwarded: for=6.6.6.6\r\n" +
		"X-Forwarded-Prefix: /admin\r\n" +
		"Content-Length: 999\r\n" +
		"Transfer-Encoding: chunked\r\n" +
		"Host: evil\r\n" +
		"Authorization: Basic eA==\r\n" +
		"Cookie: session=admin\r\n" +
		"X-Undeclared: 1\r\n" +
		"\r\n"
	for _, tt := range []struct {
		what    string
		trusted string
		buffer  int
		want    []string // announced and sent alike
	}{
		{"untrusted, buffered", "192.0.2.1", 0, []string{"X-Checksum=7"}},
		{"untrusted, streamed", "192.0.2.1", -1, []string{"X-Checksum=7"}},
		{"trusted, buffered", "127.0.0.1", 0, []string{"Forwarded=for=6.6.6.6", "X-Checksum=7", "X-Forwarded-For=6.6.6.6", "X-Forwarded-Prefix=/admin", "X-Real-Ip=6.6.6.6"}},
		{"trusted, streamed", "127.0.0.1", -1, []string{"Forwarded=for=6.6.6.6", "X-Checksum=7", "X-Forwarded-For=6.6.6.6", "X-Forwarded-Prefix=/admin", "X-Real-Ip=6.6.6.6"}},
	} {
		t.Run(tt.what, func(t *testing.T) {
			up, seen := trailerUpstream(t)
			ts := startServer(t, strings.Replace(hostilePolicy, "TRUSTED", tt.trusted, 1), Options{Upstream: up.URL, RequestBuffer: tt.buffer})
			if resp, body := rawRequest(t, ts.Addrs().Proxy, req); resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			s := <-seen
			var announced []string
			for _, f := range tt.want {
				announced = append(announced, f[:strings.IndexByte(f, '=')])
			}
			if s.body != "abc" || !slices.Equal(s.fields, tt.want) || !slices.Equal(s.announced, announced) {
				t.Errorf("the upstream got the body %q, a trailer announced as %q and sent as\n%q\nwant abc, %q and\n%q", s.body, s.announced, s.fields, announced, tt.want)
			}
		})
	}
}

// A body with a trailer is buffered as any other: announcing a trailer
// no longer lets a client trickle its body to the upstream. One whose
// trailer brought nothing reaches the upstream with its length; one that
// stops is answered 408 without the upstream hearing of it.
func TestProxyBuffersBodyWithTrailer(t *testing.T) {
	entered := make(chan string, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- fmt.Sprintf("%d %q", r.ContentLength, r.TransferEncoding)
		io.Copy(io.Discard, r.Body)
	}))
	defer up.Close()
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL, BodyTimeout: 200 * time.Millisecond})
	const head = "POST /up HTTP/1.1\r\nHost: x\r\nTrailer: X-Nothing\r\nTransfer-Encoding: chunked\r\n\r\n"
	if resp, body := rawRequest(t, ts.Addrs().Proxy, head+"1\r\na\r\n1\r\nb\r\n1\r\nc\r\n0\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if got := <-entered; got != `3 []` {
		t.Errorf("a small body announcing a trailer reached the upstream as %s, want whole, with its length", got)
	}
	resp, _ := rawRequest(t, ts.Addrs().Proxy, head+"1\r\na\r\n")
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a body announcing a trailer that stops: %d, want 408", resp.StatusCode)
	}
	select {
	case got := <-entered:
		t.Errorf("the upstream was asked (%s) for a body that never came whole", got)
	default:
	}
}

// Expect: 100-continue is the client's question to sluice, answered as
// sluice reads the body. Once sluice has the body whole, the upstream is
// not asked it again: an upstream that sends no 100 made each such
// request wait a second for nothing, and one that does sent the client a
// second 100. A body that streams keeps it, for the upstream to answer.
func TestProxyExpectContinue(t *testing.T) {
	expect := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		expect <- r.Header.Get("Expect")
		io.Copy(io.Discard, r.Body) // sends 100 Continue when asked
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	for _, tt := range []struct {
		what     string
		buffer   int
		upstream string // the Expect the upstream gets
	}{
		{"buffered", 0, ""},
		{"streamed", -1, "100-continue"},
	} {
		t.Run(tt.what, func(t *testing.T) {
			ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL, RequestBuffer: tt.buffer})
			c, err := net.DialTimeout("tcp", ts.Addrs().Proxy, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello")
			br := bufio.NewReader(c)
			continues := 0
			for {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode == http.StatusContinue {
					continues++
					continue
				}
				if resp.StatusCode != 200 {
					t.Fatalf("final response %d", resp.StatusCode)
				}
				break
			}
			if got := <-expect; got != tt.upstream {
				t.Errorf("the upstream got Expect %q, want %q", got, tt.upstream)
			}
			if tt.buffer == 0 && continues != 1 {
				t.Errorf("the client got %d 100 Continue, want 1", continues)
			}
		})
	}
}

// From a trusted proxy, sluice appends its element to the Forwarded the
// proxy sent on the same line, as it does X-Forwarded-For's: many readers
// take only the first line of a field.
func TestProxyJoinsForwarded(t *testing.T) {
	seen := make(chan []string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Values("Forwarded") }))
	defer up.Close()
	ts := startServer(t, strings.Replace(untrustedPolicy, "policies:", "client_ip: {trusted_proxies: [127.0.0.1]}\npolicies:", 1), Options{Upstream: up.URL})
	resp, _ := rawRequest(t, ts.Addrs().Proxy, "GET / HTTP/1.1\r\nHost: x\r\nForwarded: for=203.0.113.1\r\nForwarded: for=198.51.100.2;proto=https\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	want := []string{"for=203.0.113.1, for=198.51.100.2;proto=https, for=127.0.0.1"}
	if got := <-seen; !slices.Equal(got, want) {
		t.Errorf("the upstream got Forwarded %q, want %q", got, want)
	}
}

// An upstream that breaks off its response mid-body is logged one line a
// second, counting those left out, as an upstream that fails is: one
// that does so for every request would otherwise log a line each.
func TestProxyPacesBodyCopyErrors(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
		brw.Flush()
	}))
	defer up.Close()
	ts := startServer(t, "policies: [{name: api, key: ip, limits: [\"100/m\"]}]\n", Options{Upstream: up.URL})
	send := func() {
		t.Helper()
		// The client sees the connection close, before the response's
		// head (still in net/http's buffer) or within its body.
		resp, err := http.Get("http://" + ts.Addrs().Proxy + "/")
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if err == nil {
			t.Error("a response the upstream broke off reached the client whole")
		}
	}
	lines := func() []string {
		var got []string
		for line := range strings.SplitSeq(ts.logs.String(), "\n") {
			if strings.Contains(line, "read error during body copy") {
				got = append(got, line)
			}
		}
		return got
	}
	for range 3 {
		send()
	}
	if got := lines(); len(got) != 1 {
		t.Fatalf("3 responses broken off within a second: %d lines logged, want 1:\n%s", len(got), strings.Join(got, "\n"))
	}
	ts.clock.Advance(time.Second)
	send()
	if got := lines(); len(got) != 2 || !strings.Contains(got[1], "not_logged=2") {
		t.Errorf("a second later: lines\n%s\nwant a second one with not_logged=2", strings.Join(got, "\n"))
	}
}
