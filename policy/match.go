package policy

import (
	"fmt"
	"net/http"
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

// marker is the handler a policy's mux routes matching requests to. It
// records nothing itself: matching compares the handler mux.Handler
// returns with it, and wildcard capture reads the path values of the
// request it is served.
type marker struct{}

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
	return mux, mk, nil
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

// matches reports whether the policy applies to r.
func (m *matcher) matches(r *Request) bool {
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
		if h, _ := m.mux.Handler(r.routed); h != http.Handler(m.marker) {
			return false
		}
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
