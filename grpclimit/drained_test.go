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

// A call whose wait the drain ended, and whose context has ended since,
// is still told of the drain, UNAVAILABLE with its wait, as httplimit
// tells a request: not the context's status, which would hide why.
func TestRefusalDrainedEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := policy.Outcome{Verdict: policy.Unavailable, Err: policy.ErrDrained, RetryAfter: 2 * time.Second}
	st := status.Convert(refusal(ctx, &out))
	if want := policy.ErrDrained.Error() + "; retry in 2s"; st.Code() != codes.Unavailable || st.Message() != want {
		t.Errorf("status %v %q, want UNAVAILABLE %q", st.Code(), st.Message(), want)
	}
}
