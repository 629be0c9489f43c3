package server

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
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
	cfg   policy.StoreConfig
	store sluice.Store // instrumented
	// conn is the connection to Redis: nil for the memory store, and,
	// when Redis did not answer at start, until it does (connectLater
	// stores it then; readiness reads it meanwhile).
	conn atomic.Pointer[redisConn]
	// late stands in for the Redis store when Redis did not answer at
	// start (nil otherwise): it fails every call until connectLater
	// swaps the store in.
	late *lateRedis
	// breaker stands between the server and Redis (nil for the memory
	// store): while Redis is known down, calls fail at once with
	// sluice.ErrStoreDown instead of waiting for the timeout, and each
	// policy's on_store_error applies.
	breaker *sluice.Fallback
	close   func()
}

// redisConn is a connection to Redis and the store over it.
type redisConn struct {
	client rueidis.Client
	rs     *redis.Store
}

// openStore makes the store c describes: memory, or Redis (one server, a
// Cluster or a Sentinel-managed master). It reads c.TLS's files, and
// fails with ErrConfig when one does not load.
//
// A Redis that is not there yet (see unreachable) does not stop the
// start: the server serves by each policy's on_store_error, as through
// any outage, while connectLater tries again in the background. A Redis
// that is there and refuses the connection (a password, TLS) stops it
// with its error, as does a configuration that does not load.
func (s *Server) openStore(ctx context.Context, c policy.StoreConfig) (*storeHandle, error) {
	h := &storeHandle{cfg: c, close: func() {}}
	// The local store decides while Redis is down, for the policies whose
	// on_store_error is local.
	s.local = memory.New(memory.Options{Clock: s.clock, MaxKeys: c.MaxKeys})
	if !c.IsRedis() {
		ms := memory.New(memory.Options{Clock: s.clock, MaxKeys: c.MaxKeys})
		registerMemory(s.reg, "memory", ms.Stats)
		h.store = newInstrumented(ms, "memory", s.m)
		h.close = s.watchMemory(&memoryWatch{st: ms, name: "memory", every: memoryWatchEvery})
		s.log.Info("store: in memory (counters are this process's own)", "max_keys", ms.Stats().MaxKeys)
		return h, nil
	}
	co, where, err := redisClientOption(c, func(base *tls.Config) (*tls.Config, error) { return storeTLS(c.TLS, base, s.log) })
	if err != nil {
		return nil, err
	}
	client, err := dialRedis(ctx, co)
	if errors.Is(err, ErrStopped) {
		return nil, err
	}
	if err != nil && !unreachable(err) {
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
	newStore := func(client rueidis.Client) *redis.Store {
		return redis.New(client, redis.Options{
			DisableDenyCache: c.NoDenyCache, Clock: s.clock, CallTimeout: timeout,
			Latency: func(d time.Duration) { latency.Observe(d.Seconds()) },
		})
	}
	info := []any{"at", where, "tls", tlsMode(co.TLSConfig), "timeout", timeout.String(), "deny_cache", !c.NoDenyCache}
	// The breaker's primary: the store, or while Redis has not answered,
	// what stands in for it. Its discovery of the store's optional
	// interfaces is by type assertion, once (see lateRedis).
	var primary sluice.Store
	if client != nil {
		rs := newStore(client)
		h.conn.Store(&redisConn{client: client, rs: rs})
		RegisterRedis(s.reg, rs.Stats)
		primary = rs
		// The store first: on a cluster it reads the slots in the background.
		h.close = sync.OnceFunc(func() { rs.Close(); client.Close() })
		s.log.Info("store: Redis", info...)
	} else {
		s.log.Warn("store: Redis unreachable at start; serving by on_store_error until it answers", "at", where, "error", whyUnreachable(err, &co))
		h.late = &lateRedis{}
		h.late.failed(whyUnreachable(err, &co))
		RegisterRedis(s.reg, h.late.Stats)
		primary = h.late
		ctx, cancel := context.WithCancel(context.Background())
		go s.connectLater(ctx, h, co, newStore, info)
		h.close = sync.OnceFunc(func() {
			cancel()
			// After the cancel, under the lock: connectLater has stored
			// its connection, which is closed here, or will close it
			// itself.
			h.late.mu.Lock()
			conn := h.conn.Load()
			h.late.mu.Unlock()
			if conn != nil {
				conn.rs.Close()
				conn.client.Close()
			}
		})
	}
	registerMemory(s.reg, "local", s.local.Stats)
	// The local store decides only while Redis is down: what an outage
	// left in it is reclaimed as it turns fresh, not at the next outage.
	stopWatch := s.watchMemory(&memoryWatch{st: s.local, name: "local", sweep: true, every: memoryWatchEvery})
	closeRedis := h.close
	h.close = sync.OnceFunc(func() { stopWatch(); closeRedis() })
	// The breaker counts the store's timeouts and errors as failures and
	// probes Redis with backoff while it is down; the instrumentation
	// outside it counts what requests see, ErrStoreDown included. A
	// request whose own deadline comes before the timeout (Envoy's do)
	// ends its call itself: it counts too once Redis has completed no call
	// for longer than the timeout, so that a hung Redis is declared down
	// as a failing one is, while a loaded one that still answers is not.
	h.breaker = sluice.NewFallback(primary, sluice.FallbackOptions{Mode: sluice.FailError, Timeout: -1, MaxSilence: timeout, Logger: s.log.With("at", where), Clock: s.clock})
	registerBreaker(s.reg, h.breaker.Stats)
	h.store = newInstrumented(h.breaker, "", s.m)
	if h.late != nil {
		// Redis is down from the start: one call, which fails at once,
		// tells the breaker so, and sluice_redis_down reads 1 before any
		// request comes. From then on it probes as in any outage.
		_, _ = h.breaker.Decide(context.Background(), readyProbe(nil))
	}
	return h, nil
}

// dialRedis connects a client with co, as rueidis.NewClient does, or
// returns an error wrapping ErrStopped as soon as ctx ends: NewClient
// takes no context, and a Redis that accepts the connection and answers
// nothing would hold a signal at start for its whole dial timeout. A
// client that connects after ctx ended is closed.
func dialRedis(ctx context.Context, co rueidis.ClientOption) (rueidis.Client, error) {
	type dialed struct {
		client rueidis.Client
		err    error
	}
	done := make(chan dialed, 1)
	go func() {
		c, err := rueidis.NewClient(co)
		done <- dialed{c, err}
	}()
	select {
	case d := <-done:
		return d.client, d.err
	case <-ctx.Done():
		go func() {
			if d := <-done; d.client != nil {
				d.client.Close()
			}
		}()
		return nil, stopped(ctx)
	}
}

// redisClientOption returns the options of the Redis client for c, a
// Redis store, and where it points, for logs and errors (no password).
// It does no I/O of its own, so that what a store section turns into can
// be checked without a Redis or files: withTLS, called only when c.TLS
// is on, makes the TLS configuration from the one c's URL sets (nil
// without rediss://) and is where the files are read (storeTLS). Its
// error, and a URL that does not parse, are ErrConfig.
func redisClientOption(c policy.StoreConfig, withTLS func(base *tls.Config) (*tls.Config, error)) (co rueidis.ClientOption, where string, err error) {
	switch {
	case c.Redis != "":
		if co, err = rueidis.ParseURL(c.Redis); err != nil {
			return rueidis.ClientOption{}, "", fmt.Errorf("%w: store.redis: %w", ErrConfig, urlProblem(err))
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
			return rueidis.ClientOption{}, "", fmt.Errorf("%w: store.tls: a unix:// socket has no TLS; give Redis's TCP address (rediss://host:port) or drop tls", ErrConfig)
		}
		tc, err := withTLS(co.TLSConfig)
		if err != nil {
			return rueidis.ClientOption{}, "", fmt.Errorf("%w: %w", ErrConfig, err)
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
	return co, where, nil
}

// Bounds of connectLater's backoff: the first attempt after the one at
// start comes after minConnectWait, each later one twice as long after
// the one before, up to maxConnectWait, as the breaker's probes do.
const (
	minConnectWait = 100 * time.Millisecond
	maxConnectWait = 5 * time.Second
)

// connectLater connects to Redis with co, Redis not having answered at
// start, with backoff, until it answers or ctx ends (h.close); then it
// makes the store over the connection with newStore, as openStore does, and
// swaps it into h.late, where calls find it from then on. The breaker,
// down since the start, finds Redis back at its next probe, as after any
// outage. A failure that says Redis is there but refuses (a password
// changed since, or a TLS Redis) is logged once: it is retried all the
// same, as the fix may be Redis's.
//
// The waits are on the machine's clock, not the server's: they pace real
// connection attempts, and a test's clock, which moves at each Sleep,
// would have them follow one another at once. info is what openStore
// logs of the store, where first.
func (s *Server) connectLater(ctx context.Context, h *storeHandle, co rueidis.ClientOption, newStore func(rueidis.Client) *redis.Store, info []any) {
	where := info[1]
	start := time.Now()
	wait, refused := minConnectWait, false
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		client, err := rueidis.NewClient(co)
		if err != nil {
			h.late.failed(whyUnreachable(err, &co))
			wait = min(2*wait, maxConnectWait)
			there := !unreachable(err)
			switch {
			case there && !refused:
				s.log.Error("store: Redis refused the connection; still serving by on_store_error, and trying again",
					"at", where, "error", fmt.Sprintf("%v%s", err, tlsHint(co.TLSConfig, err)))
			case !there:
				s.log.Debug("store: Redis still unreachable", "at", where, "error", err, "next_in", wait.String())
			}
			refused = there
			t.Reset(wait)
			continue
		}
		rs := newStore(client)
		h.late.mu.Lock()
		if ctx.Err() != nil { // h.close ran while we connected
			h.late.mu.Unlock()
			rs.Close()
			client.Close()
			return
		}
		h.conn.Store(&redisConn{client: client, rs: rs})
		h.late.rs.Store(rs)
		h.late.mu.Unlock()
		s.log.Info("store: connected to Redis; the breaker brings it back at its next probe",
			append(info, "after", time.Since(start).Round(time.Millisecond).String())...)
		return
	}
}

// unreachable reports whether err, the failure of a connection to Redis,
// says that Redis is not there (yet), rather than that it is there and
// refuses the connection: the server then starts without it (see
// connectLater), where a refusal stops it as a configuration error does.
//
// Not there:
//   - a connect that failed for want of a server or a way to it:
//     refused, no route to the host or network, the host or network
//     down, no local address to use, or no socket file (a unix:// socket
//     appears when Redis starts);
//   - a host name that did not resolve: in Kubernetes, a headless
//     service's name has no address until its pod is ready, so a name
//     misspelt looks the same, and is told apart by its error in the
//     log and in /readyz;
//   - a timeout: the connect took too long (no answer from the address
//     at all), or Redis took the connection and answered nothing within
//     the dial timeout: hung, or loading its data set (the client waits
//     out LOADING). A TLS client facing a Redis without TLS also waits
//     that long, and is indistinguishable from these.
//
// There: everything else. A Redis that answered with an error (WRONGPASS,
// NOAUTH, a database out of range, a Sentinel that knows no such master
// or is no Sentinel), a TLS handshake that failed (a certificate that
// does not verify, a client certificate missing or refused), a
// connection closed or reset once made (EOF: most often a Redis with TLS
// dialled without it).
func unreachable(err error) bool {
	if errors.As(err, new(*net.DNSError)) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		for _, no := range unreachableErrnos {
			if errors.Is(op.Err, no) {
				return true
			}
		}
	}
	var ne net.Error // context.DeadlineExceeded is one too
	return errors.As(err, &ne) && ne.Timeout()
}

// memoryWatchEvery is how often a memory store's evictions are logged,
// and the local store of a server on Redis swept (memory.Store.Sweep).
const memoryWatchEvery = time.Minute

// memoryWatch is a memory store watched every period: its evictions
// logged, and, for a store that may see no decisions for long, its fresh
// keys reclaimed.
type memoryWatch struct {
	st      *memory.Store
	name    string // the store's label: memory, local
	sweep   bool
	every   time.Duration
	evicted uint64 // Stats.Evictions at the last look
}

// watchMemory looks at w every w.every, on the wall clock (the store
// reads its own), until the function it returns is called.
func (s *Server) watchMemory(w *memoryWatch) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	go every(ctx, w.every, func() { s.watchOnce(w) })
	return cancel
}

