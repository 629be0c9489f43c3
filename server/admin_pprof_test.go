package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// pprofRequest sends one request to admin, an admin listener's mux, by
// the Host 127.0.0.1:9090 and with header (name, value pairs), and
// returns what it answered. The request's context is canceled before it
// is served: a profile or trace that starts stops at once, so that a
// test sees what would hold the profiler without waiting for it.
func pprofRequest(admin http.Handler, method, target, body string, header ...string) *httptest.ResponseRecorder {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var req *http.Request
	if body != "" {
		req = httptest.NewRequestWithContext(ctx, method, target, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequestWithContext(ctx, method, target, nil)
	}
	req.Host = "127.0.0.1:9090"
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	admin.ServeHTTP(w, req)
	return w
}

// A web page on another site can make a browser send a GET to the admin
// listener by an IP address, which hostGuard lets through: an <img> whose
// src is /debug/pprof/profile starts a CPU profile, and holds the
// profiler from the operator's own. Browsers mark such a request with
// Sec-Fetch-Site, older ones with Origin; curl and go tool pprof send
// neither, and an operator who types the address sends
// Sec-Fetch-Site: none.
func TestPprofRefusesOtherOrigins(t *testing.T) {
	ts := newServer(t, "", Options{Pprof: true})
	admin := ts.adminMux()
	refusals := 0
	for _, tt := range []struct {
		name   string
		header []string
		want   int
	}{
		{"curl or go tool pprof", nil, 200},
		{"typed in the address bar", []string{"Sec-Fetch-Site", "none", "Sec-Fetch-Mode", "navigate"}, 200},
		{"a link on the index", []string{"Sec-Fetch-Site", "same-origin", "Referer", "http://127.0.0.1:9090/debug/pprof/"}, 200},
		{"an old browser, same origin", []string{"Origin", "http://127.0.0.1:9090"}, 200},
		{"an image on another site", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors",
			"Sec-Fetch-Dest", "image", "Referer", "https://evil.example/"}, 403},
		{"a page of a sibling origin", []string{"Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "no-cors"}, 403},
		{"cross-site with a matching Origin", []string{"Sec-Fetch-Site", "cross-site", "Origin", "http://127.0.0.1:9090"}, 403},
		{"an old browser, another origin", []string{"Origin", "https://evil.example"}, 403},
		{"an old browser, another port", []string{"Origin", "http://127.0.0.1:8080"}, 403},
		{"an opaque origin", []string{"Origin", "null"}, 403},
	} {
		for _, target := range []string{
			"/debug/pprof/profile?seconds=1",
			"/debug/pprof/trace?seconds=1",
			"/debug/pprof/",
			"/debug/pprof/heap",
			"/debug/pprof/cmdline",
			"/debug/pprof/symbol",
		} {
			w := pprofRequest(admin, "GET", target, "", tt.header...)
			if w.Code == 403 {
				refusals++
			}
			if w.Code != tt.want {
				t.Errorf("%s: GET %s: %d, want %d: %.100q", tt.name, target, w.Code, tt.want, w.Body.String())
			}
			if tt.want == 403 && !strings.Contains(w.Body.String(), "another origin") {
				t.Errorf("%s: GET %s: the refusal does not say why: %.100q", tt.name, target, w.Body.String())
			}
		}
	}
	if n := strings.Count(ts.logs.String(), "refused a request to /debug/pprof/ from a page of another origin"); n != 1 {
		t.Errorf("%d refusals logged %d times, want once a minute:\n%s", refusals, n, ts.logs.String())
	}
	// The dashboard's pages and /debug/top are for reading, which another
	// origin cannot: a browser keeps the answer from the page.
	for _, target := range []string{"/debug/top", "/"} {
		if w := pprofRequest(admin, "GET", target, "", "Sec-Fetch-Site", "cross-site"); w.Code != 200 {
			t.Errorf("cross-site GET %s: %d, want 200", target, w.Code)
		}
	}
}

// One request cannot hold the CPU profiler, the tracer or a goroutine
// for longer than pprofMaxSeconds: past it, the request is refused
// before anything starts, rather than cut short, so that the operator
// learns the profile is not the length asked for.
func TestPprofSecondsBound(t *testing.T) {
	admin := newServer(t, "", Options{Pprof: true}).adminMux()
	for _, tt := range []struct {
		method, target, body string
		refused              bool
	}{
		{"GET", "/debug/pprof/profile", "", false}, // net/http/pprof's 30s
		{"GET", "/debug/pprof/profile?seconds=60", "", false},
		{"GET", "/debug/pprof/profile?seconds=61", "", true},
		{"GET", "/debug/pprof/profile?seconds=86400", "", true},
		{"GET", "/debug/pprof/profile?seconds=99999999999999999999", "", true},
		{"POST", "/debug/pprof/profile", "seconds=86400", true},
		{"POST", "/debug/pprof/profile?seconds=5", "seconds=86400", true}, // the body's value comes first
		{"GET", "/debug/pprof/trace?seconds=0.5", "", false},
		{"GET", "/debug/pprof/trace?seconds=60", "", false},
		{"GET", "/debug/pprof/trace?seconds=60.5", "", true},
		{"GET", "/debug/pprof/trace?seconds=0x1p10", "", true},
		{"GET", "/debug/pprof/trace?seconds=Inf", "", true},
		{"GET", "/debug/pprof/trace?seconds=NaN", "", true},
		{"GET", "/debug/pprof/heap?seconds=61", "", true},
		{"GET", "/debug/pprof/goroutine?seconds=3600", "", true},
		{"GET", "/debug/pprof/heap?seconds=10", "", false},
	} {
		w := pprofRequest(admin, tt.method, tt.target, tt.body)
		refused := w.Code == http.StatusBadRequest && strings.Contains(w.Body.String(), "at most 60")
		if refused != tt.refused {
			t.Errorf("%s %s %q: %d, refused %v, want %v: %.100q", tt.method, tt.target, tt.body, w.Code, refused, tt.refused, w.Body.String())
		}
	}
}

// /debug/pprof/cmdline shows the command line, and with it the password of
// a Redis URL given to --redis, which the log hides.
func TestPprofCmdlineHidesPasswords(t *testing.T) {
	ts := newServer(t, "", Options{Pprof: true})
	args := os.Args
	t.Cleanup(func() { os.Args = args })
	os.Args = []string{"sluice", "serve", "--pprof", "--redis", "redis://admin:S3cretPass@127.0.0.1:1/0",
		"--upstream=http://bob:Pa%2Fss@upstream.internal:8000/", "--admin-listen", "127.0.0.1:9090"}
	w := pprofRequest(ts.adminMux(), "GET", "/debug/pprof/cmdline", "")
	want := "sluice\x00serve\x00--pprof\x00--redis\x00redis://admin:xxxxx@127.0.0.1:1/0\x00" +
		"--upstream=http://bob:xxxxx@upstream.internal:8000/\x00--admin-listen\x00127.0.0.1:9090"
	if w.Code != 200 || w.Body.String() != want {
		t.Errorf("/debug/pprof/cmdline: %d\n%q\nwant\n%q", w.Code, w.Body.String(), want)
	}
	if ct := w.Header().Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("/debug/pprof/cmdline: Content-Type %q, want text/plain; charset=utf-8", ct)
	}
}

// hidePasswords hides what url.URL.Redacted hides, in an argument that
// may hold a URL after a flag's name or several URLs, and keeps hiding
// passwords that url.Parse would misread.
func TestHidePasswords(t *testing.T) {
	for _, tt := range []struct{ arg, want string }{
		{"redis://admin:S3cretPass@127.0.0.1:1/0", "redis://admin:xxxxx@127.0.0.1:1/0"},
		{"--redis=rediss://:pw@h:6380", "--redis=rediss://:xxxxx@h:6380"},
		{"unix://u:p@/tmp/redis.sock", "unix://u:xxxxx@/tmp/redis.sock"},
		{"redis://a:p@ss@h", "redis://a:xxxxx@h"},
		{"redis://a:pa/ss@h/0", "redis://a:xxxxx@h/0"},
		{"redis://a:p:w@h", "redis://a:xxxxx@h"}, // a colon in the password
		{"redis://a:p@h1,redis://b:q@h2", "redis://a:xxxxx@h1,redis://b:xxxxx@h2"},
		{"redis://h1:6379,redis://b:q@h2", "redis://h1:6379,redis://b:xxxxx@h2"},
		{"a://:@", "a://:xxxxx@"},
		// No password: a user name alone is no secret.
		{"redis://user@h:6379", "redis://user@h:6379"},
		{"redis://h1:6379/0?addr=h2:6379", "redis://h1:6379/0?addr=h2:6379"},
		{"127.0.0.1:9090", "127.0.0.1:9090"},
		{"user:pass@host", "user:pass@host"}, // no URL, no scheme to tell one
		{"://", "://"},
		{"", ""},
		// The cost of not parsing: a colon and an @ in a path.
		{"http://h:80/a@b", "http://h:xxxxx@b"},
	} {
		if got := hidePasswords(tt.arg); got != tt.want {
			t.Errorf("hidePasswords(%q) = %q, want %q", tt.arg, got, tt.want)
		}
	}
}
