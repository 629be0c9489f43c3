package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const checkPolicy = `
client_ip: {trusted_proxies: [127.0.0.1]}
policies:
  - name: login
    match: "POST /login"
    key: ip
    limits: ["2/m"]
`

// Traefik's forwardAuth: the gateway describes the request in
// X-Forwarded-* headers; sluice answers 200 with the RateLimit fields,
// or the refusal as the client should get it.
func TestCheckTraefik(t *testing.T) {
	ts := startServer(t, checkPolicy, Options{})
	check := func(client string) (*http.Response, string) {
		return get(t, ts.Addrs().Check, "/check",
			"X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/login?next=/", "X-Forwarded-Host", "app.example",
			"X-Forwarded-Proto", "https", "X-Forwarded-For", client)
	}
	ex := traefikExample(t)
	copied := ex.sluice.AuthResponseHeaders
	for i := range 2 {
		resp, _ := check("203.0.113.5")
		if resp.StatusCode != 200 || resp.Header.Get("Ratelimit") != fmt.Sprintf(`"login";r=%d;t=%d`, 1-i, 30*(i+1)) {
			t.Fatalf("check %d: %d, RateLimit %q", i, resp.StatusCode, resp.Header.Get("Ratelimit"))
		}
		for _, h := range copied {
			if resp.Header.Get(h) == "" {
				t.Errorf("examples/traefik/sluice.yml copies %s, which the answer lacks", h)
			}
		}
	}
	resp, body := check("203.0.113.5")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "30" ||
		resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, `"violated-policies":["login"]`) {
		t.Fatalf("third check: %d %v %s; want 429, Retry-After 30 and a problem body", resp.StatusCode, resp.Header, body)
	}
	// Traefik reads at most maxResponseBodySize of it, and answers 401
	// past that: the refusal must fit, with room for more policies.
	for _, fa := range []forwardAuth{ex.sluice, ex.body} {
		if *fa.MaxResponseBodySize < int64(4*len(body)) {
			t.Errorf("examples/traefik/sluice.yml: maxResponseBodySize %d, want room for 4 refusals of %d bytes", *fa.MaxResponseBodySize, len(body))
		}
	}
	// Another client has its own bucket; another route is not limited.
	if resp, _ := check("203.0.113.6"); resp.StatusCode != 200 {
		t.Errorf("another client: %d", resp.StatusCode)
	}
	if resp, _ := get(t, ts.Addrs().Check, "/check", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/login", "X-Forwarded-For", "203.0.113.5"); resp.StatusCode != 200 || resp.Header.Get("Ratelimit") != "" {
		t.Errorf("GET /login: %d %v, want 200 and no limit", resp.StatusCode, resp.Header)
	}
}

// forwardAuth is the part of Traefik's forwardAuth middleware the
// examples set.
type forwardAuth struct {
	Address             string   `yaml:"address"`
	TrustForwardHeader  *bool    `yaml:"trustForwardHeader"`
	MaxResponseBodySize *int64   `yaml:"maxResponseBodySize"`
	ForwardBody         bool     `yaml:"forwardBody"`
	MaxBodySize         *int64   `yaml:"maxBodySize"`
	AuthResponseHeaders []string `yaml:"authResponseHeaders"`
}

// traefikConfig is examples/traefik/sluice.yml: the general middleware,
// sluice, and the one with the body, for the login route.
type traefikConfig struct {
	sluice, body forwardAuth
}

