package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rls"
)

// generation is one loaded configuration and the handlers built from it.
// It is immutable once stored: a reload builds a new one and swaps the
// pointer, so a request runs start to end on the generation it began on.
type generation struct {
	set   *policy.Set // nil when serving Envoy's service alone
	rls   *rls.Config // nil without EnvoyConfigs
	proxy http.Handler
	check http.Handler // the policies, in front of a handler that answers 200
	// read are the fields the policies read, whose other spellings a
	// check refuses.
	read readFields

	// warnedUntrusted is set once a check under this generation has
	// warned of a gateway missing from trusted_proxies.
	warnedUntrusted atomic.Bool
	// retired is set once a reload has replaced the generation: its
	// requests still in flight are counted in the decision series only
	// where the generation in force has the same series, lest they bring
	// back those the reload dropped (see Metrics.decided).
	retired atomic.Bool
}

// names returns the names g's decisions are counted under: its policies'
// and, as rls:DOMAIN, its Envoy domains'.
func (g *generation) names() []string {
	var out []string
	if g.set != nil {
		for _, p := range g.set.Policies() {
			out = append(out, p.Name)
		}
	}
	if g.rls != nil {
		for _, d := range g.rls.Domains() {
			out = append(out, rlsName(d))
		}
	}
	return out
}

