package server

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/logpace"
	"github.com/sluicehq/sluice/policy"
)

// The headers a gateway describes the original request with, as Traefik's
// forwardAuth sends them (NGINX sends them as its configuration says).
const (
	hForwardedMethod = "X-Forwarded-Method"
	hForwardedURI    = "X-Forwarded-Uri"
	hForwardedHost   = "X-Forwarded-Host"
	hForwardedProto  = "X-Forwarded-Proto"
)

// hSluiceStatus carries the real status of a refusal through NGINX's
// auth_request, which only understands 2xx, 401 and 403.
const hSluiceStatus = "X-Sluice-Status"

// checkMux routes the check listener.
//
//	/check, /check/traefik   Traefik forwardAuth: 200, or the refusal as
//	                         the client should see it (429 or 503)
//	/check/nginx             NGINX auth_request: 200, or 403 with the real
//	                         status in X-Sluice-Status, and no body
func (s *Server) checkMux() http.Handler {
	// One pacer for the endpoints: a gateway that half describes its
	// requests does so for each of them.
	halfLog := &logpace.Pacer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/check", s.serveCheck(false, halfLog))
	mux.HandleFunc("/check/traefik", s.serveCheck(false, halfLog))
	mux.HandleFunc("/check/nginx", s.serveCheck(true, halfLog))
	mux.HandleFunc("/healthz", serveHealthz)
	return mux
}

// serveCheck decides the request a gateway describes, without serving it.
// halfLog paces the warning of a trusted gateway that sends
// X-Forwarded-Method or X-Forwarded-Uri without the other.
func (s *Server) serveCheck(nginx bool, halfLog *logpace.Pacer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// What the check answers, before checkWriter turns a refusal
		// into NGINX's 403: the status its client gets.
		a := &answer{ResponseWriter: w}
		defer func() { s.m.request(listenerCheck, a.code()) }()
		r, finish := s.boundBody(w, r)
		defer finish()
		g := s.gen.Load()
		orig, problem := forwardedRequest(r, g.set.ClientIP())
		if problem == "" {
			problem = g.otherSpelling(r.Header)
		}
		if problem != "" {
			writeProblem(a, http.StatusBadRequest, problem)
			return
		}
		// A check that describes a request and is decided as itself comes
		// from a peer not trusted: a gateway left out of trusted_proxies
		// has every request decided as the check itself, and counted as its own.
		if orig == r && (r.Header.Get(hForwardedURI) != "" || r.Header.Get(hForwardedMethod) != "") && g.firstUntrustedWarning(s.gen.Load()) {
			s.log.Warn("a check describes a request in X-Forwarded-Method and -Uri, but its peer is not in client_ip.trusted_proxies: "+
				"the check is decided as itself; add the gateway's address to trusted_proxies", "peer", r.RemoteAddr)
		}
		// A trusted gateway that sends one of the two is misconfigured
		// (a proxy_set_header left out): its requests are decided as GET,
		// or as /, whatever they were. Every check of it is so: the
		// warning comes at most once a second.
		if orig != r && (r.Header.Get(hForwardedMethod) == "" || r.Header.Get(hForwardedURI) == "") {
			if held, ok := halfLog.Take(s.clock.Now()); ok {
				missing := hForwardedURI
				if r.Header.Get(hForwardedMethod) == "" {
					missing = hForwardedMethod
				}
				s.log.Warn("a check from a trusted gateway has one of X-Forwarded-Method and X-Forwarded-Uri but not the other: "+
					"it is decided as the method and path below; have the gateway send both",
					"missing", missing, "method", orig.Method, "path", orig.URL.Path, "peer", r.RemoteAddr, "not_logged", held)
			}
		}
		// The policies answer a HEAD request with no body, as its client
		// expects; the check that asks about it is a GET (Traefik's
		// forwardAuth, NGINX's subrequest), whose answer must be whole.
		noBody := orig.Method == http.MethodHead && r.Method != http.MethodHead
		if nginx || noBody {
			a.ResponseWriter = &checkWriter{ResponseWriter: w, nginx: nginx, noBody: noBody}
		}
		g.check.ServeHTTP(a, orig)
	}
}

// otherSpelling says why a check whose request has header cannot be
// decided under g: it carries another spelling of a field the policies
// read (X_Api_Key or X.Api.Key beside a key of X-API-Key), or "". The gateway passes
// the request on whole, so an upstream that reads X_Api_Key as the field
// itself (CGI, Puma) would take a key, a user or a plan that the
// policies, which read only X-Api-Key, never counted. The proxy drops
// such fields (see reverseProxy); a check cannot.
func (g *generation) otherSpelling(header http.Header) string {
	for name := range header {
		if field := g.read.otherOf(name); field != "" {
			return name + " is another spelling of " + field + ", which the policies read and an upstream may take it for: " +
				"have the gateway drop fields with underscores or dots in their names (NGINX does, unless underscores_in_headers is on; " +
				"Traefik with aliasHeadersStrategy: delete)"
		}
	}
	return ""
}

// firstUntrustedWarning reports whether a check decided under g, while
// cur is the server's generation, is the first to warn of an untrusted
// gateway under it: the warning comes once per configuration. Only the
// current generation warns, so that a check begun before a reload and
// ending after it adds no warning of the configuration replaced.
func (g *generation) firstUntrustedWarning(cur *generation) bool {
	return g == cur && g.warnedUntrusted.CompareAndSwap(false, true)
}

