package ratefield

import (
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

func TestAppendPolicy(t *testing.T) {
	for _, c := range []struct {
		name string
		l    string // as rate.ParseLimit reads it
		want string
	}{
		{"api", "20/m", `"api";q=20;w=60`},
		// A burst of 40 at 20/s takes 2s to come back: exact as it is.
		{"burst", "20/s burst 40", `"burst";q=40;w=2`},
		// 3 per 7s: the window is whole seconds.
		{"odd", "3 per 7s", `"odd";q=3;w=7`},
		{"monthly", "fixed_window 10000/month", `"monthly";q=10000`},
		// A burst that refills within the period is stated over the
		// period: 100 a second, not the 10 that may go at once.
		{"fast", "100/s burst 10", `"fast";q=100;w=1`},
		{"paced", "token_bucket 1000/s burst 1", `"paced";q=1000;w=1`},
		// A burst back in whole seconds is exact as it is.
		{"queue", "leaky_bucket 60/m burst 5", `"queue";q=5;w=5`},
		// A refill of 10/3 s over a period of 2s: 4s hold 6 units, 1.5/s.
		{"slow", "3 per 2s burst 5", `"slow";q=6;w=4`},
		// 1 per 1.5s has no whole-second window that states it: 1 in 2s
		// is the most that stays at or below it.
		{"uneven", "token_bucket 1 per 1500ms burst 1", `"uneven";q=1;w=2`},
		// Windows shorter than a second, or not whole seconds, are
		// stated per whole seconds as well.
		{"half", "fixed_window 100 per 500ms", `"half";q=200;w=1`},
		{"sliding", "sliding_window 3 per 1500ms", `"sliding";q=4;w=2`},
		{"log", "sliding_log 5 per 10s", `"log";q=5;w=10`},
		// A million a microsecond is 10^12 a second; a count past what a
		// Structured Field holds is written as the largest it does.
		{"quick", "gcra 1000000 per 1us burst 1", `"quick";q=1000000000000;w=1`},
		{"huge", "4000000000000000 per 1us", `"huge";q=999999999999999;w=1`},
	} {
		l := rate.MustParseLimit(c.l)
		if got := string(AppendPolicy(nil, c.name, l)); got != c.want {
			t.Errorf("AppendPolicy(%q, %v) = %s, want %s", c.name, l, got, c.want)
		}
	}
	// Bytes a Structured Field string cannot hold are never written as
	// they are (sluice refuses such names before they get here).
	if got, want := string(AppendPolicy(nil, `we"ird\é`, rate.Limit{Count: 1, Period: time.Second})), `"we\"ird\\??";q=1;w=1`; got != want {
		t.Errorf("AppendPolicy of an odd name = %s, want %s", got, want)
	}
}

// TestAppendPolicyRate: for random valid limits, q/w is at most the
// limit's rate, so that a client pacing itself by it is never refused,
// and at least half of it, so that it does not hold back far below it.
func TestAppendPolicyRate(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	algorithms := rate.Algorithms()
	checked := 0
	for checked < 20000 {
		l := rate.Limit{Algorithm: algorithms[r.IntN(len(algorithms))]}
		// Periods from a microsecond to years, counts from 1 to 2^52, on
		// a logarithmic scale so that every order of magnitude is met.
		l.Period = time.Duration(1+r.Int64N(int64(1)<<r.IntN(53))) * time.Microsecond
		if r.IntN(3) == 0 {
			l.Period = time.Duration(1+r.Int64N(100)) * 500 * time.Millisecond
		}
		l.Count = 1 + r.Int64N(int64(1)<<r.IntN(53))
		if l.Algorithm.HasBurst() && r.IntN(2) == 0 {
			l.Burst = 1 + r.Int64N(int64(1)<<r.IntN(53))
		}
		if l.Validate() != nil {
			continue
		}
		checked++
		got := string(AppendPolicy(nil, "x", l))
		q, w, ok := parsePolicy(got)
		if !ok || q < 1 || w < 1 {
			t.Fatalf("%v: %s, want q and w positive", l, got)
		}
		// q/w against Count/Period, exactly: q·Period against Count·w.
		stated := new(big.Int).Mul(big.NewInt(q), big.NewInt(int64(l.Period)))
		allowed := new(big.Int).Mul(big.NewInt(l.Count), new(big.Int).Mul(big.NewInt(w), big.NewInt(int64(time.Second))))
		if stated.Cmp(allowed) > 0 {
			t.Fatalf("%v: %s states more than the limit allows", l, got)
		}
		// The largest q a Structured Field holds may understate further.
		if q < maxSFInteger && new(big.Int).Lsh(stated, 1).Cmp(allowed) < 0 {
			t.Fatalf("%v: %s states less than half of what the limit allows", l, got)
		}
	}
}

// parsePolicy reads q and w from a RateLimit-Policy item `"x";q=Q;w=W`.
func parsePolicy(s string) (q, w int64, ok bool) {
	rest, ok := strings.CutPrefix(s, `"x";q=`)
	if !ok {
		return 0, 0, false
	}
	qs, ws, ok := strings.Cut(rest, ";w=")
	if !ok {
		return 0, 0, false
	}
	q, err1 := strconv.ParseInt(qs, 10, 64)
	w, err2 := strconv.ParseInt(ws, 10, 64)
	return q, w, err1 == nil && err2 == nil
}

func TestAppendItem(t *testing.T) {
	for _, c := range []struct {
		remaining int64
		reset     time.Duration
		want      string
	}{
		{19, 59*time.Second + time.Millisecond, `"api";r=19;t=60`},
		{0, 0, `"api";r=0;t=0`},
		{-1, time.Second, `"api";r=0;t=1`}, // never a negative remaining
		{4_000_000_000_000_000, 0, `"api";r=999999999999999;t=0`},
	} {
		if got := string(AppendItem([]byte("x: "), "api", c.remaining, c.reset)); got != "x: "+c.want {
			t.Errorf("AppendItem(%d, %v) = %s, want x: %s", c.remaining, c.reset, got, c.want)
		}
	}
}
