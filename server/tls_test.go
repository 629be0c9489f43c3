package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	t    *testing.T
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  string
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice test CA"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{t: t, cert: cert, key: key, pool: x509.NewCertPool(), pem: pemBlock("CERTIFICATE", der)}
	ca.pool.AddCert(cert)
	return ca
}

// leaf issues a certificate for 127.0.0.1 and localhost, for a server
// or a client, and returns it and its key as PEM.
func (ca *testCA) leaf(serial int64, client bool) (certPEM, keyPEM string) {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		ca.t.Fatal(err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder)
}

// clientCert issues a client certificate as crypto/tls takes it.
func (ca *testCA) clientCert(serial int64) tls.Certificate {
	ca.t.Helper()
	c, k := ca.leaf(serial, true)
	cert, err := tls.X509KeyPair([]byte(c), []byte(k))
	if err != nil {
		ca.t.Fatal(err)
	}
	return cert
}

func pemBlock(typ string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

// serverFiles writes a server certificate of serial and its key to dir
// as tls.crt and tls.key, and returns their paths.
func (ca *testCA) serverFiles(dir string, serial int64) (cert, key string) {
	ca.t.Helper()
	c, k := ca.leaf(serial, false)
	return writeFile(ca.t, dir, "tls.crt", c), writeFile(ca.t, dir, "tls.key", k)
}

// httpsClient is a client of its own (its own connections) trusting
// pool, presenting certs, and speaking HTTP/2 where the server offers it.
func httpsClient(t *testing.T, pool *x509.CertPool, certs ...tls.Certificate) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: certs},
		ForceAttemptHTTP2: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// fetch sends a request to https://addr+path with header pairs, and
// returns the response with its body read.
func fetch(c *http.Client, method, addr, path string, header ...string) (*http.Response, string, error) {
	req, err := http.NewRequest(method, "https://"+addr+path, nil)
	if err != nil {
		return nil, "", err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// serial returns the serial number of the certificate addr serves, from
// a handshake of its own.
func serial(t *testing.T, addr string, pool *x509.CertPool) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// HTTPS on the proxy and the check listener, HTTP/2 as negotiated: the
// limits apply as over plain HTTP, and a refusal is a 429 with
// Retry-After. The admin listener stays plain HTTP.
func TestTLSProxyAndCheck(t *testing.T) {
	ca := newCA(t)
	crt, key := ca.serverFiles(t.TempDir(), 1)
	up := newUpstream(t)
	ts := startServer(t, checkPolicy, Options{Upstream: up.URL, TLSCert: crt, TLSKey: key})
	c := httpsClient(t, ca.pool)
	for i, want := range []int{200, 200, 429} {
		resp, body, err := fetch(c, "POST", ts.Addrs().Proxy, "/login")
		if err != nil {
			t.Fatalf("proxy request %d: %v", i, err)
		}
		if resp.StatusCode != want || resp.ProtoMajor != 2 {
			t.Fatalf("proxy request %d: %s %d %q, want HTTP/2 %d", i, resp.Proto, resp.StatusCode, body, want)
		}
		if want == 429 && resp.Header.Get("Retry-After") != "30" {
			t.Errorf("proxy refusal: Retry-After %q, want 30", resp.Header.Get("Retry-After"))
		}
		if want == 200 && body != "upstream saw POST /login" {
			t.Errorf("proxy request %d: %q", i, body)
		}
	}
	check := func() (*http.Response, error) {
		resp, _, err := fetch(c, "GET", ts.Addrs().Check, "/check",
			"X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/login", "X-Forwarded-For", "203.0.113.5")
		return resp, err
	}
	for i, want := range []int{200, 200, 429} {
		resp, err := check()
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if resp.StatusCode != want || resp.ProtoMajor != 2 {
			t.Fatalf("check %d: %s %d, want HTTP/2 %d", i, resp.Proto, resp.StatusCode, want)
		}
		if want == 429 && resp.Header.Get("Retry-After") != "30" {
			t.Errorf("check refusal: Retry-After %q, want 30", resp.Header.Get("Retry-After"))
		}
	}
	// Plain HTTP on a TLS listener is no request.
	if resp, err := http.Get("http://" + ts.Addrs().Check + "/check"); err == nil && resp.StatusCode == 200 {
		t.Error("plain HTTP on the check listener answered 200")
	}
	if got := ts.metric("sluice_tls_certificate_expiry_timestamp_seconds "); got == "" {
		t.Error("no certificate expiry metric on the plain admin listener")
	}
	for _, line := range []string{
		"listener=proxy addr=" + ts.Addrs().Proxy + " tls=on",
		"listener=check addr=" + ts.Addrs().Check + " tls=on",
		"listener=admin addr=" + ts.Addrs().Admin + " tls=off",
	} {
		if !strings.Contains(ts.logs.String(), line) {
			t.Errorf("no listening line with %q", line)
		}
	}
}

// edgeRequest is a request examples/envoy/config answers.
var edgeRequest = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
	{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "203.0.113.9"}}},
}}

