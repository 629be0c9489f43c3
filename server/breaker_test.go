package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
)

// breakerPolicies limits two paths by the same limit in Redis, one failing
// open and one failing closed.
const breakerPolicies = `
policies:
  - name: open
    match: /open/
    key: ip
    limits: ["3/m"]
    on_store_error: open
  - name: closed
    match: /closed/
    key: ip
    limits: ["3/m"]
    on_store_error: closed
`

// counter returns the value of the metric line that starts with prefix,
// 0 if there is none.
func (ts *testServer) counter(prefix string) int {
	ts.t.Helper()
	line := ts.metric(prefix + " ")
	if line == "" {
		return 0
	}
	n, err := strconv.ParseFloat(strings.TrimPrefix(line, prefix+" "), 64)
	if err != nil {
		ts.t.Fatalf("metric %q: %v", line, err)
	}
	return int(n)
}

// While Redis is down, requests stop reaching it: after the call that
// finds it failing, each request gets ErrStoreDown at once and its
// policy's on_store_error decides (open: 200, closed: 503), while one
// probe at a time goes to Redis after a backoff on the server's clock.
// Once a probe succeeds, Redis decides again. A Redis that hangs costs one
// timeout, not one per request.
func TestRedisDownStopsCalls(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	ts := startServer(t, `
store: {redis: "redis://`+rs.Addr()+`/0", timeout: 200ms, deny_cache: false}`+breakerPolicies,
		Options{Upstream: up.URL})
	br := ts.st.breaker
	if br == nil {
		t.Fatal("the Redis store is not behind a breaker")
	}
	statuses := func(paths ...string) []int {
		var got []int
		for _, p := range paths {
			got = append(got, ts.status(p))
		}
		return got
	}
	const n = 20 // requests while Redis is down, half on each policy
	whileDown := func(what string) {
		t.Helper()
		for i := range n / 2 {
			if got := statuses("/open/x", "/closed/x"); got[0] != 200 || got[1] != 503 {
				t.Fatalf("%s, request pair %d: %v, want [200 503] by on_store_error", what, i, got)
			}
		}
	}

	if got := statuses("/open/a", "/closed/a"); got[0] != 200 || got[1] != 200 {
		t.Fatalf("Redis up: %v", got)
	}

	// Killed: refused connections.
	rs.Kill()
	whileDown("Redis killed")
	st := br.Stats()
	if !st.Down || st.Outages != 1 || st.Failures != 1 || st.Probes != 0 || st.Primary != 2 {
		t.Fatalf("after %d requests with Redis killed: %+v, want down, 1 call sent (the failure), no probe yet", n, st)
	}
	if down := ts.counter(`sluice_store_errors_total{kind="down"}`); down != n-1 {
		t.Errorf("store errors of kind down: %d, want %d (every request after the first)", down, n-1)
	}
	if down, outages := ts.counter(`sluice_redis_down`), ts.counter(`sluice_redis_outages_total`); down != 1 || outages != 1 {
		t.Errorf("sluice_redis_down %d, sluice_redis_outages_total %d; want 1 and 1", down, outages)
	}
	ts.clock.Advance(sluice.DefaultProbeMinBackoff) // one probe is due
	whileDown("Redis killed, probed once")
	if st := br.Stats(); st.Failures != 2 || st.Probes != 1 {
		t.Fatalf("after the backoff: %+v, want exactly one probe (failed) sent", st)
	}

	// Back, empty. Only Redis refuses with 429 (the deny cache is off, and
	// the closed policy fails with 503). Redis is back once a probe, due
	// after the backoff, succeeds: hence the loop.
	rs.Restart()
	resumed := func(what string) {
		t.Helper()
		eventually(t, what, func() bool {
			ts.clock.Advance(sluice.DefaultProbeMaxBackoff) // a probe is due
			return ts.status("/closed/b") == 429
		})
	}
	resumed("Redis to decide again after its restart")
	if st := br.Stats(); st.Recoveries < 1 || st.Recoveries != st.Outages {
		t.Errorf("after Redis came back: %+v, want as many recoveries as outages", st)
	}

	// Hung: every call sent would wait for the 200ms timeout.
	timeouts := ts.counter(`sluice_store_errors_total{kind="timeout"}`)
	failures := br.Stats().Failures
	rs.Pause()
	whileDown("Redis hung")
	if got := ts.counter(`sluice_store_errors_total{kind="timeout"}`) - timeouts; got > 1 {
		t.Errorf("%d of %d requests waited for the timeout with Redis hung, want at most 1", got, n)
	}
	if got := br.Stats().Failures - failures; got != 1 {
		t.Errorf("%d calls sent to a hung Redis, want 1", got)
	}
	rs.Resume()
	resumed("Redis to decide again once resumed") // it kept the counter
	st = br.Stats()
	if st.Down || st.Outages < 2 || st.Recoveries != st.Outages {
		t.Errorf("stats %+v: want up, 2 outages or more, as many recoveries", st)
	}
	if down, outages := ts.counter(`sluice_redis_down`), ts.counter(`sluice_redis_outages_total`); down != 0 || outages != int(st.Outages) {
		t.Errorf("sluice_redis_down %d, sluice_redis_outages_total %d; want 0 and %d", down, outages, st.Outages)
	}
	logs := ts.logs.String()
	if down, up := strings.Count(logs, "sluice: store unavailable"), strings.Count(logs, "sluice: store recovered"); uint64(down) != st.Outages || uint64(up) != st.Recoveries {
		t.Errorf("%d lines down, %d up; want each of %d outages and %d recoveries logged once:\n%s", down, up, st.Outages, st.Recoveries, logs)
	}
	// Each names the Redis, as the line at start does.
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "sluice: store") && !strings.Contains(line, "at=") {
			t.Errorf("a line of the outage does not say which store: %s", line)
		}
	}
}

