package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

// secretDir is a directory laid out as Kubernetes mounts a Secret:
// tls.crt and tls.key are symlinks into ..data, itself a symlink to a
// directory of the current version, which an update replaces whole by
// renaming a new ..data over the old.
type secretDir struct {
	t       *testing.T
	dir     string
	version int
}

// newSecretDir returns a secretDir holding cert and key.
func newSecretDir(t *testing.T, cert, key string) *secretDir {
	t.Helper()
	s := &secretDir{t: t, dir: t.TempDir()}
	s.swap(cert, key)
	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(s.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// paths returns the names a store section gives: the symlinks.
func (s *secretDir) paths() (cert, key string) {
	return filepath.Join(s.dir, "tls.crt"), filepath.Join(s.dir, "tls.key")
}

// swap puts a new version in force at once, as the kubelet does: write
// it in a directory of its own, point a new link at it, rename that link
// over ..data, and remove the old version. A file given as "" is left
// out of the new version.
func (s *secretDir) swap(cert, key string) {
	s.t.Helper()
	old, _ := os.Readlink(filepath.Join(s.dir, "..data"))
	s.version++
	name := "..v" + strconv.Itoa(s.version)
	if err := os.Mkdir(filepath.Join(s.dir, name), 0o755); err != nil {
		s.t.Fatal(err)
	}
	for file, content := range map[string]string{"tls.crt": cert, "tls.key": key} {
		if content != "" {
			writeFile(s.t, filepath.Join(s.dir, name), file, content)
		}
	}
	tmp := filepath.Join(s.dir, "..data_tmp")
	if err := os.Symlink(name, tmp); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "..data")); err != nil {
		s.t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(s.dir, old)); err != nil {
			s.t.Fatal(err)
		}
	}
}

// write rewrites one file of the version in force in place, truncating
// it and writing content, as a tool that edits the mounted files
// directly would: a reader in between sees it cut short, or the new
// certificate beside the old key.
func (s *secretDir) write(name, content string) {
	s.t.Helper()
	if err := os.WriteFile(filepath.Join(s.dir, "..data", name), []byte(content), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

// presented returns the serial of the certificate c presents in a TLS 1.3
// handshake with an ECDSA P-256 signature, as Redis's OpenSSL asks, or
// "none" for none.
func presented(t *testing.T, c *tls.Config) string {
	t.Helper()
	cri := &tls.CertificateRequestInfo{Version: tls.VersionTLS13, SignatureSchemes: []tls.SignatureScheme{tls.ECDSAWithP256AndSHA256}}
	var cert *tls.Certificate
	if c.GetClientCertificate != nil {
		var err error
		if cert, err = c.GetClientCertificate(cri); err != nil {
			t.Fatalf("GetClientCertificate: %v", err)
		}
	} else {
		// What crypto/tls does without the callback.
		for i := range c.Certificates {
			if cri.SupportsCertificate(&c.Certificates[i]) == nil {
				cert = &c.Certificates[i]
				break
			}
		}
	}
	if cert == nil || len(cert.Certificate) == 0 {
		return "none"
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatalf("the certificate presented does not parse: %v", err)
	}
	return leaf.SerialNumber.String()
}

// The client certificate is read again from its files at each handshake:
// a renewal, by a swap of the directory or by a rewrite in place, is
// presented from the next connection on, with no restart, and files that
// do not load (a certificate without its key yet, a file cut short,
// files gone) leave the last pair that loaded in force.
func TestStoreTLSClientCertRenewed(t *testing.T) {
	ca := newCA(t)
	type pair struct{ cert, key string }
	pairs := map[int]pair{}
	for serial := 10; serial <= 15; serial++ {
		c, k := ca.leaf(int64(serial), true)
		pairs[serial] = pair{c, k}
	}
	sd := newSecretDir(t, pairs[10].cert, pairs[10].key)
	certFile, keyFile := sd.paths()
	tc, err := storeTLS(policy.StoreTLS{Cert: certFile, Key: keyFile}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		what   string
		change func()
		want   string // the serial presented after the change
	}{
		{"at start", func() {}, "10"},
		{"unchanged", func() {}, "10"},
		{"the directory swapped to a renewal", func() { sd.swap(pairs[11].cert, pairs[11].key) }, "11"},
		{"a swap to a certificate and a key not its own", func() { sd.swap(pairs[12].cert, pairs[11].key) }, "11"},
		{"a swap to a certificate without a key", func() { sd.swap(pairs[12].cert, "") }, "11"},
		{"a swap to an empty directory", func() { sd.swap("", "") }, "11"},
		{"the directory swapped to a renewal again", func() { sd.swap(pairs[12].cert, pairs[12].key) }, "12"},
		{"the certificate rewritten in place, cut short", func() { sd.write("tls.crt", pairs[13].cert[:len(pairs[13].cert)/2]) }, "12"},
		{"the certificate rewritten, the key not yet", func() { sd.write("tls.crt", pairs[13].cert) }, "12"},
		{"the key rewritten too", func() { sd.write("tls.key", pairs[13].key) }, "13"},
		{"the key emptied", func() { sd.write("tls.key", "") }, "13"},
		{"the files' link target removed", func() {
			if err := os.RemoveAll(filepath.Join(sd.dir, "..v"+strconv.Itoa(sd.version))); err != nil {
				t.Fatal(err)
			}
		}, "13"},
		{"a renewal after all that", func() { sd.swap(pairs[14].cert, pairs[14].key) }, "14"},
	}
	for i, s := range steps {
		s.change()
		if got := presented(t, tc); got != s.want {
			t.Errorf("step %d, %s: presented serial %s, want %s", i, s.what, got, s.want)
		}
	}
	// The connections still say they present a certificate, and the
	// hint for a Redis that wanted one but got none stays silent.
	if got := tlsMode(tc); got != "mutual" {
		t.Errorf("tlsMode: %q, want mutual", got)
	}
	if got := tlsHint(tc, io.EOF); got != "" {
		t.Errorf("tlsHint(EOF) with a client certificate: %q, want none", got)
	}
}

// Files that do not load at start still stop it, named, as before the
// certificate was read again at each handshake.
func TestStoreTLSClientCertBadAtStart(t *testing.T) {
	ca := newCA(t)
	c1, _ := ca.leaf(1, true)
	_, k2 := ca.leaf(2, true)
	dir := t.TempDir()
	cert, key := writeFile(t, dir, "tls.crt", c1), writeFile(t, dir, "tls.key", k2)
	_, err := storeTLS(policy.StoreTLS{Cert: cert, Key: key}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "store.tls.cert "+cert+" and store.tls.key "+key) ||
		!strings.Contains(err.Error(), "private key does not match") {
		t.Errorf("storeTLS with a mismatched pair: %v", err)
	}
	_, err = storeTLS(policy.StoreTLS{Cert: filepath.Join(dir, "missing.crt"), Key: key}, nil, nil)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "store.tls.cert") {
		t.Errorf("storeTLS with no certificate file: %v", err)
	}
}

// Against a Redis that requires client certificates: once Redis stops
// accepting the certificate sluice started with (here, Redis is told to
// trust another CA only, as an expired certificate is refused), a new
// connection succeeds again as soon as the renewed certificate is in the
// mounted directory, with the same *tls.Config, as a pool's new
// connection after a failover or a Redis restart would be made.
func TestStoreTLSClientCertRenewedRedis(t *testing.T) {
	caOld, caNew := newCA(t), newCA(t)
	dir := t.TempDir()
	caFile := writeFile(t, dir, "ca.crt", caOld.pem)
	both := writeFile(t, dir, "clients-both.crt", caOld.pem+caNew.pem)
	newOnly := writeFile(t, dir, "clients-new.crt", caNew.pem)
	files := redistest.TLSFiles{CA: both}
	files.Cert, files.Key = caOld.serverFiles(dir, 1)
	// The harness's certificate is of the new CA, which Redis trusts
	// throughout.
	rs := redistest.StartTLS(t, files, &tls.Config{RootCAs: caOld.pool, Certificates: []tls.Certificate{caNew.clientCert(3)}})

	c, k := caOld.leaf(20, true)
	sd := newSecretDir(t, c, k)
	certFile, keyFile := sd.paths()
	tc, err := storeTLS(policy.StoreTLS{CA: caFile, Cert: certFile, Key: keyFile}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ping := func() error {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rs.Addr()}, TLSConfig: tc, DisableCache: true})
		if err != nil {
			return err
		}
		defer client.Close()
		return client.Do(t.Context(), client.B().Ping().Build()).Error()
	}
	if err := ping(); err != nil {
		t.Fatalf("with the certificate of start: %v", err)
	}
	rs.MustDo("CONFIG", "SET", "tls-ca-cert-file", newOnly)
	if err := ping(); err == nil {
		t.Fatal("Redis still accepts the old certificate: the test shows nothing")
	}
	c, k = caNew.leaf(21, true)
	sd.swap(c, k)
	if err := ping(); err != nil {
		t.Fatalf("with the renewed certificate in the directory: %v", err)
	}
}

