package server

import (
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/internal/decisionmetrics"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// Metrics are the Prometheus collectors of a running server. Labels carry
// policy, domain and result names from the configuration, never a client's
// key, so their cardinality is bounded by the config.
type Metrics struct {
	// The decision counters, defined once for sluice serve and package
	// metrics (decisionmetrics): decisions, fallbacks, shed.
	dec             decisionmetrics.Counters
	requests        *prometheus.CounterVec
	storeLatency    *prometheus.HistogramVec
	storeErrors     *prometheus.CounterVec
	reloads         *prometheus.CounterVec
	lastReload      prometheus.Gauge
	reloadOK        prometheus.Gauge
	restartRequired prometheus.Gauge
	now             func() time.Time

	// series is held to count a decision (read) and to drop the series a
	// reload retires (write), so that no decision brings back a series
	// the reload dropped: see decided and retire.
	series sync.RWMutex
}

// Decision results, as the "result" label spells them: what the policy
// did to the request, whoever decided it (the store, or on_store_error
// when the store could not: sluice_fallback_decisions_total counts
// those apart). They are policy's, which defines them (see
// policy.Event.Result), so that package metrics counts a library's
// decisions as sluice serve counts its own.
const (
	ResultAllowed       = policy.ResultAllowed
	ResultRefused       = policy.ResultRefused       // 429, by the store or the local one of on_store_error: local
	ResultShadowRefused = policy.ResultShadowRefused // a shadow policy would have refused
	ResultThrottled     = policy.ResultThrottled     // admitted after a wait
	ResultUnavailable   = policy.ResultUnavailable   // 503: the store failed under on_store_error: closed
)

// rlsResults are the results an Envoy domain's decisions are counted
// under (a call the store cannot decide fails whole, and is counted in
// sluice_requests_total{listener="grpc",code="503"}); a policy's are
// policy.Policy.Results.
var rlsResults = []string{ResultAllowed, ResultRefused, ResultShadowRefused}

// The listeners sluice_requests_total counts the requests of, as the log
// names them.
const (
	listenerProxy = "proxy"
	listenerCheck = "check"
	listenerGRPC  = "grpc"
)

// The codes of sluice_requests_total: codeAllowed for a request the
// policies let through (to the proxy's upstream, which answered it), the
// status sluice answered otherwise (gRPC's as their HTTP kin), codeOther
// for any other status, or none (a handler that panicked before it
// answered): the label stays bounded whatever a handler or the upstream
// writes.
const (
	codeAllowed     = "allowed"
	codeBadRequest  = "400" // a request sluice will not decide, or the proxy's whose body could not be read
	codeMethod      = "405" // the proxy: CONNECT, PRI
	codeBodyTimeout = "408" // a body that stopped arriving
	codeRefused     = "429"
	codeBadGateway  = "502" // the proxy: the upstream could not be reached, or failed before it answered
	codeUnavail     = "503" // shed, the store failed under on_store_error: closed, or the request ended first
	codeGatewayWait = "504" // the proxy: the upstream did not answer within Options.UpstreamTimeout
	codeOther       = "other"
)

// listenerCodes lists the codes each listener answers with, whose series
// start at 0 once it is open.
var listenerCodes = map[string][]string{
	listenerProxy: {codeAllowed, codeBadRequest, codeMethod, codeBodyTimeout, codeRefused, codeBadGateway, codeUnavail, codeGatewayWait},
	listenerCheck: {codeAllowed, codeBadRequest, codeBodyTimeout, codeRefused, codeUnavail},
	listenerGRPC:  {codeAllowed, codeBadRequest, codeRefused, codeUnavail},
}

// httpCode returns the code of sluice_requests_total for a request sluice
// answered itself with status (200 for a check it passed).
func httpCode(status int) string {
	switch status {
	case http.StatusOK:
		return codeAllowed
	case http.StatusBadRequest:
		return codeBadRequest
	case http.StatusMethodNotAllowed:
		return codeMethod
	case http.StatusRequestTimeout:
		return codeBodyTimeout
	case http.StatusTooManyRequests:
		return codeRefused
	case http.StatusBadGateway:
		return codeBadGateway
	case http.StatusServiceUnavailable:
		return codeUnavail
	case http.StatusGatewayTimeout:
		return codeGatewayWait
	}
	return codeOther
}

// NewMetrics registers sluice's collectors with reg. now is the clock of
// the reload timestamp (nil → time.Now).
func NewMetrics(reg prometheus.Registerer, now func() time.Time) *Metrics {
	if now == nil {
		now = time.Now
	}
	m := &Metrics{
		dec: decisionmetrics.New(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "requests_total",
			Help: "Requests (Envoy's calls) by listener (proxy, check, grpc) and what sluice answered: allowed (let through, and answered by the upstream, a response it broke off midway included), or sluice's own status: 429, 503, 400, 405, 408, and the proxy's 502 (upstream unreachable, or failed before its status) and 504 (past --upstream-timeout) (gRPC's as their HTTP kin; a call gRPC refused before it was decided, over 256 KiB or not UTF-8, is a 400). One per request that reaches sluice: not those Go's HTTP server answers itself before (431 for a header over --max-header-bytes, 400 for a malformed request line or header), which only the gateway or client sees.",
		}, []string{"listener", "code"}),
		// From a decision in memory (about 100ns) to a call that waits
		// for a hung Redis about twice store.timeout (50ms by default,
		// more where Redis is far): each lands in a bucket of its own
		// size, where a quantile means something.
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Name: "store_latency_seconds",
			Help: "Time the store took to decide one request: in memory, or a call sent to Redis (not the deny cache's refusals, nor the calls not sent while Redis is down).",
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
		// A store is made once: a reload that changes its section loads
		// the rest, and this says, until a restart, that the store
		// serving is not the one the files describe.
		restartRequired: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sluice", Name: "config_restart_required",
			Help: "1 if the configuration in force has a store section other than the store in use, which only a restart applies; 0 otherwise.",
		}),
		now: now,
	}
	// Every store error kind and priority has a series from the start
	// (the priorities' from decisionmetrics.New),
	// and so do each policy's results (see declare) and each listener's
	// codes (see listening), so that an alert on increase() sees the
	// first failure, which would otherwise only create the series.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	for _, kind := range storeErrorKinds {
		m.storeErrors.WithLabelValues(kind)
	}
	reg.MustRegister(m.dec.Decisions, m.dec.Fallbacks, m.requests, m.storeLatency, m.storeErrors, m.reloads, m.lastReload, m.reloadOK, m.restartRequired, m.dec.Shed)
	return m
}

