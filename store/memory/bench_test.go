package memory_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// BenchmarkDecide measures a decision on a key the store holds: the hot
// path. The limit is high enough that every request passes.
func BenchmarkDecide(b *testing.B) {
	for _, alg := range []string{"gcra", "token_bucket", "fixed_window", "sliding_window"} {
		l, err := rate.ParseLimit(alg + " 1000000000/s")
		if err != nil {
			b.Fatal(err)
		}
		for _, clock := range []struct {
			name  string
			clock rate.Clock
		}{{"system", nil}, {"fake", ratetest.NewClock(start)}} {
			b.Run(fmt.Sprint(alg, "/", clock.name), func(b *testing.B) {
				s := memory.New(memory.Options{Clock: clock.clock})
				r := rate.Request{Key: "user:1234567", Limit: l, Cost: 1}
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					if d, _ := s.Decide(ctx, r); !d.Allowed {
						b.Fatal(d)
					}
				}
			})
		}
	}
}

// BenchmarkDecideKey is BenchmarkDecide through DecideKey, which takes the
// limit by pointer rather than in a Request (as sluice.Limiter calls it),
// with the system clock.
func BenchmarkDecideKey(b *testing.B) {
	for _, alg := range []string{"gcra", "token_bucket"} {
		l, err := rate.ParseLimit(alg + " 1000000000/s")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(alg, func(b *testing.B) {
			s := memory.New(memory.Options{})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if d, _ := s.DecideKey(ctx, "user:1234567", &l, 1); !d.Allowed {
					b.Fatal(d)
				}
			}
		})
	}
}

// BenchmarkStep is the step alone, as the store calls it (rate.Limit.Apply,
// in place), for comparison with BenchmarkDecide: the difference is what
// the store adds.
func BenchmarkStep(b *testing.B) {
	for _, alg := range []string{"gcra", "token_bucket", "fixed_window", "sliding_window"} {
		l, err := rate.ParseLimit(alg + " 1000000000/s")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(alg, func(b *testing.B) {
			var s rate.State
			var d rate.Decision
			now := rate.Micros(start)
			for b.Loop() {
				if l.Apply(&s, now, 1, 0, &s, &d); !d.Allowed {
					b.Fatal(d)
				}
			}
		})
	}
}
