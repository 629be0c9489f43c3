package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// A Redis that took its whole connect timeout is named as such in the
// warning: the client's bare "context deadline exceeded" said neither
// what timed out nor after how long.
func TestUnreachableSaysWhatTimedOut(t *testing.T) {
	err := whyUnreachable(fmt.Errorf("dial: %w", context.DeadlineExceeded))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 5s") {
		t.Errorf("a timeout: %v, want it said as no answer within 5s, wrapping the cause", err)
	}
	refused := fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED)
	if got := whyUnreachable(refused); got != refused {
		t.Errorf("a refused connection: %v, want the error as it is", got)
	}
}
