package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The binary, built once for the package's tests into binDir, which
// TestMain makes and removes.
var (
	binDir    string
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func sluiceBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binPath = filepath.Join(binDir, "sluice")
		build := exec.Command("go", "build", "-o", binPath, ".")
		redistest.DieWithTest(build)
		out, err := build.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// sluiceCommand is exec.Command of the sluice binary, which ends with the
// test process however that ends (see redistest.DieWithTest).
func sluiceCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(sluiceBinary(t), args...)
	redistest.DieWithTest(cmd)
	return cmd
}

// TestMain removes the binary when the tests end. A run killed before
// then (its -timeout panic, Ctrl-C) leaves the directory and the binary in
// it, which the next run removes (see redistest.TempDir).
func TestMain(m *testing.M) {
	var err error
	if binDir, err = redistest.TempDir("sluice-bin"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// process is a running `sluice serve` whose JSON log lines are read as
// they come.
type process struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan map[string]any
	mu    sync.Mutex
	log   strings.Builder
	exit  chan error
	addrs map[string]string
}

// startSluice starts `sluice serve args…` with every listener on port 0
// and JSON logs, and waits for it to say where it listens.
func startSluice(t *testing.T, want []string, args ...string) *process {
	t.Helper()
	args = append([]string{"serve", "--log-format", "json",
		"--listen", "127.0.0.1:0", "--check-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"}, args...)
	p := &process{t: t, cmd: sluiceCommand(t, args...), lines: make(chan map[string]any, 100), exit: make(chan error, 1), addrs: map[string]string{}}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				select {
				case p.lines <- m:
				default: // nobody is waiting for lines now
				}
			}
		}
		p.exit <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("sluice log:\n%s", p.logs())
		}
	})
	for len(p.addrs) < len(want) {
		m := p.waitLog("listening")
		p.addrs[m["listener"].(string)] = m["addr"].(string)
	}
	for _, w := range want {
		if p.addrs[w] == "" {
			t.Fatalf("no %s listener in %v", w, p.addrs)
		}
	}
	return p
}

func (p *process) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// waitLog returns the next log line whose msg is msg, waiting up to 10s.
func (p *process) waitLog(msg string) map[string]any {
	p.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m := <-p.lines:
			if m["msg"] == msg {
				return m
			}
		case err := <-p.exit:
			p.exit <- err
			p.t.Fatalf("sluice exited (%v) before logging %q", err, msg)
		case <-timeout:
			p.t.Fatalf("sluice did not log %q within 10s", msg)
		}
	}
}

