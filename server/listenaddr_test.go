package server

import (
	"context"
	"errors"
	"testing"
)

// stopAtOnce runs s with a context already ended: it shuts down at once,
// closing what New opened.
func stopAtOnce(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Error(err)
	}
}

// A listen address that cannot be one is a usage error (ErrOptions),
// found before any listener opens: it was found only as net.Listen
// failed, after the listeners before it had opened, and reported as a
// failure to start.
func TestListenAddressIsAnOption(t *testing.T) {
	for _, tt := range []struct {
		name string
		o    Options
	}{
		{"proxy", Options{Listen: "nonsense", CheckListen: Off, GRPCListen: Off, AdminListen: Off}},
		{"check", Options{Listen: Off, CheckListen: "8081", GRPCListen: Off, AdminListen: Off}},
		{"admin", Options{Listen: Off, CheckListen: Off, GRPCListen: Off, AdminListen: "bad-address"}},
		{"gRPC", Options{Listen: Off, CheckListen: Off, GRPCListen: "127.0.0.1:99999", AdminListen: Off}},
	} {
		s, err := New(tt.o)
		if err == nil {
			stopAtOnce(t, s)
			t.Errorf("%s: started, want a bad listen address refused", tt.name)
			continue
		}
		if !errors.Is(err, ErrOptions) {
			t.Errorf("%s: %v, want an error marked ErrOptions", tt.name, err)
		}
	}
	// What net.Listen takes passes: a port alone, an empty host.
	s, err := New(Options{Listen: ":0", CheckListen: Off, GRPCListen: Off, AdminListen: "localhost:0"})
	if err != nil {
		t.Fatalf(":0 and localhost:0: %v", err)
	}
	stopAtOnce(t, s)
}
