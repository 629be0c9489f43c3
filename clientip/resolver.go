package clientip

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
)

// The forwarding headers a Resolver can read.
const (
	XForwardedFor = "X-Forwarded-For"
	Forwarded     = "Forwarded"
	XRealIP       = "X-Real-Ip"
	// The headers in which a CDN's edge sends the one address it took the
	// connection from, read as X-Real-IP is.
	CFConnectingIP = "Cf-Connecting-Ip" // Cloudflare
	TrueClientIP   = "True-Client-Ip"   // Akamai, Cloudflare Enterprise
	FastlyClientIP = "Fastly-Client-Ip" // Fastly
)

// Options configures a Resolver. The zero value trusts no proxy, groups
// IPv6 clients by /64 and IPv4 clients by /32: the right setting for a
// server that faces clients directly.
type Options struct {
	// TrustedProxies lists the peers whose forwarding header is believed,
	// as CIDR prefixes (a single address is a /32 or /128). Empty: the
	// peer is always the client and no header is ever read.
	TrustedProxies []netip.Prefix
	// TrustNonIP also trusts peers that have no IP address, such as a
	// reverse proxy connected over a Unix socket. False by default.
	TrustNonIP bool
	// Header is the forwarding header the trusted proxies set:
	// X-Forwarded-For (the default), Forwarded (RFC 7239), or a header
	// that holds the one address the proxy took the connection from:
	// X-Real-IP, or a CDN's CF-Connecting-IP, True-Client-IP or
	// Fastly-Client-IP (its edge's addresses then being the trusted
	// proxies). Any letter case. Only that one is read: a proxy passes on
	// the headers it does not set itself, so any other would carry the
	// client's own words.
	Header string
	// IPv4Prefix is how many leading bits of an IPv4 address name one
	// client, from 8 to 32. Zero means 32: every address is a client.
	IPv4Prefix int
	// IPv6Prefix is how many leading bits of an IPv6 address name one
	// client, from 16 to 128. Zero means 64, the block one host picks its
	// addresses from: counting /128s would let a client rotate through
	// billions of keys. A subscriber is often delegated a /56 or a /48,
	// 256 or 65,536 /64s, and takes a fresh key in each: 56 or 48 counts
	// such a network as one client, and everyone behind it together.
	IPv6Prefix int
}

// maxHops bounds how many of the rightmost hops a walk looks at. A longer
// chain of trusted proxies stops at its 32nd hop, which is itself a
// trusted proxy, so a client still cannot choose its key.
const maxHops = 32

// Resolver finds the client address of requests. It is immutable and safe
// for concurrent use. Build one with [New].
type Resolver struct {
	trusted    []netip.Prefix
	trustNonIP bool
	header     string // canonical MIME form
	kind       headerKind
	v4, v6     int
}

type headerKind uint8

const (
	kindXFF headerKind = iota
	kindForwarded
	kindRealIP
)

// New validates o and returns a Resolver.
func New(o Options) (*Resolver, error) {
	r := &Resolver{trustNonIP: o.TrustNonIP, v4: o.IPv4Prefix, v6: o.IPv6Prefix}
	if r.v4 == 0 {
		r.v4 = 32
	}
	if r.v6 == 0 {
		r.v6 = 64
	}
	if r.v4 < 8 || r.v4 > 32 {
		return nil, fmt.Errorf("ipv4 prefix /%d out of range: want 8 to 32", r.v4)
	}
	if r.v6 < 16 || r.v6 > 128 {
		return nil, fmt.Errorf("ipv6 prefix /%d out of range: want 16 to 128", r.v6)
	}
	switch h := textproto.CanonicalMIMEHeaderKey(o.Header); h {
	case "", XForwardedFor:
		r.header, r.kind = XForwardedFor, kindXFF
	case Forwarded:
		r.header, r.kind = Forwarded, kindForwarded
	case XRealIP, CFConnectingIP, TrueClientIP, FastlyClientIP:
		r.header, r.kind = h, kindRealIP
	default:
		return nil, fmt.Errorf("unsupported forwarding header %q: want X-Forwarded-For, Forwarded, X-Real-IP, CF-Connecting-IP, True-Client-IP or Fastly-Client-IP", o.Header)
	}
	for _, p := range o.TrustedProxies {
		if err := CheckTrusted(p); err != nil {
			return nil, err
		}
		p = p.Masked()
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		r.trusted = append(r.trusted, p)
	}
	return r, nil
}

