package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logpace"
)

// adminMux routes the admin listener.
//
//	/metrics        Prometheus metrics
//	/healthz        200 while the process is up
//	/readyz         200 when the configuration is loaded, the server is
//	                not shutting down and the store answers, its breaker
//	                letting calls through, or is not needed (see
//	                needsStore); else 503
//	/debug/top      the most refused keys, JSON; ?n=20
//	/debug/pprof/   with Options.Pprof
//	/               the dashboard
//
// /metrics, /healthz and /readyz answer whatever name the Host header
// gives: scrapers and probes reach them by names of their own, and they
// hold no client's key. Every other route (those below /debug/, the
// dashboard, and whatever falls through to it) answers only a Host that
// is an IP address, localhost or a name under .localhost, or one of
// Options.AdminHosts; any other gets 421 (see hostGuard). Without this, a
// web page open in a browser on the admin listener's machine could point
// its own name at 127.0.0.1 (DNS rebinding) and, as the same origin, read
// the refused keys, the dashboard's data and heap profiles.
//
// hostGuard does not stop a page that stays on its own origin and sends
// a request by the listener's address, say an <img> whose src is
// http://127.0.0.1:9090/debug/pprof/profile: the browser keeps the answer
// from the page, but the request is served all the same, and a profile
// or trace holds the profiler from the operator's own until it ends. So
// /debug/pprof/ also refuses what a browser sends for a page of another
// origin (see pprofGuard), and one request may ask for pprofMaxSeconds
// at most. /debug/pprof/cmdline hides the passwords of URLs (see
// serveCmdline).
func (s *Server) adminMux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("GET /healthz", serveHealthz)
	mux.HandleFunc("GET /readyz", s.serveReadyz)
	// The rest sits behind the guard, so that a route added here is
	// guarded unless it is added above on purpose.
	guarded := http.NewServeMux()
	guarded.HandleFunc("GET /debug/top", s.serveTop)
	if s.o.Pprof {
		pp := http.NewServeMux()
		// The index serves the named profiles too, whose seconds
		// asks for a delta over that long.
		pp.HandleFunc("/debug/pprof/", boundSeconds(pprof.Index))
		pp.HandleFunc("/debug/pprof/cmdline", serveCmdline)
		pp.HandleFunc("/debug/pprof/profile", boundSeconds(pprof.Profile))
		pp.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		pp.HandleFunc("/debug/pprof/trace", boundSeconds(pprof.Trace))
		guarded.Handle("/debug/pprof/", s.pprofGuard(pp))
	}
	guarded.Handle("/", s.dash)
	mux.Handle("/", s.hostGuard(guarded))
	return mux
}

// hostGuard serves h to the requests whose Host names the admin listener
// as its operators do, and answers the others 421 Misdirected Request
// (RFC 9110 15.5.20: this server does not answer for that name). It is
// not 403: no credential would change the answer, the name would.
//
// Let through, as hostName reads them:
//   - an IP address: a page whose origin is an address cannot rebind it;
//   - localhost and names under .localhost, which browsers resolve to
//     loopback themselves (RFC 6761), never asking a DNS server;
//   - Options.AdminHosts, which the operator vouches for;
//   - an empty Host, or none (HTTP/1.0): every browser sends one.
func (s *Server) hostGuard(h http.Handler) http.Handler {
	allowed := make(map[string]bool, len(s.o.AdminHosts))
	for _, n := range s.o.AdminHosts {
		allowed[hostName(n)] = true // a plainName, as New checks
	}
	logged := logpace.Pacer{Period: time.Minute}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := hostName(r.Host)
		if r.Host == "" || rebindProof(name) || allowed[name] {
			h.ServeHTTP(w, r)
			return
		}
		if held, ok := logged.Take(time.Now()); ok {
			s.log.Warn("admin listener: refused a request by a name not allowed",
				"host", r.Host, "path", r.URL.Path, "remote", r.RemoteAddr, "not_logged", held,
				"hint", "a web page trying DNS rebinding, or a name to allow with --admin-host; logged at most once a minute")
		}
		writeText(w, http.StatusMisdirectedRequest, "421 Misdirected Request: the admin listener serves this only by an IP address,\n"+
			"by localhost, or by a name allowed with sluice serve --admin-host NAME (SLUICE_ADMIN_HOST);\n"+
			"/metrics, /healthz and /readyz answer by any name.\n")
		if plainName(name) {
			fmt.Fprintf(w, "To reach it as %s: --admin-host %s\n", name, name)
		}
	})
}

