package server_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/server"
)

// The built-in demo, as `sluice serve` runs it with no flags, on a port
// of its own: the demo upstream behind the demo policies.
func Example() {
	s, err := server.New(server.Options{
		Listen:      "127.0.0.1:0",
		CheckListen: server.Off,
		AdminListen: server.Off,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	resp, err := http.Get("http://" + s.Addrs().Proxy + "/hello")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status, resp.Header.Get("RateLimit-Policy"))

	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// 200 OK "api";q=10;w=60
	// stopped: <nil>
}
