package httplimit

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

// A request whose wait the server's shutdown ended is told so: it was
// told the rate limiter was unavailable, which sends an operator looking
// at the store.
func TestDetailDrained(t *testing.T) {
	out := policy.Outcome{Verdict: policy.Unavailable, Err: fmt.Errorf("held: %w", policy.ErrDrained)}
	if got := detail(context.Background(), &out, 3); !strings.Contains(got, "shutting down") || !strings.HasSuffix(got, "; retry in 3s") {
		t.Errorf("detail = %q, want the server shutting down, retry in 3s", got)
	}
}