// traefikExample reads examples/traefik/sluice.yml. Both its forwardAuth
// middlewares must ask /check on sluice's default check address, say
// trustForwardHeader (Traefik warns of it left out) and bound what they
// read of sluice's answer (Traefik warns of that too); the general one
// must not send the body, which Traefik refuses 401 past maxBodySize,
// and the login route's must, bounded.
func traefikExample(t *testing.T) traefikConfig {
	t.Helper()
	b, err := os.ReadFile("../examples/traefik/sluice.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		HTTP struct {
			Middlewares map[string]struct {
				ForwardAuth forwardAuth `yaml:"forwardAuth"`
			} `yaml:"middlewares"`
			Routers map[string]struct {
				Rule        string   `yaml:"rule"`
				Priority    int      `yaml:"priority"`
				Middlewares []string `yaml:"middlewares"`
			} `yaml:"routers"`
		} `yaml:"http"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	login := cfg.HTTP.Routers["login"]
	if len(login.Middlewares) != 1 || login.Rule != "Path(`/login`)" || login.Priority <= len(cfg.HTTP.Routers["app"].Rule) {
		t.Fatalf("examples/traefik/sluice.yml: login router %+v, want Path(`/login`), one middleware, and a priority above app's rule length", login)
	}
	ex := traefikConfig{sluice: cfg.HTTP.Middlewares["sluice"].ForwardAuth, body: cfg.HTTP.Middlewares[login.Middlewares[0]].ForwardAuth}
	for _, fa := range []forwardAuth{ex.sluice, ex.body} {
		if fa.Address != "http://"+DefaultCheckListen+"/check" || fa.TrustForwardHeader == nil || *fa.TrustForwardHeader ||
			fa.MaxResponseBodySize == nil || len(fa.AuthResponseHeaders) == 0 {
			t.Fatalf("examples/traefik/sluice.yml: forwardAuth %+v", fa)
		}
	}
	if ex.sluice.ForwardBody || !ex.body.ForwardBody || ex.body.MaxBodySize == nil || *ex.body.MaxBodySize <= 0 {
		t.Fatalf("examples/traefik/sluice.yml: forwardBody %v on the general middleware, %v (maxBodySize %v) on login's; want off, and on with a bound",
			ex.sluice.ForwardBody, ex.body.ForwardBody, ex.body.MaxBodySize)
	}
	return ex
}

// A check from a peer that is not a trusted proxy is decided as itself:
// its X-Forwarded-* headers cannot make it count as another request or
// another client. A gateway left out of trusted_proxies would see nothing
// limited (or everything counted as one client), so it is logged: once
// per configuration, not once per request.
func TestCheckUntrustedIsCheckedAsItself(t *testing.T) {
	policy := strings.Replace(checkPolicy, "127.0.0.1", "10.0.0.0/8", 1)
	ts := startServer(t, policy, Options{})
	const warning = "is not in client_ip.trusted_proxies"
	for range 3 {
		resp, _ := get(t, ts.Addrs().Check, "/check", "X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/login", "X-Forwarded-For", "203.0.113.5")
		if resp.StatusCode != 200 || resp.Header.Get("Ratelimit") != "" {
			t.Fatalf("untrusted check: %d %v; want 200 with no limit (GET /check matches no policy)", resp.StatusCode, resp.Header)
		}
	}
	if n := strings.Count(ts.logs.String(), warning); n != 1 {
		t.Errorf("3 checks from an untrusted gateway logged %d warnings, want 1:\n%s", n, ts.logs.String())
	}
	// A reload that still leaves the gateway out says so again, once.
	writeFile(t, ts.dir, "sluice.yaml", policy+"\n")
	if err := ts.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		get(t, ts.Addrs().Check, "/check/nginx", "X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/login")
	}
	// A plain check (a health probe) from an untrusted peer is no gateway.
	get(t, ts.Addrs().Check, "/check")
	if n := strings.Count(ts.logs.String(), warning); n != 2 {
		t.Errorf("after a reload, %d warnings, want 2:\n%s", n, ts.logs.String())
	}
}

// NGINX's auth_request, for real: examples/nginx.conf, with its ports
// replaced, in front of a test application.
func TestCheckNginx(t *testing.T) {
	nginx := findNginx(t)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "app: %s %s", r.Method, r.URL.Path)
	}))
	defer app.Close()
	// Counts the connections NGINX opens to sluice's check listener.
	checkLis := &countingListener{Listener: localListener(t)}
	ts := startServer(t, `
client_ip: {trusted_proxies: [127.0.0.1]}
policies:
  - name: api
    match: /api/
    key: ip
    limits: ["2/m"]
`, Options{CheckListener: checkLis})

	base, stop := startNginx(t, nginx, ts.Addrs().Check, strings.TrimPrefix(app.URL, "http://"))
	defer stop()

	// The client connects from 127.0.0.2: a loopback address, but not
	// NGINX's, which alone is trusted.
	client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)},
	}).DialContext}}
	defer client.CloseIdleConnections()
	get := func(t *testing.T, base, path string, header ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+base+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	for i := range 2 {
		resp, body := get(t, base, "/api/items")
		if resp.StatusCode != 200 || body != "app: GET /api/items" {
			t.Fatalf("request %d through NGINX: %d %q", i, resp.StatusCode, body)
		}
		if got, want := resp.Header.Get("Ratelimit"), fmt.Sprintf(`"api";r=%d;t=%d`, 1-i, 30*(i+1)); got != want {
			t.Errorf("request %d: RateLimit %q, want %q", i, got, want)
		}
	}
	// Over the limit, with a spoofed X-Forwarded-For that NGINX passes on
	// to the left of the real client: still the same client.
	resp, body := get(t, base, "/api/items", "X-Forwarded-For", "198.51.100.1")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "30" {
		t.Fatalf("third request: %d, Retry-After %q, body %q; want 429 with Retry-After 30", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if resp.Header.Get("Ratelimit") != `"api";r=0;t=30` || resp.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(body, `"status":429`) || !strings.Contains(body, `"retry_after":30`) {
		t.Errorf("refusal: %v %q", resp.Header, body)
	}
	// A refusal is problem+json whatever the extension of the URI, which
	// NGINX's types table would otherwise map to a type of its own.
	for _, path := range []string{"/api/page.html", "/api/x.json"} {
		resp, body := get(t, base, path)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, `"status":429`) {
			t.Errorf("refused %s: %d, Content-Type %q, body %q; want 429 and a problem+json body", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	// Outside the policy, nothing is limited.
	if resp, body := get(t, base, "/other"); resp.StatusCode != 200 || body != "app: GET /other" {
		t.Errorf("/other: %d %q", resp.StatusCode, body)
	}
	// An absolute-form target with no path: $request_uri is the query
	// string alone, which sluice decides as the root's.
	if resp, body := rawRequest(t, base, "GET http://app.example?x=1 HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n"); resp.StatusCode != 200 || body != "app: GET /" {
		t.Errorf("GET http://app.example?x=1: %d %q, want 200 from the application", resp.StatusCode, body)
	}
	// Every check, the refusals included, went over one kept-alive
	// connection: NGINX reads the header of a check's answer alone, and
	// would close a connection that a body followed.
	if n := checkLis.accepted.Load(); n != 1 {
		t.Errorf("NGINX opened %d connections to sluice for 7 sequential requests, want 1 (kept alive)", n)
	}
}

// startNginx runs nginx with examples/nginx.conf (see renderNginx) on a
// free loopback port, and returns its address, once it accepts
// connections, and how to stop it. The port is free when picked, not
// held: another process may bind it before nginx does, which then fails
// with "Address already in use", and startNginx tries another. That
// nginx listens it learns from its pid file, which nginx writes once it
// has opened its listening sockets, not from the port, which may be
// another process's.
func startNginx(t *testing.T, nginx, sluice, app string) (addr string, stop func()) {
	t.Helper()
	for try := 1; ; try++ {
		dir := t.TempDir()
		port := freePort(t)
		conf := renderNginx(t, dir, port, sluice, app)
		pidFile, errorLog := filepath.Join(dir, "nginx.pid"), filepath.Join(dir, "error.log")
		cmd := exec.Command(nginx, "-p", dir, "-c", conf, "-g", "daemon off; pid "+pidFile+"; error_log "+errorLog+";")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		log := func() string {
			b, _ := os.ReadFile(errorLog)
			return string(b)
		}
		stop := func() {
			cmd.Process.Signal(syscall.SIGTERM) // the master stops its workers
			<-exited
			if t.Failed() {
				t.Logf("nginx error log:\n%s", log())
			}
		}
		// listening waits until nginx has written its pid file, or
		// exited.
		listening := func() (bool, error) {
			pid := strconv.Itoa(cmd.Process.Pid)
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
				if b, err := os.ReadFile(pidFile); err == nil && strings.TrimSpace(string(b)) == pid {
					return true, nil
				}
				select {
				case err := <-exited:
					exited <- err // for stop
					return false, err
				case <-time.After(5 * time.Millisecond):
				}
			}
			stop()
			t.Fatalf("nginx wrote no pid file in 30s; error log:\n%s", log())
			return false, nil
		}
		ok, err := listening()
		if ok {
			addr, up := fmt.Sprintf("127.0.0.1:%d", port), false
			defer func() {
				if !up {
					stop()
				}
			}()
			waitListening(t, addr)
			up = true
			return addr, stop
		}
		if l := log(); !strings.Contains(l, "Address already in use") || try == 5 {
			t.Fatalf("nginx on port %d: %v; error log:\n%s", port, err, l)
		}
		t.Logf("nginx on port %d: another process took it; trying another", port)
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// renderNginx writes examples/nginx.conf to dir with its addresses
// replaced and its files inside dir, and returns its path.
func renderNginx(t *testing.T, dir string, port int, sluice, app string) string {
	t.Helper()
	b, err := os.ReadFile("../examples/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	for _, r := range [][2]string{
		{"listen 8000;", fmt.Sprintf("listen 127.0.0.1:%d;", port)},
		{"server 127.0.0.1:8081;", "server " + sluice + ";"},
		{"server 127.0.0.1:3000;", "server " + app + ";"},
		{"worker_processes auto;", "worker_processes 1;"},
		{"http {", "http {\n" + nginxTempPaths(dir)},
	} {
		if !strings.Contains(conf, r[0]) {
			t.Fatalf("examples/nginx.conf has no %q to replace", r[0])
		}
		conf = strings.Replace(conf, r[0], r[1], 1)
	}
	return writeFile(t, dir, "nginx.conf", conf)
}

func nginxTempPaths(dir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "    access_log %s;\n", filepath.Join(dir, "access.log"))
	for _, p := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&b, "    %s_temp_path %s;\n", p, filepath.Join(dir, p))
	}
	return b.String()
}

// findNginx returns the nginx binary, and fails the test without one: the
// recipe in examples/nginx.conf must be tested, not skipped.
func findNginx(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	t.Fatal("nginx not found: run make deps (it installs nginx-light)")
	return ""
}

// freePort returns a loopback port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l := localListener(t)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitListening polls until addr accepts connections, for up to 5s.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	eventually(t, addr+" to accept connections", func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// The snippet in docs/nginx.md is the tested file: each of its lines is
// one of examples/nginx.conf.
func TestNginxDocMatchesExample(t *testing.T) {
	conf, err := os.ReadFile("../examples/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(conf), "\n") {
		have[strings.TrimSpace(l)] = true
	}
	for _, c := range []struct {
		file     string
		minLines int
	}{{"../docs/nginx.md", 20}, {"../README.md", 20}} {
		doc, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		_, block, ok := strings.Cut(string(doc), "```nginx\n")
		if !ok {
			t.Fatalf("%s has no nginx block", c.file)
		}
		block, _, _ = strings.Cut(block, "```")
		n := 0
		for _, l := range strings.Split(block, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				n++
				if !have[l] {
					t.Errorf("%s: line %q is not in examples/nginx.conf", c.file, l)
				}
			}
		}
		if n < c.minLines {
			t.Errorf("%s: only %d lines in the nginx block", c.file, n)
		}
	}
}

