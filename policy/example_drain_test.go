package policy_test

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/policy"
)

// A server of your own bounds the holds of its policies (max_delay, a
// leaky_bucket's turn) by its shutdown, as sluice serve does: the Drain
// in every request's context, begun as the server starts to shut down,
// with the time the shutdown allows. A request that would be held past
// it is refused at once, or answered Unavailable if already held, rather
// than cut with no answer and its unit spent.
func ExampleWithDrain() {
	var drain policy.Drain
	srv := &http.Server{
		Addr:    "127.0.0.1:8080",
		Handler: http.NotFoundHandler(), // httplimit's policy middleware around your handler
		BaseContext: func(net.Listener) context.Context {
			return policy.WithDrain(context.Background(), &drain)
		},
	}
	shutdown := func(ctx context.Context, timeout time.Duration) error {
		drain.Begin(time.Now().Add(timeout)) // on the Enforcer's clock
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return srv.Shutdown(ctx)
	}
	_ = shutdown
}
