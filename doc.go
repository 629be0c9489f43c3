// Package sluice is a rate limiter for HTTP and gRPC APIs: exact to the
// last token, in one process or shared by many through Redis.
//
// # Getting started
//
// In a Go program, create a [Limiter] and ask it about each request:
//
//	lim, err := sluice.NewLimiter(sluice.LimiterOptions{
//		Limits: []rate.Limit{{Count: 10, Period: time.Second}}, // gcra, 10/s
//	})
//	...
//	d, err := lim.Allow(ctx, userID)
//	if err != nil { ... }      // the store could not decide
//	if !d.Allowed { ... }      // refused: retry in d.RetryAfter
//
// Limits are usually written as text and parsed with [rate.ParseLimit]:
// "10/s", "1000/d" (a quota per UTC day), "20/s burst 40", "sliding_log 5
// per 15m". A limiter may hold several (10/s and 1000/d), which pass or
// refuse together;
// [AllowAll] decides requests on several keys as one (per account and per
// IP). [Limiter.Wait] blocks until a request may pass, for clients that
// pace themselves. [Limiter.Reset] forgets a key, as after a successful
// login.
//
// # What to import for what
//
//	sluice               Limiter, AllowAll and the Store interface: start here;
//	                     Fallback, what to do while a shared store is down
//	sluice/rate          the definitions: Limit, ParseLimit, Algorithm, Decision,
//	                     Request, and each algorithm as a pure step function
//	sluice/store/memory  the in-process store, the default
//	sluice/store/redis   one state shared by many instances, through Redis
//	sluice/httplimit     net/http middleware: keys from requests, standard headers
//	sluice/grpclimit     gRPC server interceptors
//	sluice/policy        limits, keys and failure modes from a config file
//	sluice/metrics       Prometheus counters for the policy middlewares, as sluice serve's
//	sluice/retry         the client side: an http.Client that honours 429s
//
// The sluice command (cmd/sluice) runs the same limits as a standalone
// service.
//
// # Which algorithm
//
// Every algorithm computes in integer microseconds, and the memory and
// Redis stores run the same definition, so they agree to the last token.
// The default, gcra, suits most API limits.
//
//	algorithm       pick it for
//	gcra            API limits with bursts (the default)
//	token_bucket    the same policy as gcra, kept as a bucket of tokens
//	leaky_bucket    shaping: delay requests to a steady pace rather than
//	                refuse them
//	fixed_window    quotas per UTC day or calendar month
//	sliding_window  per-minute or per-hour counts without a fixed window's
//	                double burst at the boundary (an estimate, never above
//	                the count)
//	sliding_log     exact "at most N in any period" for small N, such as
//	                login attempts
//
// Every algorithm but sliding_log keeps a few numbers per key; sliding_log
// keeps the time of every admitted unit.
//
// # When the store is down
//
// A shared store can fail. [NewFallback] wraps one with a [FailureMode]:
// fail open (availability first), fail closed (protection first), decide
// locally in memory until the shared store is back, or return
// [ErrStoreDown] at once so that the caller applies its own policy (what
// sluice serve does, per policy). In every mode it stops sending calls to
// a store it knows is down, probing it with backoff instead, and a refusal
// the store can still give without I/O (the Redis store's deny cache)
// stands. A store that hangs is down too, even when every caller's
// deadline ends its calls first: once it has completed no call for longer
// than MaxSilence. A store that still answers some calls in time, however
// slowly others go under load, is not. On a Redis Cluster each master is
// down or up on its own: one dead master sends its own keys to the failure
// mode, not the others'.
//
// # Decisions
//
// A refusal is a decision, not an error: [rate.Decision] says Allowed,
// Remaining, RetryAfter (exact: wait that long and the same request
// passes) and ResetAfter. An error means the limiter could not decide, or
// the request can never pass (its cost exceeds the limit's capacity).
package sluice