// writeText answers code with msg in plain text, which curl and go tool
// pprof show as it is, and which no browser sniffs into a page or caches.
func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg)
}

// pprofGuard serves h to the requests no browser marks as sent for a page
// of another origin, and answers the others 403 Forbidden.
//
// It asks net/http's CrossOriginProtection, which the dashboard uses for
// its POSTs, so that both read the headers the same way: Sec-Fetch-Site
// same-origin or none (the address typed in, a bookmark) passes, and any
// other value is refused; without it, an Origin header that does not name
// the Host is refused; with neither, as curl and go tool pprof send, the
// request passes. CrossOriginProtection lets every GET through, since a
// GET should change nothing; one to /debug/pprof/ may hold the profiler
// for a minute, so it is asked as if the request were a POST.
func (s *Server) pprofGuard(h http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	logged := logpace.Pacer{Period: time.Minute}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Check reads the method, the Host and the headers: nothing else
		// of r needs copying while no bypass pattern is set.
		if err := cop.Check(&http.Request{Method: http.MethodPost, Host: r.Host, Header: r.Header}); err == nil {
			h.ServeHTTP(w, r)
			return
		}
		if held, ok := logged.Take(time.Now()); ok {
			s.log.Warn("admin listener: refused a request to /debug/pprof/ from a page of another origin",
				"path", r.URL.Path, "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"), "origin", r.Header.Get("Origin"),
				"remote", r.RemoteAddr, "not_logged", held, "hint", "a web page in a browser on this machine; logged at most once a minute")
		}
		writeText(w, http.StatusForbidden, "403 Forbidden: /debug/pprof/ refuses what a browser sends for a page of another origin\n"+
			"(a link, an image, a form). Type its address in the browser, or use go tool pprof or curl.\n")
	})
}

// pprofMaxSeconds is the most seconds a request to /debug/pprof/ may ask
// for: a CPU profile or a trace holds the profiler, or the tracer, from
// every other request until it ends, and a delta profile holds a
// goroutine. go tool pprof asks for 30 by default.
const pprofMaxSeconds = 60

// boundSeconds serves h the requests whose seconds is at most
// pprofMaxSeconds, and answers the others 400. It refuses rather than
// cuts them short so that no one reads a 60-second profile as the day
// asked for; a longer look is several profiles.
func boundSeconds(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// Read as net/http/pprof reads it, so that both see the same value:
		// FormValue, the body's before the query's. The profile wants a
		// whole number and the trace takes a fraction; a value that does not
		// parse reads 0 here and is left to them (their default, or a 400).
		// Infinity and NaN are refused.
		if v := r.FormValue("seconds"); v != "" {
			if f, _ := strconv.ParseFloat(v, 64); !(f <= pprofMaxSeconds) {
				writeText(w, http.StatusBadRequest, fmt.Sprintf("400 Bad Request: seconds=%q: a profile or trace here lasts at most %d seconds;\n"+
					"for a longer look, take several.\n", v, pprofMaxSeconds))
				return
			}
		}
		h(w, r)
	}
}

// serveCmdline is net/http/pprof's Cmdline with the password of every URL
// in the arguments hidden: --redis redis://user:pass@host is a URL the
// log shows without its password, and the admin listener should not show
// it either.
func serveCmdline(w http.ResponseWriter, _ *http.Request) {
	args := make([]string, len(os.Args))
	for i, a := range os.Args {
		args[i] = hidePasswords(a)
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, strings.Join(args, "\x00"))
}

// hidePasswords returns arg with the password of every URL in it, such as
// --redis=redis://user:pass@host:6379/0, replaced by xxxxx, as
// url.URL.Redacted writes it. It reads no URL whole, since an argument
// may hold a URL after a flag's name, or several of them: the userinfo of
// each is what comes after its "://" and before the last @ ahead of the
// next "://", and its password what follows the first colon in it. So a
// password keeps hidden with an @ or a slash left unescaped, at the cost
// of hiding more than the password when a URL without one has a colon and
// an @ in its path.
func hidePasswords(arg string) string {
	var b strings.Builder
	for {
		i := strings.Index(arg, "://")
		if i < 0 {
			b.WriteString(arg)
			return b.String()
		}
		b.WriteString(arg[:i+3])
		arg = arg[i+3:]
		end := strings.Index(arg, "://")
		if end < 0 {
			end = len(arg)
		}
		at := strings.LastIndexByte(arg[:end], '@')
		if at < 0 {
			continue
		}
		if colon := strings.IndexByte(arg[:at], ':'); colon >= 0 {
			b.WriteString(arg[:colon+1])
			b.WriteString("xxxxx")
			arg = arg[at:]
		}
	}
}