// watchOnce sweeps w's store if it should, and logs the keys it evicted
// since the last look: each was a count forgotten, its client starting
// afresh, which sluice_memory_evictions_total alone showed.
func (s *Server) watchOnce(w *memoryWatch) {
	if w.sweep {
		w.st.Sweep()
	}
	st := w.st.Stats()
	if n := st.Evictions - w.evicted; n > 0 {
		s.log.Warn("store: keys evicted at max_keys, their counts forgotten (their clients start afresh); raise store.max_keys or --max-keys",
			"store", w.name, "evicted", n, "max_keys", st.MaxKeys, "in", w.every.String())
	}
	w.evicted = st.Evictions
}

// whyUnreachable returns err, an error unreachable reports, said so that
// an operator reads what failed: a timeout is the client's connect
// timeout, the dial and Redis's first answer, which the client reports
// only as a context's deadline.
func whyUnreachable(err error, co *rueidis.ClientOption) error {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("no answer within %v of connecting (the connect timeout, dial_timeout in the URL): %w",
			cmp.Or(co.Dialer.Timeout, rueidis.DefaultDialTimeout), err)
	}
	return err
}

// lateRedis is the breaker's primary when Redis did not answer at start:
// it fails every call at once, with the last attempt's error, until
// connectLater swaps the Redis store in (rs), and from then on it is that
// store, for one atomic load per call (and per key, for Partition).
//
// sluice.Fallback discovers what its primary can do by type assertion,
// once when it is made (Partition and the rest: a Redis Cluster's
// masters, each with a breaker of its own) or at each call
// (DecideCached: the deny cache). So lateRedis has every method of the
// store that Fallback may look for (TestLateRedisMethods keeps them in
// step), each the store's once it is in, and before that the answer of a
// store that knows nothing: one partition, 0, which holds every key, and
// no refusal in memory.
type lateRedis struct {
	rs atomic.Pointer[redis.Store]
	// mu guards err, and orders connectLater's swap against h.close.
	mu  sync.Mutex
	err error // the last attempt's failure
}

