package server

import (
	"context"
	"errors"
	"net"
	"testing"
)

// A server told to stop while it starts opens no listener and connects
// to no store: NewContext returns ErrStopped, with ctx's error, and
// closes the listeners it was given.
func TestNewContextStopped(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	given := localListener(t)
	srv, err := NewContext(ctx, Options{AdminListener: given, Listen: "127.0.0.1:0", CheckListen: "127.0.0.1:0"})
	if srv != nil || !errors.Is(err, ErrStopped) || !errors.Is(err, context.Canceled) {
		t.Fatalf("NewContext with its context ended: %v, %v; want ErrStopped and context.Canceled", srv, err)
	}
	if _, err := given.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the given listener: Accept %v, want it closed", err)
	}
}
