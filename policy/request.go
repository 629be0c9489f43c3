package policy

import (
	"context"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/internal/urlpath"
)

// Request is one request as policies see it. Transports fill it in for
// each request; the Enforcer reads it during Enforce and keeps nothing.
type Request struct {
	// HTTP is matched against the policies' patterns (its Method, Host and
	// URL path) and gives form fields. gRPC builds one with method POST
	// and the full method name, /pkg.Service/Method, as path. Its
	// RemoteAddr (and its context's http.LocalAddrContextKey, for a Unix
	// socket) is the peer, from which plans.header is believed only when
	// it is a trusted proxy (see clientip.PeerOf). It must not be nil.
	HTTP *http.Request
	// Header holds the request's header fields. When nil, Metadata is
	// read instead.
	Header http.Header
	// Metadata holds gRPC metadata, keyed in lower case.
	Metadata map[string][]string
	// Client is the client's address, grouped (see clientip). The
	// invalid Prefix stands for a peer with no IP address; every such
	// request shares one key.
	Client netip.Prefix
	// User is the authenticated user the application identified, or ""
	// for an anonymous request.
	User string
	// Plan is the plan the application assigned, or "" to let the
	// policy file's plans section decide. A plan plans.names does not
	// list counts as plans.default.
	Plan string

	// routed is HTTP as the policies' patterns match it, its path clean
	// (see routed), during Enforce.
	routed *http.Request
}

// routed returns r with its path as the policies' patterns match it (see
// urlpath.CleanURL, with the file's paths options) and its host as
// gateways and servers route it (see routedHost): r itself when both are
// already so, else a shallow copy that only the policies' patterns read.
// ServeMux would answer /a/../login or //login with a redirect, which
// matches no policy, where a reverse proxy, a router that cleans paths or
// a gRPC server's unknown-service handler serves the request as /login;
// NGINX, Apache and Tomcat serve /x/%2e%2e/login as /login too. CONNECT's
// target is no path.
func routed(r *http.Request, o urlpath.Options) *http.Request {
	if r.Method == http.MethodConnect || r.URL == nil {
		return r
	}
	u := urlpath.CleanURL(r.URL, o)
	host, hostOK := routedHost(r.Host)
	if u == r.URL && hostOK {
		return r
	}
	c := *r
	c.URL, c.Host = u, host
	return &c
}

// routedHost returns host (a Host header, its port kept) in lower case and
// without the final dot of a fully qualified name, an IPv6 address without
// its brackets when it has no port, and whether it was so already. Names
// are matched as DNS matches them: a gateway (Traefik) or an application
// that ignores the host serves API.Example.COM and api.example.com. as
// api.example.com, and a policy on api.example.com must count them, where
// ServeMux, which the patterns go through, compares hosts byte for byte.
// ServeMux cuts the port off [2001:db8::1]:443 and compares 2001:db8::1,
// but compares [2001:db8::1] as it comes: without brackets, both are the
// address a pattern names.
func routedHost(host string) (string, bool) {
	name, port, bracketed := splitHost(host)
	dot := strings.HasSuffix(name, ".")
	upper := strings.IndexFunc(name, func(c rune) bool { return 'A' <= c && c <= 'Z' }) >= 0
	switch {
	case !dot && !upper && !(bracketed && port == ""):
		return host, true
	case bracketed && port != "":
		return "[" + strings.ToLower(name) + "]" + port, false
	}
	return strings.ToLower(strings.TrimSuffix(name, ".")) + port, false
}

// splitHost splits a Host header into its name, without the brackets of
// an IPv6 address, and its port, with its colon, if any. An address
// without brackets has no port.
func splitHost(host string) (name, port string, bracketed bool) {
	if strings.HasPrefix(host, "[") {
		if i := strings.IndexByte(host, ']'); i > 0 {
			return host[1:i], host[i+1:], true
		}
	}
	if i := strings.IndexByte(host, ':'); i >= 0 && strings.Count(host, ":") == 1 {
		return host[:i], host[i:], false
	}
	return host, "", false
}

// header returns the values of a header field (gRPC: a metadata key).
// Given more than once, a field has no one value: servers differ on the
// one they read (Go's Header.Get the first; Node and Rack all of them,
// joined by commas; others the last), so a key reads it as manyValues, a
// plan header names no plan, and a match condition holds if it holds for
// one of them.
func (r *Request) header(canonical, lower string) []string {
	if r.Header != nil {
		return r.Header[canonical]
	}
	return r.Metadata[lower]
}

// present reports whether a header field with values vs is present: given
// once with a value that is not blank, or more than once. A key part on
// the header applies to the request exactly when it is (see appendPart),
// which a match condition present: true is trusted to guarantee.
func present(vs []string) bool {
	return len(vs) > 1 || len(vs) == 1 && !blank(vs[0])
}

// blank reports whether a header's value is empty or only spaces and
// tabs. HTTP/1.1 servers trim a value's spaces and tabs, so net/http hands
// "X-Key:   " over as empty; HTTP/2 and gRPC hand the spaces on as sent.
// Blank is no value over any of them, so a client cannot, by switching
// to HTTP/2, pass for one with a key and escape the limit on those
// without, nor key a fresh counter with each run of spaces.
func blank(v string) bool {
	return ows(v) == ""
}

// ows returns a header's value without its leading and trailing spaces
// and tabs (RFC 9110's optional white space), as HTTP/1.1 servers read
// it: HTTP/2 and gRPC hand them on as sent, and a key, a plan's API key
// or an equals condition read with them would take " k" for another
// value than "k", where the upstream may well trim it: a client could key
// a fresh counter with each spelling.
func ows(v string) string {
	return strings.Trim(v, " \t")
}

// single returns the value of a header field given once, without its
// leading and trailing white space (see ows), and false for one given
// more than once or not at all, or blank.
func single(vs []string) (string, bool) {
	if len(vs) != 1 {
		return "", false
	}
	v := ows(vs[0])
	return v, v != ""
}

type ctxKey uint8

const (
	userKey ctxKey = iota
	planKey
)

// WithUser returns a context that names the authenticated user of a
// request. An authentication middleware that runs before the rate limiter
// calls it so that policies can key by user (key part "user") and match
// authenticated or anonymous requests. An empty id means anonymous.
func WithUser(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, userKey, id)
}

// UserFrom returns the user WithUser put in ctx, or "".
func UserFrom(ctx context.Context) string {
	id, _ := ctx.Value(userKey).(string)
	return id
}

// WithPlan returns a context that names the plan of a request, which
// takes precedence over the plans section of the policy file (a plan
// your application looked up is more trustworthy than a header).
func WithPlan(ctx context.Context, plan string) context.Context {
	return context.WithValue(ctx, planKey, plan)
}

// PlanFrom returns the plan WithPlan put in ctx, or "".
func PlanFrom(ctx context.Context) string {
	p, _ := ctx.Value(planKey).(string)
	return p
}