// The configuration in docs/traefik.md is the tested file: each of its
// lines is one of examples/traefik/sluice.yml.
func TestCheckTraefikDocMatchesExample(t *testing.T) {
	example, err := os.ReadFile("../examples/traefik/sluice.yml")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(example), "\n") {
		have[strings.TrimRight(l, " ")] = true
	}
	doc, err := os.ReadFile("../docs/traefik.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```yaml\nhttp:\n")
	if !ok {
		t.Fatal("docs/traefik.md has no yaml block of an http: configuration")
	}
	block, _, _ = strings.Cut(block, "```")
	n := 0
	for _, l := range strings.Split(block, "\n") {
		if l != "" {
			n++
			if !have[l] {
				t.Errorf("docs/traefik.md: line %q is not in examples/traefik/sluice.yml", l)
			}
		}
	}
	if n < 30 {
		t.Errorf("docs/traefik.md: only %d lines in the configuration", n)
	}
}

// Traefik with forwardBody: true sends the original request's body with
// the check: a policy keyed by a form field reads the account in it, as
// the proxy would.
func TestCheckForwardedBody(t *testing.T) {
	ts := startServer(t, strings.Replace(strings.Replace(checkPolicy, "key: ip", "key: form:username", 1), `"2/m"`, `"1/m"`, 1), Options{})
	check := func(body string) int {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+ts.Addrs().Check+"/check", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{
			"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/login", "X-Forwarded-For": "203.0.113.5",
			"Content-Type": "application/x-www-form-urlencoded",
		} {
			req.Header.Set(k, v)
		}
		resp, _ := do(t, req)
		return resp.StatusCode
	}
	if got := []int{check("username=alice&password=a"), check("username=alice&password=b"), check("username=bob&password=c")}; got[0] != 200 || got[1] != 429 || got[2] != 200 {
		t.Errorf("logins alice ×2, bob through the check: %v, want [200 429 200]", got)
	}
}

