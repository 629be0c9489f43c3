package server

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/clientip"
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
//	                         status in X-Sluice-Status
func (s *Server) checkMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/check", s.serveCheck(false))
	mux.HandleFunc("/check/traefik", s.serveCheck(false))
	mux.HandleFunc("/check/nginx", s.serveCheck(true))
	mux.HandleFunc("/healthz", serveHealthz)
	return mux
}

// serveCheck decides the request a gateway describes, without serving it.
func (s *Server) serveCheck(nginx bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.m.inflight.Inc()
		defer s.m.inflight.Dec()
		r, finish := s.boundBody(w, r)
		defer finish()
		g := s.gen.Load()
		orig, ok := forwardedRequest(r, g.set.ClientIP())
		if !ok {
			writeProblem(w, http.StatusBadRequest, "X-Forwarded-Uri is not a request URI")
			return
		}
		if nginx {
			w = &nginxWriter{ResponseWriter: w}
		}
		g.check.ServeHTTP(w, orig)
	}
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
// the forwarding header as the policies' resolver reads it. ok is false
// for a trusted request whose URI does not parse.
//
// The URI is the client's own (NGINX's $request_uri), which the gateway
// and the application may read more leniently than net/http does: a
// fragment is cut off, as parsers of request targets do, and the
// policies match the path clean (see package policy), so that neither
// /login#x nor //login escapes a policy on /login.
//
// The check request's body, if the gateway sends one, is the original
// request's (Traefik with forwardBody: true): a policy keyed by a form
// field reads it as it would the request's own.
func forwardedRequest(r *http.Request, resolver *clientip.Resolver) (*http.Request, bool) {
	if !resolver.Trusted(clientip.PeerOf(r)) {
		return r, true
	}
	uri := r.Header.Get(hForwardedURI)
	method := r.Header.Get(hForwardedMethod)
	if uri == "" && method == "" {
		return r, true
	}
	uri, _, _ = strings.Cut(uri, "#")
	if uri == "" {
		uri = "/"
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, false
	}
	if method == "" || !validMethod(method) {
		method = http.MethodGet
	}
	out := r.Clone(r.Context())
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
	return out, true
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

// nginxWriter turns refusals into the 403 NGINX's auth_request
// understands, with the real status in X-Sluice-Status for the
// error_page location to answer with.
type nginxWriter struct{ http.ResponseWriter }

func (w *nginxWriter) WriteHeader(code int) {
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		w.Header().Set(hSluiceStatus, strconv.Itoa(code))
		code = http.StatusForbidden
	}
	w.ResponseWriter.WriteHeader(code)
}