// Decision counts one decision of policy.
func (m *Metrics) Decision(policy, result string) {
	m.dec.Decisions.WithLabelValues(policy, result).Inc()
}

// Fallback counts a decision of policy that its on_store_error made, the
// store having failed.
func (m *Metrics) Fallback(policy string) { m.dec.Fallbacks.WithLabelValues(policy).Inc() }

// decided counts a decision of policy name under result (and, if
// fellBack, as on_store_error's), made by a request of generation g. A
// request still in flight on a generation a reload replaced is counted
// only where the generation in force (inForce, read here) has the same
// series: its policy still served, under a result its kind still has, as
// a shadow policy made enforcing has no shadow_refused. Otherwise it
// would bring back a series the reload dropped, flat from then on.
//
// The read lock makes the check and the count one step as retire sees
// them: a count either ends before retire drops what no longer applies,
// or sees g retired, and the generation in force that retire's swap put
// in (or a later one, whose own retire comes after).
func (m *Metrics) decided(g *generation, inForce *atomic.Pointer[generation], name, result string, fellBack bool) {
	m.series.RLock()
	defer m.series.RUnlock()
	if g.retired.Load() && !slices.Contains(inForce.Load().results(name), result) {
		return
	}
	m.Decision(name, result)
	if fellBack {
		m.Fallback(name)
	}
}

// decidedRLS counts a decision of Envoy's service under name
// (rls:DOMAIN) and result, if the generation in force (inForce, read
// here) still serves the domain: a call in flight across a reload that
// removed it would otherwise bring back the series the reload dropped. A
// call is decided under the domain the generation it began on serves, so
// this is decided's test for a retired generation, read under the same
// lock.
func (m *Metrics) decidedRLS(inForce *atomic.Pointer[generation], name, result string) {
	m.series.RLock()
	defer m.series.RUnlock()
	if !slices.Contains(inForce.Load().results(name), result) {
		return
	}
	m.Decision(name, result)
}

// request counts a request of listener, answered as code.
func (m *Metrics) request(listener, code string) { m.requests.WithLabelValues(listener, code).Inc() }

