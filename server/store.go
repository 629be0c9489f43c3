package server

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// readyProbe returns the decision readiness asks a Redis for: one unit
// of a limit no probe reaches, whose state is fresh again within a
// microsecond, on a key under prefix, as the keys of the decisions it
// stands for (so that an ACL's key pattern lets it through as it lets
// them), and no policy's or Envoy descriptor's (their keys go on with a
// name, which holds no '#').
func readyProbe(prefix string) rate.Request {
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
// Cluster or a Sentinel-managed master).
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
	// The store reads nothing through the client-side cache: off, the
	// client sends no CLIENT TRACKING, which an ACL need not allow.
	co.DisableCache = true
	client, err := rueidis.NewClient(co)
	if err != nil {
		return nil, fmt.Errorf("store: connect to Redis (%s): %w", where, err)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultStoreTimeout
	}
	// The store bounds each script call with the timeout: one timer per
	// call, where a bound per decision would cost one per request.
	rs := redis.New(client, redis.Options{DisableDenyCache: c.NoDenyCache, Clock: s.clock, CallTimeout: timeout})
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
	h.store = newInstrumented(h.breaker, "redis", s.m)
	h.client, h.redis = client, rs
	// The store first: on a cluster it reads the slots in the background.
	h.close = sync.OnceFunc(func() { rs.Close(); client.Close() })
	s.log.Info("store: Redis", "at", where, "timeout", timeout.String(), "deny_cache", !c.NoDenyCache)
	return h, nil
}

// ping reports whether the store answers: always for memory; for one
// Redis (or a Sentinel's master), whether it runs a decision, a script
// call that writes, on a key of its own under prefix (see readyProbe): a Redis that answers PING may
// still refuse every script (an ACL without the keys' pattern, out of
// memory, a replica). On a Redis Cluster every node is sent a PING, and
// the store answers if any node does: a PING left to the client goes to a
// node of its choice, which would make readiness a toss while one master
// is down. One dead master sends its own keys to on_store_error on every
// instance alike, and taking them all out of rotation would only make
// that the whole service's outage; no node answering is this instance's
// own.
func (h *storeHandle) ping(ctx context.Context, prefix string) error {
	if h.client == nil {
		return nil
	}
	if h.client.Mode() != rueidis.ClientModeCluster {
		_, err := h.redis.Decide(ctx, readyProbe(prefix))
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

// instrumented counts the latency and errors of each call to a store.
type instrumented struct {
	inner   sluice.Store
	m       *Metrics
	latency prometheus.Observer // the store's series, looked up once
}

func newInstrumented(inner sluice.Store, name string, m *Metrics) *instrumented {
	return &instrumented{inner: inner, m: m, latency: m.storeLatency.WithLabelValues(name)}
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
	s.latency.Observe(time.Since(start).Seconds())
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
