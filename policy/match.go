package policy

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// matcher decides whether a policy applies to a request. The path and
// host go through a net/http.ServeMux of the policy's own, so a pattern
// means exactly what it means to the standard library's router; methods,
// headers and authentication are checked here.
type matcher struct {
	mux     *http.ServeMux // nil: every host and path
	marker  *marker        // the handler registered in mux
	pattern string         // as registered: host and path
	methods []string       // empty: every method; GET also matches HEAD
	// pathNames are the wildcards the policy's keys use; their values are
	// captured only for policies that have some.
	pathNames []string
	headers   []headerCond
	auth      int8 // 0 either, 1 authenticated only, -1 anonymous only
}

// headerCond is one header condition: present, absent or equal to a value.
type headerCond struct {
	name    string // canonical, for net/http
	lower   string // lower case, for gRPC metadata
	present bool   // false: absent, or blank (see present)
	equals  string // "" with present: any value
}

// marker is the handler a policy's mux routes matching requests to, and
// holds the same patterns as a routing tree of its own (see routeNode),
// which matching asks instead of the mux: the mux cleans and splits the
// path again on every call, so that with a policy each, a request would
// cost policies × path length. Wildcard capture still reads the path
// values of the request the mux serves it.
type marker struct {
	// hosts holds the patterns that name a host, by host; any those that
	// name none. Both nil when the patterns could not be read as ServeMux
	// reads them: the mux is asked then.
	hosts map[string]*routeNode
	any   *routeNode
	tree  bool // the patterns are in hosts and any
}

// ServeHTTP stores the request's path values in w, a *capture.
func (*marker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c, ok := w.(*capture); ok {
		for i, name := range c.names {
			c.values[i] = r.PathValue(name)
		}
		c.ok = true
	}
}

// capture is the ResponseWriter through which a policy's mux hands the
// path values of a request to marker. Nothing is ever written to it.
type capture struct {
	names  []string
	values []string
	ok     bool
}

func (*capture) Header() http.Header         { return http.Header{} }
func (*capture) Write(b []byte) (int, error) { return len(b), nil }
func (*capture) WriteHeader(int)             {}

// newMux registers patterns (host and path, no method), the forms of one
// policy's pattern, in a new mux, turning the panic ServeMux raises for an
// invalid pattern into an error.
func newMux(patterns ...string) (mux *http.ServeMux, mk *marker, err error) {
	pattern := patterns[0]
	defer func() {
		if r := recover(); r != nil {
			msg := fmt.Sprint(r)
			// "parsing \"x\": at offset 3: bad wildcard..." is enough; drop
			// the registration boilerplate net/http adds.
			if i := strings.Index(msg, "parsing "); i >= 0 {
				msg = msg[i:]
			}
			err = fmt.Errorf("invalid pattern %q: %s", pattern, msg)
		}
	}()
	mux, mk = http.NewServeMux(), &marker{}
	for _, pattern = range patterns {
		mux.Handle(pattern, mk)
	}
	mk.tree = mk.add(patterns)
	return mux, mk, nil
}

// routeNode is a node of ServeMux's routing tree (net/http's
// routingNode, without methods: a policy's patterns have none), built
// from the same patterns so that a request's path, split into segments
// once (see route), is matched against every policy the way its mux
// matches it, in time that grows with the pattern's segments, not the
// path's.
type routeNode struct {
	end      *routeEnd             // the pattern that ends here, if any
	children map[string]*routeNode // by literal segment, unescaped; "/" for {$}
	wild     *routeNode            // a {name} segment, or an empty literal
	multi    *routeNode            // a {name...} segment or a final slash
}

// routeEnd is what ServeMux's exactMatch needs to know of a pattern.
type routeEnd struct {
	segments int  // how many segments the pattern has
	multi    bool // its last is a {name...} or a final slash
}

