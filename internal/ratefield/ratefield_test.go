package ratefield

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

func TestAppendPolicy(t *testing.T) {
	for _, c := range []struct {
		name string
		l    rate.Limit
		want string
	}{
		{"api", rate.Limit{Count: 20, Period: time.Minute}, `"api";q=20;w=60`},
		// A burst of 40 at 20/s takes 2s to come back.
		{"burst", rate.Limit{Algorithm: rate.TokenBucket, Count: 20, Period: time.Second, Burst: 40}, `"burst";q=40;w=2`},
		// 3 per 7s: w rounds 7s up, and stays whole.
		{"odd", rate.Limit{Count: 3, Period: 7 * time.Second}, `"odd";q=3;w=7`},
		{"monthly", rate.Limit{Count: 10000, Period: 30 * 24 * time.Hour, Calendar: rate.Month}, `"monthly";q=10000`},
		{`we"ird\é`, rate.Limit{Count: 1, Period: time.Second}, `"we\"ird\\??";q=1;w=1`},
		// A count of 16 digits is written as the largest of 15 a
		// Structured Field holds; a burst back within a microsecond still
		// has a window of 1s, as w is never 0.
		{"huge", rate.Limit{Count: 4_000_000_000_000_000, Period: time.Microsecond}, `"huge";q=999999999999999;w=1`},
		{"quick", rate.Limit{Algorithm: rate.GCRA, Count: 1_000_000, Period: time.Microsecond, Burst: 1}, `"quick";q=1;w=1`},
	} {
		if got := string(AppendPolicy(nil, c.name, c.l)); got != c.want {
			t.Errorf("AppendPolicy(%q, %v) = %s, want %s", c.name, c.l, got, c.want)
		}
	}
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
