package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redis"
)

// within polls cond every 20ms for up to d: for what another goroutine
// brings about on its own time (a connection retried with backoff), never
// for the passing of time.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Redis that does not answer at start is an outage like any other: the
// server starts, each policy's on_store_error applies from the first
// request (open: 200, closed: 503), /readyz is not ready and says why,
// and sluice_redis_down reads 1. Once a redis-server listens on the
// address, the server connects by itself, the breaker's probe brings
// Redis back, and Redis decides: the limit is enforced, its key is in
// Redis, the store's own counters are read from it, and /readyz is ready.
func TestRedisUnreachableAtStart(t *testing.T) {
	rs := redistest.Start(t)
	rs.Kill() // its port, where nothing listens now
	up := newUpstream(t)
	ts := startServer(t, `
store: {redis: "redis://`+rs.Addr()+`/0", timeout: 200ms, deny_cache: false}`+breakerPolicies,
		Options{Upstream: up.URL})

	for i := range 5 {
		if got := []int{ts.status("/open/x"), ts.status("/closed/x")}; got[0] != 200 || got[1] != 503 {
			t.Fatalf("request pair %d, Redis never reached: %v, want [200 503] by on_store_error", i, got)
		}
	}
	if resp, body := get(t, ts.Addrs().Admin, "/readyz"); resp.StatusCode != 503 ||
		!strings.Contains(body, "not connected") || !strings.Contains(body, "connection refused") {
		t.Errorf("/readyz, Redis never reached: %d %q; want 503 saying it is not connected, and why", resp.StatusCode, body)
	}
	if down := ts.counter(`sluice_redis_down`); down != 1 {
		t.Errorf("sluice_redis_down %d, Redis never reached; want 1", down)
	}
	if calls := ts.counter(`sluice_redis_script_calls_total`); calls != 0 {
		t.Errorf("sluice_redis_script_calls_total %d before Redis was reached; want 0", calls)
	}
	logs := ts.logs.String()
	if n := strings.Count(logs, "Redis unreachable at start"); n != 1 || !strings.Contains(logs, rs.Addr()) {
		t.Errorf("%d warnings that Redis is unreachable at start, want 1 naming %s:\n%s", n, rs.Addr(), logs)
	}

	within(t, 10*time.Second, "a second attempt to connect", func() bool {
		return strings.Contains(ts.logs.String(), "Redis still unreachable")
	})
	rs.Restart()
	// A probe is due once the breaker's backoff, on the fake clock, has
	// passed; the connection is retried on the machine's.
	within(t, 20*time.Second, "Redis to decide once it listens", func() bool {
		ts.clock.Advance(5 * time.Second)
		return ts.status("/closed/b") == 429
	})
	if got := rs.MustDo("KEYS", "{sluice:closed:*"); got == "" {
		t.Error("no key of the closed policy in Redis: the decisions did not go through it")
	}
	if calls := ts.counter(`sluice_redis_script_calls_total`); calls < 4 {
		t.Errorf("sluice_redis_script_calls_total %d once connected; want the store's count, 4 or more", calls)
	}
	if down := ts.counter(`sluice_redis_down`); down != 0 {
		t.Errorf("sluice_redis_down %d once Redis decides; want 0", down)
	}
	within(t, 5*time.Second, "/readyz to be ready once connected", func() bool {
		resp, _ := get(t, ts.Addrs().Admin, "/readyz")
		return resp.StatusCode == 200
	})
	if n := strings.Count(ts.logs.String(), "store: connected to Redis"); n != 1 {
		t.Errorf("%d lines saying Redis was connected, want 1:\n%s", n, ts.logs.String())
	}
}

