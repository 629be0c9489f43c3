package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// redisTLS is a redis-server that serves TLS alone, with a private CA,
// and requires client certificates (tls-auth-clients yes), with the files
// a store section names to reach it.
type redisTLS struct {
	*redistest.Server
	ca, cert, key string // PEM files: the CA, and a client certificate and its key
	dir           string
}

// startRedisTLS starts a redisTLS whose certificate names 127.0.0.1.
func startRedisTLS(t *testing.T, sentinel bool) (*redisTLS, *redistest.Server) {
	t.Helper()
	ca := newCA(t)
	dir := t.TempDir()
	r := &redisTLS{ca: writeFile(t, dir, "ca.crt", ca.pem), dir: dir}
	c, k := ca.leaf(2, true)
	r.cert, r.key = writeFile(t, dir, "client.crt", c), writeFile(t, dir, "client.key", k)
	files := redistest.TLSFiles{CA: r.ca, ClientCert: r.cert, ClientKey: r.key}
	files.Cert, files.Key = ca.serverFiles(dir, 1)
	r.Server = redistest.StartTLS(t, files, &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{ca.clientCert(3)}})
	var s *redistest.Server
	if sentinel {
		s = redistest.StartSentinel(t, r.Server, "sluice-master")
	}
	return r, s
}

// tlsSection returns the store section's tls mapping, in YAML flow style.
func (r *redisTLS) tlsSection() string {
	return fmt.Sprintf("{ca: %q, cert: %q, key: %q}", r.ca, r.cert, r.key)
}

// With store.tls naming a private CA and a client certificate, the
// server decides through a Redis that requires client certificates,
// whichever way the section names it: a rediss:// URL (the URL's host is
// the name checked), a redis:// URL (the tls mapping alone turns TLS on)
// or cluster seeds (each node's host is the name checked; a single server
// given as a seed is served as one).
func TestRedisTLSStore(t *testing.T) {
	rs, _ := startRedisTLS(t, false)
	up := newUpstream(t)
	for round, store := range []string{
		`redis: "rediss://` + rs.Addr() + `/0"`,
		`redis: "redis://` + rs.Addr() + `/0"`,
		`cluster: ["` + rs.Addr() + `"]`,
	} {
		ts := startServer(t, `
store: {`+store+`, tls: `+rs.tlsSection()+`, timeout: 500ms}
policies:
  - name: api
    key: "header:X-Id"
    limits: ["2/m"]
    on_store_error: closed
`, Options{Upstream: up.URL, Clock: realClock{}})
		id := strconv.Itoa(round)
		status := func() int {
			resp, _ := get(t, ts.Addrs().Proxy, "/", "X-Id", id)
			return resp.StatusCode
		}
		if got := []int{status(), status(), status()}; got[0] != 200 || got[1] != 200 || got[2] != 429 {
			t.Fatalf("%s: through Redis over TLS: %v, want 200 200 429", store, got)
		}
		// The client's key, counted by Redis (readiness's probe key comes
		// and goes beside it).
		if got := rs.MustDo("KEYS", "{sluice:api:header:x-id="+id+"}:*"); got == "" {
			t.Fatalf("%s: no key of client %s in Redis: the decisions did not go through it", store, id)
		}
		if resp, body := get(t, ts.Addrs().Admin, "/readyz"); resp.StatusCode != 200 {
			t.Fatalf("%s: /readyz: %d %q", store, resp.StatusCode, body)
		}
	}
}

