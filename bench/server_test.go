package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/redistest"
)

// serverPolicy is the policy file of the check and proxy benchmarks: one
// policy on every request, keyed by the client address that the trusted
// gateway (the benchmark, on loopback) names in X-Forwarded-For, with a
// limit no key reaches, so that every request takes the allowed path.
const serverPolicy = `
client_ip: {trusted_proxies: [127.0.0.1]}
policies:
  - name: bench
    match: /
    key: ip
    limits: ["1000000/s"]
`

// serverEnvoyConfig is the Envoy benchmark's configuration, in the
// reference service's format: one limit per client address, never
// reached.
const serverEnvoyConfig = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 1000000
`

// upstreamBody is what the proxy benchmarks' upstream answers.
var upstreamBody = []byte(`{"items":[{"id":1,"name":"sluice"}],"next":null}` + "\n")

// redisTimeout bounds each call to Redis in the benchmarks, far above
// the default (50ms): on a small machine
// shared with the load generator, a few calls in a run take longer than
// the default, and would fail the benchmark. How many is reported instead
// (store-over-50ms-ppm).
const redisTimeout = time.Second

// apiWork is how long the upstream of the proxy-10ms benchmarks takes to
// answer, as an API that does some work (a database query, another
// service) would: against an upstream that answers at once, a proxy's
// second hop costs as much as the upstream itself.
const apiWork = 10 * time.Millisecond

// rlsConns is how many gRPC connections the Envoy benchmark's callers
// share, as a few Envoy workers would.
const rlsConns = 4

// BenchmarkServer measures `sluice serve`, the built binary run as a
// process of its own, over loopback, from loadCallers concurrent callers
// in this process sending one request after another (see
// loadgen_test.go), spread over loadKeys client addresses, after a
// warm-up. Each reports decisions (or requests) per second, the 50th and
// 99th percentile latency a caller saw, the CPU time one request cost
// (cpu-µs/op: load generator, server and redis-server together;
// server-cpu-µs/op: sluice serve and redis-server alone, and from it
// server-bound/s, the rate the machine's cores would answer with no load
// generator beside the server) and how many cores other processes kept
// busy meanwhile (others-cores). A
// request not answered as expected (an error, an unexpected status, a
// missing decision) fails the benchmark, and so does a decision count on
// the server's /metrics that does not match the requests sent.
//
//   - check/memory, check/redis: Traefik's forwardAuth check (GET /check
//     with X-Forwarded-* headers) against serverPolicy.
//   - rls/memory, rls/redis: Envoy's ShouldRateLimit over gRPC, from a
//     generated client, against serverEnvoyConfig, the callers sharing
//     rlsConns connections.
//   - rls-lean/...: the same calls and checks, to the same server
//     processes, from a lean HTTP/2 client (h2rls_test.go) standing in
//     for Envoy's C++ one: grpc-go's client spends about as much CPU per
//     call as the server, this one about half as much.
//   - proxy/bare, proxy/reverseproxy, proxy/sluice: one small upstream
//     reached directly, through net/http/httputil.ReverseProxy alone,
//     and through sluice's reverse proxy enforcing serverPolicy. The last
//     two also report their rate as a percentage of the bare one's
//     (pct-of-bare, against the median of the bare runs).
//   - proxy-10ms/...: the same, with an upstream that answers after
//     apiWork without using the CPU, as an API waiting on its database
//     does.
//
// Redis is a local redis-server started for the benchmark, with a store
// timeout of redisTimeout instead of the default 50ms; the share of store
// calls that took longer than 50ms is reported as store-over-50ms-ppm
// (from sluice_store_latency_seconds). The load generator, the server and
// Redis share the machine's cores: on a small machine the load generator
// takes a good part of the CPU the server could use.
//
//	cd bench && go test -run '^$' -bench Server -benchtime 3s -count 3
func BenchmarkServer(b *testing.B) {
	keys := clientAddrs(loadKeys)
	envs := &oneAtATime{}
	b.Cleanup(func() { envs.stop(b) })

	b.Run("check", func(b *testing.B) {
		for _, store := range []string{"memory", "redis"} {
			b.Run(store, func(b *testing.B) {
				env := envs.get(b, "check/"+store, func(b *testing.B, onStop onStop) any {
					s, cpu := startSluice(b, onStop, store, serveFlags{check: true, policy: serverPolicy})
					do := checkCall(s.check, keys)
					warm(b, do)
					return &sluiceEnv{admin: s.admin, do: do, server: cpu}
				}).(*sluiceEnv)
				env.measure(b, "decisions/s", "bench")
			})
		}
	})

	b.Run("rls", func(b *testing.B) { rlsGroup(b, envs, keys, "rls", rlsCall) })
	b.Run("rls-lean", func(b *testing.B) { rlsGroup(b, envs, keys, "rls-lean", rlsLeanCall) })

	b.Run("proxy", func(b *testing.B) { proxyGroup(b, envs, keys, "proxy", 0) })
	b.Run("proxy-10ms", func(b *testing.B) { proxyGroup(b, envs, keys, "proxy-10ms", apiWork) })
}

// proxyGroup runs the proxy benchmarks named under prefix against an
// upstream that answers upstreamBody after work (none if 0), as an API
// that does its work in that time, spending no CPU on it.
func proxyGroup(b *testing.B, envs *oneAtATime, keys []string, prefix string, work time.Duration) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if work > 0 {
			time.Sleep(work)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(upstreamBody)
	}))
	b.Cleanup(upstream.Close)
	var bare runRates // proxy/bare's
	pctOfBare := func(b *testing.B, rate float64) {
		m, ok := bare.median()
		if !ok {
			b.Log(prefix + "/bare did not run: no pct-of-bare")
			return
		}
		b.ReportMetric(100*rate/m, "pct-of-bare")
	}

	b.Run("bare", func(b *testing.B) {
		do := envs.get(b, prefix+"/bare", func(b *testing.B, _ onStop) any {
			do := proxyCall(upstream.URL, keys, false)
			warm(b, do)
			return do
		}).(call)
		r := measure(b, "requests/s", do, nil)
		r.failed(b, prefix+"/bare")
		bare.add(b.N, r.rate())
	})
	b.Run("reverseproxy", func(b *testing.B) {
		do := envs.get(b, prefix+"/reverseproxy", func(b *testing.B, onStop onStop) any {
			u, err := url.Parse(upstream.URL)
			if err != nil {
				b.Fatal(err)
			}
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.Proxy, tr.MaxIdleConns, tr.MaxIdleConnsPerHost = nil, 512, 256 // as sluice's
			rp := httptest.NewServer(&httputil.ReverseProxy{
				Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
				Transport: tr,
			})
			onStop(func(testing.TB) { rp.Close() })
			do := proxyCall(rp.URL, keys, false)
			warm(b, do)
			return do
		}).(call)
		r := measure(b, "requests/s", do, nil)
		r.failed(b, prefix+"/reverseproxy")
		pctOfBare(b, r.rate())
	})
	b.Run("sluice", func(b *testing.B) {
		env := envs.get(b, prefix+"/sluice", func(b *testing.B, onStop onStop) any {
			s, cpu := startSluice(b, onStop, "memory", serveFlags{proxy: true, upstream: upstream.URL, policy: serverPolicy})
			do := proxyCall("http://"+s.proxy, keys, true)
			warm(b, do)
			return &sluiceEnv{admin: s.admin, do: do, server: cpu}
		}).(*sluiceEnv)
		pctOfBare(b, env.measure(b, "requests/s", "bench").rate())
	})
}

// rlsGroup runs the rls benchmarks named under prefix, their callers made
// by newCall: Envoy's reference service, then sluice serve with each
// store, whose rates are also reported against the reference's median
// (x-reference).
func rlsGroup(b *testing.B, envs *oneAtATime, keys []string, prefix string, newCall func(*testing.B, string, []string) (call, func())) {
	var reference runRates // the reference's
	b.Run("reference", func(b *testing.B) {
		env := envs.get(b, prefix+"/reference", func(b *testing.B, onStop onStop) any {
			rs := startRedis(b, onStop)
			p := startReference(b, onStop, serverEnvoyConfig, rs.Addr())
			do, closeConns := newCall(b, p.grpc, keys)
			onStop(func(testing.TB) { closeConns() })
			warm(b, do)
			return &sluiceEnv{do: do, server: serverSide(p.process, rs)}
		}).(*sluiceEnv)
		r := measure(b, "decisions/s", env.do, env.server)
		r.failed(b, prefix+"/reference")
		reference.add(b.N, r.rate())
	})
	for _, store := range []string{"redis", "memory"} {
		b.Run(store, func(b *testing.B) {
			env := envs.get(b, prefix+"/"+store, func(b *testing.B, onStop onStop) any {
				s, cpu := startSluice(b, onStop, store, serveFlags{grpc: true, envoy: serverEnvoyConfig})
				do, closeConns := newCall(b, s.grpc, keys)
				onStop(func(testing.TB) { closeConns() })
				warm(b, do)
				return &sluiceEnv{admin: s.admin, do: do, server: cpu}
			}).(*sluiceEnv)
			r := env.measure(b, "decisions/s", "rls:bench")
			if m, ok := reference.median(); ok {
				b.ReportMetric(r.rate()/m, "x-reference")
			}
		})
	}
}

// sluiceEnv is a running server and the call that loads it.
type sluiceEnv struct {
	admin  string // the admin listener, for /metrics
	do     call
	server func() (serverCPU, error)
}

// measure measures e.do and checks the server's metrics: every request
// was decided once against policy, and allowed, and the store never
// failed. It fails b if a request was not answered as expected, after
// reporting what the metrics say.
func (e *sluiceEnv) measure(b *testing.B, unit, policy string) loadResult {
	before, err := counters(e.admin)
	if err != nil {
		b.Fatal(err)
	}
	r := measure(b, unit, e.do, e.server)
	after, err := counters(e.admin)
	if err != nil {
		b.Fatal(err)
	}
	for series, v := range after {
		delta := v - before[series]
		switch {
		case series == `sluice_decisions_total{policy="`+policy+`",result="allowed"}`:
			if delta != float64(r.n) {
				b.Errorf("%s rose by %v during a run of %d requests", series, delta, r.n)
			}
		case strings.HasPrefix(series, "sluice_decisions_total{"), strings.HasPrefix(series, "sluice_store_errors_total{"):
			if delta != 0 {
				b.Errorf("%s rose by %v: every request should have been allowed by a working store", series, delta)
			}
		}
	}
	if _, ok := after[`sluice_decisions_total{policy="`+policy+`",result="allowed"}`]; !ok && r.n > 0 {
		b.Errorf("no allowed decisions of policy %q on /metrics", policy)
	}
	const calls, fast = `sluice_store_latency_seconds_count{store="redis"}`, `sluice_store_latency_seconds_bucket{store="redis",le="0.05"}`
	if n := after[calls] - before[calls]; n > 0 {
		if _, ok := after[fast]; !ok {
			b.Fatalf("no %s on /metrics", fast)
		}
		slow := n - (after[fast] - before[fast])
		b.ReportMetric(1e6*slow/n, "store-over-50ms-ppm")
	}
	r.failed(b, b.Name())
	return r
}

// oneAtATime keeps one benchmark's environment (a server, its store, its
// clients) across the calls Go makes to the benchmark's function, one per
// b.N it tries and one per -count, so that it is started and warmed up
// once. Starting the next benchmark's environment stops the one before:
// an idle server never competes with the one being measured.
type oneAtATime struct {
	name  string
	env   any
	stops []func(tb testing.TB)
}

// onStop registers what undoes part of an environment: a function given
// the benchmark that is running when it is undone, to report failures to.
type onStop func(func(tb testing.TB))

// get returns the environment called name, making it with newEnv if it
// is not the current one.
func (o *oneAtATime) get(b *testing.B, name string, newEnv func(b *testing.B, onStop onStop) any) any {
	if o.name == name {
		return o.env
	}
	o.stop(b)
	o.env = newEnv(b, func(f func(testing.TB)) { o.stops = append(o.stops, f) })
	o.name = name
	return o.env
}

// stop undoes the current environment, last made first.
func (o *oneAtATime) stop(tb testing.TB) {
	for _, f := range slices.Backward(o.stops) {
		f(tb)
	}
	o.name, o.env, o.stops = "", nil, nil
}

// runRates keeps the rate of every run of one benchmark, for others to be
// reported against their median. Go calls a benchmark's function once per
// b.N it tries: 1, then larger counts until a run lasts -benchtime (a
// single count with -benchtime Nx), and all of that again for each
// -count. Only the last run of each such sequence is a measurement, the
// one Go prints; the shorter ones before it (b.N of 100 or 10,000 here,
// a fraction of a second) only find the count, and must not move the
// median the others are compared with.
type runRates struct {
	n    []int
	rate []float64
}

// add records a run of b.N requests at rate.
func (r *runRates) add(n int, rate float64) {
	r.n, r.rate = append(r.n, n), append(r.rate, rate)
}

// median returns the median rate of the runs Go printed, leaving out a
// b.N of 1, and false if there is none. A run is the last of its
// sequence when no larger b.N follows it.
func (r *runRates) median() (float64, bool) {
	var last []float64
	for i, n := range r.n {
		if n > 1 && (i == len(r.n)-1 || r.n[i+1] <= n) {
			last = append(last, r.rate[i])
		}
	}
	if len(last) == 0 {
		return 0, false
	}
	return median(last), true
}

// median returns the median of xs, which must not be empty: for an even
// count, the mean of the two middle values.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// startRedis starts a redis-server for one benchmark's environment.
func startRedis(b *testing.B, onStop onStop) *redistest.Server {
	b.Helper()
	rs, stop, err := redistest.Main()
	if err != nil {
		b.Fatal(err)
	}
	onStop(func(testing.TB) { stop() })
	pinServer(b, rs.Pid())
	return rs
}

// startSluice starts sluice serve with f, its counters in memory or in
// a redis-server started for it. server returns the CPU time the server
// side has used.
func startSluice(b *testing.B, onStop onStop, store string, f serveFlags) (_ *sluiceProcess, server func() (serverCPU, error)) {
	b.Helper()
	var rs *redistest.Server
	if store == "redis" {
		rs = startRedis(b, onStop)
		f.redis = rs.Addr()
	}
	p := startServe(b, onStop, f)
	return p, serverSide(p.process, rs)
}

// serverSide returns what the server side has spent: the server process
// p, and its redis-server rs if not nil.
func serverSide(p process, rs *redistest.Server) func() (serverCPU, error) {
	return func() (c serverCPU, err error) {
		if c.server, err = p.cpu(); err != nil || rs == nil {
			return c, err
		}
		c.redis, err = redisCPU(rs)
		return c, err
	}
}

// redisCPU returns the CPU time, user and system, a redis-server has
// used, as its INFO says.
func redisCPU(rs *redistest.Server) (time.Duration, error) {
	info, err := rs.Do("INFO", "cpu")
	if err != nil {
		return 0, fmt.Errorf("redis INFO cpu: %w", err)
	}
	var total time.Duration
	found := 0
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			secs, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("redis INFO cpu: %s: %w", line, err)
			}
			total += time.Duration(secs * float64(time.Second))
			found++
		}
	}
	if found != 2 {
		return 0, fmt.Errorf("redis INFO cpu has no used_cpu_sys and used_cpu_user: %q", info)
	}
	return total, nil
}

// checkCall asks the check endpoint at addr about a GET of an API as
// Traefik's forwardAuth does, for the client keys[i mod len(keys)], and
// wants 200 with a RateLimit field.
func checkCall(addr string, keys []string) call {
	client := keepAlive()
	reqs := make([]*http.Request, loadCallers)
	for c := range reqs {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/check", nil)
		if err != nil {
			panic(err) // a constant URL
		}
		req.Header.Set("X-Forwarded-Method", http.MethodGet)
		req.Header.Set("X-Forwarded-Proto", "https")
		req.Header.Set("X-Forwarded-Host", "api.example.com")
		req.Header.Set("X-Forwarded-Uri", "/v1/items?page=2")
		reqs[c] = req
	}
	return func(_ context.Context, c int, i int64) error {
		req := reqs[c] // the caller's own, reused once its answer is read
		req.Header["X-Forwarded-For"] = []string{keys[i%int64(len(keys))]}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode != http.StatusOK:
			return fmt.Errorf("check: %s", resp.Status)
		case resp.Header.Get("RateLimit") == "":
			return errors.New("check: 200 without a RateLimit field: the policy did not decide it (a store error under on_store_error: open?)")
		}
		return err
	}
}

// rlsCall asks Envoy's rate limit service at addr about the client
// keys[i mod len(keys)] over rlsConns connections, and wants OK with the
// configured limit. close closes the connections.
func rlsCall(b *testing.B, addr string, keys []string) (do call, close func()) {
	b.Helper()
	clients := make([]rlsv3.RateLimitServiceClient, rlsConns)
	conns := make([]*grpc.ClientConn, rlsConns)
	for i := range conns {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		conns[i], clients[i] = conn, rlsv3.NewRateLimitServiceClient(conn)
	}
	close = func() {
		for _, c := range conns {
			c.Close()
		}
	}
	reqs := make([]*rlsv3.RateLimitRequest, loadCallers)
	for c := range reqs {
		reqs[c] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address"}}},
		}}
	}
	do = func(ctx context.Context, c int, i int64) error {
		req := reqs[c] // the caller's own: marshalled before the call returns
		req.Descriptors[0].Entries[0].Value = keys[i%int64(len(keys))]
		resp, err := clients[c%rlsConns].ShouldRateLimit(ctx, req)
		if err != nil {
			return err
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 1 || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1000000 {
			return fmt.Errorf("ShouldRateLimit: %v; want OK under the configured limit", resp)
		}
		return nil
	}
	return do, close
}

// proxyCall sends GET /v1/items to base from the client keys[i mod
// len(keys)], named in X-Forwarded-For, and wants 200 with the upstream's
// body, and a RateLimit field when limited is true.
func proxyCall(base string, keys []string, limited bool) call {
	client := keepAlive()
	reqs := make([]*http.Request, loadCallers)
	for c := range reqs {
		req, err := http.NewRequest(http.MethodGet, base+"/v1/items?page=2", nil)
		if err != nil {
			panic(err) // a constant URL
		}
		reqs[c] = req
	}
	bufs := make([]bytes.Buffer, loadCallers)
	return func(_ context.Context, c int, i int64) error {
		req := reqs[c]
		req.Header["X-Forwarded-For"] = []string{keys[i%int64(len(keys))]}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		buf := &bufs[c]
		buf.Reset()
		_, err = buf.ReadFrom(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			return err
		case resp.StatusCode != http.StatusOK:
			return fmt.Errorf("proxy: %s", resp.Status)
		case !bytes.Equal(buf.Bytes(), upstreamBody):
			return fmt.Errorf("proxy: body %q is not the upstream's", buf.Bytes())
		case limited && resp.Header.Get("RateLimit") == "":
			return errors.New("proxy: 200 without a RateLimit field: the policy did not decide it (a store error under on_store_error: open?)")
		}
		return nil
	}
}

// TestRunRatesMedian checks that only the runs Go prints count: the last
// of each sequence of growing b.N.
func TestRunRatesMedian(t *testing.T) {
	type run struct {
		n    int
		rate float64
	}
	for _, tc := range []struct {
		name string
		runs []run
		want float64 // 0: no median
	}{
		{"none", nil, 0},
		{"only b.N of 1", []run{{1, 5}}, 0},
		{"one timed run", []run{{1, 5}, {100, 1}, {10000, 7}, {27000, 10}}, 10},
		{"three timed runs", []run{
			{1, 5}, {100, 1}, {10000, 7}, {27000, 10},
			{1, 5}, {100, 2}, {10000, 8}, {26000, 12},
			{1, 5}, {100, 3}, {10000, 9}, {25000, 11},
		}, 11},
		{"two timed runs: the mean of both", []run{{1, 5}, {100, 1}, {30000, 10}, {1, 5}, {100, 1}, {31000, 12}}, 11},
		{"-benchtime Nx", []run{{1, 5}, {50000, 9}, {1, 5}, {50000, 10}, {1, 5}, {50000, 20}}, 10},
	} {
		var r runRates
		for _, x := range tc.runs {
			r.add(x.n, x.rate)
		}
		got, ok := r.median()
		if ok != (tc.want != 0) || got != tc.want {
			t.Errorf("%s: median %v, %v; want %v", tc.name, got, ok, tc.want)
		}
	}
}