// hostName is the name a Host header gives, as hostGuard compares it: in
// lower case, without its port, an IPv6 address's brackets or a trailing
// dot.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// rebindProof reports whether name (see hostName) is an IP address,
// localhost, or a name under .localhost: names no DNS answer can point
// elsewhere, which need no Options.AdminHosts.
func rebindProof(name string) bool {
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	return name == "localhost" || strings.HasSuffix(name, ".localhost")
}

// adminHost reports whether n is what Options.AdminHosts takes: a
// plainName, in any case, with a trailing dot, a port or neither.
func adminHost(n string) bool {
	if _, port, err := net.SplitHostPort(n); err == nil {
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return false
		}
	}
	return plainName(hostName(n))
}

// plainName reports whether name (see hostName) is made of what a DNS
// name is made of, and so is worth suggesting to --admin-host as it
// stands.
func plainName(name string) bool {
	if strings.Trim(name, ".") == "" || len(name) > 253 {
		return false
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

func serveHealthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

func (s *Server) serveReadyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := s.ready.check(r.Context(), s); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	if err := s.ready.storeErr(); err != nil {
		fmt.Fprintf(w, "ok: %v, and no policy needs it (every enforcing policy's on_store_error is open or local)\n", err)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// needsStore reports whether g cannot serve as configured while a shared
// store is down: Envoy's service then answers every call Unavailable, and
// an enforcing policy with on_store_error: closed refuses with 503.
// Policies that let requests through (open) or decide them in this
// process (local) serve on without it, and so do shadow policies, which
// refuse nothing whatever their on_store_error; an instance taken out of
// rotation for an outage every instance shares would only turn it into
// one of the whole service.
func needsStore(g *generation) bool {
	if g.rls != nil {
		return true
	}
	if g.set != nil {
		for _, p := range g.set.Policies() {
			if p.OnStoreError == sluice.FailClosed && !p.Shadow {
				return true
			}
		}
	}
	return false
}

// readiness caches the store's answer to its probe (storeHandle.ping: a
// decision on one Redis; on a cluster, a PING per node and the decision)
// for a second, so that frequent probes cost Redis one probe a second at
// most.
type readiness struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

const (
	readyCache   = time.Second
	readyTimeout = 500 * time.Millisecond
)

func (rd *readiness) check(ctx context.Context, s *Server) error {
	if s.draining.Load() {
		return errors.New("shutting down")
	}
	g := s.gen.Load()
	if g == nil {
		return errors.New("no configuration loaded")
	}
	if s.st.breaker == nil { // the memory store
		return nil
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.at.IsZero() || time.Since(rd.at) >= readyCache {
		// The answer serves every probe of the next second: a prober
		// that hangs up must not cut the probe short and have its
		// cancellation cached as Redis's answer.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
		defer cancel()
		rd.err = s.st.ping(ctx, g)
		if rd.err != nil {
			rd.err = fmt.Errorf("the Redis store does not answer: %w", rd.err)
		}
		rd.at = time.Now()
	}
	if !needsStore(g) {
		return nil
	}
	if rd.err == nil && len(s.st.cfg.Cluster) == 0 && s.st.breaker.Stats().Down {
		// Redis answers the probe, but the breaker lets no call through
		// until its own probe, a backoff later: until then every call
		// fails as if Redis were down. Read at each probe, not cached.
		// (On a Cluster, Down also means one master's keys: the store
		// answers for the others, and stays ready, as its ping says.)
		return errors.New("the Redis store answers again, but its breaker lets no call through until its next probe succeeds")
	}
	return rd.err
}

// storeErr returns the store's last answer to its probe: nil if it answered
// or was not asked.
func (rd *readiness) storeErr() error {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return rd.err
}

// TopReport is the body of /debug/top.
type TopReport struct {
	// Refused counts every refusal seen since the server started.
	Refused uint64 `json:"refused"`
	// Keys are the most refused store keys, most first. Counts are upper
	// bounds, each at most Error above the truth (see TopK). A key holds
	// the values it is made of as clients sent them, when they are short
	// and plain: an IP, or an API key of a policy keyed by its header.
	// Whoever can reach the admin listener reads them.
	Keys []TopEntry `json:"keys"`
}

func (s *Server) serveTop(w http.ResponseWriter, r *http.Request) {
	n := 20
	if v := r.URL.Query().Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			writeProblem(w, http.StatusBadRequest, "n must be a positive whole number")
			return
		}
	}
	keys, total := s.top.Top(n)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(TopReport{Refused: total, Keys: keys})
}