// CheckTrusted returns why p cannot name trusted proxies, or nil. An
// IPv4-mapped prefix shorter than the mapping's 96 bits counts its bits
// from the IPv6 address's first: it names IPv6 addresses beside the
// mapping, and no IPv4 proxy.
func CheckTrusted(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return fmt.Errorf("invalid trusted proxy prefix %v", p)
	case p.Addr().Is4In6() && p.Bits() < 96:
		return fmt.Errorf("trusted proxy %v is an IPv4-mapped prefix shorter than the mapping's /96: its bits count from the IPv6 address's first, so it names no IPv4 proxy; write the IPv4 prefix, such as %s/%d", p, p.Addr().Unmap(), min(p.Bits(), 32))
	}
	return nil
}

// Header returns the canonical name of the forwarding header r reads, for
// transports that must look it up themselves.
func (r *Resolver) Header() string { return r.header }

// Trusted reports whether a, normalized, is a trusted proxy. The invalid
// address stands for a peer that has no IP address and is trusted only
// with Options.TrustNonIP.
func (r *Resolver) Trusted(a netip.Addr) bool {
	if !a.IsValid() {
		return r.trustNonIP
	}
	a = Normalize(a)
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// TrustsAny reports whether r trusts some peer: a proxy prefix, or peers
// with no IP address. A Resolver that trusts none reads no header.
func (r *Resolver) TrustsAny() bool { return len(r.trusted) > 0 || r.trustNonIP }

// FromRequest returns the grouped address of the client that sent req:
// its RemoteAddr, or the hop found in the forwarding header when
// RemoteAddr is a trusted proxy. It returns the invalid Prefix when
// neither gives an IP address (a Unix socket peer with no usable header;
// see PeerOf).
func (r *Resolver) FromRequest(req *http.Request) netip.Prefix {
	peer := PeerOf(req)
	if len(r.trusted) == 0 && !r.trustNonIP {
		return r.Group(peer)
	}
	return r.Group(r.client(peer, req.Header[r.header]))
}

// Resolve is FromRequest for transports other than net/http: peer is the
// immediate peer's address and values the forwarding header's values, in
// the order received. The values are read only when peer is trusted.
func (r *Resolver) Resolve(peer netip.Addr, values []string) netip.Prefix {
	return r.Group(r.client(Normalize(peer), values))
}

// Client returns the ungrouped client address, as Resolve finds it.
func (r *Resolver) Client(peer netip.Addr, values []string) netip.Addr {
	return r.client(Normalize(peer), values)
}

// client walks the hops from the right while they are trusted proxies.
func (r *Resolver) client(peer netip.Addr, values []string) netip.Addr {
	if len(values) == 0 || !r.Trusted(peer) {
		return peer
	}
	if r.kind == kindRealIP {
		// One address, written by the proxy: there is no chain to walk.
		a, ok := parseHop(trimOWS(values[len(values)-1]))
		if !ok {
			return peer
		}
		return a
	}
	var hops [maxHops]string
	n := 0
	if r.kind == kindXFF {
		n = xffHops(values, &hops)
	} else {
		n = forwardedHops(values, &hops)
	}
	client := peer
	// hops holds the last min(n, maxHops) hops, oldest first, in a ring.
	for i := range min(n, maxHops) {
		h := hops[(n-1-i)%maxHops]
		a, ok := parseHop(h)
		if !ok {
			// Garbage: nothing to its left can be believed. The client is
			// the last good hop, a trusted proxy, or the peer itself.
			return client
		}
		client = a
		if !r.Trusted(a) {
			return a
		}
	}
	return client
}

// nat64 is the well-known prefix of RFC 6052. A translator (RFC 7915)
// writes an IPv4 address as an IPv6 one by putting it in the last 32 bits,
// and no host has an address of its own there.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Group returns the prefix that names a's client: a, normalized, masked
// to Options.IPv4Prefix or Options.IPv6Prefix bits. An address in
// 64:ff9b::/96 is an IPv4 client seen through a translator, and is grouped
// as the IPv4 address in its last 32 bits: by /64, all IPv4 clients would
// be one. The invalid Addr gives the invalid Prefix.
func (r *Resolver) Group(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	a = Normalize(a)
	if nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte(b[12:]))
	}
	bits := r.v6
	if a.Is4() {
		bits = r.v4
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// AppendPrefix appends the text form of a client prefix to dst: the bare
// address for a single address (203.0.113.7), address/bits for a group
// (2001:db8:1:2::/64), and nothing for the invalid Prefix. It does not
// allocate beyond growing dst.
func AppendPrefix(dst []byte, p netip.Prefix) []byte {
	if !p.IsValid() {
		return dst
	}
	dst = p.Addr().AppendTo(dst)
	if p.Bits() != p.Addr().BitLen() {
		dst = append(dst, '/')
		dst = strconv.AppendInt(dst, int64(p.Bits()), 10)
	}
	return dst
}