// add puts patterns (host and path, as registered in the policy's mux)
// in mk's tree, reading them as net/http's parsePattern does. It reports
// false, leaving the mux to be asked, for anything the mux's registration
// did not already settle: a pattern with a method, or two that would end
// on one node.
func (mk *marker) add(patterns []string) bool {
	for _, s := range patterns {
		if strings.ContainsAny(s, " \t") {
			return false
		}
		i := strings.IndexByte(s, '/')
		if i < 0 {
			return false
		}
		host, rest := s[:i], s[i:]
		var n *routeNode
		if host == "" {
			if mk.any == nil {
				mk.any = &routeNode{}
			}
			n = mk.any
		} else {
			if mk.hosts == nil {
				mk.hosts = map[string]*routeNode{}
			}
			if mk.hosts[host] == nil {
				mk.hosts[host] = &routeNode{}
			}
			n = mk.hosts[host]
		}
		end := &routeEnd{}
		for len(rest) > 0 {
			rest = rest[1:]
			end.segments++
			if rest == "" { // a final slash: the subtree
				end.multi = true
				if n.multi != nil {
					return false
				}
				n.multi = &routeNode{}
				n = n.multi
				break
			}
			j := strings.IndexByte(rest, '/')
			if j < 0 {
				j = len(rest)
			}
			seg := rest[:j]
			rest = rest[j:]
			switch {
			case seg == "{$}":
				n = n.child("/")
			case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "...}"):
				// Only a segment that starts with a brace is a wildcard:
				// to ServeMux, x...} is a literal.
				end.multi = true
				if n.multi != nil || rest != "" {
					return false
				}
				n.multi = &routeNode{}
				n = n.multi
			case strings.HasPrefix(seg, "{"):
				n = n.child("")
			default:
				n = n.child(pathUnescape(seg))
			}
		}
		if n.end != nil {
			return false
		}
		n.end = end
	}
	return true
}

// child returns n's child for the literal segment key, made if need be;
// "" is the wildcard child, as in ServeMux's tree.
func (n *routeNode) child(key string) *routeNode {
	if key == "" {
		if n.wild == nil {
			n.wild = &routeNode{}
		}
		return n.wild
	}
	c := n.children[key]
	if c == nil {
		if n.children == nil {
			n.children = map[string]*routeNode{}
		}
		c = &routeNode{}
		n.children[key] = c
	}
	return c
}

// match returns the pattern ServeMux's tree finds for the path segs (see
// route): a literal segment before a wildcard, a wildcard before the
// rest of the path; nil for none.
func (n *routeNode) match(segs []string) *routeEnd {
	if n == nil {
		return nil
	}
	if len(segs) == 0 {
		return n.end
	}
	seg := segs[0]
	next := n.wild
	if seg != "" {
		next = n.children[seg]
	}
	if e := next.match(segs[1:]); e != nil {
		return e
	}
	if seg != "/" {
		if e := n.wild.match(segs[1:]); e != nil {
			return e
		}
	}
	if n.multi != nil {
		return n.multi.end
	}
	return nil
}

// exact reports whether e matches a path of slashes slashes exactly (no
// {name...} or subtree taking a segment), as ServeMux's exactMatch does:
// a path ServeMux matches inexactly is redirected to path/ when that has
// an exact match.
func (e *routeEnd) exact(slashes int, trailing bool) bool {
	if e == nil {
		return false
	}
	return !e.multi || trailing && e.segments == slashes
}

// routes reports whether the request whose path is rt would be routed by
// the policy's mux to mk, as the mux would answer it: not when it answers
// with a redirect, to the clean path or to path/.
func (mk *marker) routes(rt *route) bool {
	if !rt.clean {
		return false
	}
	e := mk.find(rt.host, rt.segs)
	if !rt.trailing && !e.exact(rt.slashes, false) {
		if e2 := mk.find(rt.host, rt.slashed); e2.exact(rt.slashes+1, true) {
			return false
		}
	}
	return e != nil
}

// find returns the pattern for host and segs: one that names the host
// first, as ServeMux prefers them.
func (mk *marker) find(host string, segs []string) *routeEnd {
	if host != "" {
		if e := mk.hosts[host].match(segs); e != nil {
			return e
		}
	}
	return mk.any.match(segs)
}

// route is a request's host and path as ServeMux matches them, computed
// once per request for every policy's patterns.
type route struct {
	r      *http.Request // the routed request
	viaMux bool          // CONNECT, whose path ServeMux takes as it is: ask the mux
	// clean reports whether the path is clean; ServeMux redirects an
	// unclean one, which no pattern then matches.
	clean    bool
	host     string // without its port
	trailing bool   // the path ends in a slash
	slashes  int    // of the path
	// segs are the path's segments, each unescaped, a final slash "/";
	// slashed the segments of path/, when the path has no final slash,
	// for the redirect ServeMux makes to it.
	segs, slashed []string
	buf           []string
	// next is the request reset gave, done whether rt is its route yet.
	next *http.Request
	done bool
}

// reset makes rt the route of r (a routed request), computed when a
// policy's patterns first ask for it (see get): a request that only
// policies without patterns see costs nothing. A nil r empties rt, so
// that a pooled route pins no request.
func (rt *route) reset(r *http.Request) {
	if rt.done {
		rt.split(nil)
	}
	rt.next, rt.done = r, false
}

// maxKeptSegments bounds the segments a route's array keeps room for
// from one request to the next.
const maxKeptSegments = 64

