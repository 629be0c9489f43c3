package redis_test

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// packState returns a value in the script's own format: the algorithm's
// byte, then fields as big-endian float64s.
func packState(alg rate.Algorithm, fields ...float64) string {
	b := []byte{byte(alg)}
	for _, f := range fields {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(f))
	}
	return string(b)
}

// craftedStates returns values in alg's format that the script could never
// have written, each with the receipt a refund would have to be given to
// reach the state's fields: what another program, a restore from a bad
// backup or a key collision could leave. now is about the time of the
// decisions, and p the limit's period, both in µs: several states are
// placed in the window or the log that a decision at now reads.
func craftedStates(alg rate.Algorithm, now, p float64) map[string]struct {
	raw     string
	receipt [2]int64
} {
	type crafted = struct {
		raw     string
		receipt [2]int64
	}
	inf, nan := math.Inf(1), math.NaN()
	start := math.Floor(now/p) * p // the window of now
	n := int64(now)
	m := map[string]crafted{}
	if alg == rate.SlidingLog {
		m["negative units"] = crafted{packState(alg, now, -100), [2]int64{n, 0}}
		m["zero units"] = crafted{packState(alg, now, 0), [2]int64{n, 0}}
		m["fractional units"] = crafted{packState(alg, now, 0.5), [2]int64{n, 0}}
		m["NaN units"] = crafted{packState(alg, now, nan), [2]int64{n, 0}}
		m["+Inf units"] = crafted{packState(alg, now, inf), [2]int64{n, 0}}
		m["+Inf time"] = crafted{packState(alg, inf, 1), [2]int64{n, 0}}
		m["NaN time"] = crafted{packState(alg, nan, 1), [2]int64{n, 0}}
		m["negative time"] = crafted{packState(alg, -p, 1), [2]int64{-int64(p), 0}}
		m["time beyond 2^53"] = crafted{packState(alg, 1e300, 1), [2]int64{n, 0}}
		// Runs out of order: the older one last.
		m["unsorted runs"] = crafted{packState(alg, now, 1, now-2*p, 1), [2]int64{n, 0}}
		m["repeated run"] = crafted{packState(alg, now, 1, now, 1), [2]int64{n, 0}}
		return m
	}
	for name, v := range map[string]float64{"+Inf": inf, "-Inf": math.Inf(-1), "NaN": nan, "beyond 2^53": 1e300} {
		m[name+" fields"] = crafted{packState(alg, v, v, v), [2]int64{n, 1}}
	}
	switch alg {
	case rate.GCRA, rate.LeakyBucket: // (TAT, its fraction, latest seen)
		m["+Inf TAT"] = crafted{packState(alg, inf, 0, now), [2]int64{n, 1}}
		m["NaN fraction"] = crafted{packState(alg, now+p, nan, now), [2]int64{n, 1}}
		m["negative fraction"] = crafted{packState(alg, now+p, -100, now), [2]int64{n, 1}}
		m["fractional TAT"] = crafted{packState(alg, now+p+0.5, 0, now), [2]int64{n, 1}}
	case rate.TokenBucket: // (debt, last refill, 0)
		m["+Inf debt"] = crafted{packState(alg, inf, now, 0), [2]int64{n, 1}}
		m["NaN debt"] = crafted{packState(alg, nan, now, 0), [2]int64{n, 1}}
		m["negative debt"] = crafted{packState(alg, -100*p, now, 0), [2]int64{n, 1}}
	case rate.FixedWindow: // (start, count, 0)
		m["+Inf count"] = crafted{packState(alg, start, inf, 0), [2]int64{int64(start), int64(start + p)}}
		m["NaN count"] = crafted{packState(alg, start, nan, 0), [2]int64{int64(start), int64(start + p)}}
		m["negative count"] = crafted{packState(alg, start, -100, 0), [2]int64{int64(start), int64(start + p)}}
	case rate.SlidingWindow: // (start, current count, previous count)
		m["+Inf count"] = crafted{packState(alg, start, inf, 0), [2]int64{int64(start), 0}}
		m["NaN count"] = crafted{packState(alg, start, nan, 0), [2]int64{int64(start), 0}}
		m["negative count"] = crafted{packState(alg, start, -100, 0), [2]int64{int64(start), 0}}
		m["negative previous count"] = crafted{packState(alg, start, 0, -100), [2]int64{int64(start), 0}}
	}
	return m
}

// A key that holds sluice's format with numbers the script could never
// have written (infinities, NaNs, negative counts, fractions, runs out of
// order) reads as fresh, as a value of the wrong length does: a look at it
// finds it fresh and deletes it, the full burst passes and the key is
// given an expiry, and a refund on it changes nothing. Such a key used to
// fail every decision on it, for good (Infinity reached the SET's PX), or
// to admit past its limit (a negative count).
func TestForeignStateReadsAsFresh(t *testing.T) {
	srv := redistest.Start(t)
	s := redis.New(newClient(t, srv.Addr()), redis.Options{DisableDenyCache: true})
	ctx := context.Background()
	for _, alg := range rate.Algorithms() {
		l := rate.Limit{Algorithm: alg, Count: 3, Period: time.Hour}
		p := float64(l.Period.Microseconds())
		for name, c := range craftedStates(alg, float64(time.Now().UnixMicro()), p) {
			t.Run(alg.String()+"/"+name, func(t *testing.T) {
				key := alg.String() + ":" + name
				rk := s.Key(key)

				srv.MustDo("SET", rk, c.raw)
				d, err := s.Decide(ctx, rate.Request{Key: key, Limit: l, Cost: 0})
				if err != nil {
					t.Fatalf("look: %v", err)
				}
				if !d.Allowed || d.Remaining != 3 {
					t.Errorf("look: %v, want 3 of 3 remaining, as at a fresh key", d)
				}
				if v := srv.MustDo("EXISTS", rk); v != "0" {
					t.Errorf("look: EXISTS %s after it, want 0: a fresh state is deleted", v)
				}

				srv.MustDo("SET", rk, c.raw)
				d, err = s.Decide(ctx, rate.Request{Key: key, Limit: l, Cost: 3})
				if err != nil {
					t.Fatalf("full burst: %v", err)
				}
				if !d.Allowed || d.Remaining != 0 || d.RetryAfter != 0 || d.Delay != 0 {
					t.Errorf("full burst: %v, want admitted at once with 0 remaining", d)
				}
				pttl, err := strconv.ParseInt(srv.MustDo("PTTL", rk), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				// A sliding window's count weighs on the window after its
				// own: its key lives up to two periods.
				if pttl <= 0 || pttl > 2*l.Period.Milliseconds()+1 {
					t.Errorf("full burst: PTTL %d after it, want an expiry within two periods", pttl)
				}

				// A refund, by a receipt that names the state's own fields,
				// finds nothing of its commit and leaves the key as it is,
				// without an expiry.
				srv.MustDo("SET", rk, c.raw)
				req := []rate.Request{{Key: key, Limit: l, Cost: 1}}
				if _, err := redis.Refund(ctx, s, req, [][2]int64{c.receipt}); err != nil {
					t.Fatalf("refund: %v", err)
				}
				if v := srv.MustDo("GET", rk); v != c.raw {
					t.Errorf("refund: the key holds %x after it, want %x as before", v, c.raw)
				}
				if v := srv.MustDo("PTTL", rk); v != "-1" {
					t.Errorf("refund: PTTL %s after it, want -1, as it was set", v)
				}
			})
		}
	}
}
