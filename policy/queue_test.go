package policy

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// stillClock is a fake clock whose sleeps return at once without moving
// it, so that requests held back one after another all arrive at one
// instant, as concurrent requests do.
type stillClock struct {
	*ratetest.Clock
	mu     sync.Mutex
	sleeps []time.Duration
}

func (c *stillClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	return ctx.Err()
}

// max_delay on a gcra or token_bucket limit holds a request past the
// burst for its unit, reserved, as far as max_delay reaches: of 14
// requests at once under 10/s burst 9 with max_delay 400ms, 9 pass at
// once, the next 4 are held 100, 200, 300 and 400ms, each for a unit of
// its own, and the 14th is refused at once, not held only to be refused
// (NGINX's limit_req burst=12 delay=8). Before, every request past the
// burst waited the same 100ms and was decided again at one instant, when
// one unit at most had come back.
func TestMaxDelayReservesBucketUnits(t *testing.T) {
	for _, alg := range []string{"gcra", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			clock := &stillClock{Clock: ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
			e := generation(t, fmt.Sprintf(`
policies:
  - name: api
    limits: ["%s 10/s burst 9"]
    max_delay: 400ms
`, alg), memory.New(memory.Options{Clock: clock}), clock, Options{})
			for i := range 14 {
				r := httptest.NewRequest("GET", "/", nil)
				out := e.Enforce(t.Context(), &Request{HTTP: r, Header: r.Header})
				out.Done()
				var want time.Duration
				if i >= 9 {
					want = time.Duration(i-8) * 100 * time.Millisecond
				}
				switch {
				case i == 13:
					if out.Verdict != Refuse || out.Waited != 0 || out.RetryAfter != 100*time.Millisecond {
						t.Errorf("request 14: %v after %v, retry %v; want refused at once, retry in 100ms", out.Verdict, out.Waited, out.RetryAfter)
					}
				case out.Verdict != Allow || out.Waited != want:
					t.Errorf("request %d: %v after %v; want allowed after %v", i+1, out.Verdict, out.Waited, want)
				}
			}
		})
	}
}