// A check's body is bounded as the proxy's is: one that stops arriving
// frees the check's goroutine after the body timeout and is answered 408,
// and one that cannot be read 400; neither is passed, though the form key
// saw no account in it.
func TestCheckBodyTimeout(t *testing.T) {
	const idle = 200 * time.Millisecond
	ts := startServer(t, strings.Replace(checkPolicy, "key: ip", "key: form:username", 1), Options{BodyTimeout: idle})
	send := func(path, body string) (string, time.Duration) {
		t.Helper()
		c, err := net.Dial("tcp", ts.Addrs().Check)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		if !strings.HasPrefix(body, "Content-Type:") {
			body = "Content-Type: application/x-www-form-urlencoded\r\n" + body
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nX-Forwarded-Method: POST\r\nX-Forwarded-Uri: /login\r\n%s", path, body)
		c.SetReadDeadline(time.Now().Add(20 * idle))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil && line == "" {
			return "no answer: " + err.Error(), time.Since(start)
		}
		return strings.TrimSpace(line), time.Since(start)
	}
	for _, path := range []string{"/check", "/check/nginx"} {
		if status, took := send(path, "Content-Length: 100\r\n\r\nusername=al"); status != "HTTP/1.1 408 Request Timeout" || took > 10*idle {
			t.Errorf("%s with a stalled body: %q after %v, want 408 after about %v", path, status, took, idle)
		}
		if status, _ := send(path, "Transfer-Encoding: chunked\r\n\r\nzz\r\nusername=alice\r\n0\r\n\r\n"); status != "HTTP/1.1 400 Bad Request" {
			t.Errorf("%s with a malformed chunked body: %q, want 400", path, status)
		}
		if status, _ := send(path, "Content-Length: 14\r\n\r\nusername=alice"); status != "HTTP/1.1 200 OK" {
			t.Errorf("%s with a whole body: %q, want 200", path, status)
		}
	}
	// A check decided without its body (a JSON one, which no form key
	// reads) is answered though the body stalls: net/http reads the rest
	// of it before it answers, within the bound.
	for _, path := range []string{"/check", "/check/nginx"} {
		if status, took := send(path, "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"); status != "HTTP/1.1 200 OK" || took > 10*idle {
			t.Errorf("%s with a stalled body no key reads: %q after %v, want 200 within about %v", path, status, took, idle)
		}
	}
}

// X-Forwarded-Uri is what NGINX's $request_uri holds: the URI as the
// client sent it. It is decided as net/http would route it: a fragment
// is no part of the path, and . and .. segments and repeated slashes are
// cleaned as ServeMux cleans them (it redirects to the clean path). So
// none of these escapes the POST /login policy; a URI that is no request
// URI is a 400, never a panic.
func TestCheckForwardedURIForms(t *testing.T) {
	ts := startServer(t, strings.Replace(checkPolicy, `"2/m"`, `"100/m"`, 1), Options{})
	check := func(method, uri string) *http.Response {
		t.Helper()
		resp, _ := get(t, ts.Addrs().Check, "/check", "X-Forwarded-Method", method, "X-Forwarded-Uri", uri, "X-Forwarded-For", "203.0.113.5")
		return resp
	}
	for _, uri := range []string{
		"/login", "/login?next=/", "/log%69n", "http://app.example/login",
		"/login#top", "/login?x=1#top", "//login", "/./login", "/a/../login", "/a//b/../../login",
		"/login?" + strings.Repeat("a", 64<<10),
	} {
		if resp := check("POST", uri); resp.StatusCode != 200 || resp.Header.Get("Ratelimit") == "" {
			t.Errorf("POST %.60q: %d, RateLimit %q; want 200 decided by the login policy", uri, resp.StatusCode, resp.Header.Get("Ratelimit"))
		}
	}
	for _, uri := range []string{"/login/", "/login%2f", "/other#/login", "/other/?/login", "/other"} {
		if resp := check("POST", uri); resp.StatusCode != 200 || resp.Header.Get("Ratelimit") != "" {
			t.Errorf("POST %q: %d, RateLimit %q; want 200 and no policy", uri, resp.StatusCode, resp.Header.Get("Ratelimit"))
		}
	}
	for _, uri := range []string{"login", "/%zz", "/" + strings.Repeat("%", 100)} {
		if resp := check("POST", uri); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %q: %d, want 400", uri, resp.StatusCode)
		}
	}
}

