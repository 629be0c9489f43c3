package clientip

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
)

func mustResolver(t testing.TB, o Options) *Resolver {
	t.Helper()
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func prefixes(ss ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range ss {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}

func TestFromRequest(t *testing.T) {
	proxies := prefixes("10.0.0.0/8", "2001:db8:ffff::/48")
	tests := []struct {
		name   string
		opts   Options
		remote string
		header map[string][]string
		want   string // AppendPrefix form; "" for the invalid prefix
	}{
		{"peer only", Options{}, "203.0.113.7:5123", nil, "203.0.113.7"},
		{"port stripped v6", Options{}, "[2001:db8::1]:443", nil, "2001:db8::/64"},
		{"mapped v4 normalized", Options{}, "[::ffff:203.0.113.7]:80", nil, "203.0.113.7"},
		{"zone dropped", Options{IPv6Prefix: 128}, "[fe80::1%eth0]:80", nil, "fe80::1"},
		{"no port", Options{}, "203.0.113.7", nil, "203.0.113.7"},
		{"unix socket", Options{}, "@", nil, ""},
		{"spoofed XFF from untrusted peer ignored", Options{TrustedProxies: proxies}, "203.0.113.7:1",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1"}}, "203.0.113.7"},
		{"spoof ignored without any trusted proxy", Options{}, "203.0.113.7:1",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1"}, "Forwarded": {"for=198.51.100.1"}}, "203.0.113.7"},
		{"trusted proxy: rightmost untrusted hop", Options{TrustedProxies: proxies}, "10.0.0.2:1",
			map[string][]string{"X-Forwarded-For": {"198.51.100.99, 203.0.113.7"}}, "203.0.113.7"},
		{"chain of trusted proxies", Options{TrustedProxies: proxies}, "10.0.0.2:1",
			map[string][]string{"X-Forwarded-For": {"1.1.1.1, 203.0.113.7, 10.1.1.1", "10.2.2.2"}}, "203.0.113.7"},
		{"all hops trusted: leftmost", Options{TrustedProxies: proxies}, "10.0.0.2:1",
			map[string][]string{"X-Forwarded-For": {"10.9.9.9, 10.1.1.1"}}, "10.9.9.9"},
		{"garbage stops the walk at the last good hop", Options{TrustedProxies: proxies}, "10.0.0.2:1",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1, bogus, 10.1.1.1"}}, "10.1.1.1"},
		{"garbage as the only hop: the peer", Options{TrustedProxies: proxies}, "10.0.0.2:1",
			map[string][]string{"X-Forwarded-For": {"not an ip"}}, "10.0.0.2"},
		{"empty hop is garbage", Options{TrustedProxies: proxies}, "10.0.0.2:1",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1,,"}}, "10.0.0.2"},
		{"XFF hop with port", Options{TrustedProxies: proxies}, "10.0.0.2:1",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7:8080"}}, "203.0.113.7"},
		{"XFF v6 grouped", Options{TrustedProxies: proxies}, "10.0.0.2:1",
			map[string][]string{"X-Forwarded-For": {"[2001:db8:1:2:3::9]:1"}}, "2001:db8:1:2::/64"},
		{"other header not read", Options{TrustedProxies: proxies}, "10.0.0.2:1",
			map[string][]string{"Forwarded": {"for=198.51.100.1"}, "X-Real-Ip": {"198.51.100.2"}}, "10.0.0.2"},
		{"Forwarded", Options{TrustedProxies: proxies, Header: "forwarded"}, "10.0.0.2:1",
			map[string][]string{"Forwarded": {`for=198.51.100.1;proto=https, for="[2001:db8:cafe::17]:4711";by=10.0.0.2`}}, "2001:db8:cafe::/64"},
		{"Forwarded walks trusted hops", Options{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.2:1",
			map[string][]string{"Forwarded": {`for=198.51.100.1`, `For="203.0.113.9:80", for=10.3.3.3`}}, "203.0.113.9"},
		{"Forwarded unknown stops", Options{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.2:1",
			map[string][]string{"Forwarded": {`for=198.51.100.1, for=unknown, for=10.3.3.3`}}, "10.3.3.3"},
		{"Forwarded unterminated quote", Options{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.2:1",
			map[string][]string{"Forwarded": {`for="198.51.100.1, for=203.0.113.9`}}, "203.0.113.9"},
		{"Forwarded element without for", Options{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.2:1",
			map[string][]string{"Forwarded": {`for=198.51.100.1, proto=http`}}, "10.0.0.2"},
		{"X-Real-IP", Options{TrustedProxies: proxies, Header: "x-real-ip"}, "10.0.0.2:1",
			map[string][]string{"X-Real-Ip": {"203.0.113.5"}}, "203.0.113.5"},
		{"X-Real-IP garbage", Options{TrustedProxies: proxies, Header: "X-Real-IP"}, "10.0.0.2:1",
			map[string][]string{"X-Real-Ip": {"203.0.113.5, 1.1.1.1"}}, "10.0.0.2"},
		{"CF-Connecting-IP", Options{TrustedProxies: proxies, Header: "CF-Connecting-IP"}, "10.0.0.2:1",
			map[string][]string{"Cf-Connecting-Ip": {"203.0.113.6"}, "X-Forwarded-For": {"198.51.100.1"}}, "203.0.113.6"},
		{"True-Client-IP", Options{TrustedProxies: proxies, Header: "true-client-ip"}, "10.0.0.2:1",
			map[string][]string{"True-Client-Ip": {"2001:db8:5::1"}}, "2001:db8:5::/64"},
		{"Fastly-Client-IP from an untrusted peer", Options{TrustedProxies: proxies, Header: "Fastly-Client-IP"}, "203.0.113.7:1",
			map[string][]string{"Fastly-Client-Ip": {"198.51.100.3"}}, "203.0.113.7"},
		{"trusted unix socket", Options{TrustNonIP: true}, "@",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"v4 grouping", Options{IPv4Prefix: 24}, "203.0.113.7:1", nil, "203.0.113.0/24"},
		{"trusted v6 proxy", Options{TrustedProxies: proxies}, "[2001:db8:ffff::1]:1",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"mapped peer in v4 trusted range", Options{TrustedProxies: proxies}, "[::ffff:10.0.0.2]:1",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustResolver(t, tt.opts)
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = tt.remote
			for k, v := range tt.header {
				req.Header[k] = v
			}
			got := string(AppendPrefix(nil, r.FromRequest(req)))
			if got != tt.want {
				t.Errorf("FromRequest = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSameSlash64SharesKey(t *testing.T) {
	r := mustResolver(t, Options{})
	a := r.Resolve(netip.MustParseAddr("2001:db8:1:2::1"), nil)
	b := r.Resolve(netip.MustParseAddr("2001:db8:1:2:ffff:ffff:ffff:ffff"), nil)
	c := r.Resolve(netip.MustParseAddr("2001:db8:1:3::1"), nil)
	if a != b {
		t.Errorf("two addresses in one /64: %v != %v", a, b)
	}
	if a == c {
		t.Errorf("addresses in different /64s share %v", a)
	}
}

func TestNewRejects(t *testing.T) {
	for _, o := range []Options{
		{IPv4Prefix: 33},
		{IPv4Prefix: 4},
		{IPv6Prefix: 129},
		{IPv6Prefix: 8},
		{Header: "X-Client-IP"},
		{TrustedProxies: []netip.Prefix{{}}},
		// Mapped, but shorter than the mapping: ::/8, no IPv4 proxy.
		{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/8")}},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

func TestManyHopsBounded(t *testing.T) {
	r := mustResolver(t, Options{TrustedProxies: prefixes("10.0.0.0/8")})
	hops := make([]string, 0, 100)
	for range 99 {
		hops = append(hops, "10.0.0.1")
	}
	// The client wrote a long list of trusted-looking hops; it stays a
	// trusted address, never one the client chose from outside the range.
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.2:1"
	req.Header.Set("X-Forwarded-For", "198.51.100.66, "+strings.Join(hops, ","))
	got := r.FromRequest(req)
	if !r.Trusted(got.Addr()) {
		t.Errorf("FromRequest = %v, want a trusted hop", got)
	}
}

func TestNoAllocs(t *testing.T) {
	r := mustResolver(t, Options{TrustedProxies: prefixes("10.0.0.0/8"), Header: "Forwarded"})
	req := &http.Request{RemoteAddr: "10.0.0.2:1", Header: http.Header{
		"Forwarded": {`for=198.51.100.1, for="[2001:db8::1]:80", for=10.0.0.9`},
	}}
	var buf []byte
	allocs := testing.AllocsPerRun(100, func() {
		buf = AppendPrefix(buf[:0], r.FromRequest(req))
	})
	if string(buf) != "2001:db8::/64" || allocs != 0 {
		t.Errorf("got %q with %v allocs, want 2001:db8::/64 with 0", buf, allocs)
	}
}

// Forwarded elements as proxies write them behind a client. A proxy that
// appends its element to the field it received, or an intermediary that
// joins several Forwarded lines into one, puts whatever the client wrote
// to the left of the elements the proxies wrote: garbage there must not
// hide them, or the client would choose to be counted as the proxy. And
// RFC 7239 lets a proxy hide the port of a node it names ("_" and letters,
// digits, ".", "_" or "-"): the address beside it is still the client's.
func TestForwardedClient(t *testing.T) {
	r := mustResolver(t, Options{TrustedProxies: prefixes("10.0.0.0/8"), Header: "Forwarded", IPv6Prefix: 128})
	peer := netip.MustParseAddr("10.0.0.2")
	for _, tt := range []struct {
		header string
		want   string
	}{
		// Garbage on the left.
		{`x, for=203.0.113.9`, "203.0.113.9"},
		{`for=198.51.100.1 bogus, for=203.0.113.9;proto=https`, "203.0.113.9"},
		{`for=198.51.100.1;x="a, for=203.0.113.9`, "203.0.113.9"},
		{`for=198.51.100.1;x=", for="[2001:db8::1]:80"`, "2001:db8::1"},
		{`for="\", for=203.0.113.9, for=10.3.3.3`, "203.0.113.9"},
		{`=, for=203.0.113.9;host="a,b"`, "203.0.113.9"},
		// Garbage between trusted hops still stops the walk there.
		{`for=203.0.113.9, junk, for=10.3.3.3`, "10.3.3.3"},
		{`for=203.0.113.9, for=10.3.3.3 junk`, "10.0.0.2"},
		// Empty pairs, which RFC 7239 allows before, between and after
		// the pairs of an element: the element still names its client.
		{`for=203.0.113.9;`, "203.0.113.9"},
		{`;for=203.0.113.9`, "203.0.113.9"},
		{`proto=https;;for=203.0.113.9 ; , for=10.3.3.3;`, "203.0.113.9"},
		// An element that names "for" twice names no one client. A proxy
		// that writes host=$host unquoted after its for= pair passes a Host
		// of "x;for=198.51.100.66" on as a second pair: the client's.
		{`for=203.0.113.9;host=x;for=198.51.100.66;proto=http`, "10.0.0.2"},
		{`for=198.51.100.66;FOR=203.0.113.9`, "10.0.0.2"},
		{`for=198.51.100.1, for=203.0.113.9;host=x;for=10.3.3.3, for=10.3.3.4`, "10.3.3.4"},
		// Hidden ports.
		{`for="203.0.113.9:_abc"`, "203.0.113.9"},
		{`for="[2001:db8:cafe::17]:_p-1.x_Y"`, "2001:db8:cafe::17"},
		{`for="203.0.113.9:_abc", for="10.3.3.3:_def"`, "203.0.113.9"},
		// Not nodes: no name after "_", a character outside the set, an
		// IPv6 address without brackets.
		{`for="203.0.113.9:_"`, "10.0.0.2"},
		{`for="203.0.113.9:_a b"`, "10.0.0.2"},
		{`for="2001:db8::1:_abc"`, "10.0.0.2"},
	} {
		if got := r.Client(peer, []string{tt.header}); got.String() != tt.want {
			t.Errorf("Forwarded: %s: client %v, want %s", tt.header, got, tt.want)
		}
	}
	// X-Forwarded-For has no obfuscated ports.
	x := mustResolver(t, Options{TrustedProxies: prefixes("10.0.0.0/8")})
	if got := x.Client(peer, []string{"203.0.113.9:_abc"}); got != peer {
		t.Errorf("X-Forwarded-For: 203.0.113.9:_abc: client %v, want the peer", got)
	}
}

// Group and Trusted take addresses as a program has them, and a
// dual-stack socket hands out IPv4 clients as IPv4-mapped IPv6
// (net.TCPAddr.AddrPort does): the same client must get the same key, and
// two IPv4 clients must never share the key of one IPv6 /64.
func TestGroupAndTrustedNormalize(t *testing.T) {
	r := mustResolver(t, Options{TrustedProxies: prefixes("10.0.0.0/8")})
	mapped := netip.MustParseAddr("::ffff:203.0.113.7")
	if got, want := r.Group(mapped), netip.MustParsePrefix("203.0.113.7/32"); got != want {
		t.Errorf("Group(%v) = %v, want %v", mapped, got, want)
	}
	if a, b := r.Group(mapped), r.Group(netip.MustParseAddr("::ffff:198.51.100.1")); a == b {
		t.Errorf("two IPv4 clients share the key %v", a)
	}
	if a := netip.MustParseAddr("::ffff:10.0.0.2"); !r.Trusted(a) {
		t.Errorf("Trusted(%v) = false, want true: it is 10.0.0.2", a)
	}
}

// Behind a stateless IPv4/IPv6 translator (SIIT, RFC 7915), an IPv6
// server sees every IPv4 client as an address in the well-known prefix
// 64:ff9b::/96 with the client's IPv4 address in the last 32 bits
// (RFC 6052). Grouped by /64 as other IPv6 addresses are, all the IPv4
// clients in the world would share one key, and one of them could get all
// the others refused; each must instead be the IPv4 client it stands for.
func TestGroupNAT64(t *testing.T) {
	r := mustResolver(t, Options{IPv4Prefix: 24})
	for _, tt := range []struct{ addr, want string }{
		{"64:ff9b::203.0.113.7", "203.0.113.0/24"},
		{"64:ff9b::198.51.100.1", "198.51.100.0/24"},
		{"64:ff9b::c633:6401", "198.51.100.0/24"},
		// Outside the /96: an ordinary IPv6 address.
		{"64:ff9b::1:203.0.113.7", "64:ff9b::/64"},
		{"64:ff9b:1::203.0.113.7", "64:ff9b:1::/64"},
	} {
		if got := r.Group(netip.MustParseAddr(tt.addr)); got.String() != tt.want {
			t.Errorf("Group(%s) = %v, want %s", tt.addr, got, tt.want)
		}
	}
}

// Over a Unix socket, net/http's RemoteAddr is the path the peer bound
// its end to, which the peer chooses: one named 10.0.0.1 must neither be
// keyed as that address nor pass for a trusted proxy.
func TestUnixSocketPeerHasNoAddress(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // the peer binds the relative path "10.0.0.1" here
	l, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Skipf("no Unix sockets: %v", err)
	}
	r := mustResolver(t, Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	type seen struct {
		remote string
		peer   netip.Addr
		client netip.Prefix
	}
	got := make(chan seen, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		got <- seen{req.RemoteAddr, PeerOf(req), r.FromRequest(req)}
	})}
	go srv.Serve(l)
	defer srv.Close()

	c, err := net.DialUnix("unix", &net.UnixAddr{Name: "10.0.0.1", Net: "unix"}, &net.UnixAddr{Name: filepath.Join(dir, "s"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.9\r\nConnection: close\r\n\r\n")
	s := <-got
	if s.remote != "10.0.0.1" {
		t.Fatalf("RemoteAddr %q: the test's premise (the peer's bound path) does not hold here", s.remote)
	}
	if s.peer.IsValid() || s.client.IsValid() {
		t.Errorf("a Unix peer bound to 10.0.0.1: PeerOf %v, FromRequest %v; want no address for either", s.peer, s.client)
	}
	// A request built by hand, with no connection behind it, reads
	// RemoteAddr as it is.
	req, _ := http.NewRequest("GET", "/", nil)
	req.RemoteAddr = "203.0.113.7:1234"
	if a := PeerOf(req); a != netip.MustParseAddr("203.0.113.7") {
		t.Errorf("PeerOf a request with no connection: %v", a)
	}
}
