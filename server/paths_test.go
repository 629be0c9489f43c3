package server

// What the policies decide when sluice fronts an application that reads
// forms and paths otherwise than Go does.

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// loginFormPolicy limits logins per account, the account read from the
// form's username field.
const loginFormPolicy = `
policies:
  - name: login
    match: "POST /login"
    key: form:username
    limits: ["2/m"]
`

// A form field given twice keys as one shared value: Go reads the first
// value, Django, PHP and Rails the last, so a key on either would let
// username=decoyN&username=victim log in victim under a fresh key each
// time. The upstream here reads the last, as Django's request.POST does.
func TestProxyFormFieldGivenTwice(t *testing.T) {
	saw := make(chan string, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		v := r.PostForm["username"]
		saw <- v[len(v)-1] // request.POST["username"] in Django, $_POST in PHP
	}))
	defer up.Close()
	ts := startServer(t, loginFormPolicy, Options{Upstream: up.URL})
	var got []string
	for i := range 5 {
		body := fmt.Sprintf("username=decoy%d&username=victim&password=guess%d", i, i)
		resp, _ := rawRequest(t, ts.Addrs().Proxy, fmt.Sprintf(
			"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body))
		got = append(got, served(resp.StatusCode, saw))
	}
	if want := []string{"victim", "victim", "429", "429", "429"}; !slices.Equal(got, want) {
		t.Errorf("login attempts on the account victim: %v, want %v (2 a minute per account)", got, want)
	}
}

// served returns what the upstream read for a request answered status: the
// value it sent on saw, or the status of a request it never saw.
func served(status int, saw <-chan string) string {
	if status != http.StatusOK {
		return strconv.Itoa(status)
	}
	return <-saw
}

// A field in both the query string and a multipart body keys as one shared
// value: Go's FormValue reads the query first, PHP's $_POST, Django's
// request.POST and multer the body alone, so POST /login?username=decoyN
// with username=victim in the body would log in victim under a fresh key
// each time.
func TestProxyMultipartFieldInQueryAndBody(t *testing.T) {
	saw := make(chan string, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			saw <- "error: " + err.Error()
			return
		}
		saw <- r.MultipartForm.Value["username"][0] // the body's field alone
	}))
	defer up.Close()
	ts := startServer(t, loginFormPolicy, Options{Upstream: up.URL})
	var got []string
	for i := range 5 {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		mw.WriteField("username", "victim")
		mw.WriteField("password", fmt.Sprintf("guess%d", i))
		mw.Close()
		req, _ := http.NewRequest("POST", fmt.Sprintf("http://%s/login?username=decoy%d", ts.Addrs().Proxy, i), &buf)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		resp, _ := do(t, req)
		got = append(got, served(resp.StatusCode, saw))
	}
	if want := []string{"victim", "victim", "429", "429", "429"}; !slices.Equal(got, want) {
		t.Errorf("multipart login attempts on victim: %v, want %v (2 a minute per account)", got, want)
	}
}

// Paths the upstream may serve as /login: escaped dot segments, which
// NGINX, Apache and Tomcat decode and resolve, are refused (400) before
// any policy, as dot segments are (see serveProxy); case and a final slash (Express's default router, ASP.NET Core)
// and ;parameters (Tomcat, Jetty) only when the policy file's paths
// section says the upstream serves them so, and otherwise are other paths,
// as ServeMux reads them.
func TestProxyPathForms(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	const policy = `
policies:
  - name: login
    match: "POST /login"
    key: ip
    limits: ["100/m"]
`
	decided := func(ts *testServer, p string) bool {
		resp, _ := rawRequest(t, ts.Addrs().Proxy, "POST "+p+" HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		if strings.Contains(p, "%2e") && resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %s: %d, want 400", p, resp.StatusCode)
		}
		return resp.Header.Get("Ratelimit") != ""
	}
	plain := startServer(t, policy, Options{Upstream: up.URL})
	opted := startServer(t, policy+`
paths:
  ignore_case: true
  ignore_trailing_slash: true
  ignore_path_parameters: true
`, Options{Upstream: up.URL})
	for _, c := range []struct {
		path         string
		plain, opted bool
	}{
		{"/login", true, true},
		{"/x/%2e%2e/login", false, false},
		{"/%2e/login", false, false},
		{"/LOGIN", false, true},
		{"/Login", false, true},
		{"/login/", false, true},
		{"/login;jsessionid=1", false, true},
		{"/logout", false, false},
	} {
		if got := decided(plain, c.path); got != c.plain {
			t.Errorf("POST %s, no paths section: decided %v, want %v", c.path, got, c.plain)
		}
		if got := decided(opted, c.path); got != c.opted {
			t.Errorf("POST %s, paths section: decided %v, want %v", c.path, got, c.opted)
		}
	}
}

// The check endpoint decides X-Forwarded-Uri as the proxy decides a path
// (see TestProxyPathForms): it is Traefik's RequestURI() and NGINX's
// $request_uri, raw, while NGINX itself routes (and, with a proxy_pass
// that has a URI part, forwards) the decoded, resolved $uri.
func TestCheckPathForms(t *testing.T) {
	plain := startServer(t, checkPolicy, Options{})
	opted := startServer(t, checkPolicy+`
paths:
  ignore_case: true
  ignore_trailing_slash: true
`, Options{})
	for _, c := range []struct {
		uri          string
		plain, opted bool
	}{
		{"/x/%2e%2e/login", true, true},
		{"/%2e/login", true, true},
		{"/LOGIN", false, true},
		{"/login/", false, true},
	} {
		for _, s := range []struct {
			ts   *testServer
			want bool
			name string
		}{{plain, c.plain, "no paths section"}, {opted, c.opted, "paths section"}} {
			resp, _ := get(t, s.ts.Addrs().Check, "/check", "X-Forwarded-Method", "POST", "X-Forwarded-Uri", c.uri, "X-Forwarded-For", "203.0.113.5")
			if got := resp.Header.Get("Ratelimit") != ""; got != s.want {
				t.Errorf("check about POST %s, %s: decided %v, want %v", c.uri, s.name, got, s.want)
			}
		}
	}
}
