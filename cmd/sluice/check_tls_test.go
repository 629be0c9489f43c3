package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writePEMPair writes a self-signed certificate and its key as PEM files
// in dir, and returns their paths.
func writePEMPair(t *testing.T, dir, name string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// The store's TLS files are read as sluice serve reads them at start,
// where one that does not load stops it (exit 3): check said OK to such
// a file. Each is a warning about sluice serve, at the file's name in
// the policy file, since the files may exist only where sluice runs (a
// mounted Secret), not where the file is checked: it leaves the exit
// code 0, with --strict too, as the other warnings about sluice serve.
func TestCheckStoreTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := writePEMPair(t, dir, "ca")
	cert, key := writePEMPair(t, dir, "client")
	missing := filepath.Join(dir, "nonexistent", "ca.pem")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	policyFile := func(name, tls string) string {
		f := filepath.Join(dir, name+".yaml")
		content := "store:\n  redis: \"rediss://127.0.0.1:6399/0\"\n  tls:\n" + tls + "policies:\n  - name: a\n    key: ip\n    limits: [\"5/m\"]\n"
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	tests := []struct {
		name, tls string
		// warnings are the stderr lines after "file:", in order.
		warnings []string
	}{
		{"good", fmt.Sprintf("    ca: %s\n    cert: %s\n    key: %s\n", ca, cert, key), nil},
		{"ca-missing", fmt.Sprintf("    ca: %s\n", missing),
			[]string{"4:9: warning (sluice serve): store.tls.ca: open " + missing + ": no such file or directory"}},
		{"ca-not-pem", fmt.Sprintf("    ca: %s\n", notPEM),
			[]string{"4:9: warning (sluice serve): store.tls.ca: " + notPEM + " holds no PEM certificate"}},
		{"key-missing", fmt.Sprintf("    cert: %s\n    key: %s\n", cert, missing),
			[]string{"5:10: warning (sluice serve): store.tls.key: open " + missing + ": no such file or directory"}},
		{"wrong-key", fmt.Sprintf("    cert: %s\n    key: %s\n", cert, caKey),
			[]string{"4:11: warning (sluice serve): store.tls.cert " + cert + " and store.tls.key " + caKey + ": tls: private key does not match public key"}},
		{"both", fmt.Sprintf("    ca: %s\n    cert: %s\n    key: %s\n", notPEM, missing, key),
			[]string{"4:9: warning (sluice serve): store.tls.ca: " + notPEM + " holds no PEM certificate",
				"5:11: warning (sluice serve): store.tls.cert: open " + missing + ": no such file or directory"}},
	}
	for _, tt := range tests {
		f := policyFile(tt.name, tt.tls)
		for _, args := range [][]string{{"check", f}, {"check", "--strict", f}} {
			code, stdout, stderr := runCLI(t, args...)
			if code != 0 {
				t.Errorf("%s %q: exit %d, want 0", tt.name, args, code)
			}
			var lines []string
			if stderr != "" {
				lines = strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			}
			if len(lines) != len(tt.warnings) {
				t.Errorf("%s %q: stderr %q, want %d warnings", tt.name, args, stderr, len(tt.warnings))
				continue
			}
			for i, w := range tt.warnings {
				if !strings.HasPrefix(lines[i], f+":"+w) {
					t.Errorf("%s %q: line %d %q, want it to start %q", tt.name, args, i, lines[i], f+":"+w)
				}
			}
			wantOut := f + ": OK: 1 policy, 1 limit, store: redis\n"
			if n := len(tt.warnings); n > 0 {
				wantOut = fmt.Sprintf("%s: OK: 1 policy, 1 limit, store: redis, %d warning%s\n", f, n, plural(n))
			}
			if stdout != wantOut {
				t.Errorf("%s %q: stdout %q, want %q", tt.name, args, stdout, wantOut)
			}
		}
	}
}

// A relative path is read from the working directory, as sluice serve
// reads it, not from the policy file's directory; the warning says so.
func TestCheckStoreTLSRelativePath(t *testing.T) {
	dir := t.TempDir()
	writePEMPair(t, dir, "ca")
	f := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(f, []byte("store:\n  redis: \"rediss://127.0.0.1:6399/0\"\n  tls: {ca: ca.crt}\npolicies:\n  - name: a\n    key: ip\n    limits: [\"5/m\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "check", f)
	want := f + ":3:13: warning (sluice serve): store.tls.ca: open ca.crt: no such file or directory"
	if code != 0 || !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, "working directory") {
		t.Errorf("from elsewhere: exit %d, stderr %q; want 0 and a warning starting %q that names the working directory", code, stderr, want)
	}
	t.Chdir(dir)
	if code, _, stderr := runCLI(t, "check", f); code != 0 || stderr != "" {
		t.Errorf("from the file's directory: exit %d, stderr %q; want 0 and no warning", code, stderr)
	}
}