// checkPassed answers an allowed check: 200, with the rate limit headers
// the middleware set. A check whose body (read by a form key) stopped
// arriving or could not be read was decided on a part of it: it is
// answered 408 or 400 instead, never passed.
func checkPassed(w http.ResponseWriter, r *http.Request) {
	if !bodyFailed(w, r) {
		w.WriteHeader(http.StatusOK)
	}
}

// forwardedRequest returns the request a gateway asks about: the check
// request with the method, URI, host and scheme of its X-Forwarded-*
// headers. Only a trusted proxy (client_ip.trusted_proxies) is believed:
// from anyone else the check request is decided as itself, so that no
// client can choose what it is counted as. The client address comes from
// the forwarding header as the policies' resolver reads it. problem says
// why a trusted request describes no request: its URI does not parse, or
// its X-Forwarded-Method, -Uri or -Host came more than once.
//
// A missing or malformed method is taken as GET, and a method is read in
// upper case: the policies match the method and host whatever their case,
// and the host without a final dot, as gateways route them (Traefik
// describes them as the client wrote them), and Django and Flask read a
// post's form from its body as a POST's, so a form key must too.
//
// The URI is the client's own (NGINX's $request_uri), which the gateway
// and the application may read more leniently than net/http does: a
// fragment is cut off, as parsers of request targets do, and the
// policies match the path clean (see package policy), so that neither
// /login#x nor //login escapes a policy on /login. A URI that is a query
// string alone is the root's: NGINX's $request_uri of GET http://host?x,
// which it serves as /?x.
//
// The check request's body, if the gateway sends one, is the original
// request's (Traefik with forwardBody: true): a policy keyed by a form
// field reads it as it would the request's own. A check without one
// describes a request whose body, if it had one, the gateway kept (NGINX;
// Traefik without forwardBody): see policy.WithoutBody.
func forwardedRequest(r *http.Request, resolver *clientip.Resolver) (*http.Request, string) {
	if !resolver.Trusted(clientip.PeerOf(r)) {
		return r, ""
	}
	// A field that comes twice describes no one request: a gateway that
	// appends its copy after the client's would let the client choose
	// which is decided.
	for _, h := range []string{hForwardedMethod, hForwardedURI, hForwardedHost} {
		if len(r.Header[h]) > 1 {
			return nil, repeatedForwarded(h)
		}
	}
	uri := r.Header.Get(hForwardedURI)
	method := r.Header.Get(hForwardedMethod)
	if uri == "" && method == "" {
		return r, ""
	}
	uri, _, _ = strings.Cut(uri, "#")
	switch {
	case uri == "":
		uri = "/"
	case uri[0] == '?':
		uri = "/" + uri
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, "X-Forwarded-Uri is not a request URI"
	}
	if validMethod(method) {
		method = strings.ToUpper(method)
	} else {
		method = http.MethodGet
	}
	ctx := r.Context()
	if r.Body == nil || r.Body == http.NoBody {
		ctx = policy.WithoutBody(ctx)
	}
	out := r.Clone(ctx)
	out.Method, out.URL, out.RequestURI = method, u, uri
	if h := r.Header.Get(hForwardedHost); h != "" {
		out.Host = h
	}
	u.Host = out.Host
	u.Scheme = "http"
	if r.Header.Get(hForwardedProto) == "https" {
		u.Scheme = "https"
	}
	out.Header.Del(hForwardedMethod)
	out.Header.Del(hForwardedURI)
	return out, ""
}

// repeatedForwarded says why a request from a trusted proxy whose field
// h came more than once is refused.
func repeatedForwarded(h string) string {
	return h + " came more than once: have the proxy in front set it, replacing any the client sent"
}

// validMethod reports whether m is an HTTP token.
func validMethod(m string) bool {
	if len(m) > 32 {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return m != ""
}

// checkWriter is the ResponseWriter a check is answered through when its
// answer needs changing. For NGINX (nginx), it turns refusals into the
// 403 auth_request understands, with the real status in X-Sluice-Status
// for the error_page location to answer with, and no body: auth_request
// reads the header alone and closes the connection rather than read a
// body, so a body would cost NGINX a new connection to sluice for every
// refusal (the error_page location writes the client's body). For a check
// about a HEAD request that is not a HEAD itself (noBody), it drops the
// Content-Length of the body the policies, answering as to the HEAD, do
// not write: the gateway would wait for that body, find the connection
// closed, and answer its client 500 (Traefik) for a refusal. The client
// of a HEAD gets no body whatever the length.
type checkWriter struct {
	http.ResponseWriter
	nginx  bool
	noBody bool
	drop   bool // the body is not sent: a refusal to NGINX
}

func (w *checkWriter) WriteHeader(code int) {
	if w.noBody {
		w.Header().Del("Content-Length")
	}
	if w.nginx && (code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable) {
		h := w.Header()
		h.Set(hSluiceStatus, strconv.Itoa(code))
		h.Del("Content-Type")
		h.Set("Content-Length", "0")
		w.drop = true
		code = http.StatusForbidden
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes p, or drops it when the answer has no body.
func (w *checkWriter) Write(p []byte) (int, error) {
	if w.drop {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap returns the ResponseWriter underneath, for
// http.ResponseController.
func (w *checkWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
