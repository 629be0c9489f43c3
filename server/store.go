package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// readyProbe returns the decision readiness asks a Redis for, serving g:
// one unit of a limit no probe reaches, whose state is fresh again within
// a microsecond, on a key under the prefix of g's keys (its policies', or
// with Envoy's service alone rls), so that an ACL's key pattern lets it
// through as it lets them, and no policy's or Envoy descriptor's (their
// keys go on with a name, which holds no '#').
func readyProbe(g *generation) rate.Request {
	prefix := "rls"
	if g != nil && g.set != nil {
		prefix = g.set.Prefix()
	}
	return rate.Request{Key: prefix + ":#readyz", Limit: rate.Limit{Algorithm: rate.GCRA, Count: 1_000_000, Period: time.Second}, Cost: 1}
}

// storeHandle is the store the server decides against, chosen at start.
type storeHandle struct {
	cfg    policy.StoreConfig
	store  sluice.Store   // instrumented
	client rueidis.Client // nil for the memory store
	redis  *redis.Store   // nil for the memory store
	// breaker stands between the server and Redis (nil for the memory
	// store): while Redis is known down, calls fail at once with
	// sluice.ErrStoreDown instead of waiting for the timeout, and each
	// policy's on_store_error applies.
	breaker *sluice.Fallback
	close   func()
}

// openStore makes the store c describes: memory, or Redis (one server, a
// Cluster or a Sentinel-managed master). It reads c.TLS's files, and
// fails with ErrConfig when one does not load.
func (s *Server) openStore(c policy.StoreConfig) (*storeHandle, error) {
	h := &storeHandle{cfg: c, close: func() {}}
	// The local store decides while Redis is down, for the policies whose
	// on_store_error is local.
	s.local = memory.New(memory.Options{Clock: s.clock, MaxKeys: c.MaxKeys})
	if !c.IsRedis() {
		ms := memory.New(memory.Options{Clock: s.clock, MaxKeys: c.MaxKeys})
		registerMemory(s.reg, "memory", ms.Stats)
		h.store = newInstrumented(ms, "memory", s.m)
		s.log.Info("store: in memory (counters are this process's own)", "max_keys", ms.Stats().MaxKeys)
		return h, nil
	}
	var co rueidis.ClientOption
	where := ""
	switch {
	case c.Redis != "":
		var err error
		if co, err = rueidis.ParseURL(c.Redis); err != nil {
			return nil, fmt.Errorf("%w: store.redis: %w", ErrConfig, urlProblem(err))
		}
		where = redactURL(c.Redis)
	case len(c.Cluster) > 0:
		co.InitAddress = c.Cluster
		where = fmt.Sprintf("cluster %v", c.Cluster)
	default:
		co.InitAddress = c.SentinelAddrs
		co.Sentinel = rueidis.SentinelOption{MasterSet: c.SentinelMaster}
		where = fmt.Sprintf("sentinel master %q via %v", c.SentinelMaster, c.SentinelAddrs)
	}
	if c.TLS.On() {
		// The loader refuses tls with a unix:// URL in the file; --redis
		// may still give one.
		if strings.HasPrefix(c.Redis, "unix:") {
			return nil, fmt.Errorf("%w: store.tls: a unix:// socket has no TLS; give Redis's TCP address (rediss://host:port) or drop tls", ErrConfig)
		}
		tc, err := storeTLS(c.TLS, co.TLSConfig)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		co.TLSConfig = tc
		// The Sentinels are dialled with options of their own: a
		// deployment that puts TLS on Redis puts it on its Sentinels too
		// (they read the same tls-* directives), with the same CA and
		// client certificates. Without a ServerName, which only a
		// rediss:// URL sets, each connection checks the host it dials.
		if co.Sentinel.MasterSet != "" {
			co.Sentinel.TLSConfig = tc.Clone()
		}
	}
	// The store reads nothing through the client-side cache: off, the
	// client sends no CLIENT TRACKING, which an ACL need not allow.
	co.DisableCache = true
	client, err := rueidis.NewClient(co)
	if err != nil {
		return nil, fmt.Errorf("store: connect to Redis (%s): %w%s", where, err, tlsHint(co.TLSConfig, err))
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultStoreTimeout
	}
	// The store bounds each script call with the timeout: one timer per
	// call, where a bound per decision would cost one per request.
	// The latency histogram is of decisions sent to Redis, as the store
	// times them: the breaker's instant answers while Redis is down, and
	// the refusals the deny cache answers in memory, are no round trips,
	// and would make Redis read as faster than ever during an outage.
	latency := s.m.storeLatency.WithLabelValues("redis")
	rs := redis.New(client, redis.Options{
		DisableDenyCache: c.NoDenyCache, Clock: s.clock, CallTimeout: timeout,
		Latency: func(d time.Duration) { latency.Observe(d.Seconds()) },
	})
	RegisterRedis(s.reg, rs.Stats)
	registerMemory(s.reg, "local", s.local.Stats)
	// The breaker counts the store's timeouts and errors as failures and
	// probes Redis with backoff while it is down; the instrumentation
	// outside it counts what requests see, ErrStoreDown included. A
	// request whose own deadline comes before the timeout (Envoy's do)
	// ends its call itself: it counts too once Redis has completed no call
	// for longer than the timeout, so that a hung Redis is declared down
	// as a failing one is, while a loaded one that still answers is not.
	h.breaker = sluice.NewFallback(rs, sluice.FallbackOptions{Mode: sluice.FailError, Timeout: -1, MaxSilence: timeout, Logger: s.log, Clock: s.clock})
	registerBreaker(s.reg, h.breaker.Stats)
	h.store = newInstrumented(h.breaker, "", s.m)
	h.client, h.redis = client, rs
	// The store first: on a cluster it reads the slots in the background.
	h.close = sync.OnceFunc(func() { rs.Close(); client.Close() })
	s.log.Info("store: Redis", "at", where, "tls", tlsMode(co.TLSConfig), "timeout", timeout.String(), "deny_cache", !c.NoDenyCache)
	return h, nil
}

