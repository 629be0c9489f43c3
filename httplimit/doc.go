// Package httplimit is net/http middleware that enforces a policy file,
// or a sluice.Limiter built in Go.
//
//	set, err := policy.LoadFile("sluice.yaml")
//	...
//	limit := httplimit.Middleware(set, memory.New(memory.Options{}), httplimit.Options{})
//	http.ListenAndServe(":8080", limit(mux))
//
// A program that sets its limits in code keys each request with a
// function instead (ByClientIP, or its own, such as one that reads an API
// key), and gets the same headers and bodies:
//
//	l, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "api", Limits: limits})
//	...
//	limit := httplimit.Limit(l, httplimit.ByClientIP(nil), httplimit.LimitOptions{})
//
// A policy file adds what code would have to write again: matching by
// route and method, several policies per request, plans, overrides,
// shadow mode, concurrency limits and reloading.
//
// The file's store section is acted on by `sluice serve` alone: the
// middleware decides against the store it is passed, so a program that
// wants the store the section describes builds it from set.Store(), with
// store/redis or store/memory.
//
// An allowed request is served with the rate limit headers of the most
// restrictive limit that applied:
//
//	RateLimit-Policy: "search";q=20;w=2
//	RateLimit: "search";r=13;t=1
//	X-RateLimit-Limit: 20
//	X-RateLimit-Remaining: 13
//	X-RateLimit-Reset: 1
//
// (the first two from draft-ietf-httpapi-ratelimit-headers-10, the last
// three the older convention, each family switchable in Options; t and
// X-RateLimit-Reset are whole seconds from now, rounded up, not a Unix
// time; on a refusal t is the
// wait, as Retry-After). Shadow policies send none. Middlewares stacked
// (one for the API, one for a route) each add their item to the
// RateLimit and RateLimit-Policy lists; the X-RateLimit-* fields, which
// hold one value, are the innermost's. They count requests: under a
// policy whose requests cost several units (cost: 5), q, r,
// X-RateLimit-Limit and X-RateLimit-Remaining are the units over the
// cost, rounded down, the requests that fit them.
//
// A refused request gets 429 Too Many Requests, the same headers, a
// Retry-After in whole seconds rounded up and never 0, and an RFC 9457
// body:
//
//	{"type":"about:blank","title":"Too Many Requests","status":429,
//	 "detail":"rate limited by policy \"search\" (limit gcra 10/s burst 20); retry in 1s",
//	 "retry_after":1,"violated-policies":["search"]}
//
// violated-policies names the limits that refused, the longest wait
// first, as RateLimit-Policy names them: a policy's name, or name.N for
// one of a policy's several limits.
//
// A request shed by the concurrency limit, or refused because the store
// failed under on_store_error: closed, gets 503 Service Unavailable with
// Retry-After and a problem body of the same shape, whose type is always
// about:blank (Options.ProblemType names the 429's problem only).
//
// An allowed request goes to the handler with the ResponseWriter as it
// came, so Flush and Hijack work, and holds its slot in the concurrency
// limit until the handler returns: a websocket, a server-sent event
// stream or a long poll holds it for as long as it stays open.
//
// The user a policy keys by (key: user) or matches on (authenticated:
// true) comes from the request context: an authentication middleware
// that runs first calls WithUser; or set Options.Identify.
//
// # Behind a router
//
// Policies match the request's path as the middleware receives it, in
// the form the policy file's paths section describes (see package
// policy). Put the middleware where the path is whole: in front of
// http.StripPrefix, not behind it, where /api/secret arrives as /secret
// and a policy on /api/secret decides nothing (a sub-router mounted under
// a prefix, as chi's Mount or gorilla/mux's PathPrefix, passes the whole
// path on). A router that reads paths otherwise than net/http's ServeMux
// serves, on a route, paths its policy does not match, unless the paths
// section says so: gorilla/mux (without UseEncodedPath) and gin (without
// UseRawPath) route /api%2Fsecret to /api/secret (decode_slash); echo's
// /users/:id takes /users/7/, and chi's StripSlashes serves /api/secret/
// on /api/secret (ignore_trailing_slash).
//
// A CORS preflight (OPTIONS) is a request like any other: a policy whose
// match names no method counts it, so a browser's cross-origin call with
// custom headers costs two units, and a refused preflight reaches the
// page as a CORS failure, not a 429. Answer preflights in front of the
// middleware (a CORS middleware placed first), or name the methods a
// policy limits. A handler that answers 429 itself does so under the
// headers of the request the middleware allowed, which say what its
// limits leave; it may set or delete them before it writes.
//
// # Cost
//
// On the allowed path the middleware allocates the key (one string) and
// the header values (one block, the response's own); everything else is
// precomputed when the policy file is loaded or pooled.
//
// # Files
//
//   - middleware.go: Options, Middleware, the headers and the problem body.
//   - limit.go: Limit, the middleware over a sluice.Limiter, and its keys.
package httplimit
