package rate

import (
	"testing"
	"time"
)

// BenchmarkApply measures the step as stores call it: in place, on the
// allowed path.
func BenchmarkApply(b *testing.B) {
	for _, alg := range Algorithms() {
		l := Limit{Algorithm: alg, Count: 60_000, Period: time.Minute}
		b.Run(alg.String(), func(b *testing.B) {
			var s State
			var d Decision
			now := int64(1_700_000_000_000_000)
			for b.Loop() {
				now += 1000
				l.Apply(&s, now, 1, 0, &s, &d)
			}
			if !d.Allowed {
				b.Fatal("refused: the benchmark measures the allowed path")
			}
		})
	}
}

// BenchmarkStep measures the value form of the same step.
func BenchmarkStep(b *testing.B) {
	l := Limit{Count: 60_000, Period: time.Minute}
	var s State
	now := int64(1_700_000_000_000_000)
	for b.Loop() {
		now += 1000
		next, d := l.Step(s, now, 1)
		if d.Allowed {
			s = next
		}
	}
}
