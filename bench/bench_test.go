package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	xrate "golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/memory"
)

// hotRate is the hot-key limit: high enough that every request passes, so
// the benchmarks measure the path an admitted request takes.
const hotRate = 1_000_000_000 // per second

func newSluice(tb testing.TB, limit string) *sluice.Limiter {
	tb.Helper()
	l, err := rate.ParseLimit(limit)
	if err != nil {
		tb.Fatal(err)
	}
	lim, err := sluice.NewLimiter(sluice.LimiterOptions{Limits: []rate.Limit{l}})
	if err != nil {
		tb.Fatal(err)
	}
	return lim
}

// hotKey lists the contenders on one key. Each entry returns the function
// one request calls.
func hotKey(b *testing.B) []struct {
	name  string
	allow func() bool
} {
	ctx := context.Background()
	gcra := newSluice(b, fmt.Sprintf("gcra %d/s", hotRate))
	tb := newSluice(b, fmt.Sprintf("token_bucket %d/s", hotRate))
	x := xrate.NewLimiter(hotRate, hotRate)
	return []struct {
		name  string
		allow func() bool
	}{
		{"sluice-gcra", func() bool { d, _ := gcra.Allow(ctx, "user:1234567"); return d.Allowed }},
		{"sluice-tokenbucket", func() bool { d, _ := tb.Allow(ctx, "user:1234567"); return d.Allowed }},
		{"xtimerate", x.Allow},
		// A bare time.Now(), the clock read x/time/rate makes: the wall
		// and the monotonic clock. sluice reads the monotonic clock alone
		// (store/memory's Clock benchmark), which costs less.
		{"time-now", func() bool { return !time.Now().IsZero() }},
	}
}

// BenchmarkHotKey is one caller on one key, back to back: the latency of a
// decision, with no contention.
func BenchmarkHotKey(b *testing.B) {
	for _, c := range hotKey(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			refused := 0
			for b.Loop() {
				if !c.allow() {
					refused++
				}
			}
			if refused > b.N/100 {
				b.Fatalf("%d of %d refused: the benchmark should measure admitted requests", refused, b.N)
			}
		})
	}
}

// BenchmarkHotKeyParallel is GOMAXPROCS callers on the same key: how a
// limiter behaves when one key is hammered from every core.
func BenchmarkHotKeyParallel(b *testing.B) {
	for _, c := range hotKey(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var refused atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				n := int64(0)
				for pb.Next() {
					if !c.allow() {
						n++
					}
				}
				refused.Add(n)
			})
			if r := refused.Load(); r > int64(b.N)/100 {
				b.Fatalf("%d of %d refused: the benchmark should measure admitted requests", r, b.N)
			}
		})
	}
}

// manyKeys is how many distinct keys BenchmarkManyKeys spreads requests
// over.
const manyKeys = 1_000_000

// The many-keys limit: 100 per hour, burst 100, per key. At a few million
// requests per second each key is asked a few times a second, so requests
// pass, and a key's state stays far from fresh: sluice holds every key,
// as the peers (which never forget a key) do.
const (
	perKeyCount  = 100
	perKeyPeriod = time.Hour
)

// keysOnce returns the keys, twice: the same strings in two sets of
// distinct objects. Stores are filled with the first, in order, and asked
// with the second, as a server asks with a key it has just built; asking
// with the very string a store kept would let string comparison stop at
// the pointer and hide a cache miss from stores that keep the caller's
// string.
//
// The second set lists the keys in a random order (each string allocated
// in that order, so reading the next one is what reading a freshly built
// key is: cheap). A server is asked about its keys in no relation to the
// order it first saw them in; walking them in that order instead would
// let the CPU prefetch everything a store allocated per key (the stored
// string, a per-key limiter) on the way, as it never can in production,
// and flatter the stores that allocate per key.
var keysOnce = sync.OnceValues(func() (fill, ask []string) {
	fill, ask = make([]string, manyKeys), make([]string, manyKeys)
	for i := range fill {
		fill[i] = fmt.Sprintf("key-%012d", i) // 16 bytes: no size-class slack
	}
	for j, i := range rand.New(rand.NewPCG(1, 2)).Perm(manyKeys) {
		ask[j] = fmt.Sprintf("key-%012d", i)
	}
	return fill, ask
})

type takeFunc func(key string) bool

// contender is one limiter under test, with a fresh store.
type contender struct {
	take  takeFunc
	close func()
	// held returns how many keys the store holds, where it can tell.
	held func() int
}

