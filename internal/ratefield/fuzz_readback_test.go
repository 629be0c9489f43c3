package ratefield_test

import (
	"fmt"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/ratefield"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/retry"
)

// FuzzPolicyReadsBack: for any limit ParseLimit accepts, the
// RateLimit-Policy item's q per w never states more than the limit's
// rate, q is at least the capacity unless w was clamped, and sluice's own
// client (package retry) reads the policy and the RateLimit item back as
// written, within the 15 digits a Structured Field integer holds.
func FuzzPolicyReadsBack(f *testing.F) {
	for _, s := range []string{"10/s", "100/s burst 10", "3 per 2s burst 5", "3 per 7s", "1/month", "gcra 1 per 1ms burst 1000",
		"gcra 1 per 52124d", "fixed_window 4503599627370496 per 1us", "5 per 1500ms", "7 per 333us burst 9", "sliding_window 100/m"} {
		f.Add(s, int64(3), int64(1500000000))
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string, remaining int64, reset int64) {
		l, err := rate.ParseLimit(s)
		if err != nil {
			return
		}
		pol := string(ratefield.AppendPolicy(nil, "p", l))
		item := string(ratefield.AppendItem(nil, "p", remaining, time.Duration(reset)))
		var q, w int64 = -1, -1
		var n int
		if l.Calendar == rate.Month {
			n, _ = sscan(pol, &q, nil)
		} else {
			n, _ = sscan(pol, &q, &w)
		}
		if n == 0 || q < 1 || (l.Calendar != rate.Month && w < 1) {
			t.Fatalf("%v: policy %s", l, pol)
		}
		if l.Calendar != rate.Month {
			// q per w s must not exceed Count per Period: q*Period <= Count*w*1e9
			lhs := new(big.Int).Mul(big.NewInt(q), big.NewInt(int64(l.Period)))
			rhs := new(big.Int).Mul(big.NewInt(l.Count), big.NewInt(w))
			rhs.Mul(rhs, big.NewInt(1e9))
			if lhs.Cmp(rhs) > 0 {
				t.Fatalf("%v: policy %s overstates the rate", l, pol)
			}
			if w < 999_999_999_999_999 && q < min(l.Capacity(), 999_999_999_999_999) {
				t.Errorf("%v: policy %s: q below capacity %d", l, pol, l.Capacity())
			}
		}
		h := http.Header{}
		h.Set("RateLimit-Policy", pol)
		h.Set("RateLimit", item)
		qs := retry.ParseRateLimit(h, now)
		if len(qs) != 1 {
			t.Fatalf("%s / %s: %d quotas", pol, item, len(qs))
		}
		wantR := min(max(remaining, 0), 999_999_999_999_999)
		wantT := min(rate.CeilSeconds(time.Duration(reset)), 999_999_999_999_999)
		if qs[0].Remaining != wantR || qs[0].Reset != time.Duration(wantT)*time.Second && !(wantT > 9223372036 && qs[0].Reset == 1<<63-1) {
			t.Fatalf("item %s read as %+v, want r=%d t=%d", item, qs[0], wantR, wantT)
		}
	})
}

func sscan(pol string, q, w *int64) (int, error) {
	// `"p";q=Q;w=W`
	var n int
	var err error
	if w == nil {
		n, err = fmt.Sscanf(pol, `"p";q=%d`, q)
	} else {
		n, err = fmt.Sscanf(pol, `"p";q=%d;w=%d`, q, w)
	}
	return n, err
}