// A HEAD request is decided as itself (a GET policy covers it), but
// Traefik asks about it with a GET: the refusal must be a whole answer to
// that GET, or Traefik, reading the body it was promised, answers the
// client 500. With preserveRequestMethod the check is a HEAD itself, and
// has no body.
func TestCheckForwardedHEAD(t *testing.T) {
	ts := startServer(t, strings.Replace(checkPolicy, `"POST /login"`, `"GET /login"`, 1), Options{})
	for i, c := range []struct {
		method, path string
		refused      int
	}{
		{"GET", "/check", http.StatusTooManyRequests},
		{"GET", "/check/nginx", http.StatusForbidden},
		{"HEAD", "/check", http.StatusTooManyRequests},
		{"HEAD", "/check/nginx", http.StatusForbidden},
	} {
		client := fmt.Sprintf("203.0.113.%d", i+1)
		for n, want := range []int{200, 200, c.refused} {
			req, err := http.NewRequest(c.method, "http://"+ts.Addrs().Check+c.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Forwarded-Method", "HEAD")
			req.Header.Set("X-Forwarded-Uri", "/login")
			req.Header.Set("X-Forwarded-For", client)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != want || resp.Header.Get("Ratelimit") == "" {
				t.Errorf("%s %s about HEAD /login, #%d: %d, RateLimit %q, body %q, read error %v; want %d and a whole answer",
					c.method, c.path, n+1, resp.StatusCode, resp.Header.Get("Ratelimit"), body, err, want)
			}
			if want != 200 && resp.Header.Get("Retry-After") != "30" {
				t.Errorf("%s %s about HEAD /login: Retry-After %q, want 30", c.method, c.path, resp.Header.Get("Retry-After"))
			}
		}
	}
}

// Traefik routes a host name in any letter case, and with the final dot
// of a fully qualified name, and describes the request with the Host the
// client wrote: a policy on api.example.com decides them all, as NGINX's
// $host (lower case, no final dot) has it decide.
func TestCheckForwardedHostForms(t *testing.T) {
	ts := startServer(t, `
client_ip: {trusted_proxies: [127.0.0.1]}
policies:
  - name: api
    match: "api.example.com/"
    key: ip
    limits: ["100/m"]
`, Options{})
	for _, host := range []string{
		"api.example.com", "API.Example.COM", "api.example.com.", "Api.Example.Com.:8443", "api.example.com:443",
	} {
		resp, _ := get(t, ts.Addrs().Check, "/check", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/",
			"X-Forwarded-Host", host, "X-Forwarded-For", "203.0.113.5")
		if resp.StatusCode != 200 || resp.Header.Get("Ratelimit") == "" {
			t.Errorf("Host %q: %d, RateLimit %q; want 200 decided by the api policy", host, resp.StatusCode, resp.Header.Get("Ratelimit"))
		}
	}
	for _, host := range []string{"www.example.com", "api.example.com..", "api.example.com.evil", "xapi.example.com"} {
		resp, _ := get(t, ts.Addrs().Check, "/check", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/",
			"X-Forwarded-Host", host, "X-Forwarded-For", "203.0.113.5")
		if resp.StatusCode != 200 || resp.Header.Get("Ratelimit") != "" {
			t.Errorf("Host %q: %d, RateLimit %q; want 200 and no policy", host, resp.StatusCode, resp.Header.Get("Ratelimit"))
		}
	}
}

// Traefik passes a method in lower case on as it came, and Django and
// Flask (Werkzeug) read it in upper case: post /login is a POST /login to
// them, and must not escape the policy on POST /login.
func TestCheckForwardedMethodCase(t *testing.T) {
	ts := startServer(t, checkPolicy, Options{})
	for i, method := range []string{"post", "Post", "POST"} {
		resp, _ := get(t, ts.Addrs().Check, "/check", "X-Forwarded-Method", method, "X-Forwarded-Uri", "/login", "X-Forwarded-For", "203.0.113.5")
		if want := []int{200, 200, 429}[i]; resp.StatusCode != want || resp.Header.Get("Ratelimit") == "" {
			t.Errorf("%s /login: %d, RateLimit %q; want %d, decided by the login policy", method, resp.StatusCode, resp.Header.Get("Ratelimit"), want)
		}
	}
}

// The warning of a gateway missing from trusted_proxies comes once per
// configuration, also while checks begun under the one a reload replaced
// finish among checks under the new one.
func TestUntrustedWarnedOncePerGeneration(t *testing.T) {
	g0, g1, g2 := &generation{}, &generation{}, &generation{}
	for i, step := range []struct {
		g, cur *generation // the check's generation, the server's
		want   bool
	}{
		{g0, g1, false}, // a check begun under one replaced before it warned
		{g1, g1, true},
		{g1, g1, false},
		{g2, g2, true},  // after a reload
		{g1, g2, false}, // a check begun before it
		{g2, g2, false},
		{g1, g2, false},
		{g2, g2, false},
	} {
		if got := step.g.firstUntrustedWarning(step.cur); got != step.want {
			t.Errorf("step %d: warns %v, want %v", i+1, got, step.want)
		}
	}
}

// NGINX's auth_request reads the header of a check's answer alone: a
// refusal turned into 403 has no body, or the next check on the
// connection would start with the body's bytes (NGINX closes the
// connection instead, and opens a new one for every refusal). The 403
// keeps every header the recipe copies.
func TestCheckNginxRefusalHasNoBody(t *testing.T) {
	ts := startServer(t, checkPolicy, Options{})
	c, err := net.Dial("tcp", ts.Addrs().Check)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for i, want := range []int{200, 200, http.StatusForbidden, http.StatusForbidden} {
		fmt.Fprintf(c, "GET /check/nginx HTTP/1.1\r\nHost: sluice\r\nX-Forwarded-Method: POST\r\nX-Forwarded-Uri: /login\r\nX-Forwarded-For: 203.0.113.5\r\n\r\n")
		// As NGINX does: the header, and nothing after it.
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("check %d on the kept connection: %v", i+1, err)
		}
		if resp.StatusCode != want || resp.ContentLength != 0 || resp.Header.Get("Ratelimit") == "" || resp.Header.Get("Ratelimit-Policy") == "" {
			t.Errorf("check %d: %d, Content-Length %d, %v; want %d, no body and the RateLimit fields", i+1, resp.StatusCode, resp.ContentLength, resp.Header, want)
		}
		if want != 200 && (resp.Header.Get("X-Sluice-Status") != "429" || resp.Header.Get("Retry-After") != "30") {
			t.Errorf("check %d: X-Sluice-Status %q, Retry-After %q; want 429 and 30", i+1, resp.Header.Get("X-Sluice-Status"), resp.Header.Get("Retry-After"))
		}
	}
}