// The log hears of each renewal, and of files that stopped loading once
// per run of failures, not at every connection.
func TestStoreTLSClientCertLogged(t *testing.T) {
	ca := newCA(t)
	c1, k1 := ca.leaf(31, true)
	c2, k2 := ca.leaf(32, true)
	sd := newSecretDir(t, c1, k1)
	certFile, keyFile := sd.paths()
	logs := &syncBuffer{}
	tc, err := storeTLS(policy.StoreTLS{Cert: certFile, Key: keyFile}, nil, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	const renewed, broken = "client certificate renewed", "do not load; presenting the one loaded before"
	steps := []struct {
		what            string
		change          func()
		renewed, broken int // lines logged so far
		serial          string
	}{
		{"unchanged", func() {}, 0, 0, "31"},
		{"a key not the certificate's", func() { sd.swap(c1, k2) }, 0, 1, "31"},
		{"still broken", func() {}, 0, 1, "31"},
		{"renewed", func() { sd.swap(c2, k2) }, 1, 1, "32"},
		{"the same again", func() {}, 1, 1, "32"},
		{"gone", func() { sd.swap("", "") }, 1, 2, "32"},
	}
	for i, s := range steps {
		s.change()
		presented(t, tc)
		out := logs.String()
		if got := strings.Count(out, renewed); got != s.renewed {
			t.Errorf("step %d, %s: %d lines of renewal, want %d:\n%s", i, s.what, got, s.renewed, out)
		}
		if got := strings.Count(out, broken); got != s.broken {
			t.Errorf("step %d, %s: %d lines of files that do not load, want %d:\n%s", i, s.what, got, s.broken, out)
		}
		if lines := strings.Split(strings.TrimSpace(out), "\n"); s.renewed+s.broken > 0 && !strings.Contains(lines[len(lines)-1], "cert_serial="+s.serial) {
			t.Errorf("step %d, %s: the last line names another certificate than %s: %s", i, s.what, s.serial, lines[len(lines)-1])
		}
	}
}
