package httplimit

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestHeadersCountRequestsOfCost: under a policy whose requests cost c
// units each, the RateLimit fields and X-RateLimit-* count requests, as
// the draft has them (no qu: the unit is the request): r and
// X-RateLimit-Remaining are how many more requests pass at once, and q
// per w is no more than the requests the policy serves. Counting units,
// they told a client pacing itself by them c times too much.
func TestHeadersCountRequestsOfCost(t *testing.T) {
	const span = 4 * time.Second
	item := regexp.MustCompile(`^"api";r=(\d+);t=\d+$`)
	for _, limit := range []string{"fixed_window 10 per 2s", "sliding_log 10 per 2s", "sliding_window 10 per 2s", "gcra 8/s burst 9", "token_bucket 8/s burst 8"} {
		e := newEnv(t, fmt.Sprintf("policies:\n  - {name: api, cost: 4, limits: [%q]}\n", limit), Options{}, nil)
		w := e.do(req{})
		m := item.FindStringSubmatch(w.Header().Get("RateLimit"))
		if w.Code != http.StatusOK || m == nil {
			t.Fatalf("%s: first request %d, RateLimit %q", limit, w.Code, w.Header().Get("RateLimit"))
		}
		r, _ := strconv.Atoi(m[1])
		if legacy := w.Header().Get("X-RateLimit-Remaining"); legacy != m[1] {
			t.Errorf("%s: X-RateLimit-Remaining %s, RateLimit r=%d", limit, legacy, r)
		}
		passed := 0
		for e.do(req{}).Code == http.StatusOK {
			passed++
		}
		if passed != r {
			t.Errorf("%s: RateLimit said r=%d more requests, %d passed", limit, r, passed)
		}
		q, per, ok := policyRate(w.Header().Get("RateLimit-Policy"))
		if !ok {
			t.Fatalf("%s: RateLimit-Policy %q", limit, w.Header().Get("RateLimit-Policy"))
		}
		served := 0
		for end := e.clock.Now().Add(span); e.clock.Now().Before(end); {
			e.clock.Advance(time.Millisecond)
			for e.do(req{}).Code == http.StatusOK {
				served++
			}
		}
		// A sliding_window's rate right after a burst is below its
		// long-run one, which q states; the others serve it from the start.
		if stated := q * int64(span) / int64(per); limit != "sliding_window 10 per 2s" && stated > int64(served) || stated == 0 {
			t.Errorf("%s: RateLimit-Policy %s states %d requests in %v, %d served", limit, w.Header().Get("RateLimit-Policy"), stated, span, served)
		}
		// Every limit here holds 2 requests of cost 4 (8 or 9 units, or 10).
		if l := w.Header().Get("X-RateLimit-Limit"); l != "2" {
			t.Errorf("%s: X-RateLimit-Limit %s, want 2, the requests of cost 4 a fresh key passes", limit, l)
		}
	}
}

// TestHeadersFewestRequestsAcrossCosts: with policies of different costs
// on one request, the fields report the limit with the fewest requests
// left, not the fewest units: 9 units at cost 1 are 9 requests, 20 at
// cost 4 are 5, and 5 is what passes.
func TestHeadersFewestRequestsAcrossCosts(t *testing.T) {
	e := newEnv(t, `policies:
  - {name: cheap, limits: ["fixed_window 10 per 1m"]}
  - {name: dear, cost: 4, limits: ["fixed_window 24 per 1m"]}
`, Options{}, nil)
	w := e.do(req{})
	if got := w.Header().Get("RateLimit"); got != `"dear";r=5;t=60` {
		t.Errorf("RateLimit %q, want the dear policy's 5 requests", got)
	}
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "5" {
		t.Errorf("X-RateLimit-Remaining %s, want 5", got)
	}
	passed := 0
	for e.do(req{}).Code == http.StatusOK {
		passed++
	}
	if passed != 5 {
		t.Errorf("%d more passed, want the 5 the headers said", passed)
	}
}
