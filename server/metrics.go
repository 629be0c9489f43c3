package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	inflight     prometheus.Gauge
	shed         *prometheus.CounterVec

	mu     sync.Mutex
	window map[string]*ratioWindow // per policy, the last minute
	now    func() time.Time
}

// Decision results, as the "result" label spells them.
const (
	ResultAllowed       = "allowed"
	ResultRefused       = "refused"
	ResultShadowRefused = "shadow_refused" // a shadow policy would have refused
	ResultThrottled     = "throttled"      // admitted after a wait
	ResultError         = "error"          // the store could not decide
)

// NewMetrics registers sluice's collectors with reg. now is the clock for
// the refused-ratio window and the reload timestamp (nil → time.Now).
func NewMetrics(reg prometheus.Registerer, now func() time.Time) *Metrics {
	if now == nil {
		now = time.Now
	}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "decisions_total",
			Help: "Decisions by policy (for Envoy's service, rls:DOMAIN) and result: allowed, refused, shadow_refused, throttled, error.",
		}, []string{"policy", "result"}),
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Name: "store_latency_seconds",
			Help:    "Time the store took to decide one request.",
			Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
		}, []string{"store"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "store_errors_total",
			Help: "Store calls that could not decide, by kind: timeout, unavailable (Redis unreachable or failing), canceled (the client went away), invalid (a request no limit can pass).",
		}, []string{"kind"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "config_reloads_total",
			Help: "Configuration reloads by result (success, failure).",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sluice", Name: "config_last_reload_success_timestamp_seconds",
			Help: "When the configuration in force was loaded.",
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sluice", Name: "inflight_requests",
			Help: "Requests being served through the proxy or check endpoints.",
		}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "shed_total",
			Help: "Requests shed with 503 by the concurrency limit, by priority class.",
		}, []string{"priority"}),
		window: map[string]*ratioWindow{},
		now:    now,
	}
	// Both results exist from the start, so that an alert on failures
	// has a series to watch before the first one.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	reg.MustRegister(m.decisions, m.storeLatency, m.storeErrors, m.reloads, m.lastReload, m.inflight, m.shed)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Name: "refused_ratio",
		Help: "Share of decisions refused over the last minute, all policies.",
	}, m.refusedRatio))
	return m
}

// Decision counts one decision of policy.
func (m *Metrics) Decision(policy, result string) {
	m.decisions.WithLabelValues(policy, result).Inc()
	m.mu.Lock()
	w := m.window[policy]
	if w == nil {
		w = &ratioWindow{}
		m.window[policy] = w
	}
	w.add(m.now().Unix(), result == ResultRefused)
	m.mu.Unlock()
}

// StoreLatency records how long store took to decide.
func (m *Metrics) StoreLatency(store string, d time.Duration) {
	m.storeLatency.WithLabelValues(store).Observe(d.Seconds())
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
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "sluice", Name: "deny_cache_entries",
			Help: "Refusals the deny cache holds now.",
		}, func() float64 { return float64(stats().DenyCacheEntries) }),
	)
}

// loaded records when the configuration in force was loaded.
func (m *Metrics) loaded() { m.lastReload.Set(float64(m.now().UnixNano()) / 1e9) }

// Shed counts a request shed by the concurrency limit.
func (m *Metrics) Shed(priority string) { m.shed.WithLabelValues(priority).Inc() }

// Inflight returns the gauge of requests in flight.
func (m *Metrics) Inflight() prometheus.Gauge { return m.inflight }

func (m *Metrics) refusedRatio() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().Unix()
	var total, refused uint64
	for _, w := range m.window {
		t, r := w.sum(now)
		total += t
		refused += r
	}
	if total == 0 {
		return 0
	}
	return float64(refused) / float64(total)
}

// ratioWindow counts decisions and refusals per second over the last 60
// seconds, in a ring.
type ratioWindow struct {
	sec     [60]int64
	total   [60]uint64
	refused [60]uint64
}

func (w *ratioWindow) add(now int64, refused bool) {
	i := now % 60
	if w.sec[i] != now {
		w.sec[i], w.total[i], w.refused[i] = now, 0, 0
	}
	w.total[i]++
	if refused {
		w.refused[i]++
	}
}

func (w *ratioWindow) sum(now int64) (total, refused uint64) {
	for i := range w.sec {
		if now-w.sec[i] < 60 {
			total += w.total[i]
			refused += w.refused[i]
		}
	}
	return total, refused
}