// wait returns the exit code, waiting up to 20s.
func (p *process) wait() int {
	p.t.Helper()
	select {
	case err := <-p.exit:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			p.t.Fatal(err)
		}
		return 0
	case <-time.After(20 * time.Second):
		p.t.Fatal("sluice did not exit within 20s")
		return -1
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricLine returns the /metrics line starting with prefix, or "".
func metricLine(t *testing.T, admin, prefix string) string {
	t.Helper()
	_, body := httpGet(t, "http://"+admin+"/metrics")
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// The built binary, end to end: a limit through the proxy, the admin
// endpoints, reloads on SIGHUP (bad, then good), and a graceful stop on
// SIGTERM that lets a request in flight finish and exits 0.
func TestServeBinary(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	defer up.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	write := func(s string) {
		if err := os.WriteFile(cfg, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("policies:\n  - name: api\n    match: /limited/\n    limits: [\"2/m\"]\n")
	p := startSluice(t, []string{"proxy", "check", "admin"}, "--config", cfg, "--upstream", up.URL, "--watch-interval", "0")
	proxy, admin := "http://"+p.addrs["proxy"], p.addrs["admin"]

	for i, want := range []int{200, 200, 429} {
		if code, body := httpGet(t, proxy+"/limited/x"); code != want || want == 200 && body != "upstream /limited/x" {
			t.Fatalf("request %d: %d %q, want %d", i, code, body, want)
		}
	}
	if code, body := httpGet(t, "http://"+admin+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if got := metricLine(t, admin, `sluice_decisions_total{policy="api",result="refused"}`); !strings.HasSuffix(got, " 1") {
		t.Errorf("/metrics: %q", got)
	}

	// SIGHUP with a bad file: counted, logged with file:line:col, old
	// limits kept.
	write("policies:\n  - name: api\n    limits: [\"2/fortnight\"]\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	m := p.waitLog("the configuration does not load")
	if m["file"] != cfg || m["line"] != 3.0 || m["column"] != 14.0 {
		t.Errorf("reload problem %v lacks file, line and column", m)
	}
	p.waitLog("reload failed; the previous configuration keeps serving")
	if got := metricLine(t, admin, `sluice_config_reloads_total{result="failure"}`); !strings.HasSuffix(got, " 1") {
		t.Errorf("failed reload not counted: %q", got)
	}
	if code, _ := httpGet(t, proxy+"/limited/x"); code != 429 {
		t.Errorf("after a failed reload: %d, want the old limit's 429", code)
	}
	// SIGHUP with a good file: the new limit applies.
	write("policies:\n  - name: api\n    match: /limited/\n    limits: [\"5/m\"]\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog("configuration reloaded")
	if code, _ := httpGet(t, proxy+"/limited/x"); code != 200 {
		t.Errorf("after a good reload: %d, want 200 from the new 5/m", code)
	}

	// SIGTERM with a request in flight.
	type result struct {
		code int
		body string
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Get(proxy + "/slow")
		if err != nil {
			done <- result{body: err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{resp.StatusCode, string(b)}
	}()
	<-entered
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.waitLog("shutting down")
	close(release)
	if r := <-done; r.code != 200 || r.body != "upstream /slow" {
		t.Errorf("the request in flight at SIGTERM: %d %q", r.code, r.body)
	}
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// Exit codes: 3 for a configuration that does not load, 2 for usage.
func TestServeExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("policies:\n  - name: a\n    limts: [\"1/s\"]\n"), 0o644)
	out, err := sluiceCommand(t, "serve", "--config", bad).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(string(out), bad+`:3:5: unknown field "limts"`) {
		t.Errorf("bad config: %v\n%s", err, out)
	}
	code, _, stderr := runCLI(t, "serve", "--no-such-flag")
	if code != 2 || !strings.Contains(stderr, "no-such-flag") {
		t.Errorf("unknown flag: exit %d, %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "serve", "--log-format", "xml")
	if code != 2 || !strings.Contains(stderr, "text or json") {
		t.Errorf("bad log format: exit %d, %q", code, stderr)
	}
	code, stdout, _ := runCLI(t, "serve", "--help")
	if code != 0 || !strings.Contains(stdout, "SLUICE_LISTEN") || !strings.Contains(stdout, "Exit codes") ||
		!strings.Contains(stdout, "--tls-client-ca FILE") {
		t.Errorf("help: exit %d", code)
	}
	// Bad values and combinations of flags are usage errors too, told
	// apart from a failure at run time (1) and a bad file (3). None of
	// these opens a listener.
	envoy := "../../examples/envoy/config"
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--upstream", "localhost:3000"}, "upstream"},
		{[]string{"--upstream", "ftp://example.com"}, "upstream"},
		{[]string{"--redis", "127.0.0.1:6379"}, "Redis URL"},
		{[]string{"--redis", "redis://u:secret@127.0.0.1:63x9/0"}, "Redis URL"},
		{[]string{"--envoy-config", envoy, "--upstream", "http://127.0.0.1:3000"}, "--config"},
		{[]string{"--envoy-config", envoy, "--grpc-listen", "off"}, "gRPC listener"},
		{[]string{"--tls-cert", "tls.crt"}, "--tls-key"},
		{[]string{"--tls-key", "tls.key"}, "--tls-cert"},
		{[]string{"--tls-client-ca", "ca.crt"}, "--tls-client-ca"},
		{[]string{"--body-timeout", "-1s"}, "--body-timeout"},
		{[]string{"--max-keys", "-5"}, "--max-keys"},
		{[]string{"--max-keys", "99999999999999999"}, "--max-keys"}, // store.max_keys's bound, 2^40
		{[]string{"--upstream-timeout", "-1s"}, "--upstream-timeout"},
		{[]string{"--admin-host", "http://dash.example.com"}, "--admin-host"},
		{[]string{"--admin-host", "*.example.com"}, "--admin-host"},
		{[]string{"--admin-host", "."}, "--admin-host"},
		{[]string{"--gc-heap-floor", "64MB"}, "--gc-heap-floor"},
		{[]string{"--gc-heap-floor", "-1"}, "--gc-heap-floor"},
	} {
		args := append([]string{"serve", "--listen", "off", "--check-listen", "off", "--grpc-listen", "127.0.0.1:0", "--admin-listen", "off"}, tt.args...)
		code, _, stderr := runCLI(t, args...)
		if code != 2 || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, "secret") {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a message naming %s (and no password)", tt.args, code, stderr, tt.want)
		}
	}
	// A certificate that does not load is a bad file.
	notPEM := filepath.Join(dir, "tls.crt")
	os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644)
	code, _, stderr = runCLI(t, "serve", "--listen", "off", "--check-listen", "off", "--admin-listen", "off",
		"--tls-cert", notPEM, "--tls-key", notPEM)
	if code != 3 || !strings.Contains(stderr, "TLS certificate "+notPEM) {
		t.Errorf("a certificate that does not load: exit %d, stderr %q; want 3 naming the file", code, stderr)
	}
}

// silentRedis listens on a loopback port as a Redis that accepts
// connections and never answers, and returns its listener and the
// connections it accepts; both are closed as the test ends.
func silentRedis(t *testing.T) (net.Listener, chan net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns <- c // accepted, never answered
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for len(conns) > 0 {
			(<-conns).Close()
		}
	})
	return l, conns
}

// A SIGHUP while sluice is still starting (here: waiting for Redis) is a
// reload to come, not the end of the process.
func TestServeSIGHUPAtStart(t *testing.T) {
	redis, conns := silentRedis(t)
	var err error
	cmd := sluiceCommand(t, "serve", "--redis", "redis://"+redis.Addr().String()+"/0",
		"--listen", "off", "--check-listen", "off", "--admin-listen", "off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var held []net.Conn
	select {
	case c := <-conns:
		held = append(held, c)
	case <-time.After(10 * time.Second):
		t.Fatal("sluice did not connect to the Redis")
	}
	// sluice catches SIGHUP before it connects to Redis, into a buffered
	// channel: the signal, pending once Signal returns, is the process's
	// before it can see the Redis go away.
	cmd.Process.Signal(syscall.SIGHUP)
	// Now let the start fail: the Redis goes away.
	redis.Close()
	for _, c := range held {
		c.Close()
	}
	go func() {
		for c := range conns {
			c.Close()
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("sluice did not exit within 20s")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "cannot start") {
		t.Errorf("exit %v, want 1 from the failed start, not the SIGHUP; stderr:\n%s", err, stderr.String())
	}
}

// Environment variables set what flags do not; flags win.
func TestServeEnv(t *testing.T) {
	env := map[string]string{
		"SLUICE_LISTEN":                        "127.0.0.1:18080",
		"SLUICE_ADMIN_LISTEN":                  "off",
		"SLUICE_ENVOY_CONFIG":                  "a.yaml, b",
		"SLUICE_PPROF":                         "true",
		"SLUICE_LOG_LEVEL":                     "debug",
		"SLUICE_TLS_CERT":                      "tls.crt",
		"SLUICE_TLS_KEY":                       "tls.key",
		"SLUICE_TLS_CLIENT_CA":                 "ca.crt",
		"SLUICE_BODY_TIMEOUT":                  "30s",
		"SLUICE_MAX_KEYS":                      "5000",
		"SLUICE_UPSTREAM_TIMEOUT":              "5s",
		"SLUICE_PLAYGROUND":                    "true",
		"SLUICE_GC_HEAP_FLOOR":                 "1GiB",
		"SLUICE_ENVOY_HEADERS":                 "true",
		"SLUICE_ENVOY_REFUSED_CONSUME_NOTHING": "1",
		"SLUICE_REQUEST_BUFFER":                "1MiB",
		"SLUICE_SHUTDOWN_DELAY":                "5s",
	}
	f, err := parseServeFlags([]string{"--admin-listen", "127.0.0.1:19090"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.o.Listen != "127.0.0.1:18080" || f.o.AdminListen != "127.0.0.1:19090" || !f.o.Pprof ||
		strings.Join(f.o.EnvoyConfigs, "|") != "a.yaml|b" || f.logLevel != "debug" ||
		f.o.TLSCert != "tls.crt" || f.o.TLSKey != "tls.key" || f.o.TLSClientCA != "ca.crt" || f.o.BodyTimeout != 30*time.Second ||
		f.o.MaxKeys != 5000 || f.o.UpstreamTimeout != 5*time.Second || !f.o.Playground || f.gcFloorBytes != 1<<30 ||
		!f.o.EnvoyHeaders || !f.o.EnvoyRefusedConsumeNothing || f.o.RequestBuffer != 1<<20 || f.o.ShutdownDelay != 5*time.Second {
		t.Errorf("options %+v", f.o)
	}
	// --request-buffer 0 turns buffering off, where the Options' zero is
	// the default.
	if f, err := parseServeFlags([]string{"--request-buffer", "0"}, func(string) string { return "" }, io.Discard); err != nil {
		t.Errorf("--request-buffer 0: %v", err)
	} else if f.o.RequestBuffer >= 0 {
		t.Errorf("--request-buffer 0: RequestBuffer %d, want negative: off", f.o.RequestBuffer)
	}
	// --body-timeout 0 turns the bound off, where the Options' zero is
	// the default.
	if f, err := parseServeFlags([]string{"--body-timeout", "0"}, func(string) string { return "" }, io.Discard); err != nil {
		t.Errorf("--body-timeout 0: %v", err)
	} else if f.o.BodyTimeout >= 0 {
		t.Errorf("--body-timeout 0: BodyTimeout %v, want negative: no bound", f.o.BodyTimeout)
	}
	f, err = parseServeFlags([]string{"--envoy-config", "c"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil || strings.Join(f.o.EnvoyConfigs, "|") != "c" {
		t.Errorf("--envoy-config should replace the environment's list: %v %v", f.o.EnvoyConfigs, err)
	}
	if _, err := parseServeFlags(nil, func(k string) string { return map[string]string{"SLUICE_PPROF": "maybe"}[k] }, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "SLUICE_PPROF") {
		t.Errorf("a bad environment value: %v", err)
	}
}

// A bad value is refused naming where it came from: the variable, for a
// value from the environment, or the flag. A flag wins over its variable,
// which is then not read at all; a negative --watch-interval is refused,
// as the negative timeouts are, rather than taken to turn watching off.
func TestServeBadValueNamesItsSource(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		args []string
		want string // in the error; "" for none
	}{
		{map[string]string{"SLUICE_LOG_FORMAT": "xml"}, nil, "SLUICE_LOG_FORMAT"},
		{map[string]string{"SLUICE_LOG_LEVEL": "loud"}, nil, "SLUICE_LOG_LEVEL"},
		{map[string]string{"SLUICE_SHUTDOWN_TIMEOUT": "0s"}, nil, "SLUICE_SHUTDOWN_TIMEOUT"},
		{map[string]string{"SLUICE_MAX_KEYS": "-1"}, nil, "SLUICE_MAX_KEYS"},
		{map[string]string{"SLUICE_UPSTREAM_TIMEOUT": "-1s"}, nil, "SLUICE_UPSTREAM_TIMEOUT"},
		{map[string]string{"SLUICE_BODY_TIMEOUT": "-1s"}, nil, "SLUICE_BODY_TIMEOUT"},
		{map[string]string{"SLUICE_SEND_TIMEOUT": "-1s"}, nil, "SLUICE_SEND_TIMEOUT"},
		{map[string]string{"SLUICE_GRPC_MAX_CONNECTION_AGE": "-1s"}, nil, "SLUICE_GRPC_MAX_CONNECTION_AGE"},
		{nil, []string{"--grpc-max-connection-age", "0"}, ""},
		{map[string]string{"SLUICE_GC_HEAP_FLOOR": "64MB"}, nil, "SLUICE_GC_HEAP_FLOOR"},
		{map[string]string{"SLUICE_WATCH_INTERVAL": "-1s"}, nil, "SLUICE_WATCH_INTERVAL"},
		{map[string]string{"SLUICE_SHUTDOWN_DELAY": "-1s"}, nil, "SLUICE_SHUTDOWN_DELAY"},
		{nil, []string{"--log-format", "xml"}, "--log-format"},
		{nil, []string{"--shutdown-timeout", "0s"}, "--shutdown-timeout"},
		{nil, []string{"--gc-heap-floor", "64MB"}, "--gc-heap-floor"},
		{nil, []string{"--watch-interval", "-1s"}, "--watch-interval"},
		{nil, []string{"--max-header-bytes", "100"}, "--max-header-bytes"},
		{nil, []string{"--max-header-bytes", "2GiB"}, "--max-header-bytes"},
		{map[string]string{"SLUICE_MAX_HEADER_BYTES": "64k"}, nil, "SLUICE_MAX_HEADER_BYTES"},
		{map[string]string{"SLUICE_MAX_HEADER_BYTES": "1MiB"}, nil, ""},
		{map[string]string{"SLUICE_LOG_FORMAT": "json"}, []string{"--log-format", "xml"}, "--log-format"},
		{map[string]string{"SLUICE_LOG_FORMAT": "xml"}, []string{"--log-format", "json"}, ""},
		{map[string]string{"SLUICE_PPROF": "maybe"}, []string{"--pprof"}, ""},
		{map[string]string{"SLUICE_WATCH_INTERVAL": "0"}, nil, ""},
	} {
		_, err := parseServeFlags(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("env %v, args %q: %v, want no error", tt.env, tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("env %v, args %q: %v, want an error naming %s", tt.env, tt.args, err, tt.want)
		case tt.want != "" && len(tt.env) == 0 && strings.Contains(err.Error(), "SLUICE_"):
			t.Errorf("args %q: %v names a variable that is not set", tt.args, err)
		}
	}
	// A value the flag package cannot parse says what it wants, as the
	// command line's own "invalid value" message does not for a variable.
	for key, want := range map[string]string{
		"SLUICE_PPROF":          "want true or false",
		"SLUICE_WATCH_INTERVAL": "want a duration",
		"SLUICE_MAX_KEYS":       "want a whole number",
	} {
		_, err := parseServeFlags(nil, func(k string) string { return map[string]string{key: "yes please"}[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=\"yes please\": %v, want an error that says %q", key, err, want)
		}
	}
	// Of several bad variables, the same one is named every time.
	env := map[string]string{"SLUICE_PPROF": "maybe", "SLUICE_MAX_KEYS": "many", "SLUICE_WATCH_INTERVAL": "often"}
	for range 20 {
		if _, err := parseServeFlags(nil, func(k string) string { return env[k] }, io.Discard); err == nil || !strings.HasPrefix(err.Error(), "SLUICE_MAX_KEYS=") {
			t.Fatalf("%v, want the first bad variable by flag name, SLUICE_MAX_KEYS", err)
		}
	}
}

// The help names every flag, with its variable, and no flag that is not.
func TestServeHelpNamesEveryFlag(t *testing.T) {
	fs := new(serveFlags).flagSet()
	fs.VisitAll(func(fl *flag.Flag) {
		// A flag too long for the column has its text on the next lines.
		if !strings.Contains(serveUsage, "\n  --"+fl.Name+" ") && !strings.Contains(serveUsage, "\n  --"+fl.Name+"\n") {
			t.Errorf("--%s is not in the help", fl.Name)
		}
		if v, ok := serveEnv[fl.Name]; ok && !strings.Contains(serveUsage, "("+v) && !strings.Contains(serveUsage, " "+v+")") {
			t.Errorf("--%s: its variable %s is not in the help", fl.Name, v)
		}
	})
	for _, m := range regexp.MustCompile(`\n  --([a-z-]+)`).FindAllStringSubmatch(serveUsage, -1) {
		if m[1] != "help" && fs.Lookup(m[1]) == nil {
			t.Errorf("the help names --%s, which is no flag", m[1])
		}
	}
	for name := range serveEnv {
		if fs.Lookup(name) == nil {
			t.Errorf("a variable for --%s, which is no flag", name)
		}
	}
}

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64 // 0 with ok false: an error
		ok   bool
	}{
		{"0", 0, true},
		{"67108864", 64 << 20, true},
		{"64MiB", 64 << 20, true},
		{"512KiB", 512 << 10, true},
		{"2GiB", 2 << 30, true},
		{"1TiB", 1 << 40, true},
		{"100B", 100, true},
		{"16777216TiB", 0, false}, // 2^64
		{"16777215TiB", 16777215 << 40, true},
		{"64MB", 0, false},
		{"64 MiB", 0, false},
		{"MiB", 0, false},
		{"", 0, false},
		{"-1", 0, false},
		{"1.5GiB", 0, false},
	} {
		got, err := parseSize(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}

// --admin-host, repeatable or comma-separated, and SLUICE_ADMIN_HOST,
// comma-separated, name the hosts the admin listener's dashboard answers
// by; a flag replaces the variable's list. A port is a usage error,
// named, and so is what server.New finds is no host name (see
// TestServeExitCodes).
func TestServeAdminHost(t *testing.T) {
	env := map[string]string{"SLUICE_ADMIN_HOST": "dash.example.com, sluice.ops.internal.,"}
	getenv := func(k string) string { return env[k] }
	f, err := parseServeFlags(nil, getenv, io.Discard)
	if err != nil || strings.Join(f.o.AdminHosts, "|") != "dash.example.com|sluice.ops.internal." {
		t.Errorf("SLUICE_ADMIN_HOST: %q %v", f.o.AdminHosts, err)
	}
	f, err = parseServeFlags([]string{"--admin-host", "a.example,B.example", "--admin-host", "c"}, getenv, io.Discard)
	if err != nil || strings.Join(f.o.AdminHosts, "|") != "a.example|B.example|c" {
		t.Errorf("--admin-host should replace the environment's list: %q %v", f.o.AdminHosts, err)
	}
	if f, err := parseServeFlags(nil, func(string) string { return "" }, io.Discard); err != nil || f.o.AdminHosts != nil {
		t.Errorf("no --admin-host: %q %v, want none", f.o.AdminHosts, err)
	}
	for _, bad := range []string{"http://dash.example.com", "dash.example.com:9090", "[::1]"} {
		if _, err := parseServeFlags([]string{"--admin-host", bad}, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), "--admin-host") {
			t.Errorf("--admin-host %q: %v, want an error naming the flag", bad, err)
		}
	}
	if _, err := parseServeFlags(nil, func(k string) string { return map[string]string{"SLUICE_ADMIN_HOST": "a.example,https://b"}[k] }, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "SLUICE_ADMIN_HOST") {
		t.Errorf("a bad SLUICE_ADMIN_HOST: %v", err)
	}
	code, stdout, _ := runCLI(t, "serve", "--help")
	if code != 0 || !strings.Contains(stdout, "--admin-host NAME") || !strings.Contains(stdout, "SLUICE_ADMIN_HOST") {
		t.Errorf("--help does not tell of --admin-host: exit %d", code)
	}
}

// The binary's admin listener refuses its dashboard and /debug/top by a
// name it was not given, and serves them by one it was, and by its
// address; /metrics answers by any name.
func TestServeAdminHostBinary(t *testing.T) {
	p := startSluice(t, []string{"proxy", "check", "admin"}, "--admin-host", "dash.example.com")
	admin := p.addrs["admin"]
	for _, tt := range []struct {
		host, path string
		want       int
	}{
		{"evil.example", "/debug/top", 421},
		{"evil.example", "/", 421},
		{"evil.example", "/metrics", 200},
		{"Dash.Example.com.:9090", "/debug/top", 200},
		{admin, "/debug/top", 200},
		{"localhost", "/", 200},
	} {
		req, err := http.NewRequest("GET", "http://"+admin+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tt.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("GET %s by %s: %d, want %d", tt.path, tt.host, resp.StatusCode, tt.want)
		}
	}
}

// The demo's greeting names only the listeners that are on: with the
// proxy and admin listeners off it suggested curl -i http:///hello.
func TestServeDemoGreetingListenersOff(t *testing.T) {
	p := startSluice(t, []string{"check"}, "--listen", "off", "--admin-listen", "off", "--grpc-listen", "off")
	m := p.waitLog("running the built-in demo configuration (no --config given)")
	if _, ok := m["dashboard"]; ok {
		t.Errorf("greeting %v names a dashboard with the admin listener off", m)
	}
}

// A second SIGTERM during the drain stops sluice at once (exit 1), for an
// operator who will not wait out --shutdown-timeout for a request that
// hangs.
func TestServeSecondSignalStopsAtOnce(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	defer up.Close()
	defer close(release)
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte("policies:\n  - {name: api, limits: [\"100/m\"]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startSluice(t, []string{"proxy"}, "--config", cfg, "--upstream", up.URL, "--shutdown-timeout", "1m")
	go http.Get("http://" + p.addrs["proxy"] + "/hang")
	<-entered
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.waitLog("shutting down")
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(); code != 1 || time.Since(start) > 10*time.Second {
		t.Errorf("after a second SIGTERM: exit %d after %v, want 1 at once", code, time.Since(start))
	}
}
