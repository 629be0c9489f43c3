package server

import (
	"net/http"
	"strings"
	"testing"
)

// NoPlayground turns the playground off on the built-in demo too, where
// it is on by default, and wins over Playground.
func TestNoPlayground(t *testing.T) {
	for _, o := range []Options{{NoPlayground: true}, {NoPlayground: true, Playground: true}} {
		ts := startServer(t, "", o)
		resp, err := http.Post("http://"+ts.Addrs().Admin+"/api/sim", "application/json", strings.NewReader(`{"scenario":"boundary"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("a simulation on the demo with Playground %t, NoPlayground %t: %d, want 403", o.Playground, o.NoPlayground, resp.StatusCode)
		}
	}
}
