package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// redisKeys is how many keys the Redis benchmarks spread their decisions
// over.
const redisKeys = 100_000

// BenchmarkRedis compares deciding through one local redis-server: sluice's
// Redis store (gcra and token_bucket with the default options, and gcra
// with coalescing off) and redis_rate, with the same limit
// (100 per second, burst 100) over 100,000 keys, from 1, 16 and 64
// concurrent callers. It reports decisions per second and the 99th
// percentile latency of one decision, the Redis CPU each decision cost
// (the microseconds Redis spent in script calls, INFO commandstats,
// divided by the decisions), and the client's allocations per decision.
// On a shared machine the first two move with whatever else runs; compare
// ratios within one run.
//
//	make bench-redis   (or: cd bench && go test -run '^$' -bench Redis -benchtime 2s)
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	addr := srv.Addr()
	for _, callers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			for _, c := range []struct {
				name       string
				alg        rate.Algorithm
				noCoalesce bool
			}{{"sluice-gcra", rate.GCRA, false}, {"sluice-tokenbucket", rate.TokenBucket, false}, {"sluice-gcra-uncoalesced", rate.GCRA, true}} {
				b.Run(c.name, func(b *testing.B) {
					s, err := sredis.Dial("redis://"+addr, sredis.Options{Prefix: c.name + ":", DisableCoalescing: c.noCoalesce})
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					limit := rate.Limit{Algorithm: c.alg, Count: 100, Period: time.Second, Burst: 100}
					runCallers(b, srv, callers, func(ctx context.Context, key string) (bool, error) {
						d, err := s.Decide(ctx, rate.Request{Key: key, Limit: limit, Cost: 1})
						return d.Allowed, err
					})
				})
			}
			// redis_rate as its users run it (go-redis's default pool,
			// 10 connections per GOMAXPROCS), and with a pool of a
			// connection per caller, so that no caller waits for one.
			for _, r := range []struct {
				name string
				pool int
			}{{"redis_rate", 0}, {"redis_rate-pool", callers}} {
				b.Run(r.name, func(b *testing.B) {
					rdb := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: r.pool})
					defer rdb.Close()
					lim := redis_rate.NewLimiter(rdb)
					limit := redis_rate.Limit{Rate: 100, Period: time.Second, Burst: 100}
					runCallers(b, srv, callers, func(ctx context.Context, key string) (bool, error) {
						res, err := lim.Allow(ctx, "redis_rate:"+key, limit)
						return err == nil && res.Allowed > 0, err
					})
				})
			}
		})
	}
}

// runCallers runs b.N decisions from callers goroutines, each on keys
// taken in turn from redisKeys, and reports decisions/s, p99 latency and
// srv's script CPU per decision. decide returns whether the request was
// allowed: the limit is far above what any key is asked, so a refusal
// fails the benchmark, as an error does.
func runCallers(b *testing.B, srv *redistest.Server, callers int, decide func(ctx context.Context, key string) (bool, error)) {
	keys := make([]string, redisKeys)
	for i := range keys {
		keys[i] = "user=" + strconv.Itoa(i)
	}
	ctx := context.Background()
	// A first decision loads the script. Then every caller decides a few
	// times at once, which opens the connections the client uses under
	// that concurrency (go-redis dials its pool, up to 10 per GOMAXPROCS,
	// as calls need them; rueidis its few pipelined ones): otherwise the
	// dials fall in the measured calls, more of them for go-redis.
	if _, err := decide(ctx, keys[0]); err != nil {
		b.Fatal(err)
	}
	var warm sync.WaitGroup
	warmErrs := make(chan error, callers)
	for c := range callers {
		warm.Go(func() {
			for j := range 4 {
				if _, err := decide(ctx, keys[redisKeys-1-4*c-j]); err != nil {
					warmErrs <- err
					return
				}
			}
		})
	}
	warm.Wait()
	select {
	case err := <-warmErrs:
		b.Fatal(err)
	default:
	}
	_, usec0 := srv.ScriptStats()
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	var refused atomic.Int64
	errs := make(chan error, callers)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for c := range callers {
		n := b.N / callers
		if c < b.N%callers {
			n++
		}
		wg.Go(func() {
			mine := make([]time.Duration, 0, n)
			k := c * 7919
			for range n {
				k = (k + 1) % redisKeys
				t0 := time.Now()
				allowed, err := decide(ctx, keys[k])
				if err != nil {
					errs <- err
					return
				}
				mine = append(mine, time.Since(t0))
				if !allowed {
					refused.Add(1)
				}
			}
			lat[c] = mine
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	if r := refused.Load(); r > 0 {
		b.Fatalf("%d of %d refused: the benchmark should measure allowed decisions", r, b.N)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	_, usec := srv.ScriptStats()
	b.ReportMetric(float64(usec-usec0)/float64(b.N), "redis-µs/decision")
}