// NGINX's $request_uri of an absolute-form request with no path (GET
// http://host?x HTTP/1.1) is the query string alone, which NGINX serves
// as /?x: it is decided as the root's, not refused as no request URI
// (NGINX would answer its client 500).
func TestCheckForwardedQueryAlone(t *testing.T) {
	ts := startServer(t, `
client_ip: {trusted_proxies: [127.0.0.1]}
policies:
  - name: home
    match: "GET /{$}"
    key: ip
    limits: ["100/m"]
`, Options{})
	for _, uri := range []string{"?x=1", "?", "?x#top", "/?x=1"} {
		for _, path := range []string{"/check", "/check/nginx"} {
			resp, _ := get(t, ts.Addrs().Check, path, "X-Forwarded-Method", "GET", "X-Forwarded-Uri", uri, "X-Forwarded-For", "203.0.113.5")
			if resp.StatusCode != 200 || resp.Header.Get("Ratelimit") == "" {
				t.Errorf("%s about GET %q: %d, RateLimit %q; want 200 decided by the policy on /", path, uri, resp.StatusCode, resp.Header.Get("Ratelimit"))
			}
		}
	}
}

// A check without a body describes a request whose body the gateway
// kept (NGINX always; Traefik without forwardBody). Where that body would
// give form fields, a form key cannot know the field, and the query
// string may name another account than the body: every such request
// shares one key (#unread), whatever its query string says. Where it
// would not (a url-encoded GET, a JSON POST), the key reads the query
// string, as it would with the body at hand. Each step is one check, in
// order, against 1 a minute per key.
func TestCheckFormKeyWithoutBody(t *testing.T) {
	ts := startServer(t, `
client_ip: {trusted_proxies: [127.0.0.1]}
policies:
  - name: login
    match: /login
    key: form:username
    limits: ["1/m"]
`, Options{})
	const (
		form      = "application/x-www-form-urlencoded"
		multipart = "multipart/form-data; boundary=b0undary"
	)
	for i, step := range []struct {
		path, method, uri, ct string
		want                  int
	}{
		{"/check", "POST", "/login?username=r1", form, 200},           // #unread
		{"/check", "POST", "/login?username=r2", form, 429},           // #unread again
		{"/check/nginx", "PUT", "/login?username=r3", multipart, 403}, // #unread: refused, as NGINX hears it
		{"/check", "GET", "/login?username=r4", multipart, 429},       // a multipart body is read whatever the method
		{"/check", "PATCH", "/login?username=r5", form + "; charset=utf-8", 429},
		{"/check", "post", "/login?username=r6", form, 429}, // a method in any case
		{"/check", "GET", "/login?username=g1", form, 200},  // a GET's url-encoded body gives no fields
		{"/check", "GET", "/login?username=g1", form, 429},
		{"/check", "POST", "/login?username=j1", "application/json", 200}, // no form body
		{"/check", "POST", "/login?username=j1", "", 429},
		{"/check", "DELETE", "/login?username=d1", form, 200},
	} {
		resp, _ := get(t, ts.Addrs().Check, step.path, "X-Forwarded-Method", step.method, "X-Forwarded-Uri", step.uri,
			"X-Forwarded-For", "203.0.113.5", "Content-Type", step.ct)
		if resp.StatusCode != step.want {
			t.Errorf("step %d: %s about %s %s (%s): %d, want %d", i+1, step.path, step.method, step.uri, step.ct, resp.StatusCode, step.want)
		}
	}
}

