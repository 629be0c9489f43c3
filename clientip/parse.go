package clientip

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ParsePeer reads a net/http RemoteAddr ("203.0.113.7:51234",
// "[2001:db8::1]:443", or a bare address) and returns the normalized
// address, or the invalid Addr when it holds none (a Unix socket, an empty
// string).
func ParsePeer(remoteAddr string) netip.Addr {
	a, _ := parseHop(remoteAddr)
	return a
}

// PeerOf returns the address of the peer that sent req: ParsePeer of its
// RemoteAddr, or the invalid Addr when req came in over a Unix socket.
// There, net/http's RemoteAddr is whatever path the peer bound its end of
// the socket to, which the peer chooses and which may read as an IP
// address ("10.0.0.1"): it must not pass for one, or for a trusted proxy.
func PeerOf(req *http.Request) netip.Addr {
	if la, ok := req.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && strings.HasPrefix(la.Network(), "unix") {
		return netip.Addr{} // unix, unixgram, unixpacket
	}
	return ParsePeer(req.RemoteAddr)
}

// Normalize returns a in the form keys are built from: an IPv4-mapped
// IPv6 address becomes IPv4, and the zone is dropped.
func Normalize(a netip.Addr) netip.Addr {
	if !a.IsValid() {
		return a
	}
	return a.Unmap().WithZone("")
}

// parseHop reads one address as proxies write it: 203.0.113.7,
// 203.0.113.7:8080, 2001:db8::1, [2001:db8::1] or [2001:db8::1]:8080.
func parseHop(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		rest := s[end+1:]
		if rest != "" && !validPort(rest) {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(s[1:end])
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
		return Normalize(a), true
	}
	// An IPv4 address with a port has exactly one colon; an IPv6 address
	// with a port must be bracketed, which the branch above handles.
	// Deciding by the colons first keeps the common forms from building a
	// parse error, which allocates.
	i := strings.IndexByte(s, ':')
	if i < 0 || strings.IndexByte(s[i+1:], ':') >= 0 {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, false
		}
		return Normalize(a), true
	}
	if !validPort(s[i:]) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s[:i])
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

// validPort reports whether s is ":" followed by 1 to 5 digits.
func validPort(s string) bool {
	if len(s) < 2 || len(s) > 6 || s[0] != ':' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// trimOWS removes the spaces and tabs HTTP allows around list elements.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// xffHops splits X-Forwarded-For values into hops, keeping the last
// maxHops in a ring, and returns how many there were. An empty element is
// kept as an (invalid) empty hop.
func xffHops(values []string, hops *[maxHops]string) int {
	n := 0
	for _, v := range values {
		for {
			i := strings.IndexByte(v, ',')
			if i < 0 {
				hops[n%maxHops] = trimOWS(v)
				n++
				break
			}
			hops[n%maxHops] = trimOWS(v[:i])
			n++
			v = v[i+1:]
		}
	}
	return n
}

// forwardedHops reads RFC 7239 Forwarded values: comma-separated
// elements of semicolon-separated name=value pairs, where a value is a
// token or a quoted string. Each element contributes the value of its
// "for" pair as one hop (empty, so invalid, when it has none or several),
// without an obfuscated port. An element that breaks the grammar is one
// invalid hop, and reading goes on after the first comma following its
// start, as it does in X-Forwarded-For: the elements to its right were
// written by the proxies nearer to this server, which append to the field
// or join its lines, and must not be lost to what the client wrote on the
// left; nothing to the left of the invalid hop is believed.
func forwardedHops(values []string, hops *[maxHops]string) int {
	n := 0
	push := func(h string) {
		hops[n%maxHops] = h
		n++
	}
	for _, v := range values {
		p := fwdParser{s: v}
		for {
			start := p.i
			hop, ok := p.element()
			if ok {
				p.ows()
				ok = p.i >= len(p.s) || p.s[p.i] == ','
			}
			if !ok {
				// Where the element ended is unknown (a quote may have run
				// past its comma): resume at the first comma after its start.
				hop = ""
				i := strings.IndexByte(v[start:], ',')
				if i < 0 {
					push(hop)
					break
				}
				p.i = start + i
			}
			push(dropObfPort(hop))
			if p.i >= len(p.s) {
				break
			}
			p.i++ // the comma
		}
	}
	return n
}

// dropObfPort removes an obfuscated port (RFC 7239: ":_" followed by
// letters, digits, ".", "_" or "-") from a node, leaving the address of an
// IPv4 or bracketed IPv6 node to read as any other hop. Any other node is
// returned as it is.
func dropObfPort(node string) string {
	i := strings.LastIndexByte(node, ':')
	if i < 0 || !validObfPort(node[i+1:]) {
		return node
	}
	if name := node[:i]; strings.HasSuffix(name, "]") || strings.IndexByte(name, ':') < 0 {
		return name
	}
	return node
}

// validObfPort reports whether s is "_" followed by one or more letters,
// digits, ".", "_" or "-".
func validObfPort(s string) bool {
	if len(s) < 2 || s[0] != '_' {
		return false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

type fwdParser struct {
	s string
	i int
}

func (p *fwdParser) ows() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// element reads one forwarded-element and returns its "for" value. The
// grammar lets a pair be empty ("for=192.0.2.1;", ";;"): an empty pair
// is skipped. An element that names "for" twice, which RFC 7239 forbids,
// names no one client and gives the empty (invalid) value: a proxy that
// writes a pair after its "for" without quoting it, as host=$host does,
// would otherwise let a Host of "x;for=192.0.2.1" choose the client.
func (p *fwdParser) element() (forValue string, ok bool) {
	fors := 0
	for {
		p.ows()
		if p.i >= len(p.s) || p.s[p.i] == ',' {
			break
		}
		if p.s[p.i] == ';' {
			p.i++
			continue
		}
		name := p.token()
		if name == "" || p.i >= len(p.s) || p.s[p.i] != '=' {
			return "", false
		}
		p.i++
		var val string
		if p.i < len(p.s) && p.s[p.i] == '"' {
			if val, ok = p.quoted(); !ok {
				return "", false
			}
		} else if val = p.token(); val == "" {
			return "", false
		}
		if strings.EqualFold(name, "for") {
			forValue = val
			fors++
		}
		p.ows()
		if p.i < len(p.s) && p.s[p.i] == ';' {
			p.i++
			continue
		}
		break
	}
	if fors > 1 {
		return "", true
	}
	return forValue, true
}

func (p *fwdParser) token() string {
	start := p.i
	for p.i < len(p.s) && isTChar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

// quoted reads a quoted-string starting at the opening quote and returns
// its content as written. An address never contains a backslash, so a
// quoted-pair is skipped correctly but left in place, which makes the hop
// invalid, as it should be.
func (p *fwdParser) quoted() (string, bool) {
	p.i++ // opening quote
	start := p.i
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == '\\':
			p.i += 2
		case c == '"':
			v := p.s[start:p.i]
			p.i++
			return v, true
		case c < 0x20 && c != '\t', c == 0x7f:
			return "", false
		default:
			p.i++
		}
	}
	return "", false
}

// isTChar reports whether c may appear in an RFC 9110 token.
func isTChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
