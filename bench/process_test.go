package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The server benchmarks run `sluice serve` as a process of its own, the
// binary users run, so that the CPU time it spends is measured apart from
// the load generator's, which shares the machine's cores with it.

// binDir holds the sluice binary the benchmarks build; TestMain removes
// it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// sluiceBinary builds cmd/sluice once per benchmark binary.
var sluiceBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-bin")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "sluice")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/sluicehq/sluice/cmd/sluice").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build cmd/sluice: %w\n%s", err, out)
	}
	return bin, nil
})

// serveFlags are the listeners of one sluice serve process.
type serveFlags struct {
	proxy, check, grpc bool   // which listeners to turn on
	upstream           string // the proxy's upstream
	policy, envoy      string // the files' contents; empty for none
	redis              string // a Redis address; empty for memory
}

// sluiceProcess is a running sluice serve.
type sluiceProcess struct {
	proxy, check, grpc, admin string // addresses; empty when off
	pid                       int
}

// cpu returns the CPU time, user and system, the process has used.
func (p *sluiceProcess) cpu() (time.Duration, error) { return procCPU(p.pid) }

// startServe starts sluice serve with f, in a directory of its own, and
// waits until its /readyz answers 200. onStop stops it with SIGTERM and
// fails the running benchmark if it does not exit cleanly.
func startServe(b *testing.B, onStop onStop, f serveFlags) *sluiceProcess {
	b.Helper()
	bin, err := sluiceBinary()
	if err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sluice-bench")
	if err != nil {
		b.Fatal(err)
	}
	onStop(func(testing.TB) { os.RemoveAll(dir) })
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
		if policy == "" { // Envoy's service alone, with a policy file for the store
			policy = "policies: []\n"
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
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p.pid = cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	onStop(func(tb testing.TB) {
		cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("sluice serve: %v\n%s", err, log.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			tb.Errorf("sluice serve did not stop within 20s")
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.admin+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case err := <-done:
			b.Fatalf("sluice serve exited: %v\n%s", err, log.String())
		case <-ctx.Done():
			b.Fatalf("sluice serve not ready within 20s\n%s", log.String())
		case <-time.After(20 * time.Millisecond):
		}
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
