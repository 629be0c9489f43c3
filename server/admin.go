package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
)

// adminMux routes the admin listener.
//
//	/metrics        Prometheus metrics
//	/healthz        200 while the process is up
//	/readyz         200 when the configuration is loaded, the server is
//	                not shutting down and the store answers or is not
//	                needed (see needsStore); else 503
//	/debug/top      the most refused keys, JSON; ?n=20
//	/debug/pprof/   with Options.Pprof
//	/               the dashboard
func (s *Server) adminMux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("GET /healthz", serveHealthz)
	mux.HandleFunc("GET /readyz", s.serveReadyz)
	mux.HandleFunc("GET /debug/top", s.serveTop)
	if s.o.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/", s.dash)
	return mux
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
		fmt.Fprintf(w, "ok: %v, and no policy needs it (every on_store_error is open or local)\n", err)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// needsStore reports whether g cannot serve as configured while a shared
// store is down: Envoy's service then answers every call Unavailable, and
// a policy with on_store_error: closed refuses with 503. Policies that let
// requests through (open) or decide them in this process (local) serve on
// without it, and an instance taken out of rotation for an outage every
// instance shares would only turn it into one of the whole service.
func needsStore(g *generation) bool {
	if g.rls != nil {
		return true
	}
	if g.set != nil {
		for _, p := range g.set.Policies() {
			if p.OnStoreError == sluice.FailClosed {
				return true
			}
		}
	}
	return false
}

// readiness caches the store's answer to a PING for a second, so that
// frequent probes cost Redis one PING a second at most.
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
	if s.st.client == nil {
		return nil
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.at.IsZero() || time.Since(rd.at) >= readyCache {
		// The answer serves every probe of the next second: a prober
		// that hangs up must not cut the PING short and have its
		// cancellation cached as Redis's answer.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
		defer cancel()
		rd.err = s.st.ping(ctx)
		if rd.err != nil {
			rd.err = fmt.Errorf("the Redis store does not answer: %w", rd.err)
		}
		rd.at = time.Now()
	}
	if !needsStore(g) {
		return nil
	}
	return rd.err
}

// storeErr returns the store's last answer to a PING: nil if it answered
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