// get returns rt, computed.
func (rt *route) get() *route {
	if !rt.done {
		next := rt.next
		rt.split(next)
		rt.next, rt.done = next, true
	}
	return rt
}

// split makes rt the route of r (a routed request) for ServeMux's
// findHandler: the port cut off the host, and the escaped path split as
// its routing tree splits it, in one pass that also tells whether
// cleanPath would change it (an empty, . or .. segment, no leading
// slash). A nil r empties rt.
func (rt *route) split(r *http.Request) {
	clear(rt.buf)
	buf := rt.buf[:0]
	if cap(buf) > maxKeptSegments {
		// A pooled route keeps no array a path of thousands of
		// segments grew: a client chooses its path.
		buf = nil
	}
	*rt = route{r: r, buf: buf}
	if r == nil {
		return
	}
	if r.Method == http.MethodConnect || r.URL == nil {
		rt.viaMux = true
		return
	}
	p := r.URL.EscapedPath()
	if p == "" || p[0] != '/' {
		return
	}
	b := rt.buf
	defer func() { rt.buf = b }()
	if p == "/" {
		b = append(b, "/")
		rt.trailing = true
	} else {
		for rest := p[1:]; ; {
			i := strings.IndexByte(rest, '/')
			seg := rest
			if i >= 0 {
				seg = rest[:i]
			}
			if seg == "" || seg == "." || seg == ".." {
				return // unclean
			}
			b = append(b, pathUnescape(seg))
			if i < 0 {
				break
			}
			if rest = rest[i+1:]; rest == "" {
				b = append(b, "/")
				rt.trailing = true
				break
			}
		}
	}
	rt.clean = true
	rt.host = stripHostPort(r.Host)
	rt.slashes = len(b) // a segment after each, "/" the last
	rt.segs = b
	if !rt.trailing {
		b = append(b, "/")
		rt.segs = b[:len(b)-1]
		rt.slashed = b
	}
}

// pathUnescape is net/http's: an invalid escape leaves the segment as it
// is.
func pathUnescape(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}

// stripHostPort is net/http's: the host without its port, if it has one.
func stripHostPort(h string) string {
	if !strings.Contains(h, ":") {
		return h
	}
	host, _, err := net.SplitHostPort(h)
	if err != nil {
		return h
	}
	return host
}

// wildcards returns the names of the wildcards in a ServeMux pattern:
// {id} and {rest...} give id and rest; {$} gives nothing.
func wildcards(pattern string) []string {
	var names []string
	for {
		i := strings.IndexByte(pattern, '{')
		if i < 0 {
			return names
		}
		j := strings.IndexByte(pattern[i:], '}')
		if j < 0 {
			return names
		}
		name := strings.TrimSuffix(pattern[i+1:i+j], "...")
		if name != "$" && name != "" {
			names = append(names, name)
		}
		pattern = pattern[i+j+1:]
	}
}

// matches reports whether the policy applies to r, whose routed request's
// host and path are rt.
func (m *matcher) matches(r *Request, rt *route) bool {
	if len(m.methods) > 0 && !methodIn(r.HTTP.Method, m.methods) {
		return false
	}
	if m.auth > 0 && r.User == "" || m.auth < 0 && r.User != "" {
		return false
	}
	for i := range m.headers {
		c := &m.headers[i]
		vs := r.header(c.name, c.lower)
		if present(vs) != c.present || c.equals != "" && !slices.ContainsFunc(vs, func(v string) bool { return ows(v) == c.equals }) {
			return false
		}
	}
	if m.mux != nil {
		rt = rt.get()
		if rt.viaMux || !m.marker.tree {
			h, _ := m.mux.Handler(rt.r)
			return h == http.Handler(m.marker)
		}
		return m.marker.routes(rt)
	}
	return true
}

// methodIn reports whether method is one of methods (upper case), GET
// standing for HEAD too. Case does not count: methods are case-sensitive,
// but a gateway that passes post on as it came (Traefik) and applications
// that serve it as POST (Django, Flask) would let it escape a policy on
// POST.
func methodIn(method string, methods []string) bool {
	for _, m := range methods {
		if strings.EqualFold(m, method) || m == http.MethodGet && strings.EqualFold(method, http.MethodHead) {
			return true
		}
	}
	return false
}

// pathValues returns the values of the named wildcards of r in the
// policy's pattern. It serves a shallow copy of r to the mux, which is
// where net/http computes path values, so that r's own Pattern and path
// values stay as the application's router set them.
func (m *matcher) pathValues(r *http.Request, names, values []string) bool {
	if m.mux == nil {
		return false
	}
	c := capture{names: names, values: values}
	r2 := *r
	m.mux.ServeHTTP(&c, &r2)
	return c.ok
}
