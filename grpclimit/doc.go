// Package grpclimit enforces a policy file, or a sluice.Limiter built in
// Go, on gRPC servers, with unary and stream server interceptors:
//
//	l := grpclimit.New(set, store, grpclimit.Options{})
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(l.Unary),
//		grpc.ChainStreamInterceptor(l.Stream),
//	)
//
// A program that sets its limits in code keys each call with a function
// instead (ByPeer, or its own, such as one that reads an API key from the
// metadata), and gets the same answers:
//
//	k := grpclimit.Limit(limiter, grpclimit.ByPeer(nil), grpclimit.LimitOptions{})
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(k.Unary), grpc.ChainStreamInterceptor(k.Stream))
//
// What follows is said of a Limiter and holds for a Keyed alike, with
// the Keyed's limits in place of policies.
//
// The file's store section is acted on by `sluice serve` alone: the
// Limiter decides against the store it is passed, so a program that wants
// the store the section describes builds it from set.Store(), with
// store/redis or store/memory.
//
// Policies see a call as an HTTP/2 request: method POST, the full method
// name as path (match: /pkg.Service/Method, or /pkg.Service/ for a whole
// service; a name an unknown service handler gets, such as
// /pkg.Service//Method, is cleaned first, as ServeMux cleans paths),
// :authority as host, metadata as headers (key: "header:x-api-key"), and
// the peer's address as ip (forwarding metadata, and plans.header, are
// read only from trusted proxies, as for HTTP; a Unix socket peer has no
// address, whatever path it bound). A stream is decided once, when it opens, and holds its slot
// in the concurrency limit until it ends.
//
// Every call is decided, health checks included, unless Options.Skip
// skips it: a policy with no match limits the health service too, and
// a client's probes, or probes shed under load, may then take the
// server out of service. A server that answers probes (Kubernetes' gRPC
// probes, a load balancer's) and has such a policy skips the service:
//
//	grpclimit.Options{Skip: grpclimit.SkipServices("grpc.health.v1.Health")}
//
// A skipped call bypasses the Limiter: no policy decides it, one that
// names it included, and it takes no slot in the concurrency limit. Skip
// is not the default because the Limiter cannot tell a catch-all policy
// from one written for the health service, and would silently turn the
// latter off (see Options.Skip). SkipServices skips exact method names
// only: a spelling a hop would clean into another method is decided as
// that method.
//
// A refused call fails with RESOURCE_EXHAUSTED, and its status carries a
// google.rpc.RetryInfo (the exact retry delay) and a
// google.rpc.QuotaFailure (one violation per refusing policy, subject
// "policy:NAME"). A shed call, or one refused because the store failed
// under on_store_error: closed, fails with UNAVAILABLE and a RetryInfo,
// whatever the store's error (a Redis call that timed out is no
// DEADLINE_EXCEEDED of the call's). Both send retry-after metadata in
// whole seconds and grpc-retry-pushback-ms, the exact wait in
// milliseconds, which gRPC's own retries (gRFC A6) honour: a client whose
// retry policy lists the code waits that long rather than its own
// backoff.
//
// gRPC's retries sleep out any pushback and end only with the call's
// context, so a wait the call's deadline would end first, or one longer
// than Options.MaxPushback (a minute by default: not an hourly or monthly
// quota's), is sent as -1, which tells the client not to retry: it gets
// the refusal at once, its details and the true wait in RetryInfo with
// it, rather than DEADLINE_EXCEEDED at its deadline or, with none, a
// sleep of weeks.
//
// Every decided call also gets ratelimit and ratelimit-policy metadata
// unless Options.NoHeaders. A call that fails, refused or failed by its
// handler, gets its metadata in the trailers, a trailers-only response as
// gRPC errors usually are (a call whose client has headers is committed,
// and gRPC retries never retry it); a call that is served gets it with
// the response headers (a stream's, when its handler first sends), or
// with the trailers if they were sent already; so Limiters chained (one for the server, one for a service) keep each
// other's refusals trailers-only. An interceptor that runs before the
// Limiter and sets or sends headers (a request id) makes every failure,
// refusals included, a response with headers, which gRPC retries do not
// retry: have it send its metadata in the trailers. A call whose own
// context ends before its verdict (while it waits under max_delay) fails
// with its context's status.
//
// # Files
//
//   - interceptor.go: Options, Limiter, its Unary and Stream interceptors,
//     SkipServices, the pushback of a refusal, and the stream that adds
//     the metadata to a stream's headers.
//   - limit.go: Keyed, the interceptors over a sluice.Limiter, and ByPeer.
package grpclimit
