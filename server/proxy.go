package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/logpace"
	"github.com/sluicehq/sluice/policy"
)

// serveProxy serves the data plane on the current generation. CONNECT,
// which asks for a tunnel, not a resource, is no request for the upstream:
// it is answered 405 here, where the upstream's refusal came back as a 502
// and a warning in the log for every one a client sent. So is PRI, HTTP/2's
// preface sent as if to an HTTP/1 server (a whole preface is HTTP/2 with
// prior knowledge, which net/http serves itself).
//
// A gRPC call (see isGRPC) to an upstream spoken to in HTTP/2 (see
// Server.grpcCall) gets sluice's own answers as gRPC's (see grpcAnswer),
// and its body is neither bounded by Options.BodyTimeout nor buffered: a
// stream may be silent for as long as its client likes, and a
// full-duplex client waits for replies before it sends more. Nor is its
// answer bounded by Options.UpstreamTimeout (see newGRPCTransport): its
// bound is its client's deadline.
//
// The policies decide the request as the upstream will get it: without
// its hop-by-hop fields (see hopByHop), and with the host a trusted proxy
// forwarded it for (see forwardedHost). A path with . or .. segments is
// answered 400 (see dotSegment): the policies decide a path clean, as
// ServeMux routes it, and the request goes on as it came, so an upstream
// that does not remove them itself (Werkzeug's <path:...>, Express's *)
// would serve /secret/../x under /secret/, which no policy on /secret/
// decided. Clients remove them before they send.
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request) {
	// Counted as it ends, a panic (ReverseProxy's abort) included.
	a := &answer{ResponseWriter: w}
	defer func() { s.m.request(listenerProxy, a.code()) }()
	var ga *grpcAnswer
	if s.grpcCall(r) {
		r = r.WithContext(context.WithValue(r.Context(), grpcCallKey{}, true))
		ga = newGRPCAnswer(a, r)
		a.ResponseWriter = ga
		defer ga.finish()
	}
	switch r.Method {
	case http.MethodConnect:
		w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
		writeProblem(a, http.StatusMethodNotAllowed, "the proxy opens no tunnels (CONNECT)")
		return
	case "PRI":
		// HTTP/2's connection preface, cut short or sent as an HTTP/1
		// request line: no request for the upstream either.
		w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
		writeProblem(a, http.StatusMethodNotAllowed, "PRI is HTTP/2's connection preface, not a request: send it whole, or use HTTP/1.1")
		return
	}
	if dotSegment(r.URL.EscapedPath()) {
		writeProblem(a, http.StatusBadRequest, "the path has . or .. segments; resolve them before sending")
		return
	}
	g := s.gen.Load()
	r = withDeclaredTrailer(r)
	r, problem := forwardedHost(hopByHop(r), g.set.ClientIP())
	if problem != "" {
		writeProblem(a, http.StatusBadRequest, problem)
		return
	}
	if ga == nil {
		// A gRPC call's body is not bounded: a stream may be silent as
		// long as its client likes (a subscription), and its deadline is
		// the client's, which the upstream gets in grpc-timeout.
		var finish func()
		r, finish = s.boundBody(w, r)
		defer finish()
	}
	w, finishWrites := s.boundWrites(w, r)
	defer finishWrites()
	if !r.ProtoAtLeast(1, 1) {
		w = finalOnly{w}
	}
	if ga != nil {
		ga.ResponseWriter = w
	} else {
		a.ResponseWriter = w
	}
	g.proxy.ServeHTTP(a, r)
}

// finalOnly is the ResponseWriter of a request older than HTTP/1.1: it
// drops informational responses, which such a client cannot read (RFC
// 9110, section 15.2). sluice asks the upstream in HTTP/1.1, which may
// answer with 103 Early Hints first, or with 100 Continue to an Expect
// the client sent, and ReverseProxy passes each on.
type finalOnly struct{ http.ResponseWriter }

func (w finalOnly) WriteHeader(code int) {
	if code >= 200 {
		w.ResponseWriter.WriteHeader(code)
	}
}

// Unwrap returns the ResponseWriter underneath, for
// http.ResponseController.
func (w finalOnly) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// grpcCall reports whether the proxy treats r as a gRPC call: a request
// that is one (isGRPC) to an upstream that can take one, spoken to in
// HTTP/2 by the gRPC transport (s.grpcTrans: h2c://, or https:// with h2
// required). Elsewhere the type is any HTTP/2 client's to claim, and a
// gRPC server could not answer the call anyway: to an http:// upstream,
// spoken to in HTTP/1.1, a claimed call whose body never came held one of
// its connections, unbounded by Options.BodyTimeout, for as long as its
// client liked. There it is an ordinary request, buffered and bounded,
// and answered in HTTP.
func (s *Server) grpcCall(r *http.Request) bool {
	return s.grpcTrans != nil && isGRPC(r)
}

// grpcCallKey is the context key that marks a request serveProxy treats
// as a gRPC call (see Server.grpcCall), for the handlers after it and
// the transport (see upstreamTransport).
type grpcCallKey struct{}

// inGRPCCall reports whether r, or the request going upstream for it, is
// one serveProxy treats as a gRPC call.
func inGRPCCall(r *http.Request) bool {
	return r.Context().Value(grpcCallKey{}) != nil
}

// dotSegment reports whether an escaped path has a segment that is . or
// .., written as dots or as %2e (which RFC 3986 reads as a dot).
func dotSegment(path string) bool {
	if !strings.Contains(path, ".") && !strings.Contains(path, "%2") {
		return false // most paths: no segment to look at
	}
	for seg := range strings.SplitSeq(path, "/") {
		if len(seg) > 6 {
			continue
		}
		if d := strings.ReplaceAll(strings.ToLower(seg), "%2e", "."); d == "." || d == ".." {
			return true
		}
	}
	return false
}

