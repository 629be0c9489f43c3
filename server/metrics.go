package server

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// Metrics are the Prometheus collectors of a running server. Labels carry
// policy, domain and result names from the configuration, never a client's
// key, so their cardinality is bounded by the config.
type Metrics struct {
	decisions    *prometheus.CounterVec
	storeLatency *prometheus.HistogramVec
	storeErrors  *prometheus.CounterVec
	reloads      *prometheus.CounterVec
	lastReload   prometheus.Gauge
	reloadOK     prometheus.Gauge
	shed         *prometheus.CounterVec
	now          func() time.Time
}

// Decision results, as the "result" label spells them.
const (
	ResultAllowed       = "allowed"
	ResultRefused       = "refused"
	ResultShadowRefused = "shadow_refused" // a shadow policy would have refused
	ResultThrottled     = "throttled"      // admitted after a wait
	ResultError         = "error"          // the store could not decide
)

// NewMetrics registers sluice's collectors with reg. now is the clock of
// the reload timestamp (nil → time.Now).
func NewMetrics(reg prometheus.Registerer, now func() time.Time) *Metrics {
	if now == nil {
		now = time.Now
	}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "decisions_total",
			Help: "Decisions by policy (for Envoy's service, rls:DOMAIN) and result: allowed, refused, shadow_refused, throttled, error.",
		}, []string{"policy", "result"}),
		// From a decision in memory (about 100ns) to a call that waits
		// for a hung Redis about twice store.timeout (50ms by default,
		// more where Redis is far): each lands in a bucket of its own
		// size, where a quantile means something.
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Name: "store_latency_seconds",
			Help: "Time the store took to decide one request.",
			Buckets: []float64{
				.0000001, .00000025, .0000005,
				.000001, .0000025, .000005,
				.00001, .000025, .00005,
				.0001, .00025, .0005,
				.001, .0025, .005,
				.01, .025, .05,
				.1, .25, .5,
				1,
			},
		}, []string{"store"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "store_errors_total",
			Help: "Store calls that could not decide, by kind: timeout, unavailable (Redis unreachable or failing), canceled (the client went away), invalid (a request no limit can pass), down (answered at once while the store is known to be down).",
		}, []string{"kind"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "config_reloads_total",
			Help: "Configuration reloads by result (success, failure).",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sluice", Name: "config_last_reload_success_timestamp_seconds",
			Help: "When the configuration in force was loaded.",
		}),
		// A failed reload is counted once, as the files are read again
		// only when they change: this says, for as long as it lasts, that
		// the files on disk are not the ones serving.
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sluice", Name: "config_last_reload_successful",
			Help: "1 if the last load of the configuration files succeeded, 0 if it failed and the previous configuration keeps serving.",
		}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "shed_total",
			Help: "Requests shed with 503 by the concurrency limit, by priority class.",
		}, []string{"priority"}),
		now: now,
	}
	// Every result, store error kind and priority has a series from the
	// start, so that an alert on increase() sees the first failure, which
	// would otherwise only create the series.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	for _, kind := range storeErrorKinds {
		m.storeErrors.WithLabelValues(kind)
	}
	for _, p := range []policy.Priority{policy.Low, policy.Normal, policy.Critical} {
		m.shed.WithLabelValues(p.String())
	}
	reg.MustRegister(m.decisions, m.storeLatency, m.storeErrors, m.reloads, m.lastReload, m.reloadOK, m.shed)
	return m
}

// Decision counts one decision of policy.
func (m *Metrics) Decision(policy, result string) {
	m.decisions.WithLabelValues(policy, result).Inc()
}

// forget drops the decision series of every name in was, policies and
// Envoy domains (rls:DOMAIN), missing from is: a reload that removes or
// renames a policy would otherwise leave its series, flat, for the life
// of the process.
func (m *Metrics) forget(was, is []string) {
	for _, name := range was {
		if !slices.Contains(is, name) {
			m.decisions.DeletePartialMatch(prometheus.Labels{"policy": name})
		}
	}
}

// StoreError counts a store call that could not decide.
func (m *Metrics) StoreError(kind string) { m.storeErrors.WithLabelValues(kind).Inc() }

// Reload counts a configuration reload.
func (m *Metrics) Reload(ok bool) {
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		m.loaded()
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
	m.reloadOK.Set(0)
}

