package bench

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The load generator of the server benchmarks (server_test.go) is closed
// loop: loadCallers goroutines each send one request, wait for its
// answer, and send the next at once, so the rate is what the server can
// answer at that concurrency. It runs in the benchmark's own process,
// on the same cores as the server it measures (a process of its own).
const (
	// loadCallers is how many requests are in flight at once.
	loadCallers = 64
	// loadKeys is how many distinct keys (client addresses) the requests
	// are spread over.
	loadKeys = 100_000
	// loadWarmup is how long each benchmark sends requests before the
	// first measurement: connections are opened, the store holds most of
	// the keys, and the runtime has sized its heap.
	loadWarmup = time.Second
	// loadTimeout bounds one measured run: a server that stops answering
	// fails the benchmark instead of hanging it.
	loadTimeout = 2 * time.Minute
)

// call sends request i from caller c (0 ≤ c < loadCallers) and returns an
// error unless it was answered as expected. A caller's calls are
// sequential, so per-caller state needs no lock.
type call func(ctx context.Context, c int, i int64) error

// loadResult is what one run of the load generator saw.
type loadResult struct {
	n       int64           // requests sent
	elapsed time.Duration   // from the first request sent to the last answer
	lat     []time.Duration // each request's latency, sorted; empty for a timed run
	errs    int64           // requests not answered as expected
	why     map[string]int  // how many failed with each error message
}

// maxWhy bounds how many distinct error messages a run keeps.
const maxWhy = 5

// failed fails b if any request was not answered as expected, saying
// how many failed and why.
func (r loadResult) failed(b *testing.B, what string) {
	b.Helper()
	if r.errs == 0 {
		return
	}
	var why []string
	for msg, n := range r.why {
		why = append(why, fmt.Sprintf("%d× %s", n, msg))
	}
	slices.Sort(why)
	if kept := sumValues(r.why); int64(kept) < r.errs {
		why = append(why, fmt.Sprintf("%d× other errors", r.errs-int64(kept)))
	}
	b.Fatalf("%s: %d of %d requests failed:\n\t%s", what, r.errs, r.n, strings.Join(why, "\n\t"))
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// rate returns the requests answered per second.
func (r loadResult) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

// quantile returns the latency that a fraction q of requests did not
// exceed (nearest rank).
func (r loadResult) quantile(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	// The nearest rank is ⌈q·n⌉; rounding q·n instead would take the
	// rank below it whenever q·n has a fraction under a half.
	i := int(math.Ceil(q*float64(len(r.lat)))) - 1
	return r.lat[min(max(i, 0), len(r.lat)-1)]
}

// drive sends requests through do from callers goroutines: n of them,
// or, when n is 0, as many as fit in d. Each of the n requests records
// its latency into a slice allocated before the first is sent; a timed
// run records none.
func drive(ctx context.Context, callers int, n int64, d time.Duration, do call) loadResult {
	var (
		lat  []time.Duration
		next atomic.Int64
		errs atomic.Int64
		mu   sync.Mutex
		why  = map[string]int{}
		wg   sync.WaitGroup
	)
	if n > 0 {
		lat = make([]time.Duration, n)
	}
	start := time.Now()
	deadline := start.Add(d)
	for c := range callers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if n > 0 && i >= n {
					return
				}
				t0 := time.Now()
				if n == 0 && !t0.Before(deadline) {
					return
				}
				err := do(ctx, c, i)
				if n > 0 {
					lat[i] = time.Since(t0)
				}
				if err != nil {
					errs.Add(1)
					mu.Lock()
					if msg := err.Error(); why[msg] > 0 || len(why) < maxWhy {
						why[msg]++
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	r := loadResult{elapsed: time.Since(start), errs: errs.Load(), why: why}
	r.n = min(next.Load(), n)
	if n == 0 {
		// Every caller claimed one index past the deadline and sent
		// nothing for it.
		r.n = next.Load() - int64(callers)
	}
	if lat != nil {
		slices.Sort(lat)
		r.lat = lat
	}
	return r
}

// warm sends requests for loadWarmup and fails b if any is not answered
// as expected.
func warm(b *testing.B, do call) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	drive(ctx, loadCallers, 0, loadWarmup, do).failed(b, "warm-up")
}

// measure sends b.N requests through do from loadCallers callers and
// reports the rate (in unit, such as "decisions/s"), the 50th and 99th
// percentile latency, and the CPU time one request cost: cpu-µs/op for
// every process of the benchmark (this one, the load generator and any
// in-process upstream, and the server side), and, when server is not nil,
// server-cpu-µs/op for the server side alone (what server says: sluice
// serve and its redis-server, and redis-cpu-µs/op for the latter). From
// that it reports server-bound/s, the rate the machine's cores would
// answer if the server side had them to itself, with the load coming from
// elsewhere: an upper bound, as a server never turns every cycle into
// answers. The CPU figures depend less on what else the machine runs than
// the rate and latency do. The caller checks that every request was
// answered as expected (loadResult.failed).
func measure(b *testing.B, unit string, do call, server func() (serverCPU, error)) loadResult {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	self0, server0, err := cpuTimes(server)
	if err != nil {
		b.Fatal(err)
	}
	busy0, busyErr := hostBusy()
	b.ResetTimer()
	r := drive(ctx, loadCallers, int64(b.N), 0, do)
	b.StopTimer()
	busy1, busyErr1 := hostBusy()
	self1, server1, err := cpuTimes(server)
	if err != nil {
		b.Fatal(err)
	}
	srv, redis := server1.total()-server0.total(), server1.redis-server0.redis
	all := (self1 - self0) + srv
	b.ReportMetric(r.rate(), unit)
	b.ReportMetric(micros(r.quantile(0.50)), "p50-µs")
	b.ReportMetric(micros(r.quantile(0.99)), "p99-µs")
	b.ReportMetric(micros(all)/float64(r.n), "cpu-µs/op")
	if server != nil && r.n > 0 && srv > 0 {
		perOp := srv.Seconds() / float64(r.n)
		b.ReportMetric(1e6*perOp, "server-cpu-µs/op")
		if os.Getenv("SLUICE_BENCH_SERVER_CPUS") == "" {
			// Pinned, the server side has its own CPUs and the rate
			// itself says what they answer.
			b.ReportMetric(float64(runtime.NumCPU())/perOp, "server-bound/s")
		}
		if redis > 0 {
			b.ReportMetric(micros(redis)/float64(r.n), "redis-cpu-µs/op")
		}
	}
	if busyErr == nil && busyErr1 == nil {
		others := (busy1 - busy0) - all
		b.ReportMetric(max(others.Seconds(), 0)/r.elapsed.Seconds(), "others-cores")
	}
	return r
}

// hostBusy returns the CPU time all the machine's cores have spent busy
// (not idle nor waiting for I/O; time a hypervisor stole is not counted),
// from the first line of /proc/stat. With cpuTime, it tells how much of
// the machine other processes took during a measurement, reported as
// others-cores. It fails where there is no /proc/stat.
func hostBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	// user nice system idle iowait irq softirq: all but idle and iowait,
	// in clock ticks of 1/100 s (USER_HZ).
	for i, v := range f[1:8] {
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %q: %w", line, err)
		}
		busy += n
	}
	return time.Duration(busy) * 10 * time.Millisecond, nil
}