// storeTLS returns the TLS configuration of the connections to Redis that
// t describes, on top of base: a rediss:// URL's (nil for none), whose
// ServerName, as the Redis client set it from the URL's host, and
// skip_verify it keeps. Without a ServerName, crypto/tls checks the host
// of each address dialled: a Cluster's nodes, a Sentinel's master. TLS
// 1.2 is the minimum; t's CAs replace the system's roots; t's certificate
// is presented to a Redis that asks for one. storeTLS reads the files
// now: an error names the field and the file.
func storeTLS(t policy.StoreTLS, base *tls.Config) (*tls.Config, error) {
	c := &tls.Config{}
	if base != nil {
		c = base.Clone()
	}
	c.MinVersion = max(c.MinVersion, tls.VersionTLS12)
	if t.CA != "" {
		// An *fs.PathError names the file.
		b, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("store.tls.ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("store.tls.ca: %s holds no PEM certificate", t.CA)
		}
		c.RootCAs = pool
	}
	if t.Cert != "" || t.Key != "" {
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
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// tlsHint returns what a connection over TLS with c that failed with err
// may need from store.tls: a CA, when the system's roots do not know
// Redis's; a client certificate, when it presented none and Redis closed
// the connection or sent an alert. A Redis that requires one
// (tls-auth-clients yes) refuses the handshake, and under TLS 1.3 the
// client learns it only on its first command, often as a reset
// connection that says nothing of TLS.
func tlsHint(c *tls.Config, err error) string {
	var op *net.OpError
	closed := errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &op) && op.Op == "remote error"
	switch {
	case c == nil:
		return ""
	case errors.As(err, new(x509.UnknownAuthorityError)) && c.RootCAs == nil:
		return " (no CA among the system's roots signed Redis's certificate: name its CA in store.tls.ca)"
	case len(c.Certificates) == 0 && closed:
		return " (over TLS with no client certificate: if Redis requires one, as tls-auth-clients yes, its default, does, give it in store.tls.cert and store.tls.key)"
	}
	return ""
}

// tlsMode names, for the log, how the store's connections use TLS: off,
// on, or mutual when they present a client certificate.
func tlsMode(c *tls.Config) string {
	switch {
	case c == nil:
		return "off"
	case len(c.Certificates) > 0:
		return "mutual"
	}
	return "on"
}

// ping reports whether the store answers: always for memory; for one
// Redis (or a Sentinel's master), whether it runs a decision, a script
// call that writes, on a key of its own under g's prefix (see
// readyProbe): a Redis that answers PING may still refuse every script (an ACL without the keys' pattern, out of
// memory, a replica). On a Redis Cluster every node is sent a PING, and
// the store answers if any node does: a PING left to the client goes to a
// node of its choice, which would make readiness a toss while one master
// is down. One dead master sends its own keys to on_store_error on every
// instance alike, and taking them all out of rotation would only make
// that the whole service's outage; no node answering is this instance's
// own.
func (h *storeHandle) ping(ctx context.Context, g *generation) error {
	if h.client == nil {
		return nil
	}
	if h.client.Mode() != rueidis.ClientModeCluster {
		_, err := h.redis.Decide(ctx, readyProbe(g))
		return err
	}
	nodes := h.client.Nodes()
	if len(nodes) == 0 {
		return errors.New("no node of the cluster known")
	}
	errs := make(chan error, len(nodes))
	for addr, c := range nodes {
		go func() {
			err := c.Do(ctx, c.B().Ping().Build()).Error()
			if err != nil {
				err = fmt.Errorf("%s: %w", addr, err)
			}
			errs <- err
		}()
	}
	var all []error
	for range nodes {
		err := <-errs
		if err == nil {
			return nil
		}
		all = append(all, err)
	}
	return errors.Join(all...)
}

// urlProblem returns what is wrong with a URL that did not parse, without
// the URL, which may hold a password: a *url.Error quotes it whole.
func urlProblem(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}

// redactURL hides the password of a Redis URL, for logs.
func redactURL(s string) string {
	co, err := rueidis.ParseURL(s)
	if err != nil || co.Password == "" {
		return s
	}
	return fmt.Sprintf("%v (password hidden)", co.InitAddress)
}

// instrumented counts the errors of each call to a store, and times it
// unless the store times its own calls (Redis: see Server.openStore).
type instrumented struct {
	inner   sluice.Store
	m       *Metrics
	latency prometheus.Observer // the store's series, looked up once; nil if it times itself
}

// newInstrumented returns inner instrumented, its latency observed as
// store name, or not at all if name is "".
func newInstrumented(inner sluice.Store, name string, m *Metrics) *instrumented {
	s := &instrumented{inner: inner, m: m}
	if name != "" {
		s.latency = m.storeLatency.WithLabelValues(name)
	}
	return s
}

func (s *instrumented) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	start := time.Now()
	d, err := s.inner.Decide(ctx, r)
	s.done(start, err)
	return d, err
}