// errNotConnected is the error of a call while Redis has not answered
// since the start.
var errNotConnected = errors.New("not connected to Redis since the start")

// failed records the failure of an attempt to connect.
func (l *lateRedis) failed(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

// notConnected returns the error of a call while Redis has not answered.
func (l *lateRedis) notConnected() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Errorf("%w (last attempt: %v)", errNotConnected, l.err)
}

func (l *lateRedis) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	if rs := l.rs.Load(); rs != nil {
		return rs.Decide(ctx, r)
	}
	return rate.Decision{}, l.notConnected()
}

func (l *lateRedis) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	if rs := l.rs.Load(); rs != nil {
		return rs.DecideAll(ctx, reqs, out)
	}
	return rate.Decision{}, l.notConnected()
}

// Reset is the store's; before it is in, it fails as a decision does:
// the keys are not forgotten in a Redis not reached yet.
func (l *lateRedis) Reset(ctx context.Context, keys ...string) error {
	if rs := l.rs.Load(); rs != nil {
		return rs.Reset(ctx, keys...)
	}
	return l.notConnected()
}

// DecideCached is the store's; false before it is in.
func (l *lateRedis) DecideCached(reqs []rate.Request, out []rate.Decision) (rate.Decision, bool) {
	if rs := l.rs.Load(); rs != nil {
		return rs.DecideCached(reqs, out)
	}
	return rate.Decision{}, false
}

