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
	for _, h := range []string{XForwardedFor, Forwarded, XRealIP} {
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