// load reads every configuration file, and logs the policy file's
// warnings, and its ServeWarnings, at Warn: at start and on every reload,
// so that a file that leaves requests unlimited is noticed where it is
// served. Its error wraps ErrConfig when a file does not load.
func (s *Server) load() (*generation, error) {
	g := &generation{}
	var errs []error
	switch {
	case s.o.ConfigFile != "":
		set, err := policy.LoadFile(s.o.ConfigFile)
		if err != nil {
			errs = append(errs, err)
		}
		g.set = set
	case s.demo:
		set, err := policy.Load("demo.yaml", DemoConfig)
		if err != nil {
			return nil, fmt.Errorf("the built-in demo configuration: %w", err)
		}
		g.set = set
	}
	if len(s.o.EnvoyConfigs) > 0 {
		cfg, err := loadEnvoy(s.o.EnvoyConfigs)
		if err != nil {
			errs = append(errs, err)
		}
		g.rls = cfg
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	if g.set != nil {
		// The serve warnings too: nothing but the file's user section
		// names users here (see build).
		for _, ws := range [][]policy.Problem{g.set.Warnings(), g.set.ServeWarnings()} {
			for _, w := range ws {
				s.log.Warn("policy file warning", "warning", w.String())
			}
		}
		s.warnHolds(g)
	}
	return g, nil
}

// loadEnvoy loads Envoy configuration files and directories as one Config.
func loadEnvoy(paths []string) (*rls.Config, error) {
	files, err := rls.Files(paths...)
	if err != nil {
		return nil, err
	}
	return rls.LoadFiles(files...)
}

// LoadEnvoy loads Envoy configuration files and directories (the files
// rls.ConfigFiles lists, as the reference reads them) as one rls.Config,
// as the server does.
func LoadEnvoy(paths ...string) (*rls.Config, error) { return loadEnvoy(paths) }

// watched returns the paths whose changes trigger a reload.
func (s *Server) watched() []string {
	var paths []string
	if s.o.ConfigFile != "" {
		paths = append(paths, s.o.ConfigFile)
	}
	return append(paths, s.o.EnvoyConfigs...)
}

// storeConfig returns the store a generation asks for: the RedisURL
// and MaxKeys options, else the policy file's section.
func (s *Server) storeConfig(g *generation) policy.StoreConfig {
	var c policy.StoreConfig
	if g.set != nil {
		c = g.set.Store()
	}
	if s.o.RedisURL != "" {
		c.Redis, c.Cluster, c.SentinelMaster, c.SentinelAddrs = s.o.RedisURL, nil, "", nil
	}
	if s.o.MaxKeys > 0 {
		c.MaxKeys = s.o.MaxKeys
	}
	return c
}

// build makes a generation's handlers.
func (s *Server) build(g *generation) {
	if g.set == nil {
		return
	}
	// The user is the one the file's user section names, believed from
	// trusted proxies only: no application runs in front of the
	// middleware to call WithUser. What clients are told is the response
	// section's, the generation's own, so a reload changes it from the
	// next request on.
	resp := g.set.Response()
	mw := httplimit.Middleware(g.set, s.st.store, httplimit.Options{
		Identify:        g.set.UserOf,
		NoDraftHeaders:  resp.NoDraftHeaders,
		NoLegacyHeaders: resp.NoLegacyHeaders,
		ProblemType:     resp.ProblemType,
		Options: policy.Options{
			Clock:    s.clock,
			Local:    s.local,
			Observer: observer{s, g},
			Logger:   s.log,
			// The breaker in front of Redis logs its outages, each cluster
			// master's apart.
			StoreLogs: s.st.breaker != nil,
			InFlight:  &s.inFlight,
		}})
	if s.proxy {
		if s.target == nil {
			g.proxy = mw(passed(demoUpstream{set: g.set}))
		} else {
			// A body read whole before the upstream is asked, and
			// failing, is answered by sluice, the request not yet passed
			// on: buffered's 408 and 400 are counted as such.
			g.proxy = mw(s.buffered(passed(s.reverseProxy(g.set))))
		}
	}
	g.check = mw(http.HandlerFunc(checkPassed))
	g.read = fieldsRead(g.set)
}

// Reload reads the configuration files again and, if they all load,
// serves them from the next request on; requests in flight finish on the
// configuration they started with. If a file does not load, the old
// configuration keeps serving; the error is counted in
// sluice_config_reloads_total and returned, and logged as LogConfigProblems
// does, a record per problem, then one saying the old configuration
// serves on. The new file's warnings (policy.Set.Warnings) are logged but
// do not keep it from serving. Limits whose state still means the same
// keep their counters (a window limit whose count changed included; see
// package policy). The store is chosen at start: a changed store section
// is logged, with the fields that differ from the store in use, and needs
// a restart; a reload that puts it back is logged too.
//
// With TLS, Reload also reloads the certificate, key and client CA
// files, apart: a bad policy file does not hold back a rotated
// certificate, nor the reverse (sluice_tls_reloads_total counts the TLS
// files' reloads). The error is then the join of both.
//
// The file watchers take what Reload read as the files' content in
// force: they reload the files on their next change, not again for the
// one Reload acted on, so that a reload, or a failure, is counted and
// logged once.
func (s *Server) Reload(ctx context.Context) error {
	var err error
	s.watch.reload(func() { err = s.reloadConfig(nil) })
	if s.tls != nil {
		var tlsErr error
		s.tlsWatch.reload(func() { tlsErr = s.reloadTLS() })
		if tlsErr != nil {
			err = errors.Join(err, tlsErr)
		}
	}
	return err
}

// configChanged is the configuration watcher's reload, of files that
// changed on disk.
func (s *Server) configChanged() {
	s.log.Info("configuration changed on disk; reloading")
	_ = s.reloadConfig(s.watch.unchanged)
}

// tlsChanged is the TLS files' watcher's reload.
func (s *Server) tlsChanged() {
	s.log.Info("TLS files changed on disk; reloading them")
	_ = s.reloadTLS()
}

// reloadConfig is Reload for the configuration files alone. With read,
// what it loaded serves only if read reports, once it is loaded, that the
// files still hold what they held as the load began: the watcher's check
// that it read the content it saw settle, not a later one caught half
// written (a file cut short may still load, and lift the limits it lost).
// Otherwise the files are changing again, which is no failure: the
// watcher reloads them once they settle.
func (s *Server) reloadConfig(read func() bool) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	start := time.Now()
	g, err := s.load()
	// Loaded or not: a file caught half written may fail to load as well.
	if read != nil && !read() {
		s.log.Info("the configuration files changed while they were read; the previous configuration keeps serving until they settle")
		return nil
	}
	if err != nil {
		// Counted before it is logged: whoever reads the log line finds
		// the failure in /metrics.
		s.m.Reload(false)
		LogConfigProblems(s.log, err)
		s.log.Error("reload failed; the previous configuration keeps serving")
		return err
	}
	// Counted as a success, as the policies serve; the gauge says, until
	// a restart or a reload back to the store in use, that the store
	// section does not. The log says so when the need comes and when it
	// goes: the gauge alone would leave a reader of the log believing a
	// restart is still due.
	changed := storeChanges(s.st.cfg, s.storeConfig(g))
	restart := changed != ""
	switch prev := s.gen.Load(); {
	case restart:
		s.log.Warn("the store section changed; a restart is needed for it to apply, the current store stays in use", "changed", changed)
	case prev != nil && !s.storeConfig(prev).Equal(s.st.cfg):
		s.log.Info("the store section is back to the store in use; no restart is needed")
	}
	s.build(g)
	s.m.declare(g)
	old := s.gen.Swap(g)
	if s.rls != nil {
		s.rls.SetConfig(g.rls)
	}
	s.m.Reload(true)
	s.m.restart(restart)
	s.m.retire(old, g)
	attrs := []any{"took", time.Since(start).String()}
	if g.set != nil {
		attrs = append(attrs, "policies", len(g.set.Policies()))
	}
	if g.rls != nil {
		attrs = append(attrs, "envoy_domains", len(g.rls.Domains()))
	}
	s.log.Info("configuration reloaded", attrs...)
	return nil
}

