package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The server benchmarks run `sluice serve` as a process of its own, the
// binary users run, so that the CPU time it spends is measured apart from
// the load generator's, which shares the machine's cores with it.

// builtDirs hold the binaries the benchmarks build; TestMain removes them.
var builtDirs []string

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range builtDirs {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// build builds the command pkg, from the module in dir, into a directory
// of its own, and returns the binary's path.
func build(dir, pkg, name string) (string, error) {
	tmp, err := os.MkdirTemp("", "sluice-bench-bin")
	if err != nil {
		return "", err
	}
	builtDirs = append(builtDirs, tmp)
	bin := filepath.Join(tmp, name)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// sluiceBinary builds cmd/sluice once per benchmark binary, in the main
// module, with its dependency versions rather than the bench module's.
var sluiceBinary = sync.OnceValues(func() (string, error) {
	return build("..", "./cmd/sluice", "sluice")
})

// referenceBinary builds Envoy's reference rate limit service (the tool
// in this module's go.mod) once per benchmark binary.
var referenceBinary = sync.OnceValues(func() (string, error) {
	return build(".", "github.com/envoyproxy/ratelimit/src/service_cmd", "ratelimit")
})

// process is a server the benchmark started.
type process struct{ pid int }

// cpu returns the CPU time, user and system, the process has used.
func (p process) cpu() (time.Duration, error) { return procCPU(p.pid) }

// start starts cmd, its output kept for failure messages, waits until it
// answers 200 at readyURL (see waitReady), and pins it (see pinServer).
func start(b *testing.B, onStop onStop, cmd *exec.Cmd, readyURL string) process {
	b.Helper()
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	waitReady(b, onStop, cmd, &log, readyURL)
	pinServer(b, cmd.Process.Pid)
	return process{cmd.Process.Pid}
}

// workDir returns a directory for one server's files, removed when the
// server's environment stops.
func workDir(b *testing.B, onStop onStop) string {
	b.Helper()
	dir, err := os.MkdirTemp("", "sluice-bench")
	if err != nil {
		b.Fatal(err)
	}
	onStop(func(testing.TB) { os.RemoveAll(dir) })
	return dir
}

// referenceProcess is a running reference service.
type referenceProcess struct {
	process
	grpc string
}

// startReference starts Envoy's reference rate limit service on loopback
// with the configuration envoy (in its own format) and its counters in
// the Redis at redisAddr, as its README sets it up, with statsd off, and
// waits until it answers its health check.
func startReference(b *testing.B, onStop onStop, envoy, redisAddr string) *referenceProcess {
	b.Helper()
	bin, err := referenceBinary()
	if err != nil {
		b.Fatal(err)
	}
	dir := workDir(b, onStop)
	conf := filepath.Join(dir, "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "bench.yaml"), []byte(envoy), 0o644); err != nil {
		b.Fatal(err)
	}
	p := &referenceProcess{grpc: freeAddr(b)}
	health := freeAddr(b)
	cmd := exec.Command(bin)
	cmd.Env = referenceEnv(dir, p.grpc, health, freeAddr(b), redisAddr)
	if extra := os.Getenv("SLUICE_BENCH_REFERENCE_ENV"); extra != "" {
		// Settings to try on the reference, such as
		// GOGC=738 (the heap floor sluice serve runs with) or REDIS_POOL_SIZE=64.
		// (REDIS_PIPELINE_WINDOW applies only with REDIS_TYPE=cluster.)
		cmd.Env = append(cmd.Env, strings.Split(extra, ",")...)
	}
	p.process = start(b, onStop, cmd, "http://"+health+"/healthcheck")
	return p
}

// referenceEnv returns the environment of a reference service whose
// configuration is under dir/ratelimit/config, listening on loopback at
// the ports of grpc, health and debug, with its counters in the Redis at
// redisAddr, as its README sets it up, and statsd off.
func referenceEnv(dir, grpc, health, debug, redisAddr string) []string {
	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	return append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+port(health),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+port(grpc),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+port(debug),
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+dir, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
	)
}

// serveFlags are the listeners of one sluice serve process.
type serveFlags struct {
	proxy, check, grpc bool   // which listeners to turn on
	upstream           string // the proxy's upstream
	policy, envoy      string // the files' contents; empty for none
	redis              string // a Redis address; empty for memory
}

// sluiceProcess is a running sluice serve.
type sluiceProcess struct {
	process
	proxy, check, grpc, admin string // addresses; empty when off
}

// startServe starts sluice serve with f, in a directory of its own, and
// waits until its /readyz answers 200. onStop stops it with an interrupt
// and fails the running benchmark if it does not exit cleanly.
func startServe(b *testing.B, onStop onStop, f serveFlags) *sluiceProcess {
	b.Helper()
	bin, err := sluiceBinary()
	if err != nil {
		b.Fatal(err)
	}
	dir := workDir(b, onStop)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
		return p
	}
	p := &sluiceProcess{admin: freeAddr(b)}
	if a := os.Getenv("SLUICE_BENCH_ADMIN"); a != "" {
		// To profile the server under load: its admin listener at a known
		// address, with /debug/pprof/ on.
		p.admin = a
	}
	listen := func(on bool, addr *string) string {
		if !on {
			return "off"
		}
		*addr = freeAddr(b)
		return *addr
	}
	args := []string{"serve",
		"--listen", listen(f.proxy, &p.proxy),
		"--check-listen", listen(f.check, &p.check),
		"--grpc-listen", listen(f.grpc, &p.grpc),
		"--admin-listen", p.admin,
		"--watch-interval", "0",
		"--log-format", "json",
		"--pprof",
	}
	policy := f.policy
	if f.redis != "" {
		if policy == "" {
			// Envoy's service alone, with a policy file for the store: a
			// policy file needs a policy, here one no request meets.
			policy = "policies:\n  - name: unused\n    match: /sluice-bench-unused\n    limits: [\"1/s\"]\n"
		}
		policy += fmt.Sprintf("store: {redis: \"redis://%s/0\", timeout: %v}\n", f.redis, redisTimeout)
	}
	if policy != "" {
		args = append(args, "--config", write("sluice.yaml", policy))
	}
	if f.envoy != "" {
		args = append(args, "--envoy-config", write("envoy.yaml", f.envoy))
	}
	if f.upstream != "" {
		args = append(args, "--upstream", f.upstream)
	}
	cmd := exec.Command(bin, args...)
	if extra := os.Getenv("SLUICE_BENCH_SERVER_ENV"); extra != "" {
		// Settings to try on sluice serve alone, such as GOGC=200.
		cmd.Env = append(os.Environ(), strings.Split(extra, ",")...)
	}
	p.process = start(b, onStop, cmd, "http://"+p.admin+"/readyz")
	return p
}