// hopHeaders are the fields ReverseProxy removes from every request it
// forwards, besides those its Connection field names: net/http/httputil's
// list.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// hopByHop returns r with the header ReverseProxy will forward: without
// the fields its Connection field names nor those of hopHeaders, but
// with TE: trailers, and Connection: Upgrade and the Upgrade asked for,
// which ReverseProxy puts back. The policies read this header, not the
// client's: a field the client named in Connection (X-API-Key) was
// matched and keyed on by the policies and never reached the upstream,
// which served the request as if it had none, so that a client escaped
// the policy for requests without one with a new key each time. It
// returns r itself when there is nothing to remove, else a shallow copy.
// (The Upgrade kept is the first value, as ReverseProxy keeps it; one it
// refuses, not printable, is kept for it to refuse.)
//
// An upgrade to h2c is not forwarded: the connection would become an
// HTTP/2 tunnel to the upstream, whose requests no policy decides (the
// one that opened it is decided once, as a websocket is) and whose
// header fields reach the upstream as the client wrote them. The request
// goes on as a plain one, without the h2c token (Upgrade goes when
// nothing else is left in it) and without HTTP2-Settings, h2c's alone.
// Other protocols are upgraded as asked, each decided once.
func hopByHop(r *http.Request) *http.Request {
	h := r.Header
	found := false
	for _, name := range hopHeaders {
		if _, ok := h[name]; ok {
			found = true
			break
		}
	}
	if _, ok := h["Http2-Settings"]; ok {
		found = true
	}
	if !found {
		return r
	}
	upgrade := ""
	if hasToken(h["Connection"], "upgrade") {
		upgrade = withoutH2C(h.Get("Upgrade"))
	}
	trailers := hasToken(h["Te"], "trailers")
	h = h.Clone()
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	h.Del("Http2-Settings")
	if trailers {
		h["Te"] = []string{"trailers"}
	}
	if upgrade != "" {
		h["Connection"] = []string{"Upgrade"}
		h["Upgrade"] = []string{upgrade}
	}
	out := new(http.Request)
	*out = *r
	out.Header = h
	return out
}

// withoutH2C returns the protocols of an Upgrade value but h2c, or "" if
// it names h2c alone. A value with no h2c in it is returned as it is.
func withoutH2C(upgrade string) string {
	if !hasToken([]string{upgrade}, "h2c") {
		return upgrade
	}
	var kept []string
	for p := range strings.SplitSeq(upgrade, ",") {
		if p = textproto.TrimString(p); p != "" && !strings.EqualFold(p, "h2c") {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, ", ")
}

// hasToken reports whether a comma-separated list of values holds token,
// in any letter case, as ReverseProxy reads Connection and TE
// (httpguts.HeaderValuesContainsToken).
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.Trim(t, " \t"), token) {
				return true
			}
		}
	}
	return false
}

// forwardedHost returns r with the host a trusted proxy forwarded it for
// (X-Forwarded-Host) as its Host, for the policies to match, as the check
// endpoint does: behind a proxy that sets Host to sluice's own address
// (NGINX's default), a policy scoped to a host matched nothing. The Host
// the request came with is kept for the upstream (see receivedHost). A
// peer not trusted is not believed: r is returned as it came. problem
// says why a trusted request names no one host, as the check endpoint
// refuses it: its X-Forwarded-Host came more than once, and a proxy that
// appends its own after the client's would let the client choose the
// host it is limited as, and the one the upstream is told.
func forwardedHost(r *http.Request, resolver *clientip.Resolver) (_ *http.Request, problem string) {
	hosts := r.Header[hForwardedHost]
	if len(hosts) == 0 || !resolver.Trusted(clientip.PeerOf(r)) {
		return r, ""
	}
	if len(hosts) > 1 {
		return nil, repeatedForwarded(hForwardedHost)
	}
	if host := hosts[0]; host != "" && host != r.Host {
		r = r.WithContext(context.WithValue(r.Context(), receivedHostKey{}, r.Host))
		r.Host = host
	}
	return r, ""
}

// receivedHostKey is the context key of the Host a request came with,
// when forwardedHost replaced it.
type receivedHostKey struct{}

// receivedHost returns the Host r came with.
func receivedHost(r *http.Request) string {
	if host, ok := r.Context().Value(receivedHostKey{}).(string); ok {
		return host
	}
	return r.Host
}

// declaredTrailerKey is the context key of the names a request declared
// in its Trailer field, canonical.
type declaredTrailerKey struct{}

// withDeclaredTrailer returns r with the names of the trailer fields it
// declared (in its Trailer field) kept in its context, for
// forwardTrailer. They must be taken before anything reads the body (a
// policy's form key, buffered): net/http adds every field of the trailer
// that comes to the same map as the body ends, declared or not, and
// after that the two cannot be told apart. A request that declared none
// is returned as it came.
func withDeclaredTrailer(r *http.Request) *http.Request {
	if len(r.Trailer) == 0 {
		return r
	}
	names := make([]string, 0, len(r.Trailer))
	for name := range r.Trailer {
		names = append(names, name)
	}
	return r.WithContext(context.WithValue(r.Context(), declaredTrailerKey{}, names))
}

// declaredTrailer returns the names r declared in its Trailer field, as
// withDeclaredTrailer kept them.
func declaredTrailer(r *http.Request) []string {
	names, _ := r.Context().Value(declaredTrailerKey{}).([]string)
	return names
}

