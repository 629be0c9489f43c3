package httplimit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// A request whose wait the server's shutdown ended is told so: it was
// told the rate limiter was unavailable, which sends an operator looking
// at the store.
func TestDetailDrained(t *testing.T) {
	out := policy.Outcome{Verdict: policy.Unavailable, Err: fmt.Errorf("held: %w", policy.ErrDrained), RetryAfter: 3 * time.Second}
	if got := detail(context.Background(), &out); !strings.Contains(got, "shutting down") || !strings.HasSuffix(got, "; retry in 3s") {
		t.Errorf("detail = %q, want the server shutting down, retry in 3s", got)
	}
}

// A request whose wait the drain ended, and whose context has ended since
// (its client gone, or the server cutting it as the drain ends), is told
// of the drain with its wait, as the Enforcer decided and as grpclimit
// tells a call: the drain is what ended it, and a client still there
// learns when to try again, elsewhere.
func TestDetailDrainedEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := policy.Outcome{Verdict: policy.Unavailable, Err: policy.ErrDrained, RetryAfter: 3 * time.Second}
	if got, want := detail(ctx, &out), policy.ErrDrained.Error()+"; retry in 3s"; got != want {
		t.Errorf("detail = %q, want %q", got, want)
	}
}