// Traefik passes a method on as the client wrote it; Django and Flask
// read a post's form from its body as a POST's. With the body (Traefik's
// forwardBody), a key reads it for post too: an account in the body and
// another in the query string is the field given twice (#many), one key
// whatever the query string names.
func TestCheckForwardedBodyMethodCase(t *testing.T) {
	ts := startServer(t, strings.Replace(strings.Replace(checkPolicy, "key: ip", "key: form:username", 1), `"2/m"`, `"1/m"`, 1), Options{})
	for i, q := range []string{"r1", "r2"} {
		req, err := http.NewRequest("GET", "http://"+ts.Addrs().Check+"/check", strings.NewReader("username=alice&password=a"))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{
			"X-Forwarded-Method": "post", "X-Forwarded-Uri": "/login?username=" + q, "X-Forwarded-For": "203.0.113.5",
			"Content-Type": "application/x-www-form-urlencoded",
		} {
			req.Header.Set(k, v)
		}
		if resp, _ := do(t, req); resp.StatusCode != []int{200, 429}[i] {
			t.Errorf("post /login?username=%s with alice in the body: %d, want %d", q, resp.StatusCode, []int{200, 429}[i])
		}
	}
}

// A trusted gateway that sends X-Forwarded-Method without X-Forwarded-Uri
// (or the reverse) is misconfigured: its requests are decided as / or as
// GET, as before, and sluice says so, at most once a second.
func TestCheckHalfDescribedWarns(t *testing.T) {
	ts := startServer(t, checkPolicy, Options{})
	const warning = "has one of X-Forwarded-Method and X-Forwarded-Uri but not the other"
	check := func(header ...string) {
		t.Helper()
		resp, _ := get(t, ts.Addrs().Check, "/check", append(header, "X-Forwarded-For", "203.0.113.5")...)
		// POST / and GET /login: the login policy (POST /login) decides neither.
		if resp.StatusCode != 200 || resp.Header.Get("Ratelimit") != "" {
			t.Errorf("check %v: %d, RateLimit %q; want 200 and no policy", header, resp.StatusCode, resp.Header.Get("Ratelimit"))
		}
	}
	for range 3 {
		check("X-Forwarded-Method", "POST")
	}
	check("X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/other") // whole: no warning
	logs := ts.logs.String()
	if n := strings.Count(logs, warning); n != 1 || !strings.Contains(logs, "missing=X-Forwarded-Uri method=POST path=/ ") {
		t.Fatalf("3 checks without X-Forwarded-Uri logged %d warnings, want 1 naming the missing header and the decision:\n%s", n, logs)
	}
	ts.clock.Advance(time.Second)
	check("X-Forwarded-Uri", "/login")
	logs = ts.logs.String()
	if n := strings.Count(logs, warning); n != 2 || !strings.Contains(logs, "missing=X-Forwarded-Method method=GET path=/login ") ||
		!strings.Contains(logs, "not_logged=2") {
		t.Errorf("a second later, without X-Forwarded-Method: %d warnings, want 2, the second counting the 2 held back:\n%s", n, logs)
	}
}