// forwardTrailer returns the trailer the upstream gets for in, whose
// body going out is body, and the body to send in its place: the fields
// in declared in its Trailer field (see withDeclaredTrailer) that keep
// lets through, with the values that came for them. The upstream is told their names before the body, in the
// outgoing Trailer field, and their values are copied from in's trailer
// as body ends (see trailerCopy), the moment net/http has filled it and
// before the transport, having read that end, writes the trailer out.
// Nothing else of in's trailer is sent: not a field the client did not
// declare, whatever net/http took in. Without a body, or nothing to
// send, the trailer is nil.
func forwardTrailer(in *http.Request, body io.ReadCloser, keep func(name string) bool) (http.Header, io.ReadCloser) {
	declared := declaredTrailer(in)
	if body == nil || len(declared) == 0 {
		return nil, body
	}
	out := make(http.Header, len(declared))
	for _, name := range declared {
		if keep(name) {
			out[name] = nil
		}
	}
	if len(out) == 0 {
		return nil, body
	}
	return out, &trailerCopy{ReadCloser: body, from: in.Trailer, to: out}
}

// trailerCopy is a request body going to the upstream that, as it ends,
// gives its trailer, to, the values of the same names in from, the
// trailer net/http fills as the client's body ends. The upstream's
// trailer is a map of its own, not the client's, so that what net/http
// puts in the client's (every field that came) never reaches the
// upstream unfiltered.
type trailerCopy struct {
	io.ReadCloser
	from, to http.Header
}

func (b *trailerCopy) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		for name := range b.to {
			b.to[name] = b.from[name]
		}
	}
	return n, err
}

// notInTrailer are the fields RFC 9110 (section 6.5.1) keeps out of a
// trailer, lower case: those that frame the message, route it, carry
// credentials, modify the request or describe its content, all of which
// a recipient acts on before the body. An upstream that merges a
// trailer into the header, as some do, would take a Host, a
// Content-Length or an Authorization that came after the body for the
// request's own. x/net/http2's list, with Cookie, the conditionals and
// Upgrade added.
var notInTrailer = []string{
	"content-length", "transfer-encoding", "trailer", "content-type", "content-encoding", "content-range",
	"host", "authorization", "proxy-authorization", "cookie", "www-authenticate", "proxy-authenticate",
	"cache-control", "expect", "max-forwards", "pragma", "range", "te",
	"if-match", "if-none-match", "if-modified-since", "if-unmodified-since", "if-range",
	"connection", "keep-alive", "proxy-connection", "upgrade",
}

// spellingOf reports whether name is, in any spelling, its own included,
// one of the fields whose lower-case spellings (foldName) are folds.
func spellingOf(name string, folds []string) bool {
	for _, f := range folds {
		if len(name) == len(f) && foldEqual(name, f) {
			return true
		}
	}
	return false
}

// boundBody returns r with its body bounded by Options.BodyTimeout (see
// idleBody), and what the handler calls as it returns.
func (s *Server) boundBody(w http.ResponseWriter, r *http.Request) (*http.Request, func()) {
	if r.Body == nil || r.Body == http.NoBody {
		return r, func() {}
	}
	b := &idleBody{ReadCloser: r.Body, idle: s.o.BodyTimeout, stream: r.ProtoMajor == 2, off: s.o.BodyTimeout <= 0}
	finish := func() {}
	if !b.off {
		b.rc = http.NewResponseController(w)
		finish = b.finish
	}
	r = r.WithContext(context.WithValue(r.Context(), idleBodyKey{}, b))
	r.Body = b
	// net/http reads what a handler leaves of an HTTP/1 body before it
	// answers, to keep the connection, and nothing bounds that read: a
	// request refused before its body is read, from a client that sends
	// no more, would hold its answer and its connection for ever. So the
	// deadline is set at once, and each read moves it.
	if !b.off && !b.stream && b.rc.SetReadDeadline(time.Now().Add(b.idle)) != nil {
		b.off = true
	}
	return r, finish
}

// idleBody is a request body that fails when its client sends nothing for
// idle (Options.BodyTimeout), and remembers how it failed (see
// proxyError). net/http bounds the headers' time
// (ReadHeaderTimeout) but a body only by a deadline for the whole of it,
// which a proxy cannot set without cutting long uploads. Each read moves
// the connection's read deadline to idle from now, so a client that
// trickles nothing (a slow-loris body) frees its goroutine, the body a
// form key keeps, and the connection to the upstream. The deadline is
// cleared at the body's end: net/http then reads the connection in the
// background to notice a client that goes away, and a deadline there
// would cancel a request whose response is merely slow. After an error
// the deadline stays, passed: net/http reads what is left of a body before
// it answers, and that read must fail at once, not wait for the client. A
// body left unread keeps its deadline until the connection's next request,
// whose header deadline replaces it. An HTTP/2 stream's read deadline is
// a timer that fails its body when it fires, read or not: there the
// deadline is cleared after each read too, or an upstream slow to take
// the body would get a client that sent it all a 408.
//
// A read may end after the handler has returned (a transport writes the
// body from a goroutine of its own, and an upstream may answer before it
// has all of it): the deadline is then left alone, since the connection
// may be serving the next request, and net/http's HTTP/2 ResponseWriter
// panics when used after its handler.
type idleBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	idle     time.Duration
	stream   bool        // an HTTP/2 stream: the deadline holds during reads only
	off      bool        // no deadline (none asked, cleared, or the connection takes none)
	timedOut atomic.Bool // a read failed at the deadline
	failed   atomic.Bool // a read failed otherwise (a malformed chunked body, say)

	mu   sync.Mutex // held while rc is used, so that finish waits for it
	done bool       // the handler has returned: rc is not to be used
}