// waitReady waits until the started cmd answers 200 at url, and has
// onStop stop it with an interrupt and fail the running benchmark if it
// does not exit cleanly. It fails b if cmd exits first, or is not ready
// within 20s, with what cmd logged.
func waitReady(b *testing.B, onStop onStop, cmd *exec.Cmd, log *strings.Builder, url string) {
	b.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	name := filepath.Base(cmd.Path)
	onStop(func(tb testing.TB) {
		cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-done:
			if err != nil && !isInterrupt(err) {
				tb.Errorf("%s: %v\n%s", name, err, log.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			tb.Errorf("%s did not stop within 20s", name)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-done:
			b.Fatalf("%s exited: %v\n%s", name, err, log.String())
		case <-ctx.Done():
			b.Fatalf("%s not ready within 20s\n%s", name, log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// isInterrupt reports whether err says a process ended on SIGINT, as the
// reference service does rather than exit 0.
func isInterrupt(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGINT
}

// pinServer confines process pid, all its threads, to the CPUs that
// SLUICE_BENCH_SERVER_CPUS lists (as taskset -c takes them), if set: with
// the benchmark itself run under taskset on the other CPUs, the server side
// has cores of its own, as if the load came from another machine.
func pinServer(tb testing.TB, pid int) {
	tb.Helper()
	cpus := os.Getenv("SLUICE_BENCH_SERVER_CPUS")
	if cpus == "" {
		return
	}
	if out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		tb.Fatalf("taskset %s %d: %v\n%s", cpus, pid, err, out)
	}
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// procCPU returns the CPU time, user and system, process pid has used,
// from /proc/pid/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis. utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, s)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil // USER_HZ is 100
}
