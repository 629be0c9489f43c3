package policy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// The store's TLS files are read by whoever connects to the store, at
// start and, for a client certificate renewed in place, at each handshake;
// Load only names them, so that a file checked where they are not (a
// pipeline, for a Secret mounted where sluice runs) loads. These readers
// are the one way to read them, so that `sluice check` reads them as
// `sluice serve` does, with the same messages. An error names the field
// and wraps the *fs.PathError of a file that cannot be read, which names
// it.

// ReadCA reads t.CA, which must be set: the pool of its certificates.
func (t StoreTLS) ReadCA() (*x509.CertPool, error) {
	b, err := os.ReadFile(t.CA)
	if err != nil {
		return nil, fmt.Errorf("store.tls.ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("store.tls.ca: %s holds no PEM certificate", t.CA)
	}
	return pool, nil
}

// ReadCertificate reads t.Cert and t.Key, which must both be set: the
// client certificate chain and its key, the leaf parsed.
func (t StoreTLS) ReadCertificate() (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(t.Cert)
	if err != nil {
		return nil, fmt.Errorf("store.tls.cert: %w", err)
	}
	keyPEM, err := os.ReadFile(t.Key)
	if err != nil {
		return nil, fmt.Errorf("store.tls.key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("store.tls.cert %s and store.tls.key %s: %w", t.Cert, t.Key, err)
	}
	if pair.Leaf == nil { // set by crypto/tls unless GODEBUG x509keypairleaf=0
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("store.tls.cert %s: %w", t.Cert, err)
		}
	}
	return &pair, nil
}