// idleBodyKey is the context key of a request's idleBody.
type idleBodyKey struct{}

func (b *idleBody) Read(p []byte) (int, error) {
	if !b.off && b.setDeadline(time.Now().Add(b.idle)) != nil {
		b.off = true
	}
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF && !b.off:
		b.off = true
		_ = b.setDeadline(time.Time{})
	case err == nil && b.stream && !b.off:
		_ = b.setDeadline(time.Time{})
	case err == nil || err == io.EOF:
	case !b.off && errors.Is(err, os.ErrDeadlineExceeded):
		b.timedOut.Store(true)
	default:
		b.failed.Store(true)
	}
	return n, err
}

// setDeadline sets the read deadline of the request's connection (or
// stream) to t, unless its handler has returned.
func (b *idleBody) setDeadline(t time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return nil
	}
	return b.rc.SetReadDeadline(t)
}

// finish marks the handler returned, once no deadline is being set.
func (b *idleBody) finish() {
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
}

// boundWrites returns w with the writes of its response bounded by
// Options.SendTimeout (see idleWriter), and what the handler calls as it
// returns.
func (s *Server) boundWrites(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, func()) {
	if s.o.SendTimeout <= 0 {
		return w, func() {}
	}
	iw := &idleWriter{ResponseWriter: w, rc: *http.NewResponseController(w), idle: s.o.SendTimeout, stream: r.ProtoMajor == 2}
	return iw, iw.finish
}

// idleWriter is a ResponseWriter whose writes fail when its client takes
// nothing for idle (Options.SendTimeout), as NGINX's send_timeout.
// net/http bounds a response's writes only by a deadline for the whole
// of it (WriteTimeout), which a proxy cannot set without cutting long
// downloads and event streams: a client that stopped reading held its
// goroutine, the response's buffer and the connection to the upstream
// for ever. Each write moves the connection's write deadline to idle
// from now; a write that fails makes ReverseProxy abort the response and
// close the upstream's. A deadline that passes between writes (an event
// stream the upstream has nothing to say on) fails nothing: a
// connection's deadline fails I/O, and the next write moves it first. An
// HTTP/2 stream's write deadline is a timer that resets the stream when
// it fires, written to or not: there it is cleared after each write.
// As the handler returns the deadline is set once more, for what
// net/http writes then (what it buffered, the end of a chunked body,
// trailers), and net/http clears it once the response is written
// (HTTP/1.x) or the stream is closed (HTTP/2).
//
// Writes happen on the handler's goroutine, but for informational
// responses, which ReverseProxy writes from the transport's while the
// handler waits on it. A protocol upgrade (a websocket) hands the
// connection over, its deadlines cleared: its writes are bounded the same
// way (see Hijack), and it may idle as long as its ends like.
type idleWriter struct {
	http.ResponseWriter
	rc     http.ResponseController
	idle   time.Duration
	stream bool // an HTTP/2 stream: the deadline holds during writes only
	off    bool // the connection takes no deadline, or is the caller's (Hijack)
}

func (w *idleWriter) WriteHeader(code int) {
	if code >= 200 { // written with the body
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.start()
	w.ResponseWriter.WriteHeader(code)
	w.end()
}

func (w *idleWriter) Write(p []byte) (int, error) {
	w.start()
	n, err := w.ResponseWriter.Write(p)
	w.end()
	return n, err
}

// FlushError flushes the response, for http.ResponseController (which
// ReverseProxy flushes a streamed response through).
func (w *idleWriter) FlushError() error {
	w.start()
	err := w.rc.Flush()
	w.end()
	return err
}

// Unwrap returns the ResponseWriter underneath, for
// http.ResponseController.
func (w *idleWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands the connection over for a protocol upgrade, as
// ReverseProxy asks for it (through http.ResponseController), with each
// write bounded as a response's are (see idleConn): a client that stops
// reading what the upstream sends on a websocket is cut, and the
// upstream's connection with it, where it held both for as long as it
// liked. An upgraded connection idle both ways has no deadline.
func (w *idleWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := w.rc.Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.off = true // the connection is the caller's now
	ic := &idleConn{Conn: conn, idle: w.idle}
	if brw.Writer.Buffered() == 0 {
		// The response to the upgrade is written through brw: through ic
		// now, in the buffer net/http gave it.
		brw.Writer.Reset(ic)
	}
	return ic, brw, nil
}

// idleConn is an upgraded connection whose writes fail when its client
// takes nothing for idle: each write moves the write deadline to idle
// from now, and a deadline that passes between writes fails nothing, as
// the next write moves it first.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// start sets the write deadline before a write.
func (w *idleWriter) start() {
	if !w.off && w.rc.SetWriteDeadline(time.Now().Add(w.idle)) != nil {
		w.off = true
	}
}

// end clears a stream's write deadline after a write.
func (w *idleWriter) end() {
	if w.stream && !w.off {
		_ = w.rc.SetWriteDeadline(time.Time{})
	}
}

// finish sets the write deadline for what net/http writes once the
// handler has returned.
func (w *idleWriter) finish() {
	if !w.off {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.idle))
	}
}