// Partition is the store's; 0, unknown, before it is in.
func (l *lateRedis) Partition(key string) int {
	if rs := l.rs.Load(); rs != nil {
		return rs.Partition(key)
	}
	return 0
}

// FailedPartition is the store's; 0 before it is in.
func (l *lateRedis) FailedPartition(err error) int {
	if rs := l.rs.Load(); rs != nil {
		return rs.FailedPartition(err)
	}
	return 0
}

// PartitionName is the store's; "" before it is in.
func (l *lateRedis) PartitionName(p int) string {
	if rs := l.rs.Load(); rs != nil {
		return rs.PartitionName(p)
	}
	return ""
}

// PartitionHolds is the store's; before it is in, partition 0 holds every
// key, as in a store that has not read the cluster.
func (l *lateRedis) PartitionHolds(p int) bool {
	if rs := l.rs.Load(); rs != nil {
		return rs.PartitionHolds(p)
	}
	return p == 0
}

// Stats is the store's; zero before it is in.
func (l *lateRedis) Stats() redis.Stats {
	if rs := l.rs.Load(); rs != nil {
		return rs.Stats()
	}
	return redis.Stats{}
}

// storeTLS returns the TLS configuration of the connections to Redis that
// t describes, on top of base: a rediss:// URL's (nil for none), whose
// ServerName, as the Redis client set it from the URL's host, and
// skip_verify it keeps. Without a ServerName, crypto/tls checks the host
// of each address dialled: a Cluster's nodes, a Sentinel's master. TLS
// 1.2 is the minimum; t's CAs replace the system's roots; t's certificate
// is presented to a Redis that asks for one, read again at each
// handshake (see clientCert), and log, if not nil, hears of its renewals.
// storeTLS reads the files now, so that a bad one stops the start: an
// error names the field and the file.
func storeTLS(t policy.StoreTLS, base *tls.Config, log *slog.Logger) (*tls.Config, error) {
	c := &tls.Config{}
	if base != nil {
		c = base.Clone()
	}
	c.MinVersion = max(c.MinVersion, tls.VersionTLS12)
	if t.CA != "" {
		pool, err := t.ReadCA()
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	if t.Cert != "" || t.Key != "" {
		cc := &clientCert{files: t, log: log}
		pair, err := cc.read()
		if err != nil {
			return nil, err
		}
		cc.cur = pair
		c.GetClientCertificate = cc.get
	}
	return c, nil
}

// clientCert is the client certificate that the connections to Redis
// present, read again from store.tls.cert and store.tls.key at each
// handshake. Client certificates issued automatically are short-lived
// and renewed in place (cert-manager rewrites the files; the kubelet
// swaps the symlinked directory of a mounted Secret), under the same
// names, so no reload would see the change: read once, the first
// certificate's expiry would make Redis refuse every new connection
// (after a failover, a Redis restart, a connection lost) until a restart.
// Files that do not load (half-written, a new certificate beside the old
// key, gone) leave the last pair that loaded in force: a certificate
// that may still be valid beats none, and the next handshake tries again.
//
// Every handshake reads the files, rather than only those whose
// modification time or size changed: connections to Redis are pooled and
// long-lived, so handshakes are rare, and reading and parsing two small
// files costs little beside a handshake's round trip and signatures;
// a renewal that keeps the size (one of the same key type often does)
// within the file system's timestamp granularity cannot go unseen.
type clientCert struct {
	files policy.StoreTLS // the files; Cert and Key set
	log   *slog.Logger    // nil: nothing logged

	// mu is held across a read, so that handshakes read in turn and cur
	// is always the pair of the latest read that loaded.
	mu      sync.Mutex
	cur     *tls.Certificate // never nil once storeTLS returns
	failing bool             // the latest read failed, and was logged
}

// read reads and checks the pair; an error names the field and the file.
func (c *clientCert) read() (*tls.Certificate, error) { return c.files.ReadCertificate() }

// get is the connections' tls.Config.GetClientCertificate.
func (c *clientCert) get(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pair, err := c.read()
	if err != nil {
		// Once per run of failures: a secret left broken would otherwise
		// be logged at every connection, and the first says it all.
		if !c.failing && c.log != nil {
			c.log.Warn("store: the client certificate's files do not load; presenting the one loaded before",
				append([]any{"error", err.Error()}, certAttrs(c.cur)...)...)
		}
		c.failing = true
	} else {
		c.failing = false
		renewed := !bytes.Equal(pair.Certificate[0], c.cur.Certificate[0])
		// Taken even when the leaf is the same: its chain may not be.
		c.cur = pair
		if renewed && c.log != nil {
			c.log.Info("store: client certificate renewed", certAttrs(pair)...)
		}
	}
	// As crypto/tls does with Config.Certificates: a certificate Redis
	// says it would not accept (an issuer or a signature it does not
	// list) is not sent, and Redis's refusal names the missing one.
	if cri.SupportsCertificate(c.cur) != nil {
		return new(tls.Certificate), nil
	}
	return c.cur, nil
}

// certAttrs returns what the log says of a client certificate.
func certAttrs(c *tls.Certificate) []any {
	leaf := c.Leaf
	return []any{"cert_subject", leaf.Subject.String(), "cert_serial", leaf.SerialNumber.String(),
		"cert_not_after", leaf.NotAfter.UTC().Format(time.RFC3339)}
}

// presentsCert reports whether connections with c present a client
// certificate: storeTLS's, through the callback, or one fixed in c.
func presentsCert(c *tls.Config) bool {
	return c.GetClientCertificate != nil || len(c.Certificates) > 0
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
	closed := errors.Is(err, errConnReset) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &op) && op.Op == "remote error"
	switch {
	case c == nil:
		return ""
	case errors.As(err, new(x509.UnknownAuthorityError)) && c.RootCAs == nil:
		return " (no CA among the system's roots signed Redis's certificate: name its CA in store.tls.ca)"
	case !presentsCert(c) && closed:
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
	case presentsCert(c):
		return "mutual"
	}
	return "on"
}