var manyKeysContenders = []struct {
	name string
	// copiesKeys says whether the store keeps a copy of each key.
	copiesKeys bool
	make       func(tb testing.TB) contender
}{
	{"sluice", true, func(tb testing.TB) contender {
		lim := newSluice(tb, fmt.Sprintf("gcra %d per %v", perKeyCount, perKeyPeriod))
		ctx := context.Background()
		return contender{
			// An error is not an admission: every contender's take counts
			// it as a refusal, which the benchmark fails on.
			take: func(key string) bool {
				d, err := lim.Allow(ctx, key)
				return err == nil && d.Allowed
			},
			close: func() {},
			held:  lim.Store().(*memory.Store).Len,
		}
	}},
	{"xtimerate-map", false, func(testing.TB) contender {
		// What users write around x/time/rate: one Limiter per key in a
		// map behind a mutex (and no way to forget a key).
		var mu sync.Mutex
		m := make(map[string]*xrate.Limiter)
		every := xrate.Every(perKeyPeriod / perKeyCount)
		return contender{
			take: func(key string) bool {
				mu.Lock()
				l, ok := m[key]
				if !ok {
					l = xrate.NewLimiter(every, perKeyCount)
					m[key] = l
				}
				mu.Unlock()
				return l.Allow()
			},
			close: func() {},
			held:  func() int { mu.Lock(); defer mu.Unlock(); return len(m) },
		}
	}},
	{"go-limiter", false, func(tb testing.TB) contender {
		s, err := memorystore.New(&memorystore.Config{Tokens: perKeyCount, Interval: perKeyPeriod})
		if err != nil {
			tb.Fatal(err)
		}
		ctx := context.Background()
		return contender{
			take: func(key string) bool {
				_, _, _, ok, err := s.Take(ctx, key)
				return err == nil && ok
			},
			close: func() {
				if err := s.Close(ctx); err != nil {
					tb.Error(err)
				}
			},
		}
	}},
	{"throttled", false, func(tb testing.TB) contender {
		// Bounded like sluice's store (an LRU of 1<<20 keys).
		st, err := memstore.NewCtx(1 << 20)
		if err != nil {
			tb.Fatal(err)
		}
		lim, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
			MaxRate:  throttled.PerDuration(perKeyCount, perKeyPeriod),
			MaxBurst: perKeyCount - 1, // throttled admits MaxBurst+1 at once
		})
		if err != nil {
			tb.Fatal(err)
		}
		ctx := context.Background()
		return contender{
			take: func(key string) bool {
				// On an error throttled returns limited false: that is not
				// an admission.
				limited, _, err := lim.RateLimitCtx(ctx, key, 1)
				return err == nil && !limited
			},
			close: func() {},
		}
	}},
}

// BenchmarkManyKeys spreads requests over a million keys from GOMAXPROCS
// goroutines, each walking the keys (in a random order, see keysOnce) from
// its own random offset. Every key is held before the timer starts, so
// this is the steady state of a busy server: a lookup, a decision and an
// update per request, on memory that is mostly not in cache.
func BenchmarkManyKeys(b *testing.B) {
	fill, keys := keysOnce()
	for _, mk := range manyKeysContenders {
		// b.Run calls its function again for every b.N it tries: the store
		// is made and filled on the first call only, and closed at the end.
		var c *contender
		b.Run(mk.name, func(b *testing.B) {
			if c == nil {
				made := mk.make(b)
				for _, k := range fill {
					made.take(k)
				}
				c = &made
			}
			b.ReportAllocs()
			b.ResetTimer()
			var refused atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(len(keys))
				n := int64(0)
				for pb.Next() {
					if !c.take(keys[i]) {
						n++
					}
					if i++; i == len(keys) {
						i = 0
					}
				}
				refused.Add(n)
			})
			if r := refused.Load(); r > int64(b.N)/100 {
				b.Fatalf("%d of %d refused: the benchmark should measure admitted requests", r, b.N)
			}
		})
		if c != nil {
			c.close()
		}
	}
}

// BenchmarkIdleKeyMemory holds a million keys, each after one request, and
// reports the heap they cost per key, beyond the key string's own bytes
// (a store that copies the key pays for the copy; it is subtracted).
func BenchmarkIdleKeyMemory(b *testing.B) {
	keys, _ := keysOnce()
	keyBytes := 0
	for _, k := range keys {
		keyBytes += len(k)
	}
	for _, mk := range manyKeysContenders {
		b.Run(mk.name, func(b *testing.B) {
			var perKey float64
			for b.Loop() {
				before := heap()
				c := mk.make(b)
				for _, k := range keys {
					if !c.take(k) {
						b.Fatal("refused")
					}
				}
				after := heap()
				// The store must still be reachable when after is read: a
				// contender whose close and held do not refer to it (throttled)
				// would otherwise let the collector free it first.
				runtime.KeepAlive(c)
				if c.held != nil {
					if n := c.held(); n != len(keys) {
						b.Fatalf("holds %d keys, want %d", n, len(keys))
					}
				}
				c.close()
				used := float64(after) - float64(before)
				if mk.copiesKeys {
					used -= float64(keyBytes)
				}
				perKey = used / float64(len(keys))
			}
			b.ReportMetric(perKey, "B/key")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// heap returns the bytes of live heap objects after a full collection.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestContendersAgree checks that every contender is configured to the
// same limit: on a fresh key each admits exactly 100 requests at once.
func TestContendersAgree(t *testing.T) {
	for _, mk := range manyKeysContenders {
		t.Run(mk.name, func(t *testing.T) {
			c := mk.make(t)
			defer c.close()
			n := 0
			for range 150 {
				if c.take("fresh") {
					n++
				}
			}
			if n != perKeyCount {
				t.Errorf("admitted %d of 150 at once, want %d", n, perKeyCount)
			}
		})
	}
}