func (s *instrumented) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	start := time.Now()
	d, err := s.inner.DecideAll(ctx, reqs, out)
	s.done(start, err)
	return d, err
}

func (s *instrumented) done(start time.Time, err error) {
	if s.latency != nil {
		s.latency.Observe(time.Since(start).Seconds())
	}
	if err != nil {
		s.m.StoreError(errorKind(err))
	}
}

// The kinds of store error, the store_errors_total label.
const (
	kindDown        = "down" // a call not sent: the store is known to be down
	kindTimeout     = "timeout"
	kindCanceled    = "canceled"
	kindInvalid     = "invalid"
	kindUnavailable = "unavailable"
)

// storeErrorKinds lists what errorKind returns.
var storeErrorKinds = []string{kindDown, kindTimeout, kindCanceled, kindInvalid, kindUnavailable}

// errorKind classifies a store error for the store_errors_total label.
func errorKind(err error) string {
	switch {
	case errors.Is(err, sluice.ErrStoreDown):
		return kindDown
	case errors.Is(err, context.DeadlineExceeded):
		return kindTimeout
	case errors.Is(err, context.Canceled):
		return kindCanceled
	case errors.Is(err, rate.ErrCostExceedsCapacity), errors.Is(err, rate.ErrNegativeCost), errors.Is(err, rate.ErrSyntax):
		return kindInvalid
	}
	return kindUnavailable
}