// ping reports whether the store answers: always for memory; never for a
// Redis not connected since the start (the error is the last attempt's);
// for one Redis (or a Sentinel's master), whether it runs a decision, a
// script call that writes, on a key of its own under g's prefix (see
// readyProbe): a Redis that answers PING may still refuse every script
// (an ACL without the keys' pattern, out of memory, a replica).
//
// On a Redis Cluster every node is sent a PING, and the store answers if
// any node does: a PING left to the client goes to a node of its choice,
// which would make readiness a toss while one master is down. One dead
// master sends its own keys to on_store_error on every instance alike,
// and taking them all out of rotation would only make that the whole
// service's outage; no node answering is this instance's own. The probe
// decision runs too, on the master that holds its key, and only its
// refusal by an ACL (see aclRefused) makes the store not answer: an ACL
// is the cluster's configuration, the same for every instance, under
// which no decision can succeed on any master. Any other failure of the
// probe (its master down, out of memory, its slot moving) is that
// master's, and the PINGs decide.
func (h *storeHandle) ping(ctx context.Context, g *generation) error {
	conn := h.conn.Load()
	if conn == nil {
		if h.late != nil {
			return h.late.notConnected()
		}
		return nil
	}
	if conn.client.Mode() != rueidis.ClientModeCluster {
		_, err := conn.rs.Decide(ctx, readyProbe(g))
		return err
	}
	// At the same time as the PINGs, so that a probe that waits on its
	// master adds nothing to their wait.
	probe := make(chan error, 1)
	go func() {
		_, err := conn.rs.Decide(ctx, readyProbe(g))
		probe <- err
	}()
	err := pingNodes(ctx, conn.client)
	if perr := <-probe; aclRefused(perr) {
		return fmt.Errorf("the cluster's ACL refuses sluice's script, so every decision fails on every master: %w", perr)
	}
	return err
}

// pingNodes sends every node of the cluster that client knows a PING, and
// returns nil as soon as one answers, or all their errors.
func pingNodes(ctx context.Context, client rueidis.Client) error {
	nodes := client.Nodes()
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

// aclRefused reports whether err, a script call's failure, is an ACL's
// refusal: of the call's keys or of EVALSHA itself (NOPERM), or of a
// command the script runs (Redis's "can't run this command").
func aclRefused(err error) bool {
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "can't run this command")
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
