package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is one redis-server process on a loopback port. Its methods are
// safe for concurrent use.
type Server struct {
	t       tb
	dir     string
	port    int
	busPort int    // cluster bus port; 0 unless cluster-enabled
	conf    string // the config file of a sentinel; empty for a server
	extra   []string
	// tlsFiles, when set, makes the server serve TLS alone on port (see
	// StartTLS), and tlsClient is how the harness connects to it.
	tlsFiles  *TLSFiles
	tlsClient *tls.Config

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited
	paused bool
}

// tb is the part of testing.TB the harness uses, so that a TestMain can
// start a server too (see Main).
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Start starts a redis-server on a free loopback port and stops it when
// the test ends. Extra arguments are passed to redis-server as they are,
// e.g. "--maxmemory", "10mb".
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	mustHave(t, "redis-server")
	s := &Server{t: t, dir: serverDir(t), extra: extra}
	s.startFree()
	t.Cleanup(s.stop)
	return s
}

// TLSFiles names the PEM files of a redis-server that serves TLS (see
// StartTLS).
type TLSFiles struct {
	// CA holds the CAs that sign the clients' certificates
	// (tls-ca-cert-file).
	CA string
	// Cert and Key are the server's certificate and its key
	// (tls-cert-file, tls-key-file). Clients dial 127.0.0.1: the
	// certificate must name that address.
	Cert, Key string
	// ClientCert and ClientKey, both or neither, are what the server
	// presents when it connects to another (a sentinel to its master:
	// tls-client-cert-file, tls-client-key-file). Empty, it presents Cert,
	// which then needs the clientAuth usage too.
	ClientCert, ClientKey string
}

// args returns the redis-server arguments that serve TLS alone on port,
// require a client certificate (tls-auth-clients yes, Redis's default,
// made explicit) and use TLS to a master too (tls-replication).
func (f *TLSFiles) args(port int) []string {
	args := []string{
		"--port", "0",
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", f.Cert,
		"--tls-key-file", f.Key,
		"--tls-ca-cert-file", f.CA,
		"--tls-auth-clients", "yes",
		"--tls-replication", "yes",
	}
	if f.ClientCert != "" {
		args = append(args, "--tls-client-cert-file", f.ClientCert, "--tls-client-key-file", f.ClientKey)
	}
	return args
}

// StartTLS is Start for a redis-server that serves TLS alone, on a free
// loopback port, with files, and requires every client to present a
// certificate signed by files.CA. The harness (Do, MustDo, Info, a
// restart's wait) connects with client, which must trust the server's
// certificate and hold a client certificate. StartTLS skips the test when
// redis-server was built without TLS support.
func StartTLS(t testing.TB, files TLSFiles, client *tls.Config, extra ...string) *Server {
	t.Helper()
	mustHave(t, "redis-server")
	s := &Server{t: t, dir: serverDir(t), extra: extra, tlsFiles: &files, tlsClient: client}
	var err error
	for range 5 { // another process may take the free port before we do
		s.port = freePort(t)
		if err = s.start(); err == nil {
			break
		}
		if noTLS(err) {
			t.Fatalf("redistest: this redis-server has no TLS support (built without BUILD_TLS=yes; Debian's redis-server has it): %v", err)
		}
	}
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.stop)
	return s
}

// noTLS reports whether a start failed because redis-server has no TLS.
// Built without it, Redis 6 and 7.0 know no tls-* directive: they refuse
// the first, tls-port, on standard error ("FATAL CONFIG FILE ERROR ...
// >>> 'tls-port "6380"' Bad directive or wrong number of arguments");
// from 7.2 on, TLS is a connection type that may be missing.
func noTLS(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "bad directive") && strings.Contains(msg, "'tls-port ") ||
		strings.Contains(msg, "connection type tls") || strings.Contains(msg, "tls is not supported")
}