// newTransport is the transport to the upstream: http.DefaultTransport's
// settings, more idle connections per host (every request goes to one),
// no proxy from the environment (HTTP_PROXY is for clients, not for a
// reverse proxy's upstream), no compression of its own (net/http would
// ask for gzip when the client asked for no encoding, and undo it, so
// that the client got the body re-framed without its Content-Length and
// the upstream compressed for nothing), and timeout, when above zero, as
// the bound on connecting and on waiting for the response's headers (see
// Options.UpstreamTimeout). With h2c, it speaks HTTP/2 with prior
// knowledge, and nothing else, to an http:// URL: a plaintext gRPC
// server answers no HTTP/1.1.
func newTransport(timeout time.Duration, h2c bool) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if h2c {
		t.Protocols = new(http.Protocols)
		t.Protocols.SetUnencryptedHTTP2(true)
	}
	t.Proxy = nil
	t.DisableCompression = true
	if timeout > 0 {
		t.ResponseHeaderTimeout = timeout
		t.DialContext = (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext
	}
	t.MaxIdleConns = 512
	t.MaxIdleConnsPerHost = 256
	return t
}

// newGRPCTransport is the transport of the gRPC calls to the upstream
// (see Server.grpcCall): newTransport's, but in HTTP/2 alone and with no
// bound on the wait for the response's header fields. grpc-go sends them
// with a call's first message or its status, so that a server stream (a
// subscription) or a stream its client has closed may be silent past
// Options.UpstreamTimeout before its first message: it was cut with
// DEADLINE_EXCEEDED. A call's bound is its client's deadline, which the
// client enforces by cancelling the call, and the proxy's request with
// it; timeout still bounds connecting, and TLS handshakes take 10
// seconds at most. HTTP/2 alone, also over TLS, so that a call, exempt
// from Options.BodyTimeout and the request buffer, holds a stream of the
// upstream's and never an HTTP/1.1 connection: to an https:// upstream
// that does not offer h2 it fails (502, UNAVAILABLE), as it would at a
// gRPC server.
func newGRPCTransport(timeout time.Duration, h2c bool) *http.Transport {
	t := newTransport(timeout, h2c) // HTTP/2 alone already for h2c
	t.ResponseHeaderTimeout = 0
	if !h2c {
		t.Protocols = new(http.Protocols)
		t.Protocols.SetHTTP2(true)
	}
	return t
}

// upstreamTransport sends a gRPC call (see Server.grpcCall) by the gRPC
// transport, grpc, and any other request by http.
type upstreamTransport struct{ http, grpc http.RoundTripper }

func (t upstreamTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if inGRPCCall(r) {
		return t.grpc.RoundTrip(r)
	}
	return t.http.RoundTrip(r)
}

// reverseProxy returns the proxy to the upstream for one generation: it
// reads the trusted proxies of set.
//
// Forwarding headers: ReverseProxy drops X-Forwarded-For, -Host, -Proto
// and Forwarded from the outgoing request before Rewrite. When the peer
// is a trusted proxy, its values are put back and this hop is appended;
// from anyone else they are dropped, and so are X-Real-IP and the rest
// of the X-Forwarded- family (-Port, -Prefix, -Ssl...), so the upstream
// never reads a client's claim as if it were a proxy's. Any of these
// spelled with underscores, dots or other signs (X_Forwarded_For,
// X.Forwarded.For), which CGI-style servers and PHP read as the header
// itself and which no proxy sends, is dropped from everyone. The peer's address is always appended to X-Forwarded-For,
// unless it has none (a Unix socket; see setForwarded).
//
// The user and plan headers (the user section's, plans.header) are
// passed on only where the policies believe them (Set.UserOf,
// Set.PlanHeaderOf): from a trusted proxy, given once. Any other spelling
// of either, or of a header the policies key or match on
// (Set.HeadersRead), in underscores or letter case (X_Auth_Request_User,
// X_Api_Key), which CGI-style servers read as the header itself, is
// dropped from everyone, as the forwarding headers' are (see
// otherSpelling).
//
// Request trailers: ReverseProxy gives the outgoing request a copy of
// the incoming one's Trailer, taken before the body is read, when the
// trailer's values are not there yet, and net/http fills the incoming
// one with every field that comes, declared or not, and checks none of
// them: forwarded as it was, a trailer reached the upstream with the
// forwarding, user and key fields the header is cleaned of, and with a
// Host or Content-Length of the client's choosing. The upstream gets a
// trailer of its own (see forwardTrailer): the fields the client
// declared, through the header's filter, without any field the policies
// read, in any spelling (they decided the request before its trailer
// came: the user and plan fields, a key), and without those a trailer
// may not carry (notInTrailer), their values copied as the body ends.
//
// Headers set before the proxy runs (the rate limit headers) are kept
// apart while the upstream answers, see keepHeaders. A Location naming
// the upstream is rewritten to the path on sluice, see relocate.
func (s *Server) reverseProxy(set *policy.Set) http.Handler {
	resolver := set.ClientIP()
	userHeader, planHeader := set.UserHeader(), set.PlanHeader()
	// The fields the policies read, whose other spellings go (see below).
	read := fieldsRead(set)
	target := s.target
	preserveHost := s.o.PreserveHost
	transport := s.trans
	if s.grpcTrans != nil {
		transport = upstreamTransport{http: s.trans, grpc: s.grpcTrans}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			in, out := pr.In, pr.Out
			pr.SetURL(target)
			if preserveHost {
				out.Host = receivedHost(in)
			}
			peer := clientip.PeerOf(in)
			trusted := resolver.Trusted(peer)
			for name := range out.Header {
				if unbelieved(name, trusted) || read.otherOf(name) != "" {
					delete(out.Header, name)
				}
			}
			if in.Trailer != nil { // else out's is nil too
				out.Trailer, out.Body = forwardTrailer(in, out.Body, func(name string) bool {
					return !spellingOf(name, notInTrailer) && !spellingOf(name, read.folds) &&
						!unbelieved(name, trusted)
				})
			}
			if userHeader != "" && set.UserOf(in) == "" {
				// The upstream is told of a user only where the policies
				// believe one: not a client's own name (from an untrusted
				// peer), nor a name given twice, which the policies take
				// for no one's (a proxy that adds its own after the
				// client's leaves the client's first, where an upstream
				// would read it).
				out.Header.Del(userHeader)
			}
			if planHeader != "" && set.PlanHeaderOf(in) == "" {
				// Likewise the plan: a client's own would name the plan
				// the upstream serves it as.
				out.Header.Del(planHeader)
			}
			if !in.ProtoAtLeast(1, 1) {
				// An HTTP/1.0 request's 100-continue is ignored (RFC
				// 9110, section 10.1.1): asked on, an upstream that sends
				// no 100 holds the body for ExpectContinueTimeout.
				out.Header.Del("Expect")
			}
			setForwarded(out.Header, in, peer, trusted)
		},
		Transport: transport,
		// FlushInterval stays 0: ReverseProxy already flushes every write of
		// a streaming reply (text/event-stream, or no Content-Length) as it
		// comes, and buffers the rest, which costs far less per request.
		BufferPool: proxyBuffers{},
		// ReverseProxy logs here a response body the upstream broke off,
		// once per request: paced as the upstream's failures are, by a
		// pacer of this generation's (a reload may let one more through).
		ErrorLog: log.New(&logpace.Writer{Log: s.log, Now: s.clock.Now}, "", 0),
		ModifyResponse: func(res *http.Response) error {
			res.Header = restoreHeaders(res.Request, res.Header)
			relocate(res.Header, target)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			restoreHeaders(r, w.Header())
			// The upstream failed to answer: what proxyError writes (502,
			// 504, or 408 and 400 for a body that failed on the way) is
			// sluice's own answer, counted under its status.
			if a, ok := w.(*answer); ok {
				w = ownAnswer{a}
			}
			s.proxyError(w, r, err)
		},
	}
	return keepHeaders{rp}
}

