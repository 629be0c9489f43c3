package clientip

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzHeaders feeds arbitrary forwarding headers through every parser. It
// checks that they never panic, that an untrusted peer is always its own
// client, and that a trusted peer's client is either the peer or an
// address that appears literally in the header.
func FuzzHeaders(f *testing.F) {
	for _, s := range []string{
		"203.0.113.7",
		"198.51.100.1, 203.0.113.7, 10.1.1.1",
		`for=198.51.100.1;proto=https, for="[2001:db8:cafe::17]:4711"`,
		`for="\"[::1]\"", for=unknown`,
		"[::ffff:1.2.3.4]:80,,",
		`for="`,
	} {
		f.Add(s, "10.0.0.2:1")
		f.Add(s, "203.0.113.7:1")
	}
	resolvers := make([]*Resolver, 0, 3)
	for _, h := range []string{XForwardedFor, Forwarded, XRealIP, CFConnectingIP} {
		r, err := New(Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Header: h, IPv6Prefix: 128})
		if err != nil {
			f.Fatal(err)
		}
		resolvers = append(resolvers, r)
	}
	f.Fuzz(func(t *testing.T, header, remote string) {
		peer := ParsePeer(remote)
		for _, r := range resolvers {
			got := r.Client(peer, []string{header, header})
			if !r.Trusted(peer) {
				if got != peer {
					t.Fatalf("untrusted peer %v: client %v", peer, got)
				}
				continue
			}
			if got == peer {
				continue
			}
			if !got.IsValid() {
				t.Fatalf("trusted peer %v: invalid client from %q", peer, header)
			}
			// The address must come from the header. Its text may differ
			// (brackets, zero compression, mapping), so compare parsed forms.
			if !appearsIn(got, header) {
				t.Fatalf("client %v does not appear in %q", got, header)
			}
		}
	})
}

func appearsIn(a netip.Addr, s string) bool {
	for _, f := range strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == ';' || r == ' ' || r == '\t' || r == '"' || r == '=' || r == '[' || r == ']'
	}) {
		if b, ok := parseHop(f); ok && b == a {
			return true
		}
		if i := strings.LastIndexByte(f, ':'); i > 0 {
			if b, ok := parseHop(f[:i]); ok && b == a {
				return true
			}
		}
		// A zone is dropped, and may hold the characters split on above.
		if i := strings.IndexByte(f, '%'); i > 0 {
			if b, ok := parseHop(f[:i]); ok && b == a {
				return true
			}
		}
	}
	return false
}

// FuzzClientWrittenPrefix checks the property the walk exists for: what
// the client writes to the left of the hops trusted proxies append, on the
// same line or on earlier ones, never changes the client they name.
func FuzzClientWrittenPrefix(f *testing.F) {
	for _, s := range []string{"", `x="`, `for="\`, `a=",b=";c="`, `for=1.1.1.1;x="\`, `"`, `\`, `a="\"`, ";", ",,"} {
		f.Add(s)
	}
	fwd := mustResolver(f, Options{TrustedProxies: prefixes("10.0.0.0/8"), Header: Forwarded, IPv6Prefix: 128})
	xff := mustResolver(f, Options{TrustedProxies: prefixes("10.0.0.0/8"), IPv6Prefix: 128})
	peer := netip.MustParseAddr("10.0.0.2")
	v4 := netip.MustParseAddr("203.0.113.9")
	v6 := netip.MustParseAddr("2001:db8::9")
	f.Fuzz(func(t *testing.T, c string) {
		for _, tt := range []struct {
			r      *Resolver
			values []string
			want   netip.Addr
		}{
			{fwd, []string{c + ", for=203.0.113.9"}, v4},
			{fwd, []string{c + ",for=203.0.113.9;proto=https"}, v4},
			{fwd, []string{c + `, for="[2001:db8::9]:443";by=10.0.0.2;host="example.com"`}, v6},
			{fwd, []string{c + `, for="203.0.113.9:_x", for=10.0.0.3`}, v4},
			{fwd, []string{c, `for="[2001:db8::9]"`}, v6},
			{fwd, []string{c, `for=203.0.113.9`, `for=10.0.0.3`}, v4},
			{xff, []string{c + ", 203.0.113.9"}, v4},
			{xff, []string{c + ",203.0.113.9, 10.0.0.3"}, v4},
			{xff, []string{c, "[2001:db8::9]:1"}, v6},
		} {
			if got := tt.r.Client(peer, tt.values); got != tt.want {
				t.Fatalf("%q: client %v, want %v", tt.values, got, tt.want)
			}
		}
	})
}
