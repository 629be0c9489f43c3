package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	channelzpb "google.golang.org/grpc/channelz/grpc_channelz_v1"
	channelzsvc "google.golang.org/grpc/channelz/service"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
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
	// Envoy's deadline is for the calls that Redis, hung, leaves
	// unanswered. The others are to be answered (by Redis, up, by the deny
	// cache, or at once with the store down), and wait for their answers:
	// on a loaded machine Envoy's deadline may pass before the server
	// answers even so, and the call then runs on in the server while the
	// next one comes in, two calls at once where the sequence here has
	// one after the other.
	const envoy, patient = 20 * time.Millisecond, 10 * time.Second
	// A client's calls, 20 a minute, and a spammer's logins, 5 a minute
	// in a gcra limit, which a refusal of the deny cache can answer.
	//
	// send returns how long a call took, from before its deadline's clock
	// started: a call that ran out its deadline took at least that long,
	// however late a loaded client got to sending it. And it returns
	// whether the call left the client: one the client got to only after
	// its deadline, gRPC fails at once with DeadlineExceeded, unsent.
	send := func(deadline time.Duration, entries ...string) (resp *rlsv3.RateLimitResponse, took time.Duration, sent bool, err error) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		d := &ratelimitv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(entries); i += 2 {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
		}
		// gRPC sets the peer once it has queued the call's headers on the
		// connection, which then reach the server, its request after them.
		var p peer.Peer
		resp, err = c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}, grpc.Peer(&p))
		return resp, time.Since(start), p.Addr != nil, err
	}
	call := func(deadline time.Duration, entries ...string) (*rlsv3.RateLimitResponse, time.Duration, error) {
		resp, took, _, err := send(deadline, entries...)
		return resp, took, err
	}
	client := []string{"remote_address", "203.0.113.7"}
	spammer := []string{"path", "/login", "remote_address", "198.51.100.1"}
	// A call sent to the hung Redis runs out its deadline: the client's,
	// or the store's copy of it, a moment earlier, which makes the server
	// answer Unavailable. The server may go on with the call after its
	// client gave up: wait for the store's instrumentation, outside the
	// breaker, to count its error.
	//
	// The breaker takes such a call for one its deadline ended if it
	// reached Redis and ended at the server's copy of the deadline, or was
	// cancelled by the client's reset within 2ms of it. A loaded server
	// may take a call up late: after the deadline, and it fails the call
	// before it reaches Redis, or late enough that its copy of the
	// deadline comes well after the reset, which is then a cancellation,
	// of which the breaker takes no notice. So hung sends the call again,
	// on the same server time (the same call, to the breaker), until the
	// breaker surely took it for one its deadline ended: the store reports
	// the deadline, or sure says what the breaker made of it. It returns
	// how many of the calls reached Redis.
	down := func(err error) bool {
		return status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), sluice.ErrStoreDown.Error())
	}
	const timeouts, scripts = `sluice_store_errors_total{kind="timeout"}`, "sluice_redis_script_calls_total"
	hung := func(what string, sure func() bool) (reached int) {
		t.Helper()
		lost := 0
		for try := 1; ; try++ {
			errs, timedOut, sent, handled := ts.storeErrors(), ts.counter(timeouts), ts.counter(scripts), ts.grpcRequests()
			started, _ := grpcCalls(t, ts.Addrs().GRPC)
			_, took, left, err := send(envoy, client...)
			if code := status.Code(err); code != codes.DeadlineExceeded && code != codes.Unavailable || down(err) || took < 15*time.Millisecond {
				t.Fatalf("%s: %v after %v, want the 20ms deadline to pass", what, err, took)
			}
			// A call may be lost on the way, late: a client that gets to
			// it after its deadline does not send it, and gRPC's server
			// ends one whose deadline passed, or its client reset it,
			// before its handler reads the request. Neither reaches
			// sluice, and it is no try: hung sends it again.
			if left {
				eventually(t, what+": the gRPC server to end the call", func() bool {
					s, e := grpcCalls(t, ts.Addrs().GRPC)
					return s > started && e == s
				})
			}
			if !left || ts.grpcRequests() == handled {
				if lost++; lost == 20 {
					t.Fatalf("%s: %d calls lost before they reached sluice", what, lost)
				}
				try--
				continue
			}
			eventually(t, what+": the server to finish the call", func() bool { return ts.storeErrors() > errs })
			if ts.counter(scripts) > sent {
				reached++
				if ts.counter(timeouts) > timedOut {
					return reached
				}
			}
			if sure != nil && sure() {
				return reached
			}
			if try == 20 {
				t.Fatalf("%s: %d calls, %d of them to Redis, and none surely ended by its deadline", what, try, reached)
			}
		}
	}
	for i := range 5 {
		if resp, _, err := call(patient, spammer...); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("login %d of 5 a minute, Redis up: %v %v", i+1, resp, err)
		}
	}
	if resp, _, err := call(patient, spammer...); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the 6th login of 5 a minute, Redis up: %v %v", resp, err)
	}
	if resp, _, err := call(patient, client...); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
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
		if resp, _, err := call(patient, spammer...); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("step %d, Redis hung, a key it refused: %v %v, want OVER_LIMIT from the deny cache", i, resp, err)
		}
		var sure func() bool
		switch {
		case step.down:
			sure = func() bool { return br.Stats().Down }
		case i > 0:
			// The silence runs from step 0 on: whether the breaker
			// took this call for one its deadline ended changes
			// nothing of it.
			sure = func() bool { return true }
		}
		hung(fmt.Sprintf("step %d, Redis hung", i), sure)
		if st := br.Stats(); st.Down != step.down {
			t.Fatalf("step %d, Redis hung and silent for %v more: %+v, want down %v", i, step.advance, st, step.down)
		}
	}
	failures, sent := br.Stats().Failures, ts.counter(scripts)
	for i := range 10 {
		if _, took, err := call(patient, client...); !down(err) {
			t.Fatalf("call %d, Redis known down: %v after %v, want Unavailable (store down) at once", i, err, took)
		}
	}
	if st, n := br.Stats(), ts.counter(scripts)-sent; st.Failures != failures || st.Probes != 0 || n != 0 {
		t.Fatalf("stats %+v, %d script calls: calls reached the hung Redis while it was known down", st, n)
	}
	// The probe runs out its caller's deadline too: a failed probe, and
	// the next call is no probe.
	ts.clock.Advance(sluice.DefaultProbeMinBackoff)
	probes := hung("the probe, Redis hung", func() bool { return br.Stats().Failures > failures })
	if _, _, err := call(patient, client...); !down(err) {
		t.Fatalf("after the failed probe: %v, want Unavailable (store down) at once", err)
	}
	if st := br.Stats(); !st.Down || st.Probes != uint64(probes) || st.Failures != failures+1 {
		t.Fatalf("stats %+v: want down, %d probes, one failed", st, probes)
	}

	// Resumed, Redis decides again after the first probe. (It runs the
	// client's calls sent while it was hung too, which count against the
	// client's limit: another client's call is the probe.)
	rs.Resume()
	other := []string{"remote_address", "203.0.113.8"}
	eventually(t, "Redis to decide again once resumed", func() bool {
		ts.clock.Advance(sluice.DefaultProbeMaxBackoff) // a probe is due
		resp, _, err := call(patient, other...)
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

// grpcRequests counts the calls of Envoy's service that reached sluice,
// whatever their answer.
func (ts *testServer) grpcRequests() int {
	ts.t.Helper()
	_, body := get(ts.t, ts.Addrs().Admin, "/metrics")
	n := 0
	for _, line := range strings.Split(body, "\n") {
		if series, value, ok := strings.Cut(line, " "); ok && strings.HasPrefix(series, "sluice_requests_total{") && strings.Contains(series, `listener="grpc"`) {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				ts.t.Fatalf("metric %q: %v", line, err)
			}
			n += int(v)
		}
	}
	return n
}

// grpcCalls returns how many calls the gRPC server listening on addr has
// started and how many it has ended, those it ended before their handler
// (sluice's) ran included: channelz counts them, which importing its
// service turned on.
func grpcCalls(t *testing.T, addr string) (started, ended int64) {
	t.Helper()
	var cz channelzService
	channelzsvc.RegisterChannelzServiceToServer(&cz)
	for from := int64(0); ; {
		resp, err := cz.GetServers(context.Background(), &channelzpb.GetServersRequest{StartServerId: from})
		if err != nil {
			t.Fatal(err)
		}
		for _, srv := range resp.Server {
			for _, l := range srv.ListenSocket {
				if l.Name == addr {
					d := srv.Data
					return d.CallsStarted, d.CallsSucceeded + d.CallsFailed
				}
			}
			from = srv.Ref.ServerId + 1
		}
		if resp.End || len(resp.Server) == 0 {
			t.Fatalf("channelz knows no gRPC server listening on %s", addr)
		}
	}
}

// channelzService takes channelz's service, to call it in the process.
type channelzService struct{ channelzpb.ChannelzServer }

func (c *channelzService) RegisterService(_ *grpc.ServiceDesc, impl any) {
	c.ChannelzServer = impl.(channelzpb.ChannelzServer)
}