// keepHeaders is a ReverseProxy that keeps the headers set on its
// response before it runs (the rate limit headers) apart while the
// upstream answers, and puts them back in front of the final response's
// own. ReverseProxy writes an informational response (100 Continue, 103
// Early Hints) with every header set so far and then clears them all:
// the rate limit headers went out on the 1xx and were missing from the
// final response.
type keepHeaders struct{ rp *httputil.ReverseProxy }

// keptHeadersKey is the context key of the headers keepHeaders keeps.
type keptHeadersKey struct{}

func (k keepHeaders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	if len(h) > 0 {
		r = r.WithContext(context.WithValue(r.Context(), keptHeadersKey{}, h.Clone()))
		clear(h)
	}
	k.rp.ServeHTTP(w, r)
}

// restoreHeaders puts the headers keepHeaders kept for r in front of
// those of h, and returns h (a new Header when h was nil). An upstream
// that limits too keeps its items of the RateLimit and RateLimit-Policy
// lists, after sluice's, but its X-RateLimit-Limit, -Remaining and
// -Reset are replaced by sluice's: each holds one number, and a client
// that joins repeated fields, as most do, read "2, 99" and could not
// parse it. (Retry-After is sluice's only on a refusal, which the
// upstream never answers: an upstream's own is left alone.)
func restoreHeaders(r *http.Request, h http.Header) http.Header {
	kept, _ := r.Context().Value(keptHeadersKey{}).(http.Header)
	if len(kept) == 0 {
		return h
	}
	if h == nil {
		h = make(http.Header, len(kept))
	}
	for name, v := range kept {
		switch name {
		case "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset":
			h[name] = v
		default:
			h[name] = append(v[:len(v):len(v)], h[name]...)
		}
	}
	return h
}

// relocate rewrites a Location field of h that names the upstream,
// target, into the path the client asks sluice for, as NGINX's
// proxy_redirect default does: an upstream that builds its redirects
// from the Host it gets (its own name, unless PreserveHost), as NGINX's
// and Apache's own directory redirects do, sent clients to an address
// they cannot reach, and told them what it is. A scheme-relative
// Location (//host/path) with the upstream's host names it as well,
// whatever the scheme, and is rewritten alike. The scheme and host match
// in any letter case, as URLs read them; target's path, which every
// path the upstream gets begins with, is taken off. A Location whose
// path would read as another host's (//evil.example, /\evil.example) is
// left alone, as is any that names another host, scheme, port or a user,
// and any with a control character in it: browsers drop tabs and
// newlines from a URL, so that /<tab>/evil.example reads as
// //evil.example.
func relocate(h http.Header, target *url.URL) {
	loc := h.Get("Location")
	if loc == "" {
		return // most responses: nothing to build the origin for
	}
	origin := target.Scheme + "://" + target.Host
	if strings.HasPrefix(loc, "//") {
		origin = "//" + target.Host
	}
	if len(loc) < len(origin) || !strings.EqualFold(loc[:len(origin)], origin) {
		return
	}
	rest := loc[len(origin):]
	if base := strings.TrimSuffix(target.EscapedPath(), "/"); base != "" {
		after, ok := strings.CutPrefix(rest, base)
		if !ok || after != "" && !strings.ContainsRune("/?#", rune(after[0])) {
			return
		}
		rest = after
	} else if rest != "" && !strings.ContainsRune("/?#", rune(rest[0])) {
		return // another port, or another host that begins as this one does
	}
	if rest == "" || rest[0] != '/' {
		rest = "/" + rest
	}
	if len(rest) > 1 && (rest[1] == '/' || rest[1] == '\\') || strings.ContainsFunc(rest, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return
	}
	h.Set("Location", rest)
}