// A check whose X-Forwarded-Method, -Uri or -Host comes twice describes
// no one request: a gateway that appends its copy after the client's
// would let the client choose what is decided (the first copy). It is
// answered 400 and counted so, as a URI that does not parse is.
func TestCheckRepeatedForwardedFieldsRefused(t *testing.T) {
	ts := startServer(t, checkPolicy, Options{})
	for _, c := range [][]string{
		{"X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/x", "X-Forwarded-Uri", "/login"},
		{"X-Forwarded-Method", "GET", "X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/login"},
		{"X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/login", "X-Forwarded-Host", "evil", "X-Forwarded-Host", "app.example"},
	} {
		req, err := http.NewRequest("GET", "http://"+ts.Addrs().Check+"/check", nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(c); i += 2 {
			req.Header.Add(c[i], c[i+1]) // Add: the field twice
		}
		req.Header.Set("X-Forwarded-For", "203.0.113.5")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "more than once") {
			t.Errorf("%q: %d %s, want 400 saying a field came more than once", c, resp.StatusCode, body)
		}
	}
	if n := ts.counter(`sluice_requests_total{code="400",listener="check"}`); n != 3 {
		t.Errorf("%d checks counted as 400, want 3", n)
	}
}

// A check carrying another spelling of a header the policies read
// (X_Api_Key for a policy keyed on X-API-Key, X_Partner_Key for
// plans.api_key_header) is answered 400: the gateway passes the client's
// request on whole, so an upstream that reads X_Api_Key as the header
// itself (CGI, Puma) would take the key that the policies, reading the
// request without it, never counted. The proxy drops such fields; a check
// cannot, and decides none.
func TestCheckOtherSpellingsOfHeadersThePoliciesReadRefused(t *testing.T) {
	ts := startServer(t, `
client_ip: {trusted_proxies: [127.0.0.1]}
plans: {names: [free, partner], default: free, api_key_header: X-Partner-Key, api_keys: {pk1: partner}}
policies:
  - {name: per-key, match: "/k", key: "header:X-API-Key", limits: ["5/m"], plans: {partner: ["50/m"]}}
`, Options{})
	for _, c := range []struct {
		name, value string
		refused     bool
	}{
		{"X_Api_Key", "k2", true},
		{"x-api_key", "k3", true},
		{"X_Partner_Key", "pk1", true},
		{"X.Api.Key", "k4", true}, // Traefik's alias too: CGI and PHP read it as X-Api-Key
		{"X-Api-Key", "k1", false},
		{"X-Other_Field", "kept", false},
	} {
		req, err := http.NewRequest("GET", "http://"+ts.Addrs().Check+"/check", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-Method", "GET")
		req.Header.Set("X-Forwarded-Uri", "/k")
		req.Header.Set("X-Forwarded-For", "203.0.113.5")
		req.Header[c.name] = []string{c.value}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		switch {
		case c.refused && (resp.StatusCode != http.StatusBadRequest || !strings.Contains(strings.ToLower(body), strings.ToLower(c.name))):
			t.Errorf("%s: %d %s, want 400 naming the field", c.name, resp.StatusCode, body)
		case !c.refused && resp.StatusCode != http.StatusOK:
			t.Errorf("%s: %d %s, want 200", c.name, resp.StatusCode, body)
		}
	}
	if n := ts.counter(`sluice_requests_total{code="400",listener="check"}`); n != 4 {
		t.Errorf("%d checks counted as 400, want 4", n)
	}
}