// A store error is counted by its cause; a call not sent because the
// store is known down, as down.
func TestErrorKind(t *testing.T) {
	for _, c := range []struct {
		err  error
		kind string
	}{
		{fmt.Errorf("%w for 1s (last error: %v)", sluice.ErrStoreDown, context.DeadlineExceeded), "down"},
		{fmt.Errorf("redis store: %w", context.DeadlineExceeded), "timeout"},
		{context.Canceled, "canceled"},
		{fmt.Errorf("redis store: %w", rate.ErrCostExceedsCapacity), "invalid"},
		{errors.New("dial tcp: connection refused"), "unavailable"},
	} {
		if got := errorKind(c.err); got != c.kind {
			t.Errorf("errorKind(%v) = %s, want %s", c.err, got, c.kind)
		}
	}
}

// With no request coming, Redis back is still found: the server hands the
// breaker a probe of its own while Redis is down, and sluice_redis_down
// returns to 0, where it stayed 1 until the next request.
func TestRedisBackWithoutRequests(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	ts := startServer(t, `
store: {redis: "redis://`+rs.Addr()+`/0", timeout: 200ms, deny_cache: false}`+breakerPolicies,
		Options{Upstream: up.URL})
	rs.Kill()
	if got := ts.status("/open/a"); got != 200 {
		t.Fatalf("Redis killed, an open policy: %d, want 200", got)
	}
	if down := ts.counter(`sluice_redis_down`); down != 1 {
		t.Fatalf("sluice_redis_down %d with Redis killed, want 1", down)
	}
	rs.Restart()
	eventually(t, "Redis found back with no request", func() bool {
		ts.clock.Advance(sluice.DefaultProbeMaxBackoff) // a probe is due
		return ts.counter(`sluice_redis_down`) == 0
	})
	if st := ts.st.breaker.Stats(); st.Recoveries != 1 {
		t.Errorf("stats %+v, want one recovery", st)
	}
}