// setForwarded sets the forwarding headers of h, for a request forwarded
// for in, whose peer is peer: ProxyRequest.SetXForwarded's, with a
// trusted peer's values passed on, and with the peer as package clientip
// reads it. A Unix socket's peer has no IP address, and is appended to
// neither chain: net/http's RemoteAddr is then the path the peer bound
// its end to, which it chooses (10.0.0.1:80), and which SetXForwarded
// wrote into X-Forwarded-For as an address.
func setForwarded(h http.Header, in *http.Request, peer netip.Addr, trusted bool) {
	var xff, fwd []string
	host, proto := in.Host, "http"
	if in.TLS != nil {
		proto = "https"
	}
	if trusted {
		xff, fwd = in.Header["X-Forwarded-For"], in.Header["Forwarded"]
		if v := in.Header.Get("X-Forwarded-Host"); v != "" {
			host = v
		}
		if v := in.Header.Get("X-Forwarded-Proto"); v != "" {
			proto = v
		}
	}
	if peer.IsValid() {
		xff = append(xff[:len(xff):len(xff)], peer.String())
		if len(fwd) > 0 {
			fwd = append(fwd[:len(fwd):len(fwd)], forwardedFor(peer))
		}
	}
	if len(xff) > 0 {
		h["X-Forwarded-For"] = []string{strings.Join(xff, ", ")} // one line: many read only the first
	}
	if len(fwd) > 0 {
		h["Forwarded"] = []string{strings.Join(fwd, ", ")} // one line, as X-Forwarded-For
	}
	h["X-Forwarded-Host"] = []string{host}
	h["X-Forwarded-Proto"] = []string{proto}
}

// unbelieved reports whether name is a forwarding field (forwardingHeader)
// that the proxy drops from a peer, trusted or not: any from a peer not
// trusted, and from anyone a spelling with a sign other than a hyphen
// (X_Forwarded_For, X.Forwarded.For), which no proxy sends: a trusted
// proxy that passes a client's on would have it read as its own.
func unbelieved(name string, trusted bool) bool {
	return forwardingHeader(name) && (!trusted || !hyphensOnly(name))
}

// hyphensOnly reports whether name holds no byte but letters, digits and
// hyphens.
func hyphensOnly(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c != '-' && !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// forwardingHeader reports whether name, in any letter case and with any
// sign read as a hyphen (see foldEqual), is of the X-Forwarded- family or
// another field by which a proxy tells the upstream who the client is,
// or which URL it asked for (otherForwarding).
func forwardingHeader(name string) bool {
	const family = "x-forwarded-"
	if len(name) > len(family) && foldEqual(name[:len(family)], family) {
		return true
	}
	for _, f := range otherForwarding {
		if len(name) == len(f) && foldEqual(name, f) {
			return true
		}
	}
	return false
}

// otherForwarding are the fields besides the X-Forwarded- family that
// upstreams read a client's address or URL from: frameworks and CDNs
// (PHP's HTTP_CLIENT_IP, Symfony's and IIS's X-Original-URL, Cloudflare's
// and Akamai's), lower case.
var otherForwarding = []string{
	"forwarded", "x-real-ip", "x-forwarded", "forwarded-for", "x-original-forwarded-for",
	"client-ip", "x-client-ip", "true-client-ip", "cf-connecting-ip", "fastly-client-ip", "x-cluster-client-ip",
	"x-original-url", "x-rewrite-url",
}

// foldName returns name in lower case with every byte but a letter or a
// digit read as a hyphen, the form foldEqual compares with; "" for "".
func foldName(name string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			b[i] = '-'
		}
	}
	return string(b)
}

// otherSpelling reports whether name is another spelling of header (a
// canonical name, "" for none), whose foldName is fold: the same in any
// letter case and with underscores, dots and the other signs a field
// name may hold read as hyphens, but not header itself, which net/http
// gives every request in its canonical form. It is another field to
// net/http, and to policies, but CGI-style servers, PHP, and some WSGI
// and Rack ones, read X_Auth_Request_User or X.Auth.Request.User as
// HTTP_X_AUTH_REQUEST_USER, the header itself (Traefik's
// aliasHeadersStrategy reads them so too); no proxy sends one.
func otherSpelling(name, header, fold string) bool {
	return header != "" && len(name) == len(fold) && name != header && foldEqual(name, fold)
}

// readFields are the fields the policies of a set read: the user and plan
// headers and Set.HeadersRead, canonical, with their lower-case
// spellings (foldName).
type readFields struct{ names, folds []string }

// fieldsRead returns the fields set's policies read.
func fieldsRead(set *policy.Set) readFields {
	var f readFields
	for _, h := range append([]string{set.UserHeader(), set.PlanHeader()}, set.HeadersRead()...) {
		if h != "" {
			f.names, f.folds = append(f.names, h), append(f.folds, foldName(h))
		}
	}
	return f
}

// otherOf returns the field read of which name is another spelling (see
// otherSpelling), or "".
func (f readFields) otherOf(name string) string {
	for i, h := range f.names {
		if otherSpelling(name, h, f.folds[i]) {
			return h
		}
	}
	return ""
}

