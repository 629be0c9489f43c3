package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// statuses sends req, as it goes on the wire, to addr and returns the
// status codes of the responses that come for it, informational ones
// first, up to the final one, and the final one's body.
func statuses(t *testing.T, addr, req string) (codes []int, body string) {
	t.Helper()
	br := sendRaw(t, addr, req)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading a response to %.40q after %v: %v", req, codes, err)
		}
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode >= 200 {
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("reading the body of the response to %.40q: %v", req, err)
			}
			return codes, string(b)
		}
	}
}

// An HTTP/1.0 client gets no informational response (RFC 9110, section
// 15.2): sluice asks the upstream in HTTP/1.1, which may send 103 Early
// Hints, or 100 Continue to an Expect an HTTP/1.0 client sent, and those
// reached a client that cannot read them. An HTTP/1.1 client still gets
// them.
func TestProxyNoInformationalToHTTP10(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.Copy(io.Discard, r.Body) // sends 100 Continue when asked
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	// The body streams, Expect and all, for the upstream to answer it.
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL, RequestBuffer: -1})
	for _, tt := range []struct {
		what, req string
		want      string // the status codes, in order
	}{
		{"HTTP/1.0 GET", "GET /early HTTP/1.0\r\nHost: x\r\n\r\n", "[200]"},
		{"HTTP/1.0 POST with Expect", "POST /up HTTP/1.0\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello", "[200]"},
		{"HTTP/1.1 GET", "GET /early HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "[103 200]"},
	} {
		codes, body := statuses(t, ts.Addrs().Proxy, tt.req)
		if got := fmt.Sprint(codes); got != tt.want || body != "ok" {
			t.Errorf("%s: responses %s, body %q; want %s, ok", tt.what, got, body, tt.want)
		}
	}
}

// A chunked body larger than the request buffer, sent with Expect:
// 100-continue, gets one 100 Continue: net/http's, as sluice reads the
// first part into its buffer. The rest went on with Expect still set, so
// that an upstream that answers it sent the client a second, and one
// that does not held the request for the transport's
// ExpectContinueTimeout.
func TestProxyExpectContinueBeyondBuffer(t *testing.T) {
	expect := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		expect <- r.Header.Get("Expect")
		b, _ := io.ReadAll(r.Body) // sends 100 Continue when asked
		fmt.Fprintf(w, "%d bytes", len(b))
	}))
	defer up.Close()
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL, RequestBuffer: 1 << 10})
	data := strings.Repeat("x", 4<<10)
	codes, body := statuses(t, ts.Addrs().Proxy, "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"+
		"Expect: 100-continue\r\nConnection: close\r\n\r\n"+fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(data), data))
	if got, want := fmt.Sprint(codes), "[100 200]"; got != want || body != fmt.Sprint(len(data), " bytes") {
		t.Errorf("responses %s, body %q; want %s, %d bytes", got, body, want, len(data))
	}
	if got := <-expect; got != "" {
		t.Errorf("the upstream got Expect %q, want none", got)
	}
}

// A scheme-relative Location naming the upstream's host (//host/x), in
// any letter case, is rewritten as the full form is: passed on, it told
// the client the upstream's address and sent it there. One naming
// another host, or one that only begins as the upstream's does, is left
// alone, and so is one whose path would read as another host's.
func TestRelocateSchemeRelative(t *testing.T) {
	const host = "127.0.0.1:13000"
	for _, tc := range []struct {
		target, location, want string
	}{
		{"http://" + host, "//" + host + "/x", "/x"},
		{"http://" + host, "//" + host, "/"},
		{"http://" + host, "//" + host + "?q=1#top", "/?q=1#top"},
		{"http://Up.Example", "//up.example/docs/", "/docs/"},
		{"http://up.example", "//UP.EXAMPLE/docs/", "/docs/"},
		{"https://" + host, "//" + host + "/x", "/x"},
		{"http://" + host + "/api/", "//" + host + "/api/x", "/x"},
		{"http://" + host + "/api", "//" + host + "/apix", "//" + host + "/apix"},
		{"http://" + host, "//" + host + "0/x", "//" + host + "0/x"},
		{"http://" + host, "//user@" + host + "/x", "//user@" + host + "/x"},
		{"http://" + host, "//other.example/x", "//other.example/x"},
		{"http://" + host, "//" + host + "//evil.example/", "//" + host + "//evil.example/"},
		{"http://" + host, "//" + host + "/\t/evil.example/", "//" + host + "/\t/evil.example/"},
		{"http://" + host, "///x", "///x"},
		{"http://" + host, "/x", "/x"},
	} {
		target, err := url.Parse(tc.target)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{"Location": {tc.location}}
		relocate(h, target)
		if got := h.Get("Location"); got != tc.want {
			t.Errorf("upstream %s answering Location %q: Location %q, want %q", tc.target, tc.location, got, tc.want)
		}
	}
}

// An HTTP/1.0 request's Expect: 100-continue is ignored, as RFC 9110
// (section 10.1.1) has a server do, and does not go on: an upstream that
// sends no 100 held such a request for the transport's
// ExpectContinueTimeout, and the 100 of one that does is not the
// client's to read.
func TestProxyHTTP10ExpectIgnored(t *testing.T) {
	expect := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		expect <- r.Header.Get("Expect")
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d bytes", len(b))
	}))
	defer up.Close()
	ts := startServer(t, untrustedPolicy, Options{Upstream: up.URL, RequestBuffer: -1})
	codes, body := statuses(t, ts.Addrs().Proxy, "POST /up HTTP/1.0\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello")
	if got := fmt.Sprint(codes); got != "[200]" || body != "5 bytes" {
		t.Errorf("responses %s, body %q; want [200], 5 bytes", got, body)
	}
	if got := <-expect; got != "" {
		t.Errorf("the upstream got Expect %q, want none", got)
	}
}
