package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// tlsFiles serves the certificate of the TLS listeners from files that
// are rotated under it (by cert-manager, say, which rewrites them or
// swaps a symlink). Every handshake asks for the pair in force
// (GetCertificate) and, with a client CA, for the pool in force
// (GetConfigForClient), so a reload swaps one pointer: handshakes from
// then on see the new files, connections already open keep theirs.
type tlsFiles struct {
	cert, key, clientCA string // clientCA is empty without mutual TLS

	mu  sync.Mutex // held by load, so that two loads put in force in order
	cur atomic.Pointer[tlsLoaded]

	reloads *prometheus.CounterVec // sluice_tls_reloads_total
}

// tlsLoaded is one load of the files.
type tlsLoaded struct {
	cert      *tls.Certificate // its Leaf is parsed
	clientCAs *x509.CertPool   // nil without a client CA
}

// read reads and checks the files; it puts nothing in force.
func (f *tlsFiles) read() (*tlsLoaded, error) {
	c, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", f.cert, f.key, err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("TLS certificate %s: %w", f.cert, err)
		}
	}
	l := &tlsLoaded{cert: &c}
	if f.clientCA != "" {
		b, err := os.ReadFile(f.clientCA)
		if err != nil {
			return nil, fmt.Errorf("TLS client CA: %w", err)
		}
		l.clientCAs = x509.NewCertPool()
		if !l.clientCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("TLS client CA %s: no PEM certificate in it", f.clientCA)
		}
	}
	return l, nil
}

// load reads the files and, if they all load, puts them in force.
func (f *tlsFiles) load() (*tlsLoaded, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.read()
	if err != nil {
		return nil, err
	}
	f.cur.Store(l)
	return l, nil
}

// serverConfig returns the configuration of a listener that negotiates
// protos by ALPN: TLS 1.2 at least, the certificate and the client CA in
// force at each handshake.
func (f *tlsFiles) serverConfig(protos ...string) *tls.Config {
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return f.cur.Load().cert, nil
		},
	}
	if f.clientCA == "" {
		return c
	}
	// The pool is a field of the Config, not a callback: a handshake gets
	// a Config of its own holding the pool in force. Session tickets are
	// still the outer Config's, so resumption works across reloads.
	get := c.GetCertificate
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{
			MinVersion:     tls.VersionTLS12,
			NextProtos:     protos,
			GetCertificate: get,
			ClientAuth:     tls.RequireAndVerifyClientCert,
			ClientCAs:      f.cur.Load().clientCAs,
		}, nil
	}
	return c
}

// mode is the listening lines' tls attribute: on, or mutual when
// clients must present a certificate.
func (f *tlsFiles) mode() string {
	if f.clientCA != "" {
		return "mutual"
	}
	return "on"
}

// loadTLS loads the TLS files at start; its error wraps ErrConfig.
func (s *Server) loadTLS() error {
	l, err := s.tls.load()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	s.logCert("TLS certificate loaded", l)
	return nil
}

// reloadTLS reads the TLS files again and, if they all load, serves them
// from the next handshake on. If they do not (unreadable, a key that does
// not match its certificate, a cut file), the previous ones keep serving;
// the reason is logged, counted in sluice_tls_reloads_total and
// returned.
func (s *Server) reloadTLS() error {
	l, err := s.tls.load()
	if err != nil {
		s.tls.reloads.WithLabelValues("failure").Inc()
		s.log.Error("TLS reload failed; the previous certificate keeps serving", "error", err.Error())
		return err
	}
	s.tls.reloads.WithLabelValues("success").Inc()
	s.logCert("TLS certificate reloaded", l)
	return nil
}

// logCert logs what a load put in force, warning about a certificate out
// of its validity: clients will refuse it, but sluice serves what it is
// given rather than nothing.
func (s *Server) logCert(msg string, l *tlsLoaded) {
	leaf := l.cert.Leaf
	attrs := []any{"subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339)}
	s.log.Info(msg, attrs...)
	if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		s.log.Warn("the TLS certificate is not valid now: clients will refuse it", attrs...)
	}
}

// watched returns the files, whose changes trigger a TLS reload.
func (f *tlsFiles) watched() []string {
	paths := []string{f.cert, f.key}
	if f.clientCA != "" {
		paths = append(paths, f.clientCA)
	}
	return paths
}
