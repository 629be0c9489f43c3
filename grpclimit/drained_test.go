package grpclimit

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/policy"
)

// A call whose wait the server's shutdown ended is UNAVAILABLE, and told
// why: not that the rate limiter is unavailable, which sends an operator
// looking at the store.
func TestRefusalDrained(t *testing.T) {
	out := policy.Outcome{Verdict: policy.Unavailable, Err: policy.ErrDrained, RetryAfter: 2 * time.Second}
	st := status.Convert(refusal(context.Background(), &out))
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "shutting down") {
		t.Errorf("status %v %q, want UNAVAILABLE saying the server is shutting down", st.Code(), st.Message())
	}
}