// serverCPU is the CPU time the server side of a benchmark has used: the
// server's process (sluice serve or the reference) and its redis-server.
type serverCPU struct {
	server, redis time.Duration
}

func (c serverCPU) total() time.Duration { return c.server + c.redis }

// cpuTimes returns the user and system CPU time this process has used,
// and what server says the server side has, when server is not nil.
func cpuTimes(server func() (serverCPU, error)) (self time.Duration, srv serverCPU, err error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, srv, fmt.Errorf("getrusage: %w", err)
	}
	self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if server != nil {
		if srv, err = server(); err != nil {
			return 0, srv, err
		}
	}
	return self, srv, nil
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// clientAddrs returns n client addresses, distinct, from 198.18.0.0/15,
// the range set aside for benchmarks (RFC 2544). They only ever appear
// in headers: nothing is sent to them.
func clientAddrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = net.IPv4(198, byte(18+i>>16), byte(i>>8), byte(i)).String()
	}
	return out
}

// keepAlive returns an HTTP client that keeps a connection open for each
// of loadCallers callers, and never goes through a proxy from the
// environment.
func keepAlive() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConns:        2 * loadCallers,
			MaxIdleConnsPerHost: loadCallers,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		},
		Timeout: 10 * time.Second,
	}
}

// counters reads the sluice_* series of the Prometheus text at
// http://admin/metrics into a map from series (name and labels, as
// written) to value.
func counters(admin string) (map[string]float64, error) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "sluice_") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		v, err := strconv.ParseFloat(value, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("metrics line %q is not a series and a number", line)
		}
		out[series] = v
	}
	return out, sc.Err()
}