// Main starts a redis-server for a TestMain, where there is no testing.TB:
// for examples and benchmarks. Call stop when the tests are done; a run
// killed before then leaves no server (see [DieWithTest]) and a directory
// the next Main removes (see [TempDir]). The server's methods panic where
// a test's would fail it.
func Main(extra ...string) (s *Server, stop func(), err error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, nil, fmt.Errorf("redistest: redis-server not found on PATH; run `make deps` to install it (the tests start a real Redis)")
	}
	dir, err := TempDir("redistest")
	if err != nil {
		return nil, nil, err
	}
	s = &Server{t: panicTB{}, dir: dir, extra: extra}
	s.startFree()
	return s, func() { s.stop(); os.RemoveAll(dir) }, nil
}

type panicTB struct{}

func (panicTB) Helper()                           {}
func (panicTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// startFree starts the server on a free port.
func (s *Server) startFree() {
	t := s.t
	t.Helper()
	var err error
	for range 5 { // another process may take the free port before we do
		s.port = freePort(t)
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// Addr returns the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Pid returns the process ID of the running server, or 0 if it is not
// running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill ends the server with SIGKILL, as a crash would, and waits until the
// process is gone. Its data is lost.
func (s *Server) Kill() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
	s.paused = false
}

// Restart starts a killed server again on the same port, empty, and waits
// until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		s.t.Fatalf("redistest: Restart of a running server on port %d", s.port)
	}
	// The port was ours a moment ago; the kernel may hold it briefly.
	var err error
	deadline := time.Now().Add(startTimeout)
	for {
		if err = s.start(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

// Pause stops the server with SIGSTOP: connections stay open but nothing
// answers, as with a hung or overloaded server. It returns once every
// thread of the process is stopped: the kernel stops a process when its
// threads next run, which on a loaded machine can be a while after the
// signal, and until then the server still answers.
func (s *Server) Pause() {
	s.t.Helper()
	s.signal(sigStop, true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	pid, done := s.cmd.Process.Pid, s.done
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			s.t.Fatalf("redistest: redis-server (pid %d) exited as it was paused: %s", pid, s.logTail())
		default:
		}
		stopped, err := isStopped(pid)
		if err != nil || stopped {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: redis-server (pid %d) not stopped %v after SIGSTOP", pid, startTimeout)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// isStopped reports whether every thread of process pid is stopped by a
// signal (state T in /proc/<pid>/task/<tid>/stat). Where there is no
// /proc it returns an error, and the caller cannot wait.
func isStopped(pid int) (bool, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread has exited
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) {
			return false, fmt.Errorf("redistest: %s/%s/stat: %q", dir, task.Name(), b)
		}
		if b[i+2] != 'T' {
			return false, nil
		}
	}
	return true, nil
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(sigCont, false) }

func (s *Server) signal(sig os.Signal, paused bool) {
	s.t.Helper()
	if sig == nil {
		s.t.Fatalf("redistest: pausing a server needs SIGSTOP and SIGCONT, which this platform has not")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("redistest: %v to a server that is not running", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: %v: %v", sig, err)
	}
	s.paused = paused
}

// Do sends one command over a fresh connection and returns the reply as
// text: simple strings, integers and bulk strings as they are, arrays one
// element per line. A Redis error reply is returned as an error.
func (s *Server) Do(args ...string) (string, error) { return do(s.Addr(), s.tlsClient, args...) }

// MustDo is Do that fails the test on error.
func (s *Server) MustDo(args ...string) string {
	s.t.Helper()
	r, err := s.Do(args...)
	if err != nil {
		s.t.Fatalf("redistest: %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// Info returns the fields of INFO section as a map.
func (s *Server) Info(section string) map[string]string {
	s.t.Helper()
	out := map[string]string{}
	for line := range strings.SplitSeq(s.MustDo("INFO", section), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

// ScriptStats returns how many script calls (EVALSHA and EVAL) the server
// has run and the microseconds it spent in them, as INFO commandstats
// counts them.
func (s *Server) ScriptStats() (calls, usec int64) {
	s.t.Helper()
	info := s.Info("commandstats")
	for _, cmd := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
		v, ok := info[cmd] // calls=12,usec=345,usec_per_call=28.75,...
		if !ok {
			continue
		}
		for f := range strings.SplitSeq(v, ",") {
			name, num, _ := strings.Cut(f, "=")
			var sum *int64
			switch name {
			case "calls":
				sum = &calls
			case "usec":
				sum = &usec
			default:
				continue
			}
			n, err := strconv.ParseInt(num, 10, 64)
			if err != nil {
				s.t.Fatalf("redistest: INFO commandstats %s: %q: %v", cmd, v, err)
			}
			*sum += n
		}
	}
	return calls, usec
}

// start runs redis-server on s.port and waits until it answers PING.
func (s *Server) start() error {
	var args []string
	if s.conf != "" {
		args = []string{s.conf, "--sentinel"}
	}
	port := []string{"--port", strconv.Itoa(s.port)}
	if s.tlsFiles != nil {
		port = s.tlsFiles.args(s.port)
	}
	args = append(args, port...)
	args = append(args,
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--logfile", "redis.log",
	)
	if s.busPort != 0 {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes-"+strconv.Itoa(s.port)+".conf",
			"--cluster-port", strconv.Itoa(s.busPort),
			"--cluster-node-timeout", "2000",
		)
	}
	args = append(args, s.extra...)
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = s.dir
	DieWithTest(cmd)
	// A configuration redis-server refuses is reported on standard error,
	// before the log file is open.
	stderr, err := os.OpenFile(filepath.Join(s.dir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer stderr.Close() // the process has its own copy
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(startTimeout)
	for {
		r, err := do(net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), s.tlsClient, "PING")
		if err == nil && r == "PONG" {
			break
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d did not answer within %v: %s", s.port, startTimeout, s.logTail())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The port was free when we picked it, but another test's
	// redis-server may have taken it since, and answered that PING while
	// ours failed to bind ("Address already in use") or has yet to exit.
	if err := s.isOurs(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		<-done
		return err
	}
	s.mu.Lock()
	s.cmd, s.done, s.paused = cmd, done, false
	s.mu.Unlock()
	return nil
}

// isOurs checks that the server answering on s.port is process pid, as
// INFO server's process_id says.
func (s *Server) isOurs(pid int) error {
	info, err := do(net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), s.tlsClient, "INFO", "server")
	if err != nil {
		return fmt.Errorf("redis-server on port %d: INFO server: %w", s.port, err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if v != strconv.Itoa(pid) {
				return fmt.Errorf("port %d is another redis-server's (process %s, ours %d): %s", s.port, v, pid, s.logTail())
			}
			return nil
		}
	}
	return fmt.Errorf("redis-server on port %d: no process_id in INFO server", s.port)
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	if s.paused {
		_ = s.cmd.Process.Signal(sigCont)
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Log returns the server's log as it is now, restarts included: for what
// only the log tells, as when a cluster node changed its state.
func (s *Server) Log() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return ""
	}
	return string(b)
}

// logTail returns the end of the server's log, for error messages; its
// standard error when it wrote no log.
func (s *Server) logTail() string {
	log := s.Log()
	if log == "" {
		b, _ := os.ReadFile(filepath.Join(s.dir, "stderr.log"))
		log = string(b)
	}
	if strings.TrimSpace(log) == "" {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(log), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

// mustHave fails the test when prog is not on PATH.
func mustHave(t tb, prog string) {
	t.Helper()
	if _, err := exec.LookPath(prog); err != nil {
		t.Fatalf("redistest: %s not found on PATH; run `make deps` to install it (the tests start a real Redis)", prog)
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t tb) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// do sends one command in RESP and reads one reply, over TLS with tc
// when it is not nil.
func do(addr string, tc *tls.Config, args ...string) (string, error) {
	var c net.Conn
	var err error
	if tc != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, tc)
	} else {
		c, err = net.DialTimeout("tcp", addr, time.Second)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