// RegisterRedis adds the counters a Redis store keeps itself (deny-cache
// hits, script calls), read from stats at each scrape.
func RegisterRedis(reg prometheus.Registerer, stats func() redis.Stats) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "sluice", Name: "deny_cache_hits_total",
			Help: "Requests the Redis store refused locally from its deny cache, without a round trip.",
		}, func() float64 { return float64(stats().DenyCacheHits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "sluice", Name: "redis_script_calls_total",
			Help: "Script calls sent to Redis (coalesced decisions share one).",
		}, func() float64 { return float64(stats().ScriptCalls) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "sluice", Name: "redis_retries_total",
			Help: "Script calls sent again because the one before failed on its connection (Redis restarted, a proxy closed it).",
		}, func() float64 { return float64(stats().Retries) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "sluice", Name: "redis_tryagain_total",
			Help: "Script calls Redis Cluster answered TRYAGAIN, their slot moving between masters; rising long after a resharding, a slot was left midway (redis-cli --cluster fix).",
		}, func() float64 { return float64(stats().TryAgain) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "sluice", Name: "redis_cross_slot_total",
			Help: "Requests whose keys span several Redis Cluster slots, decided by a check and a commit per slot.",
		}, func() float64 { return float64(stats().CrossSlot) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "sluice", Name: "redis_cross_slot_races_total",
			Help: "Requests across slots that passed the check and were refused at the commit, another caller having spent in between: each may have consumed from the limits committed before.",
		}, func() float64 { return float64(stats().CrossSlotRaces) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "sluice", Name: "deny_cache_entries",
			Help: "Refusals the deny cache holds now.",
		}, func() float64 { return float64(stats().DenyCacheEntries) }),
	)
}

// registerBreaker adds what the breaker in front of Redis knows: whether
// Redis, or one of its cluster masters, is down now, and how often it has
// gone down, read from stats at each scrape.
func registerBreaker(reg prometheus.Registerer, stats func() sluice.FallbackStats) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "sluice", Name: "redis_down",
			Help: "1 while Redis, or one of its cluster masters, is marked down: calls to it are not sent but for probes, and policies apply on_store_error.",
		}, func() float64 {
			if stats().Down {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "sluice", Name: "redis_outages_total",
			Help: "Times Redis, or one of its cluster masters (each on its own), was marked down.",
		}, func() float64 { return float64(stats().Outages) }),
	)
}

// registerMemory adds the series of a store kept in memory, called name
// ("memory", or "local" for the store on_store_error: local decides in):
// the keys it holds against its bound, and the keys it evicted to stay
// within it, read from stats at each scrape. Evictions that keep rising
// mean max_keys is too small for the keys the traffic brings: an evicted
// key starts again from fresh.
func registerMemory(reg prometheus.Registerer, name string, stats func() memory.Stats) {
	labels := prometheus.Labels{"store": name}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "sluice", Name: "memory_keys", ConstLabels: labels,
			Help: "Keys a store in memory holds now (store: memory, or local for on_store_error: local).",
		}, func() float64 { return float64(stats().Keys) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "sluice", Name: "memory_max_keys", ConstLabels: labels,
			Help: "The most keys a store in memory holds (store.max_keys) before a new key evicts an old one.",
		}, func() float64 { return float64(stats().MaxKeys) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "sluice", Name: "memory_evictions_total", ConstLabels: labels,
			Help: "Keys a store in memory evicted to make room while their state was not fresh; each forgot a count.",
		}, func() float64 { return float64(stats().Evictions) }),
	)
}

// registerInflight adds sluice_inflight_requests, read at each scrape
// from serving, the count of proxy and check requests whose handlers run
// that the shutdown waits on (see Server.counted).
func registerInflight(reg prometheus.Registerer, serving *atomic.Int64) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Name: "inflight_requests",
		Help: "Requests being served through the proxy or check endpoints.",
	}, func() float64 { return float64(serving.Load()) }))
}

// registerTLS adds the TLS series: sluice_tls_reloads_total, and
// sluice_tls_certificate_expiry_timestamp_seconds, read at each scrape
// from the certificate in force (an alert on it catches a rotation that
// stopped happening). It returns the reloads' counter.
func registerTLS(reg prometheus.Registerer, notAfter func() time.Time) *prometheus.CounterVec {
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sluice", Name: "tls_reloads_total",
		Help: "Reloads of the TLS certificate, key and client CA files by result (success, failure).",
	}, []string{"result"})
	reloads.WithLabelValues("success")
	reloads.WithLabelValues("failure")
	reg.MustRegister(reloads, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Name: "tls_certificate_expiry_timestamp_seconds",
		Help: "When the TLS certificate in force expires (its NotAfter).",
	}, func() float64 { return float64(notAfter().Unix()) }))
	return reloads
}

// loaded records when the configuration in force was loaded.
func (m *Metrics) loaded() {
	m.lastReload.Set(float64(m.now().UnixNano()) / 1e9)
	m.reloadOK.Set(1)
}

// Shed counts a request shed by the concurrency limit.
func (m *Metrics) Shed(priority string) { m.shed.WithLabelValues(priority).Inc() }

// registerRefusedRatio adds sluice_refused_ratio, read at each scrape
// from the live counts the dashboard keeps of every decision: the share
// of the last minute's decisions that refused, by a limit or by a store
// error failing closed. A request is one decision per policy it is
// decided against (per descriptor, for Envoy's service), so where every
// request meets one policy this is the share of requests refused, and
// where some meet several it is less.
func registerRefusedRatio(reg prometheus.Registerer, d *dashboard.Dashboard) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Name: "refused_ratio",
		Help: "Share of decisions that refused over the last minute, all policies (one decision per policy a request is decided against).",
	}, func() float64 {
		var passed, refused int64
		for _, p := range d.Live(60).Policies {
			passed += p.Passed
			refused += p.Refused
		}
		if refused == 0 {
			return 0
		}
		return float64(refused) / float64(passed+refused)
	}))
}
