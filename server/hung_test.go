package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Envoy calls ShouldRateLimit with a deadline of its own, 20ms by default,
// shorter than the store's timeout. A Redis that hangs (stopped: its
// connections stay open, nothing answers) lets every such call run out its
// deadline; once Redis has completed no call for longer than the store's
// timeout, on the server's clock, it is down: calls fail with Unavailable
// at once, for Envoy's failure_mode_deny to decide, and only probes reach
// Redis, with backoff. A refusal the deny cache still holds is no answer
// of Redis and does not put that off. Resumed, Redis decides again after
// the first probe.
func TestHungRedisBreakerEnvoyDeadlines(t *testing.T) {
	rs := redistest.Start(t)
	// The policy file carries the store section; its one policy, on a
	// path no request takes, is there because a file without policies is
	// refused.
	ts := startServer(t, `store: {redis: "redis://`+rs.Addr()+`/0", timeout: 200ms}
policies: [{name: unused, match: /unused/, limits: ["1/s"]}]`,
		Options{EnvoyConfigs: []string{"../examples/envoy/config"}})
	br := ts.st.breaker
	c, _ := envoyClient(t, ts)
	// A client's calls, 20 a minute, and a spammer's logins, 5 a minute
	// in a gcra limit, which a refusal of the deny cache can answer.
	call := func(entries ...string) (*rlsv3.RateLimitResponse, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond) // Envoy's
		defer cancel()
		d := &ratelimitv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(entries); i += 2 {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
		}
		start := time.Now()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		return resp, time.Since(start), err
	}
	client := []string{"remote_address", "203.0.113.7"}
	spammer := []string{"path", "/login", "remote_address", "198.51.100.1"}
	// A call sent to the hung Redis runs out its deadline: the client's,
	// or the store's copy of it, a moment earlier, which makes the server
	// answer Unavailable. The server may go on with the call after its
	// client gave up: wait for the store's instrumentation, outside the
	// breaker, to count its error.
	down := func(err error) bool {
		return status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), sluice.ErrStoreDown.Error())
	}
	hung := func(what string) {
		t.Helper()
		errs := ts.storeErrors()
		_, took, err := call(client...)
		if code := status.Code(err); code != codes.DeadlineExceeded && code != codes.Unavailable || down(err) || took < 15*time.Millisecond {
			t.Fatalf("%s: %v after %v, want the 20ms deadline to pass", what, err, took)
		}
		eventually(t, what+": the server to finish the call", func() bool { return ts.storeErrors() > errs })
	}
	for range 5 {
		call(spammer...)
	}
	if resp, _, err := call(spammer...); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the 6th login of 5 a minute, Redis up: %v %v", resp, err)
	}
	if resp, _, err := call(client...); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("Redis up: %v %v", resp, err)
	}

	rs.Pause()
	for i, step := range []struct {
		advance time.Duration // the server's clock, before the call
		down    bool          // after it
	}{
		{0, false},                      // the silence starts
		{100 * time.Millisecond, false}, // 100ms of the 200ms timeout
		{100 * time.Millisecond, false}, // 200ms: not longer than it
		{time.Millisecond, true},
	} {
		ts.clock.Advance(step.advance)
		if resp, _, err := call(spammer...); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("step %d, Redis hung, a key it refused: %v %v, want OVER_LIMIT from the deny cache", i, resp, err)
		}
		hung(fmt.Sprintf("step %d, Redis hung", i))
		if st := br.Stats(); st.Down != step.down {
			t.Fatalf("step %d, Redis hung and silent for %v more: %+v, want down %v", i, step.advance, st, step.down)
		}
	}
	failures := br.Stats().Failures
	for i := range 10 {
		if _, took, err := call(client...); !down(err) {
			t.Fatalf("call %d, Redis known down: %v after %v, want Unavailable (store down) before the deadline", i, err, took)
		}
	}
	if st := br.Stats(); st.Failures != failures || st.Probes != 0 {
		t.Fatalf("stats %+v: calls reached the hung Redis while it was known down", st)
	}
	// The probe runs out its caller's deadline too: a failed probe, and
	// the next call is no probe.
	ts.clock.Advance(sluice.DefaultProbeMinBackoff)
	hung("the probe, Redis hung")
	if _, _, err := call(client...); !down(err) {
		t.Fatalf("after the failed probe: %v, want Unavailable (store down) at once", err)
	}
	if st := br.Stats(); !st.Down || st.Probes != 1 || st.Failures != failures+1 {
		t.Fatalf("stats %+v: want down, 1 probe, failed", st)
	}

	rs.Resume()
	eventually(t, "Redis to decide again once resumed", func() bool {
		ts.clock.Advance(sluice.DefaultProbeMaxBackoff) // a probe is due
		resp, _, err := call(client...)
		return err == nil && resp.OverallCode == rlsv3.RateLimitResponse_OK
	})
	if st := br.Stats(); st.Down || st.Outages != 1 || st.Recoveries != 1 {
		t.Errorf("stats %+v: want up, 1 outage, 1 recovery", st)
	}
}

// storeErrors counts the store's errors of every kind.
func (ts *testServer) storeErrors() int {
	n := 0
	for _, kind := range []string{"down", "timeout", "canceled", "invalid", "unavailable"} {
		n += ts.counter(`sluice_store_errors_total{kind="` + kind + `"}`)
	}
	return n
}