// storeChanges names the fields of the store section that differ between
// the store in use and the one a configuration asks for, each as
// "field old→new" in the file's spelling, or returns "" if none do: the
// warning that a restart is needed then says which edit needs it. A
// Redis URL is shown redacted, and as "changed" alone when only what the
// redaction hides differs, lest a password reach the log.
func storeChanges(in, want policy.StoreConfig) string {
	var out []string
	diff := func(field, a, b string) {
		if a != b {
			out = append(out, field+" "+a+"→"+b)
		}
	}
	or := func(s, zero string) string {
		if s == "" {
			return zero
		}
		return s
	}
	list := func(l []string) string {
		if len(l) == 0 {
			return "(none)"
		}
		return fmt.Sprint(l)
	}
	if in.Redis != want.Redis {
		a, b := or(redactURL(in.Redis), "(none)"), or(redactURL(want.Redis), "(none)")
		if a == b {
			out = append(out, "redis changed")
		} else {
			diff("redis", a, b)
		}
	}
	diff("cluster", list(in.Cluster), list(want.Cluster))
	diff("sentinel.master", or(in.SentinelMaster, "(none)"), or(want.SentinelMaster, "(none)"))
	diff("sentinel.addrs", list(in.SentinelAddrs), list(want.SentinelAddrs))
	diff("tls.ca", or(in.TLS.CA, "(none)"), or(want.TLS.CA, "(none)"))
	diff("tls.cert", or(in.TLS.Cert, "(none)"), or(want.TLS.Cert, "(none)"))
	diff("tls.key", or(in.TLS.Key, "(none)"), or(want.TLS.Key, "(none)"))
	timeout := func(d time.Duration) string {
		if d == 0 {
			return "(default)"
		}
		return d.String()
	}
	diff("timeout", timeout(in.Timeout), timeout(want.Timeout))
	diff("deny_cache", strconv.FormatBool(!in.NoDenyCache), strconv.FormatBool(!want.NoDenyCache))
	maxKeys := func(n int) string {
		if n == 0 {
			return "(default)"
		}
		return strconv.Itoa(n)
	}
	diff("max_keys", maxKeys(in.MaxKeys), maxKeys(want.MaxKeys))
	if len(out) == 0 && !in.Equal(want) {
		// A field this does not know yet: still a restart, still said.
		return "the store section"
	}
	return strings.Join(out, ", ")
}
