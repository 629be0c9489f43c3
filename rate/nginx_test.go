package rate_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// nginxLimitReq is NGINX's limit_req for one key, as its module computes
// it: in whole milliseconds, with the excess over the rate in thousandths
// of a request, a rate of r requests per second kept as r·1000. A request
// is refused when its excess would pass burst (refused requests leave
// the state as it was); an admitted one waits (excess − delay)/rate,
// where delay is the excess it lets through at once: the burst with
// nodelay, 0 without (NGINX's default).
type nginxLimitReq struct {
	rate, burst, delay int64 // r·1000 per s, and requests·1000
	excess, last       int64
	seen               bool
}

// request returns whether a request at ms passes, and its delay in ms.
func (z *nginxLimitReq) request(ms int64) (bool, int64) {
	excess := int64(0)
	if z.seen {
		excess = max(0, z.excess-z.rate*(ms-z.last)/1000+1000)
	}
	if excess > z.burst {
		return false, 0
	}
	z.excess, z.last, z.seen = excess, ms, true
	if excess <= z.delay {
		return true, 0
	}
	return true, (excess - z.delay) * 1000 / z.rate
}

// TestNGINXLimitReq checks the mapping docs/nginx.md gives from NGINX's
// limit_req to sluice's limits, on random arrivals in whole milliseconds:
// `rate=Rr/s burst=N nodelay` is `gcra R/s burst N+1`, and `burst=N`
// without nodelay is `leaky_bucket R/s burst N+1`, whose Delay is NGINX's
// to the millisecond NGINX rounds down to. NGINX's burst counts the
// requests beyond the one being served; sluice's counts them all.
func TestNGINXLimitReq(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for _, r := range []int64{1, 3, 10, 50} {
		for _, n := range []int64{0, 1, 5, 12} {
			for _, nodelay := range []bool{true, false} {
				alg := "leaky_bucket"
				z := nginxLimitReq{rate: r * 1000, burst: n * 1000}
				if nodelay {
					alg, z.delay = "gcra", z.burst
				}
				spec := alg + " " + strconv.FormatInt(r, 10) + "/s burst " + strconv.FormatInt(n+1, 10)
				lim, err := rate.ParseLimit(spec)
				if err != nil {
					t.Fatal(err)
				}
				var s rate.State
				ms := int64(1_700_000_000_000)
				passed := 0
				for i := range 20000 {
					// Bursts of requests in one millisecond, and gaps
					// from 1ms to a few intervals.
					if rng.IntN(4) != 0 {
						ms += rng.Int64N(3 * 1000 / r)
					}
					ok, delay := z.request(ms)
					next, d := lim.Step(s, ms*1000, 1)
					if d.Allowed != ok {
						t.Fatalf("%s against limit_req rate=%dr/s burst=%d nodelay=%v: request %d at %dms: sluice %v, NGINX %v", spec, r, n, nodelay, i, ms, d.Allowed, ok)
					}
					if ok {
						passed++
						s = next
						if got := d.Delay.Truncate(time.Millisecond); got != time.Duration(delay)*time.Millisecond {
							t.Fatalf("%s against limit_req rate=%dr/s burst=%d: request %d at %dms: delay %v, NGINX %dms", spec, r, n, i, ms, d.Delay, delay)
						}
					}
				}
				if passed == 0 || passed == 20000 {
					t.Fatalf("%s: %d of 20000 passed: the arrivals test nothing", spec, passed)
				}
			}
		}
	}
}

// TestNGINXLimitReqDelay checks the two-stage `burst=N delay=D` docs/nginx.md
// maps to a gcra limit whose caller waits: `gcra R/s burst D+1`, waiting
// up to (N−D)/R seconds (a policy's max_delay). The first D+1 requests of
// a burst pass at once and the next N−D are delayed, as NGINX delays
// them. delay=0 is limit_req's default, the leaky_bucket of the test
// above, which a gcra of burst 1 with a wait gives too.
func TestNGINXLimitReqDelay(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 19))
	for _, r := range []int64{1, 3, 10, 50} {
		for _, nd := range [][2]int64{{12, 8}, {5, 2}, {5, 0}, {1, 0}, {3, 2}} {
			n, dl := nd[0], nd[1]
			z := nginxLimitReq{rate: r * 1000, burst: n * 1000, delay: dl * 1000}
			spec := "gcra " + strconv.FormatInt(r, 10) + "/s burst " + strconv.FormatInt(dl+1, 10)
			lim, err := rate.ParseLimit(spec)
			if err != nil {
				t.Fatal(err)
			}
			// (N−D)/R seconds, rounded up to the µs.
			wait := time.Duration((n-dl)*1_000_000/r+min(1, (n-dl)*1_000_000%r)) * time.Microsecond
			var s rate.State
			ms := int64(1_700_000_000_000)
			delayed := 0
			for i := range 20000 {
				if rng.IntN(4) != 0 {
					ms += rng.Int64N(3 * 1000 / r)
				}
				ok, delay := z.request(ms)
				next, d := lim.StepWithin(s, ms*1000, 1, wait)
				if d.Allowed != ok {
					t.Fatalf("%s waiting %v against limit_req rate=%dr/s burst=%d delay=%d: request %d at %dms: sluice %v, NGINX %v", spec, wait, r, n, dl, i, ms, d, ok)
				}
				if ok {
					s = next
					if got := d.Delay.Truncate(time.Millisecond); got != time.Duration(delay)*time.Millisecond {
						t.Fatalf("%s waiting %v against limit_req rate=%dr/s burst=%d delay=%d: request %d at %dms: delay %v, NGINX %dms", spec, wait, r, n, dl, i, ms, d.Delay, delay)
					}
					if delay > 0 {
						delayed++
					}
				}
			}
			if delayed == 0 {
				t.Fatalf("%s: no request was delayed: the arrivals test nothing", spec)
			}
		}
	}
}