// With Sentinel, store.tls applies to the Sentinels and to the master
// they name alike: both serve TLS alone and require client certificates
// here.
func TestRedisTLSSentinel(t *testing.T) {
	master, sentinel := startRedisTLS(t, true)
	up := newUpstream(t)
	ts := startServer(t, `
store:
  sentinel: {master: sluice-master, addrs: ["`+sentinel.Addr()+`"]}
  tls: `+master.tlsSection()+`
  timeout: 500ms
policies:
  - {name: api, limits: ["2/m"], on_store_error: closed}
`, Options{Upstream: up.URL, Clock: realClock{}})
	if got := []int{ts.status("/"), ts.status("/"), ts.status("/")}; got[0] != 200 || got[1] != 200 || got[2] != 429 {
		t.Fatalf("through the sentinel's master over TLS: %v, want 200 200 429", got)
	}
	if keys := master.MustDo("DBSIZE"); keys == "0" {
		t.Error("no key in the master")
	}
}

// A Redis that requires client certificates refuses a server that has
// none, and one that does not trust Redis's CA refuses Redis: the server
// does not start, and says why. A tls file that does not load stops it
// as a bad configuration, naming the field and the file.
func TestRedisTLSStartFails(t *testing.T) {
	rs, _ := startRedisTLS(t, false)
	url := `"rediss://` + rs.Addr() + `/0"`
	tests := []struct {
		name   string
		store  string
		config bool     // ErrConfig: the files, not Redis
		want   []string // in the error, all of them
	}{
		{"no client certificate", `{redis: ` + url + `, tls: {ca: "` + rs.ca + `"}}`, false,
			[]string{"connect to Redis", "TLS with no client certificate", "store.tls.cert"}},
		{"the system's roots", `{redis: ` + url + `, tls: {cert: "` + rs.cert + `", key: "` + rs.key + `"}}`, false,
			[]string{"connect to Redis", "certificate signed by unknown authority", "store.tls.ca"}},
		{"no CA file", `{redis: ` + url + `, tls: {ca: "` + rs.dir + `/missing.crt"}}`, true,
			[]string{"store.tls.ca", rs.dir + "/missing.crt", "no such file"}},
		{"a CA file without a certificate", `{redis: ` + url + `, tls: {ca: "` + rs.key + `", cert: "` + rs.cert + `", key: "` + rs.key + `"}}`, true,
			[]string{"store.tls.ca", rs.key, "no PEM certificate"}},
		{"a key that is not the certificate's", `{redis: ` + url + `, tls: {ca: "` + rs.ca + `", cert: "` + rs.cert + `", key: "` + writeFile(t, rs.dir, "other.key", otherKey(t)) + `"}}`, true,
			[]string{"store.tls.cert", "store.tls.key", rs.cert, "other.key", "private key does not match"}},
	}
	for _, tt := range tests {
		p := writeFile(t, t.TempDir(), "sluice.yaml", "store: "+tt.store+"\npolicies:\n  - {name: api, limits: [\"10/s\"]}\n")
		_, err := New(Options{ConfigFile: p, AdminListen: Off, CheckListen: Off})
		if err == nil {
			t.Errorf("%s: New succeeded", tt.name)
			continue
		}
		if errors.Is(err, ErrConfig) != tt.config {
			t.Errorf("%s: New: %v; ErrConfig %v, want %v", tt.name, err, errors.Is(err, ErrConfig), tt.config)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: New: %v; want %q in it", tt.name, err, w)
			}
		}
	}
}

// otherKey returns a private key, as PEM, that no certificate of the
// test's CA holds.
func otherKey(t *testing.T) string {
	_, k := newCA(t).leaf(9, true)
	return k
}

// --redis replaces the file's redis, cluster or sentinel and keeps its
// tls: a unix:// URL there, which has no TLS, is a bad configuration
// (the loader refuses one in the file).
func TestRedisTLSUnixURL(t *testing.T) {
	p := writeFile(t, t.TempDir(), "sluice.yaml", "store: {tls: {ca: ca.crt}}\npolicies:\n  - {name: api, limits: [\"10/s\"]}\n")
	_, err := New(Options{ConfigFile: p, RedisURL: "unix:///run/redis.sock", AdminListen: Off, CheckListen: Off})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "store.tls: a unix:// socket has no TLS") {
		t.Fatalf("New: %v; want ErrConfig saying a unix:// socket has no TLS", err)
	}
}