// Which failures of the first connection start the server without Redis
// (Redis not there yet: nothing listens, a socket Redis has not made, a
// name with no address yet) and which stop it with their error, as
// before (Redis there and refusing: a wrong or missing password, a
// connection it closes, as a TLS Redis does to a plain client).
func TestRedisAtStartWhichFailuresStop(t *testing.T) {
	rs := redistest.Start(t)
	rs.MustDo("CONFIG", "SET", "requirepass", "secret") // after the harness's PING
	refused := redistest.Start(t)
	refused.Kill()
	closer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	go func() {
		for {
			c, err := closer.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, tt := range []struct {
		name, url string
		starts    bool
		want      string // in the error of one that stops; | between alternatives
	}{
		{"nothing listens", "redis://" + refused.Addr() + "/0", true, ""},
		{"no socket file yet", "unix://" + filepath.Join(t.TempDir(), "redis.sock"), true, ""},
		{"a name with no address", "redis://redis.sluice-test.invalid:6379/0", true, ""},
		{"a wrong password", "redis://:wrong@" + rs.Addr() + "/0", false, "WRONGPASS"},
		{"no password", "redis://" + rs.Addr() + "/0", false, "NOAUTH"},
		{"a database out of range", "redis://:secret@" + rs.Addr() + "/99", false, "DB index is out of range"},
		// Closed before or after the client's first write: EOF, or a reset.
		{"a connection closed", "redis://" + closer.Addr().String() + "/0", false, "EOF|connection reset by peer"},
	} {
		p := writeFile(t, t.TempDir(), "sluice.yaml", "policies:\n  - {name: api, limits: [\"10/s\"], on_store_error: open}\n")
		srv, err := New(Options{ConfigFile: p, RedisURL: tt.url, CheckListen: Off, AdminListen: Off})
		if tt.starts {
			if err != nil {
				t.Errorf("%s: New: %v; want the server started, Redis to come", tt.name, err)
				continue
			}
			srv.st.close()
			continue
		}
		if err == nil {
			srv.st.close()
			t.Errorf("%s: New succeeded; want it stopped with the error", tt.name)
			continue
		}
		says := slices.ContainsFunc(strings.Split(tt.want, "|"), func(w string) bool { return strings.Contains(err.Error(), w) })
		if !strings.Contains(err.Error(), "connect to Redis") || !says || errors.Is(err, ErrConfig) {
			t.Errorf("%s: New: %v; want the connection's error, with %q", tt.name, err, tt.want)
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "wrong") {
			t.Errorf("%s: New: %v shows the password", tt.name, err)
		}
	}
}

// The failures of a connection that say Redis is not there (yet), beside
// those that say it is there and refuses, for the errors no test here can
// bring about for real (a route, a TLS handshake): see
// TestRedisAtStartWhichFailuresStop for the others.
func TestUnreachable(t *testing.T) {
	dial := func(no syscall.Errno) error {
		return fmt.Errorf("wrapped: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", no)})
	}
	_, dialTimeout := (&net.Dialer{Timeout: time.Nanosecond}).Dial("tcp", "127.0.0.1:1")
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused", dial(syscall.ECONNREFUSED), true},
		{"no route to the host", dial(syscall.EHOSTUNREACH), true},
		{"no route to the network", dial(syscall.ENETUNREACH), true},
		{"the network down", dial(syscall.ENETDOWN), true},
		{"connect timed out", dial(syscall.ETIMEDOUT), true},
		{"no such socket file", dial(syscall.ENOENT), true},
		{"the dial's own timeout", dialTimeout, true},
		{"no answer within the dial timeout (hung, LOADING)", context.DeadlineExceeded, true},
		{"no such host", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "redis", IsNotFound: true}}, true},
		{"no DNS server", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "server misbehaving", Name: "redis", IsTemporary: true}}, true},

		{"a socket not ours to use", dial(syscall.EACCES), false},
		{"closed once made", io.EOF, false},
		{"reset once made", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false},
		{"a client certificate refused", &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, false},
		{"an unknown CA", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, false},
		{"a name the certificate does not hold", &tls.CertificateVerificationError{Err: x509.HostnameError{Host: "redis"}}, false},
		{"not TLS", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, false},
		{"an error of the client's", errors.New("no alive address in InitAddress"), false},
	} {
		if got := unreachable(tt.err); got != tt.want {
			t.Errorf("%s: unreachable(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// The breaker discovers what its primary can do by type assertion (see
// lateRedis): what stands in for the Redis store until Redis answers has
// every method of the store, with the same signature, but those no one
// asks the breaker's primary for. A method added to the store fails this
// test until lateRedis has it too, or it is listed here.
func TestLateRedisMethods(t *testing.T) {
	notNeeded := map[string]string{
		"Close": "the handle closes the store",
		"Key":   "asked of the store by its tests alone",
	}
	store, late := reflect.TypeFor[*redis.Store](), reflect.TypeFor[*lateRedis]()
	for i := range store.NumMethod() {
		m := store.Method(i)
		if _, ok := notNeeded[m.Name]; ok {
			continue
		}
		lm, ok := late.MethodByName(m.Name)
		if !ok {
			t.Errorf("lateRedis has no %s: if the breaker may look for it, add it (the store's once in, and an answer before)", m.Name)
			continue
		}
		if got, want := methodSig(lm.Type), methodSig(m.Type); got != want {
			t.Errorf("lateRedis.%s is %s, the store's %s", m.Name, got, want)
		}
	}
}

// methodSig returns the signature of method type f, without its receiver.
func methodSig(f reflect.Type) string {
	var in, out []string
	for i := 1; i < f.NumIn(); i++ {
		in = append(in, f.In(i).String())
	}
	for i := range f.NumOut() {
		out = append(out, f.Out(i).String())
	}
	return "func(" + strings.Join(in, ", ") + ") (" + strings.Join(out, ", ") + ")"
}
