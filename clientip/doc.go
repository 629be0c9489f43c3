// Package clientip finds the address of the client behind a request, the
// way a rate limiter must: so that no client can choose its own key.
//
// By default the client is the immediate peer, http.Request.RemoteAddr. A
// forwarding header (X-Forwarded-For, Forwarded or X-Real-IP) is believed
// only when that peer is one of the trusted proxies configured in
// [Options]; otherwise any client could write its own header and pick the
// bucket it is counted in. Through trusted proxies, the chain of hops in
// the header is walked from the right, the hop nearest to this server, and
// the first address that is not a trusted proxy is the client: everything
// to its left was written by the client or by proxies it chose, so it is
// never read.
//
// Addresses are normalized (IPv4-mapped IPv6 becomes IPv4, zones and ports
// are dropped) and then grouped: an IPv6 client usually holds a whole /64,
// so by default every address in one /64 is one client, while an IPv4
// address is a client on its own (/32). Both prefix lengths are
// configurable.
//
// # Where to start
//
// [New] builds a [Resolver] from [Options]; [Resolver.FromRequest] returns
// the grouped client prefix of an *http.Request, and [Resolver.Resolve]
// does the same from a peer address and header values for other
// transports (gRPC metadata, for instance).
//
// # Files
//
//   - resolver.go: Options, Resolver, the walk over the hops.
//   - parse.go: the header parsers (X-Forwarded-For, RFC 7239 Forwarded,
//     X-Real-IP) and address normalization. They never panic and never
//     allocate for well-formed input; malformed hops stop the walk.
package clientip
