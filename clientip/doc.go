// Package clientip finds the address of the client behind a request, the
// way a rate limiter must: so that no client can choose its own key.
//
// By default the client is the immediate peer, http.Request.RemoteAddr. A
// forwarding header (X-Forwarded-For, Forwarded, X-Real-IP or a CDN's
// CF-Connecting-IP, True-Client-IP or Fastly-Client-IP) is believed
// only when that peer is one of the trusted proxies configured in
// [Options]; otherwise any client could write its own header and pick the
// bucket it is counted in. Through trusted proxies, the chain of hops in
// the header is walked from the right, the hop nearest to this server, and
// the first address that is not a trusted proxy is the client: everything
// to its left was written by the client or by proxies it chose, so it is
// never read. When the hop a trusted proxy wrote is not an address
// ("unknown", an obfuscated identifier, garbage, an element with no
// "for" or with two), the walk stops there and the client is the proxy
// to its right, or the peer: every such request shares that proxy's key.
// A trusted proxy must write its Forwarded values quoted where they may
// hold what the client sent: NGINX's host=$host unquoted lets a Host of
// "x,for=192.0.2.1" end the proxy's element and begin one that names
// the client's choice, which no parser can tell from a real one; quote
// it (host="$host") or send X-Forwarded-For.
//
// Addresses are normalized (IPv4-mapped IPv6 becomes IPv4, zones and ports
// are dropped) and then grouped: an IPv6 host picks any address in its
// /64, so by default every address in one /64 is one client, while an
// IPv4 address is a client on its own (/32). Both prefix lengths are
// configurable, and a network is often delegated more than a /64 (a /56
// or a /48, 256 or 65,536 of them): a client holding one can take a fresh
// key in each /64, unless Options.IPv6Prefix is set shorter. An address in
// the NAT64 well-known prefix 64:ff9b::/96 is an IPv4 client seen through
// a translator and is grouped as that IPv4 address; other forms that
// embed an IPv4 address (6to4, Teredo, a translator's own prefix) are
// grouped as the IPv6 addresses they are.
//
// A request with no IP address at all (a Unix socket peer, untrusted or
// with no usable header) has the invalid Prefix: a caller that counts it
// counts all such requests as one client.
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