// Envoy's service over TLS, with grpc's own TLS credentials.
func TestTLSEnvoy(t *testing.T) {
	ca := newCA(t)
	crt, key := ca.serverFiles(t.TempDir(), 1)
	ts := startServer(t, "", Options{EnvoyConfigs: []string{"../examples/envoy/config"}, TLSCert: crt, TLSKey: key})
	conn, err := grpc.NewClient(ts.Addrs().GRPC, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp := ask(t, rlsv3.NewRateLimitServiceClient(conn), "edge", "remote_address", "203.0.113.7")
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 19 {
		t.Fatalf("over TLS: %v", resp)
	}
	// A client without TLS gets nowhere.
	plain, _ := envoyClient(t, ts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := plain.ShouldRateLimit(ctx, edgeRequest); err == nil {
		t.Error("a plaintext client was answered")
	}
}

// With a client CA, a client must present a certificate it signed: on
// the HTTPS listeners and on gRPC.
func TestTLSClientCA(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	dir := t.TempDir()
	crt, key := ca.serverFiles(dir, 1)
	clientCA := writeFile(t, dir, "ca.crt", ca.pem)
	ts := startServer(t, checkPolicy, Options{EnvoyConfigs: []string{"../examples/envoy/config"},
		TLSCert: crt, TLSKey: key, TLSClientCA: clientCA})

	for _, tt := range []struct {
		name  string
		certs []tls.Certificate
		want  string // in the error; "" for an answer
	}{
		{"no certificate", nil, "certificate required"},
		{"another CA's", []tls.Certificate{other.clientCert(7)}, "unknown certificate authority"},
		{"the CA's", []tls.Certificate{ca.clientCert(8)}, ""},
	} {
		if tt.want == "" {
			if resp, _, err := fetch(httpsClient(t, ca.pool, tt.certs...), "GET", ts.Addrs().Check, "/check"); err != nil || resp.StatusCode != 200 {
				t.Errorf("check, %s: %v %v, want 200", tt.name, resp, err)
			}
		} else {
			if err := refusal(ts.Addrs().Check, ca.pool, tt.certs, tls.VersionTLS13); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("check, %s, TLS 1.3: %v, want the handshake to fail with %q", tt.name, err, tt.want)
			}
			if err := refusal(ts.Addrs().Check, ca.pool, tt.certs, tls.VersionTLS12); err == nil {
				t.Errorf("check, %s, TLS 1.2: the handshake passed", tt.name)
			}
		}
		conn, err := grpc.NewClient(ts.Addrs().GRPC, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.pool, Certificates: tt.certs})))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, edgeRequest)
		cancel()
		conn.Close()
		if (err == nil) != (tt.want == "") {
			t.Errorf("gRPC, %s: %v", tt.name, err)
		}
	}
	if !strings.Contains(ts.logs.String(), "listener=grpc addr="+ts.Addrs().GRPC+" tls=mutual") {
		t.Errorf("gRPC listening line: want tls=mutual\n%s", ts.logs.String())
	}
}

// refusal is the error of a handshake with addr at version, presenting
// certs. In TLS 1.2 the server refuses a client's certificate before the
// handshake ends; in TLS 1.3 its alert comes after the client's side is
// done, so the first read returns it.
func refusal(addr string, pool *x509.CertPool, certs []tls.Certificate, version uint16) error {
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: version, MaxVersion: version})
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	return err
}

