package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/rueidis"
)

// A Redis that took its whole connect timeout is named as such in the
// warning: the client's bare "context deadline exceeded" said neither
// what timed out nor after how long.
func TestUnreachableSaysWhatTimedOut(t *testing.T) {
	timeout := fmt.Errorf("dial: %w", context.DeadlineExceeded)
	err := whyUnreachable(timeout, &rueidis.ClientOption{})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 5s") {
		t.Errorf("a timeout: %v, want it said as no answer within 5s, wrapping the cause", err)
	}
	// The URL's dial_timeout is the one that ran out.
	co, perr := rueidis.ParseURL("redis://127.0.0.1:6379?dial_timeout=300ms")
	if perr != nil {
		t.Fatal(perr)
	}
	if err := whyUnreachable(timeout, &co); !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Errorf("a timeout under dial_timeout=300ms: %v, want it said as no answer within 300ms", err)
	}
	refused := fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED)
	if got := whyUnreachable(refused, &co); got != refused {
		t.Errorf("a refused connection: %v, want the error as it is", got)
	}
}