// listening creates, at 0, the request series of listener's codes.
func (m *Metrics) listening(listener string) {
	for _, code := range listenerCodes[listener] {
		m.requests.WithLabelValues(listener, code)
	}
}

// declare creates, at 0, the decision series of every result of g's
// policies and Envoy domains, and the policies' fallback series, as g is
// put in force: a series born with the first refusal is one that
// increase() reads as no refusal.
func (m *Metrics) declare(g *generation) {
	if g.set != nil {
		for _, p := range g.set.Policies() {
			m.dec.Declare(p)
		}
	}
	if g.rls != nil {
		for _, d := range g.rls.Domains() {
			for _, r := range rlsResults {
				m.dec.Decisions.WithLabelValues(rlsName(d), r)
			}
		}
	}
}

// results returns the results the decisions of name, a policy or an
// Envoy domain (rls:DOMAIN), are counted under in g; nil if g serves no
// such name.
func (g *generation) results(name string) []string {
	if g == nil {
		return nil
	}
	if isRLSName(name) {
		if g.rls.HasDomain(name[len(rlsName("")):]) {
			return rlsResults
		}
		return nil
	}
	if g.set == nil {
		return nil
	}
	if p := g.set.Policy(name); p != nil {
		return p.Results()
	}
	return nil
}

// retire marks old, which the reload to g replaced, retired, and drops
// the decision series of old that g does not have: every series of a
// policy or Envoy domain g no longer serves, and the results a policy
// switched between shadow and enforcing no longer has (g's new ones were
// declared at 0 before it served). Left, each would stay, flat, for the
// life of the process. It holds the lock decided reads under.
func (m *Metrics) retire(old, g *generation) {
	m.series.Lock()
	defer m.series.Unlock()
	old.retired.Store(true)
	for _, name := range old.names() {
		kept := g.results(name)
		if kept == nil {
			m.dec.Decisions.DeletePartialMatch(prometheus.Labels{"policy": name})
			m.dec.Fallbacks.DeleteLabelValues(name)
			continue
		}
		// The results the old generation declared (see results), so that
		// a result package policy adds is dropped with the others.
		for _, r := range old.results(name) {
			if !slices.Contains(kept, r) {
				m.dec.Decisions.DeleteLabelValues(name, r)
			}
		}
	}
}

// restart records whether the store in use differs from the one the
// configuration in force describes.
func (m *Metrics) restart(required bool) {
	if required {
		m.restartRequired.Set(1)
	} else {
		m.restartRequired.Set(0)
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
			Help: "Requests across slots that passed the check and were refused at the commit, another caller having spent in between; the slots committed before are given back what the request took (sluice_redis_cross_slot_refunds_total).",
		}, func() float64 { return float64(stats().CrossSlotRaces) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "sluice", Name: "redis_cross_slot_refunds_total",
			Help: "Raced requests across slots whose committed slots were all given back what the request took.",
		}, func() float64 { return float64(stats().CrossSlotRefunds) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "sluice", Name: "redis_cross_slot_refund_errors_total",
			Help: "Raced requests across slots whose refund failed (Redis unreachable, the deadline passed): their units stay taken.",
		}, func() float64 { return float64(stats().CrossSlotRefundErrors) }),
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
func (m *Metrics) Shed(priority string) { m.dec.Shed.WithLabelValues(priority).Inc() }

// registerRefusedRatio adds sluice_refused_ratio, read at each scrape
// from the live counts the dashboard keeps of every decision: the share
// of the last minute's decisions that refused, by a limit or by a store
// error failing closed. A request is one decision per policy it is
// decided against (per descriptor, for Envoy's service), so where every
// request meets one policy this is the share of requests refused, and
// where some meet several it is less. It is the dashboard's number, kept
// for the alerts written on it: a ratio of one instance's last minute,
// which no sum across instances makes whole and which reads 0 with no
// traffic. The share of requests answered 429 comes from
// sluice_requests_total.
func registerRefusedRatio(reg prometheus.Registerer, d *dashboard.Dashboard) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Name: "refused_ratio",
		Help: "Deprecated: use sluice_requests_total. This instance's share of decisions over the last minute (one per policy a request met, per descriptor for Envoy) that refused, with 429 or with 503 under on_store_error: closed; 0 when there were none.",
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