// A rotated certificate serves from the next handshake on, while a
// connection opened before keeps working on the old one; a pair that
// does not load keeps the one in force, and is logged and counted.
func TestTLSReload(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	crt, key := ca.serverFiles(dir, 1)
	ts := startServer(t, checkPolicy, Options{TLSCert: crt, TLSKey: key})
	addr := ts.Addrs().Check
	kept := httpsClient(t, ca.pool)
	peerSerial := func() string {
		t.Helper()
		resp, _, err := fetch(kept, "GET", addr, "/check")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("on the kept connection: %v %v", resp, err)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.String()
	}
	if got := peerSerial(); got != "1" {
		t.Fatalf("serial %s at start, want 1", got)
	}

	ca.serverFiles(dir, 2)
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := serial(t, addr, ca.pool); got != "2" {
		t.Errorf("a new handshake after the reload sees serial %s, want 2", got)
	}
	// Still serial 1: the same connection, not a new one.
	if got := peerSerial(); got != "1" {
		t.Errorf("the connection opened before the reload sees serial %s, want 1 (a new connection?)", got)
	}
	// The configuration and the TLS files count a reload each, apart.
	if got := ts.metric(`sluice_tls_reloads_total{result="success"}`); !strings.HasSuffix(got, " 1") {
		t.Errorf("TLS reloads: %q, want 1 success", got)
	}
	if got := ts.metric(`sluice_config_reloads_total{result="success"}`); !strings.HasSuffix(got, " 1") {
		t.Errorf("configuration reloads: %q, want 1 success", got)
	}

	// A key that is not the certificate's.
	_, otherKey := ca.leaf(3, false)
	writeFile(t, dir, "tls.key", otherKey)
	err := ts.Reload(context.Background())
	if err == nil || !strings.Contains(err.Error(), "private key does not match public key") || !strings.Contains(err.Error(), crt) {
		t.Fatalf("Reload with a mismatched key: %v", err)
	}
	if got := serial(t, addr, ca.pool); got != "2" {
		t.Errorf("after a failed reload: serial %s, want 2 still", got)
	}
	if got := ts.metric(`sluice_tls_reloads_total{result="failure"}`); !strings.HasSuffix(got, " 1") {
		t.Errorf("failed TLS reload not counted: %q", got)
	}
	if got := ts.metric(`sluice_config_reloads_total{result="failure"}`); !strings.HasSuffix(got, " 0") {
		t.Errorf("a failed TLS reload counted as the configuration's: %q", got)
	}
	if !strings.Contains(ts.logs.String(), "TLS reload failed; the previous certificate keeps serving") {
		t.Errorf("failed reload not logged")
	}
	// A policy file that does not load holds back neither the TLS files
	// nor their count.
	writeFile(t, ts.dir, "sluice.yaml", "policies:\n  - name: a\n    limts: [\"1/s\"]\n")
	ca.serverFiles(dir, 4)
	if err := ts.Reload(context.Background()); !errors.Is(err, ErrConfig) {
		t.Fatalf("Reload with a bad policy file: %v", err)
	}
	if got := serial(t, addr, ca.pool); got != "4" {
		t.Errorf("with a bad policy file: serial %s, want 4", got)
	}
}

// The watcher sees a certificate rotated as Kubernetes rotates a Secret
// volume, by swapping the ..data symlink, and reloads it.
func TestTLSReloadOnSymlinkSwap(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	version := func(name string, serial int64) {
		t.Helper()
		must(os.Mkdir(filepath.Join(dir, name), 0o755))
		ca.serverFiles(filepath.Join(dir, name), serial)
	}
	version("..v1", 1)
	must(os.Symlink("..v1", filepath.Join(dir, "..data")))
	for _, f := range []string{"tls.crt", "tls.key"} {
		must(os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)))
	}
	ts := startServer(t, checkPolicy, Options{TLSCert: filepath.Join(dir, "tls.crt"), TLSKey: filepath.Join(dir, "tls.key"),
		WatchInterval: 5 * time.Millisecond})
	addr := ts.Addrs().Check
	if got := serial(t, addr, ca.pool); got != "1" {
		t.Fatalf("serial %s at start, want 1", got)
	}
	version("..v2", 2)
	must(os.Symlink("..v2", filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	eventually(t, "the swapped certificate to serve", func() bool { return serial(t, addr, ca.pool) == "2" })
	if !strings.Contains(ts.logs.String(), "TLS files changed on disk") {
		t.Error("the reload was not the watcher's")
	}
}

// Options that do not go together are ErrOptions; a pair that does not
// load at start is ErrConfig, naming the files and the reason.
func TestTLSOptions(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	crt, _ := ca.serverFiles(dir, 1)
	_, otherKey := ca.leaf(2, false)
	bad := writeFile(t, dir, "other.key", otherKey)
	for _, tt := range []struct {
		name string
		o    Options
		want error
		msg  string
	}{
		{"a certificate without its key", Options{TLSCert: crt}, ErrOptions, "--tls-key"},
		{"a key without its certificate", Options{TLSKey: bad}, ErrOptions, "--tls-cert"},
		{"a client CA without TLS", Options{TLSClientCA: crt}, ErrOptions, "--tls-client-ca"},
		{"a key that is not the certificate's", Options{TLSCert: crt, TLSKey: bad}, ErrConfig, "private key does not match public key"},
		{"no key file", Options{TLSCert: crt, TLSKey: filepath.Join(dir, "missing.key")}, ErrConfig, "missing.key"},
		{"a client CA with no certificate", Options{TLSCert: crt, TLSKey: filepath.Join(dir, "tls.key"), TLSClientCA: bad}, ErrConfig, "no PEM certificate"},
	} {
		tt.o.ConfigFile = writeFile(t, dir, "sluice.yaml", checkPolicy)
		tt.o.AdminListen, tt.o.CheckListen = Off, Off
		_, err := New(tt.o)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want %v naming %q", tt.name, err, tt.want, tt.msg)
		}
	}
}
