package grpclimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
)

// refusingStore is a store whose every call fails at once, as a Redis
// store's does with its server gone.
type refusingStore struct{}

var errRefused = errors.New("redis store: connection refused")

func (refusingStore) Decide(context.Context, rate.Request) (rate.Decision, error) {
	return rate.Decision{}, errRefused
}

func (refusingStore) DecideAll(context.Context, []rate.Request, []rate.Decision) (rate.Decision, error) {
	return rate.Decision{}, errRefused
}

// TestInterceptorOverFallback: over a sluice.Fallback whose store is
// down, New's interceptors answer as Limit's do (TestKeyedOverFallback):
// a fail-closed refusal is UNAVAILABLE, with the Fallback's RetryInfo
// and no QuotaFailure, not a quota's RESOURCE_EXHAUSTED, and a fail-open
// pass carries no quota it did not decide.
func TestInterceptorOverFallback(t *testing.T) {
	const config = `
policies:
  - {name: api, limits: ["10/s"], on_store_error: closed}
`
	for _, mode := range []sluice.FailureMode{sluice.FailClosed, sluice.FailOpen} {
		t.Run(mode.String(), func(t *testing.T) {
			// On a clock that stands still, no probe reaches the store.
			clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			fb := sluice.NewFallback(refusingStore{}, sluice.FallbackOptions{Mode: mode, Timeout: -1, Clock: clock})
			c := serveStore(t, config, fb)
			for i := range 2 { // the store's failure, then the breaker open
				var hdr, trl metadata.MD
				_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
				quota := append(append(hdr["ratelimit"], trl["ratelimit"]...), append(hdr["ratelimit-policy"], trl["ratelimit-policy"]...)...)
				if mode == sluice.FailOpen {
					if err != nil || len(quota) != 0 {
						t.Errorf("call %d: %v, quota %q; want served, with no quota", i+1, err, quota)
					}
					continue
				}
				st := status.Convert(err)
				var qf *errdetails.QuotaFailure
				for _, d := range st.Details() {
					if d, ok := d.(*errdetails.QuotaFailure); ok {
						qf = d
					}
				}
				if st.Code() != codes.Unavailable || retryInfo(st) != time.Second || qf != nil || len(quota) != 0 {
					t.Errorf("call %d: %v (RetryInfo %v, QuotaFailure %v, quota %q); want UNAVAILABLE after a second, no quota",
						i+1, err, retryInfo(st), qf, quota)
				}
				if got := trl["retry-after"]; len(got) != 1 || got[0] != "1" {
					t.Errorf("call %d: retry-after %q, want 1", i+1, got)
				}
			}
		})
	}
}
