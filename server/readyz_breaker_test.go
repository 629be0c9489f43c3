package server

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// /readyz follows the breaker in front of Redis: a Redis that answers
// again is not yet one that decides, until the breaker's probe lets
// calls through (a backoff, up to seconds, later). A pod ready meanwhile
// would join the Service while its calls fail.
func TestReadyzFollowsTheBreaker(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	ts := startServer(t, `
store: {redis: "redis://`+rs.Addr()+`/0", timeout: 200ms, deny_cache: false}`+breakerPolicies,
		Options{Upstream: up.URL})
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + ts.Addrs().Admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	rs.Pause()
	if got := ts.status("/closed/x"); got != 503 {
		t.Fatalf("Redis hung, a closed policy: %d, want 503", got)
	}
	if !ts.st.breaker.Stats().Down {
		t.Fatal("the breaker did not take the hung Redis down")
	}
	rs.Resume()
	// Redis answers; the breaker's next probe is a backoff away on the
	// server's clock, which has not moved.
	if code, body := readyz(); code != 503 || !strings.Contains(body, "breaker") {
		t.Errorf("/readyz with Redis back and the breaker still down: %d %q, want 503 naming the breaker", code, body)
	}
	eventually(t, "the breaker to let calls through", func() bool {
		ts.clock.Advance(sluice.DefaultProbeMaxBackoff)
		ts.status("/closed/y")
		return !ts.st.breaker.Stats().Down
	})
	if code, body := readyz(); code != 200 {
		t.Errorf("/readyz with Redis back and the breaker up: %d %q, want 200", code, body)
	}
}