// foldEqual reports whether s is lower, a foldName of the same length,
// in any letter case and with every byte but a letter or a digit read as
// a hyphen.
func foldEqual(s, lower string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		default:
			c = '-'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// proxyBuffers recycles the 32 KiB buffers ReverseProxy copies bodies
// through, instead of allocating one per request.
type proxyBuffers struct{}

var proxyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (proxyBuffers) Get() []byte  { return *proxyBufferPool.Get().(*[]byte) }
func (proxyBuffers) Put(b []byte) { proxyBufferPool.Put(&b) }

// forwardedFor is an RFC 7239 element naming a as the hop's client.
func forwardedFor(a netip.Addr) string {
	a = clientip.Normalize(a)
	if a.Is6() {
		return `for="[` + a.String() + `]"`
	}
	return "for=" + a.String()
}

// proxyError answers 502 when the upstream cannot be reached, 504 when it
// took longer than Options.UpstreamTimeout to connect or to answer, 408
// when the client stopped sending its body (Options.BodyTimeout), and 400
// when its body could not be read. It aborts the response of a request
// canceled on the client's side.
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	// net/http cancels the request as its body's read fails, but the
	// client may still be there: it is told why, where an answer of
	// nothing would reach it as an empty 200.
	if bodyFailed(w, r) {
		return
	}
	if errors.Is(err, context.Canceled) || r.Context().Err() != nil {
		// The client went away, or so net/http thinks: it cancels a
		// request when the client shuts its sending side, as some do once
		// their request is sent. An answer of nothing would reach such a
		// client as an empty 200; aborting closes the connection instead,
		// and logs nothing. The transport's error need not be the
		// context's: an HTTP/2 stream's reset fails its body too, and the
		// transport may return that failure (a gRPC call's body, unbounded,
		// is no idleBody for bodyFailed to find).
		panic(http.ErrAbortHandler)
	}
	// One line a second, counting those it left out: a down upstream
	// fails every request.
	if held, ok := s.upstreamLog.Take(s.clock.Now()); ok {
		s.log.Warn("upstream failed", "method", r.Method, "path", r.URL.Path, "error", err.Error(), "not_logged", held)
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		writeProblem(w, http.StatusGatewayTimeout, "the upstream did not answer in time")
		return
	}
	writeProblem(w, http.StatusBadGateway, "the upstream failed to answer")
}

// buffered returns next with the body of each request of up to
// Options.RequestBuffer bytes read whole before next sees it (see
// RequestBuffer): the reads go through boundBody's deadline, and a body
// that fails is answered as the proxy answers one (bodyFailed). A body
// that declares a trailer is buffered as any other, up to RequestBuffer:
// reading it to its end reads the trailer, and a body whose trailer
// brought a field goes on chunked, for the trailer to follow it (see
// forwardTrailer). A body sluice has begun to read goes without
// Expect, whole or not: the client's 100-continue was answered as sluice
// read it (by net/http), and asked again, an upstream that sends no 100
// held the request for the transport's ExpectContinueTimeout, and one
// that does sent the client a second. A gRPC call's body (see Server.grpcCall) is
// never buffered: a client streaming its messages waits for replies as
// it sends, and the body of one that does not end would be read until
// the buffer filled.
func (s *Server) buffered(next http.Handler) http.Handler {
	size := s.o.RequestBuffer
	if size == 0 {
		size = DefaultRequestBuffer
	}
	if size < 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength > int64(size) || inGRPCCall(r) {
			next.ServeHTTP(w, r)
			return
		}
		b, err := io.ReadAll(io.LimitReader(r.Body, int64(size)+1))
		if err != nil {
			if !bodyFailed(w, r) {
				w.Header().Set("Connection", "close")
				writeProblem(w, http.StatusBadRequest, "the request body could not be read")
			}
			return
		}
		out := new(http.Request)
		*out = *r
		if len(b) <= size {
			out.Body = io.NopCloser(bytes.NewReader(b))
			out.ContentLength, out.TransferEncoding = int64(len(b)), nil
			if trailerCame(r) {
				out.ContentLength, out.TransferEncoding = -1, []string{"chunked"}
			}
		} else {
			out.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
		}
		if _, ok := r.Header["Expect"]; ok {
			out.Header = r.Header.Clone()
			delete(out.Header, "Expect")
		}
		next.ServeHTTP(w, out)
	})
}

// trailerCame reports whether a field r declared in its Trailer field
// came after its body, read to its end.
func trailerCame(r *http.Request) bool {
	for _, name := range declaredTrailer(r) {
		if len(r.Trailer[name]) > 0 {
			return true
		}
	}
	return false
}

// bodyFailed answers 408 when r's client stopped sending its body
// (Options.BodyTimeout) and 400 when its body could not be read, and
// reports whether it did.
func bodyFailed(w http.ResponseWriter, r *http.Request) bool {
	b, ok := r.Context().Value(idleBodyKey{}).(*idleBody)
	switch {
	case !ok:
		return false
	case b.timedOut.Load():
		w.Header().Set("Connection", "close")
		writeProblem(w, http.StatusRequestTimeout, "the request body stopped arriving: nothing for "+b.idle.String())
	case b.failed.Load():
		w.Header().Set("Connection", "close")
		writeProblem(w, http.StatusBadRequest, "the request body could not be read")
	default:
		return false
	}
	return true
}

// writeProblem writes an RFC 9457 problem body with no further members.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail,
	})
}

// demoUpstream answers every request with a small JSON document: the
// upstream of the built-in demo, so that `sluice serve` with no flags has
// something to protect.
type demoUpstream struct{ set *policy.Set }

func (d demoUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	client := d.set.ClientIP().FromRequest(r)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{
		"message": "hello from the demo upstream, behind sluice",
		"method":  r.Method,
		"path":    r.URL.Path,
		"client":  string(clientip.AppendPrefix(nil, client)),
		"time":    time.Now().UTC().Format(time.RFC3339),
	})
}
