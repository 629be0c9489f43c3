package server

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
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

// A Redis that accepts the connection and answers nothing holds the
// dial for its whole timeout (5 seconds by default); a server told to
// stop meanwhile returns ErrStopped at once, not after it.
func TestNewContextStoppedWhileDialling(t *testing.T) {
	l := localListener(t)
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, silent
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		srv *Server
		err error
	}
	done := make(chan result, 1)
	go func() {
		srv, err := NewContext(ctx, Options{RedisURL: "redis://" + l.Addr().String() + "/0", Listen: Off, CheckListen: "127.0.0.1:0", AdminListen: Off})
		done <- result{srv, err}
	}()
	c := <-accepted
	accepted <- c
	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(3 * time.Second): // the dial alone takes 5s or more
		t.Fatal("NewContext still starting 3s after its context ended, the Redis dial not cut short")
	}
	if r.srv != nil || !errors.Is(r.err, ErrStopped) {
		t.Fatalf("NewContext stopped while Redis was dialled: %v, %v; want ErrStopped", r.srv, r.err)
	}
}
