package server

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/internal/logpace"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rls"
	"github.com/sluicehq/sluice/store/memory"
)

// Default listen addresses. All bind to loopback: exposing a listener is
// a decision to make on purpose, with --listen 0.0.0.0:8080 or the like.
const (
	DefaultListen      = "127.0.0.1:8080" // the data plane: the reverse proxy
	DefaultCheckListen = "127.0.0.1:8081" // check endpoints for NGINX and Traefik
	DefaultGRPCListen  = "127.0.0.1:8082" // Envoy's rate limit service
	DefaultAdminListen = "127.0.0.1:9090" // metrics, health, dashboard
)

// Off, as a listen address, turns a listener off.
const Off = "off"

// Other defaults of Options.
const (
	DefaultWatchInterval   = 2 * time.Second
	DefaultShutdownTimeout = 15 * time.Second
	DefaultBodyTimeout     = time.Minute
	DefaultRequestBuffer   = 64 << 10
	DefaultSendTimeout     = time.Minute
	DefaultUpstreamTimeout = time.Minute
	DefaultStoreTimeout    = 50 * time.Millisecond
	DefaultTopKeys         = 1000
	// DefaultMaxHeaderBytes bounds a request's line and header fields,
	// as Envoy's 60 KiB and NGINX's four 8 KiB buffers do: net/http's own
	// default, 1 MiB, lets a client make each request cost megabytes.
	DefaultMaxHeaderBytes = 64 << 10
	// The gRPC listener's bounds. Envoy's calls carry a handful of
	// descriptors, and rls refuses more than 1,000; a message of gRPC's
	// default 4 MiB decodes to some 100 MiB. Envoy opens few connections
	// and many streams on each.
	grpcMaxRecvMsgSize    = 256 << 10
	grpcMaxStreamsPerConn = 1024
	// DefaultGRPCMaxConnectionAge is Envoy's reference service's: a day.
	DefaultGRPCMaxConnectionAge = 24 * time.Hour
	// grpcMaxConnectionAgeGrace is how long the calls of a connection
	// told to go away (GOAWAY) at its age may take to finish, as the
	// reference service gives them; a health watch that outlives it is
	// cut, and its client watches again on a new connection.
	grpcMaxConnectionAgeGrace = time.Hour
)

// grpcMinPingInterval is the least time between two HTTP/2 pings a gRPC
// client may send, idle or not, before the server tells it to go away
// (too_many_pings): Envoy's connection_keepalive pings at a fixed
// interval whether or not a call is open, which gRPC's default policy
// (5 minutes, and none while idle) would answer with GOAWAY. A variable
// so that tests need not wait for it.
var grpcMinPingInterval = 10 * time.Second

// UpstreamDemo, as Options.Upstream, serves the built-in demo upstream: a
// handler answering every request with a small JSON document.
const UpstreamDemo = "demo"

// DemoConfig is the policy file the server runs when it is given none.
//
//go:embed demo.yaml
var DemoConfig []byte

// ErrConfig marks errors caused by a configuration file that does not
// load: New wraps the loader's error (every problem as file:line:col) in
// it, so that a command can tell a bad file from a failure to start.
var ErrConfig = errors.New("bad configuration")

// ErrOptions marks errors caused by Options that cannot be used: a value
// that does not parse, or options that do not go together. New finds them
// before it reads a file or opens a listener, so that a command can tell a
// usage error from a bad file or a failure to start.
var ErrOptions = errors.New("bad options")

// Options configures a Server. The zero value runs the built-in demo: the
// demo policies in memory, the demo upstream on DefaultListen, the check
// endpoints on DefaultCheckListen and the admin listener on
// DefaultAdminListen.
type Options struct {
	// ConfigFile is the policy file (policy.LoadFile's format). Empty
	// means the built-in DemoConfig, unless EnvoyConfigs are given: then
	// the server is Envoy's rate limit service alone. A reverse proxy
	// needs one, but for the demo's own (no EnvoyConfigs, and Upstream
	// empty or UpstreamDemo): New refuses any other Upstream without it,
	// rather than apply the demo's limits to an upstream of one's own.
	ConfigFile string
	// EnvoyConfigs are files, or directories whose files are all read,
	// recursively, but for names starting with a dot (rls.ConfigFiles), in
	// the format of Envoy's reference rate limit service (see package rls).
	// When there are any, the gRPC listener serves them.
	EnvoyConfigs []string
	// EnvoyHeaders has Envoy's rate limit service add the RateLimit-Policy
	// and RateLimit fields, and Retry-After when over a limit, to
	// response_headers_to_add, which Envoy puts on its response (see
	// rls.Options.Headers). Off by default, as in the reference service,
	// whose LIMIT_RESPONSE_HEADERS_ENABLED is off.
	EnvoyHeaders bool
	// EnvoyRefusedConsumeNothing has Envoy's rate limit service decide
	// the descriptors of a request all or nothing, so that a refused
	// request spends from no limit (rls.Options.RefusedConsumeNothing). By
	// default, as in the reference, each descriptor is decided on its own
	// and refused hits count.
	EnvoyRefusedConsumeNothing bool
	// Upstream is the URL the reverse proxy forwards allowed requests to,
	// or UpstreamDemo. An http:// upstream is spoken to in HTTP/1.1, an
	// https:// one in HTTP/2 or HTTP/1.1 as ALPN decides, and an h2c://
	// one (h2c://host:port, a plaintext gRPC server) in HTTP/2 with prior
	// knowledge. Empty means the demo upstream when running on the
	// demo config, and no reverse proxy otherwise.
	Upstream string
	// UpstreamTimeout bounds how long the proxy waits for the upstream's
	// response headers once the request is sent, and for a connection to
	// it, as NGINX's proxy_read_timeout and proxy_connect_timeout: an
	// upstream that takes longer is answered 504 Gateway Timeout. A
	// response that has begun streams for as long as it takes. A gRPC
	// call's response is not bounded by it, only its connection: gRPC
	// sends a response's headers with its first message, which a
	// subscription may wait for; the call's bound is its client's
	// deadline. Zero means
	// DefaultUpstreamTimeout (a minute); negative means no bound on the
	// response headers, and connecting gives up after 30 seconds, as with
	// http.DefaultTransport (a TLS handshake after 10, whatever the value).
	UpstreamTimeout time.Duration
	// PreserveHost sends the client's Host header to the upstream. By
	// default the upstream gets its own host name (as NGINX does), and the
	// client's in X-Forwarded-Host. Either way, a Location naming the
	// upstream (http://upstream/docs/, //upstream/docs/) reaches the
	// client as a path on sluice (/docs/), as NGINX's proxy_redirect
	// default rewrites it.
	PreserveHost bool
	// RedisURL, when set, replaces the policy file's Redis address (redis,
	// cluster or sentinel): the counters live in the Redis at this URL
	// (rueidis.ParseURL's form). The section's timeout, deny_cache and tls
	// still apply.
	RedisURL string
	// MaxKeys, when above zero, replaces the policy file's store.max_keys:
	// the most keys a store kept in memory holds.
	MaxKeys int

	// TLSCert and TLSKey are PEM files: a certificate chain (the leaf
	// first) and its private key, both or neither. Empty means no TLS.
	// With them, the proxy and check listeners serve HTTPS (HTTP/2 or
	// HTTP/1.1, as ALPN decides) and the gRPC listener serves over TLS,
	// 1.2 at least; the admin listener stays plain HTTP, for probes and
	// scrapers. Reload and the poller reload them apart from the
	// configuration, so a rotated certificate serves from the next
	// handshake on.
	TLSCert, TLSKey string
	// TLSClientCA is a PEM file of CA certificates. When set, the TLS
	// listeners require a client certificate signed by one of them
	// (mutual TLS). It needs TLSCert and TLSKey, and is reloaded with
	// them.
	TLSClientCA string

	// Listen, CheckListen, GRPCListen and AdminListen are the addresses
	// of the four listeners; empty means the Default… constant, Off
	// turns a listener off. The proxy listener opens only when there is
	// an upstream, the gRPC one only when there are EnvoyConfigs.
	Listen, CheckListen, GRPCListen, AdminListen string
	// ProxyListener, CheckListener, GRPCListener and AdminListener, when
	// not nil, are used instead of listening on the addresses. The Server
	// closes them.
	ProxyListener, CheckListener, GRPCListener, AdminListener net.Listener

	// AdminHosts are the names, besides IP addresses, localhost and the
	// names under .localhost, by which the admin listener's dashboard,
	// /debug/top and /debug/pprof/ may be reached: a request whose Host
	// names anything else is answered 421 Misdirected Request, so that a
	// web page cannot read them through a browser by DNS rebinding.
	// /metrics, /healthz and /readyz answer by any name. A name matches
	// whatever its case, trailing dot or port; one that is no host name
	// (a URL, a path, a wildcard), which no Host would match, is an
	// ErrOptions. Nil allows no name.
	AdminHosts []string
	// Pprof mounts net/http/pprof under /debug/pprof/ on the admin
	// listener. It refuses what a browser sends for a page of another
	// origin, whose request could hold the profiler, and profiles or
	// traces longer than 60 seconds; /debug/pprof/cmdline hides the
	// passwords of URLs.
	Pprof bool
	// WatchInterval is how often the configuration files are checked for
	// changes. Zero means DefaultWatchInterval; negative turns watching
	// off (SIGHUP, through Reload, still works).
	WatchInterval time.Duration
	// ShutdownDelay is how long Run goes on serving new requests once its
	// context ends, /readyz and gRPC health saying it is shutting down,
	// before it closes its listeners and drains: a load balancer, or
	// Kubernetes (its endpoints, kube-proxy, Envoy's DNS), keeps sending
	// a terminating instance traffic for a few seconds, which listeners
	// closed at once would refuse. Zero or less means none.
	ShutdownDelay time.Duration
	// ShutdownTimeout bounds how long Run waits for requests in flight
	// once its context ends. Zero or less means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// BodyTimeout is how long the proxy and the check endpoint wait for
	// the next bytes of a request body, as NGINX's client_body_timeout: a
	// client that sends none for that long has its request cut (the
	// upstream sees the body fail) and is answered 408. A body read by a
	// policy's form key before the decision is bounded the same way, and
	// a check whose body stopped is never passed. A gRPC call's body (to
	// an h2c:// or https:// upstream) is not bounded: a stream may idle,
	// and its deadline is the client's.
	// Zero means DefaultBodyTimeout (a minute); negative means no bound.
	BodyTimeout time.Duration
	// RequestBuffer is how many bytes of an allowed request's body the
	// proxy reads before it asks the upstream, as NGINX's
	// proxy_request_buffering: a body that fits is sent whole (a chunked
	// one with its length), so that a client trickling its body holds its
	// own connection, not one of the upstream's, nor a worker of an
	// upstream that serves one request per worker; a larger one streams
	// on as it comes, and so does a gRPC call's (to an h2c:// or https://
	// upstream), whose client may wait for a reply before it sends more. Zero means DefaultRequestBuffer (64
	// KiB); negative turns buffering off.
	RequestBuffer int
	// SendTimeout is how long the proxy waits for its client to take the
	// next bytes of a response, as NGINX's send_timeout: a client that
	// takes none for that long has its response cut, and the upstream's
	// with it, rather than hold a goroutine, a buffer and a connection to
	// the upstream for as long as it likes. A response that keeps moving
	// is not cut, however long it lasts, nor a stream the upstream is
	// silent on. An upgraded connection (a websocket) is bounded the same
	// way while the proxy writes to it, and may idle as long as its ends
	// like.
	// Zero means DefaultSendTimeout (a minute); negative means no bound.
	SendTimeout time.Duration
	// MaxHeaderBytes bounds the request line and header fields of a
	// request to the proxy, check and admin listeners: one larger, by
	// more than net/http's 4 KiB of read slack over HTTP/1 (320 bytes
	// over HTTP/2, where each field counts 32 bytes more), is answered
	// 431. Zero or less means DefaultMaxHeaderBytes (64 KiB).
	MaxHeaderBytes int
	// GRPCMaxConnectionAge is how long a connection to the gRPC listener
	// lasts before the server asks its client to open another (HTTP/2
	// GOAWAY, the age varied by a tenth either way so that a gateway's
	// connections do not all go at once), its calls in flight given an
	// hour more to finish: an Envoy that reaches sluice through one
	// address (a Kubernetes Service's cluster IP) otherwise keeps its
	// connections on the instances it found first, and sends an
	// instance added later nothing. Zero means
	// DefaultGRPCMaxConnectionAge (a day, as Envoy's reference service);
	// negative means no bound.
	GRPCMaxConnectionAge time.Duration
	// TopKeys is how many refused keys /debug/top tracks. Zero means
	// DefaultTopKeys.
	TopKeys int
	// Playground lets the dashboard on the admin listener run
	// simulations (POST api/sim), each up to a core's time for ten
	// seconds. It is on for the built-in demo, and off otherwise unless
	// set, so that whoever reaches the admin listener (a scraper's
	// network) cannot spend the server's CPU. NoPlayground turns it off
	// on the demo too.
	Playground bool
	// NoPlayground turns the playground off, the built-in demo's
	// included, whatever Playground says: the demo's playground is on
	// only by default.
	NoPlayground bool
	// Logger receives the server's logs. Nil means none.
	Logger *slog.Logger
	// Clock is the clock of decisions in memory, waits and the dashboard.
	// Nil means rate.SystemClock.
	Clock rate.Clock
}

// Server is `sluice serve`: a reverse proxy that enforces a policy file,
// check endpoints that let NGINX and Traefik ask it, Envoy's rate limit
// service, and an admin listener. Build one with [New], run it with
// [Server.Run]; it reloads its configuration on [Server.Reload] and when
// its files change.
type Server struct {
	o     Options
	log   *slog.Logger
	clock rate.Clock
	reg   *prometheus.Registry
	m     *Metrics
	dash  *dashboard.Dashboard
	top   *TopK
	st    *storeHandle
	local *memory.Store // on_store_error: local, shared by every generation
	// inFlight counts the requests in flight under the concurrency limit,
	// shared by every generation.
	inFlight policy.InFlight
	rls      *rls.Service // nil without EnvoyConfigs
	demo     bool         // running on DemoConfig
	target   *url.URL     // upstream; nil for the demo upstream or no proxy
	proxy    bool         // the proxy listener is on
	trans    http.RoundTripper
	// grpcTrans is the transport of gRPC calls (see Server.grpcCall), to
	// an upstream spoken to in HTTP/2; nil for an http:// one.
	grpcTrans http.RoundTripper
	// upstreamLog paces the log of upstream failures: a down upstream
	// fails every request.
	upstreamLog logpace.Pacer

	// watch polls the configuration files, and tlsWatch the TLS files;
	// nil when they are not watched. They are made before the files are
	// first loaded, so that a change written from then on is seen even
	// before Run.
	watch, tlsWatch *fileWatch
	tls             *tlsFiles // nil without TLS

	gen      atomic.Pointer[generation]
	reloadMu sync.Mutex
	draining atomic.Bool
	ready    readiness
	// drain is in every request's context: begun at shutdown, it ends
	// the waits of max_delay and leaky_bucket turns that would outlast
	// the shutdown timeout (see policy.Drain).
	drain policy.Drain

	lis     listeners
	servers []*http.Server // the proxy and check listeners'
	admin   *http.Server   // shut down last: /readyz answers 503 during the drain
	grpc    *grpc.Server
	runOnce sync.Once
	// serving counts the proxy and check requests whose handlers run,
	// upgraded ones included: http.Server.Shutdown does not wait for a
	// hijacked connection (a websocket through the proxy), shutdown does.
	// It is sluice_inflight_requests too.
	serving atomic.Int64
	// upgraded counts the handlers of serving that took their connection
	// over (a websocket, another upgrade): at the shutdown timeout, the
	// others are requests http.Server.Close cuts, these the ones it
	// leaves to hardStop. marks holds, until it closes or is taken over,
	// the connMark of each connection of the proxy and check listeners,
	// which net/http names to ConnState alone.
	upgraded atomic.Int64
	marks    sync.Map // net.Conn → *connMark
	// hardStop cancels the requests' context, at the shutdown timeout:
	// it ends the upgraded connections http.Server.Close leaves open.
	hardStop context.CancelFunc
}

// Addrs are the addresses a Server listens on; empty for a listener that
// is off.
type Addrs struct {
	// Proxy is the reverse proxy's address, Check the check endpoints',
	// GRPC Envoy's rate limit service's and Admin the admin listener's,
	// each as its listener's Addr().String() gives it.
	Proxy, Check, GRPC, Admin string
}

type listeners struct {
	proxy, check, grpc, admin net.Listener
}

func (l *listeners) all() []net.Listener {
	var out []net.Listener
	for _, x := range []net.Listener{l.proxy, l.check, l.grpc, l.admin} {
		if x != nil {
			out = append(out, x)
		}
	}
	return out
}

// New loads the configuration, connects to the store and opens the
// listeners; requests are served once Run is called. An error wrapping
// ErrConfig means a configuration file does not load. A Redis that
// answers and refuses (a password, TLS) is an error; one that is not
// there yet, or refuses connections while it starts, is not: the server
// starts with Redis down, and connects when it comes (see "Redis down at
// start" in the package documentation).
func New(o Options) (*Server, error) { return NewContext(context.Background(), o) }

// ErrStopped marks the error of NewContext when its context ended while
// the server started.
var ErrStopped = errors.New("stopped while starting")

// NewContext is New, for a server that may be told to stop while it
// starts (a signal): once ctx has ended, it connects to no store and
// opens no listener, and returns an error wrapping ErrStopped and ctx's
// error, having closed what it opened, the listeners of Options
// included. A dial to Redis under way is not cut short: ctx is read
// before it and after it.
func NewContext(ctx context.Context, o Options) (_ *Server, err error) {
	defer func() {
		if err != nil {
			// The Server owns the listeners it is given, even when it
			// fails to start.
			for _, l := range []net.Listener{o.ProxyListener, o.CheckListener, o.GRPCListener, o.AdminListener} {
				if l != nil {
					l.Close()
				}
			}
		}
	}()
	s := &Server{o: o.withDefaults(), reg: prometheus.NewRegistry()}
	s.log, s.clock = s.o.Logger, s.o.Clock
	if err := s.o.validate(); err != nil {
		return nil, err
	}
	s.demo = s.o.runsDemo()
	target, h2c, err := s.o.upstreamURL()
	if err != nil {
		return nil, err
	}
	switch {
	case s.o.Upstream == UpstreamDemo, s.o.Upstream == "" && s.demo:
		s.proxy = true
	case target != nil:
		s.target, s.proxy = target, true
		s.trans = newTransport(s.o.UpstreamTimeout, h2c)
		if target.Scheme == "https" || h2c {
			s.grpcTrans = newGRPCTransport(s.o.UpstreamTimeout, h2c)
		}
	}
	if s.o.TLSCert != "" {
		s.tls = &tlsFiles{cert: s.o.TLSCert, key: s.o.TLSKey, clientCA: s.o.TLSClientCA}
	}

	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.m = NewMetrics(s.reg, s.clock.Now)
	registerInflight(s.reg, &s.serving)
	if s.tls != nil {
		s.tls.reloads = registerTLS(s.reg, func() time.Time { return s.tls.cur.Load().cert.Leaf.NotAfter })
	}
	s.dash = dashboard.New(dashboard.Options{Clock: s.clock, Logger: s.log, NoPlayground: s.o.NoPlayground || !s.o.Playground && !s.demo})
	registerRefusedRatio(s.reg, s.dash)
	s.top = NewTopK(s.o.TopKeys)

	if s.o.WatchInterval > 0 {
		if paths := s.watched(); len(paths) > 0 {
			s.watch = &fileWatch{paths: paths}
			s.watch.changed() // the content about to be loaded, or older
		}
		if s.tls != nil {
			s.tlsWatch = &fileWatch{paths: s.tls.watched()}
			s.tlsWatch.changed()
		}
	}
	gen, err := s.load()
	if err != nil {
		return nil, err
	}
	if s.tls != nil {
		if err := s.loadTLS(); err != nil {
			return nil, err
		}
	}
	if err := stopped(ctx); err != nil {
		return nil, err
	}
	s.st, err = s.openStore(ctx, s.storeConfig(gen))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.st.close()
			for _, l := range s.lis.all() {
				l.Close()
			}
		}
	}()
	if len(s.o.EnvoyConfigs) > 0 {
		s.rls = rls.NewService(gen.rls, s.st.store, rls.Options{
			Clock: s.clock, Logger: s.log, Observe: s.observeRLS,
			Headers: s.o.EnvoyHeaders, RefusedConsumeNothing: s.o.EnvoyRefusedConsumeNothing,
		})
	}
	s.build(gen)
	s.m.declare(gen)
	s.gen.Store(gen)
	s.m.loaded()

	if err := stopped(ctx); err != nil {
		return nil, err
	}
	if err := s.listen(); err != nil {
		return nil, err
	}
	for name, l := range map[string]net.Listener{listenerProxy: s.lis.proxy, listenerCheck: s.lis.check, listenerGRPC: s.lis.grpc} {
		if l != nil {
			s.m.listening(name)
		}
	}
	return s, nil
}

// withDefaults returns o with each field left at zero replaced by the
// default its doc comment names, so that the server reads one value and
// no code past New tells "unset" from "set". A negative value that means
// no bound or off (WatchInterval, BodyTimeout, SendTimeout,
// UpstreamTimeout, GRPCMaxConnectionAge) is kept; one that means the
// default (ShutdownTimeout, MaxHeaderBytes, TopKeys) is replaced.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = rate.SystemClock{}
	}
	if o.WatchInterval == 0 {
		o.WatchInterval = DefaultWatchInterval
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.BodyTimeout == 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	if o.SendTimeout == 0 {
		o.SendTimeout = DefaultSendTimeout
	}
	if o.UpstreamTimeout == 0 {
		o.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.GRPCMaxConnectionAge == 0 {
		o.GRPCMaxConnectionAge = DefaultGRPCMaxConnectionAge
	}
	if o.TopKeys <= 0 {
		o.TopKeys = DefaultTopKeys
	}
	return o
}

// validate returns the first problem of o, wrapped in ErrOptions: New
// calls it before it reads a file or opens a listener, so that a usage
// error is told as one, not as a bad file or a failure to start. The
// checks run in a fixed order, so that a user fixing the options one
// error at a time is told of the same problem first each run.
func (o *Options) validate() error {
	if _, _, err := o.upstreamURL(); err != nil {
		return err
	}
	if o.ConfigFile == "" && !o.runsDemo() && o.Upstream != "" {
		return fmt.Errorf("%w: a reverse proxy needs a policy file (--config)", ErrOptions)
	}
	if len(o.EnvoyConfigs) > 0 && o.GRPCListener == nil && o.GRPCListen == Off {
		return fmt.Errorf("%w: the gRPC listener is off, but Envoy configurations are given", ErrOptions)
	}
	if o.RedisURL != "" {
		if _, err := rueidis.ParseURL(o.RedisURL); err != nil {
			return fmt.Errorf("%w: the Redis URL: %w (want redis://[user:pass@]host:6379/0, or rediss:// for TLS)", ErrOptions, urlProblem(err))
		}
		if err := policy.CheckRedisURL(o.RedisURL); err != nil {
			return fmt.Errorf("%w: the Redis URL %w", ErrOptions, err)
		}
	}
	for _, l := range []struct{ addr, flag string }{
		{o.Listen, "--listen"}, {o.CheckListen, "--check-listen"}, {o.GRPCListen, "--grpc-listen"}, {o.AdminListen, "--admin-listen"},
	} {
		if err := CheckListenAddr(l.addr); err != nil {
			return fmt.Errorf("%w: %s %q: %w", ErrOptions, l.flag, l.addr, err)
		}
	}
	for _, n := range o.AdminHosts {
		if !adminHost(n) {
			return fmt.Errorf("%w: admin host %q (--admin-host, SLUICE_ADMIN_HOST): want a host name such as dash.example.com, with no scheme, path or wildcard (IP addresses and localhost need none)", ErrOptions, n)
		}
	}
	switch {
	case (o.TLSCert == "") != (o.TLSKey == ""):
		return fmt.Errorf("%w: --tls-cert and --tls-key go together: give both, or neither", ErrOptions)
	case o.TLSClientCA != "" && o.TLSCert == "":
		return fmt.Errorf("%w: client certificates (--tls-client-ca) need TLS: give --tls-cert and --tls-key too", ErrOptions)
	}
	return nil
}

// runsDemo reports whether o runs the built-in demo: no policy file, no
// Envoy configurations, and the demo upstream. The demo runs only in
// front of its own upstream: its limits (10 a minute) on a real one, for
// want of a --config, would throttle real traffic without a word.
func (o *Options) runsDemo() bool {
	return o.ConfigFile == "" && len(o.EnvoyConfigs) == 0 && (o.Upstream == "" || o.Upstream == UpstreamDemo)
}

// upstreamURL returns the upstream of one's own that o.Upstream names,
// nil for none or the demo's, with an error wrapping ErrOptions for one
// that is no http://, https:// or h2c:// URL. validate and New both read
// it, so that what is checked is what is served. An h2c:// URL comes back
// as http://, with h2c true: it is plain HTTP spoken in HTTP/2 with prior
// knowledge.
func (o *Options) upstreamURL() (u *url.URL, h2c bool, err error) {
	if o.Upstream == "" || o.Upstream == UpstreamDemo {
		return nil, false, nil
	}
	u, err = url.Parse(o.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "h2c") || u.Host == "" {
		return nil, false, fmt.Errorf("%w: upstream %q: want an http://, https:// or h2c:// URL, or %q", ErrOptions, o.Upstream, UpstreamDemo)
	}
	if h2c = u.Scheme == "h2c"; h2c {
		u.Scheme = "http"
	}
	return u, h2c, nil
}

// CheckListenAddr checks a listen address of Options as net.Listen will
// take it, before any listener opens (New refuses one that fails it, with
// ErrOptions):
// "off", or host:port with a port number from 0 (any free port) to
// 65535, and an empty host for every address. An empty value is the
// listener's default. A service name as port ("http") is refused with
// the rest: it reads as a mistake more often than it is meant.
func CheckListenAddr(v string) error {
	if v == "" || v == Off {
		return nil
	}
	const want = "want host:port, such as 127.0.0.1:8080 (or :8080 for every address), or off"
	if i := strings.Index(v, "://"); i >= 0 {
		example := strings.TrimSuffix(v[i+3:], "/")
		if _, _, err := net.SplitHostPort(example); err != nil {
			example = "127.0.0.1:8080"
		}
		return fmt.Errorf("want host:port with no scheme, such as %s", example)
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		if ip := net.ParseIP(v[:max(strings.LastIndex(v, ":"), 0)]); ip != nil && ip.To4() == nil {
			return fmt.Errorf("an IPv6 address goes in brackets, as [%s]:%s", ip, v[strings.LastIndex(v, ":")+1:])
		}
		return errors.New(want)
	}
	if strings.ContainsAny(host, "/?#") {
		return errors.New(want)
	}
	n, err := strconv.Atoi(port)
	switch {
	case err != nil || strings.HasPrefix(port, "+"):
		return fmt.Errorf("port %q is not a number: %s", port, want)
	case n < 0 || n > 65535:
		return fmt.Errorf("port %d out of range (want 0 to 65535; 0 picks a free port)", n)
	}
	return nil
}

// serverLog is an http.Server's ErrorLog: what net/http reports of a
// connection a client made fail (a TLS handshake, as a TCP health check
// or a scan makes them, a bad HTTP/2 preface) is a client's doing, paced
// to one line a second; anything else (a handler's panic and its stack,
// an Accept error) is the server's, and goes through whole.
type serverLog struct {
	log   *slog.Logger
	paced *logpace.Writer
}

func newServerLog(l *slog.Logger, clock rate.Clock) *serverLog {
	return &serverLog{log: l, paced: &logpace.Writer{Log: l, Now: clock.Now}}
}

func (w *serverLog) Write(b []byte) (int, error) {
	if bytes.HasPrefix(b, []byte("http: TLS handshake error")) || bytes.HasPrefix(b, []byte("http2: server: error reading preface")) {
		return w.paced.Write(b)
	}
	w.log.Warn(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// stopped returns an error wrapping ErrStopped once ctx has ended.
func stopped(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrStopped, context.Cause(ctx))
}

// warnHolds warns, at start and on reload, of the enforcing policies whose max_delay
// exceeds the shutdown timeout: at shutdown, a request they hold whose
// turn comes after the timeout's end is answered 503 instead (see
// policy.Drain), which the file's author may not expect.
func (s *Server) warnHolds(g *generation) {
	if g.set == nil {
		return
	}
	for _, p := range g.set.Policies() {
		if !p.Shadow && p.MaxDelay > s.o.ShutdownTimeout {
			s.log.Warn("max_delay exceeds the shutdown timeout: at shutdown, a request held past its end is answered 503 instead",
				"policy", p.Name, "max_delay", p.MaxDelay.String(), "shutdown_timeout", s.o.ShutdownTimeout.String())
		}
	}
}

// listen opens the listeners the configuration calls for.
func (s *Server) listen() error {
	open := func(given net.Listener, addr, def string, want bool, name string) (net.Listener, error) {
		if given != nil {
			if !want {
				given.Close()
				return nil, nil
			}
			return given, nil
		}
		if addr == "" {
			addr = def
		}
		if !want || addr == Off {
			return nil, nil
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%s listener: %w", name, err)
		}
		return l, nil
	}
	var err error
	o := &s.o
	if s.lis.proxy, err = open(o.ProxyListener, o.Listen, DefaultListen, s.proxy, "proxy"); err != nil {
		return err
	}
	if s.lis.check, err = open(o.CheckListener, o.CheckListen, DefaultCheckListen, s.gen.Load().set != nil, "check"); err != nil {
		return err
	}
	if s.lis.grpc, err = open(o.GRPCListener, o.GRPCListen, DefaultGRPCListen, s.rls != nil, "gRPC"); err != nil {
		return err
	}
	if s.lis.admin, err = open(o.AdminListener, o.AdminListen, DefaultAdminListen, true, "admin"); err != nil {
		return err
	}
	return nil
}

// Addrs returns the addresses the Server listens on.
func (s *Server) Addrs() Addrs {
	addr := func(l net.Listener) string {
		if l == nil {
			return ""
		}
		return l.Addr().String()
	}
	return Addrs{Proxy: addr(s.lis.proxy), Check: addr(s.lis.check), GRPC: addr(s.lis.grpc), Admin: addr(s.lis.admin)}
}

// Metrics returns the server's collectors.
func (s *Server) Metrics() *Metrics { return s.m }

// Run serves until ctx ends, then shuts down gracefully: readiness turns
// false, the listeners stop accepting, and requests in flight get up to
// Options.ShutdownTimeout to finish (gRPC calls through GracefulStop).
// It returns nil after a clean stop, or the error that stopped a
// listener. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	err := errors.New("server: Run called twice")
	s.runOnce.Do(func() { err = s.run(ctx) })
	return err
}

func (s *Server) run(ctx context.Context) error {
	defer s.st.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Requests outlive ctx, which ends when the shutdown begins: they
	// get the shutdown timeout to finish, and are cut at its end.
	reqCtx, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()
	s.hardStop = hardStop
	reqCtx = policy.WithDrain(reqCtx, &s.drain)
	errc := make(chan error, 4)
	// The proxy and check listeners serve TLS when it is on, the admin
	// listener never: it binds loopback by default and answers probes
	// and scrapers that speak plain HTTP. Their requests are counted
	// (see counted), the admin listener's not: it answers until the
	// others have drained.
	serve := func(name string, l net.Listener, h http.Handler, useTLS, h2c, count bool) *http.Server {
		srv := &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    s.o.MaxHeaderBytes,
			// What net/http reports of a connection (a TLS handshake
			// that failed, as a load balancer's TCP check or a scan
			// makes them) is a client's doing: paced, one line a
			// second, as the upstream's failures are.
			ErrorLog:    log.New(newServerLog(s.log, s.clock), "", 0),
			BaseContext: func(net.Listener) context.Context { return reqCtx },
		}
		if count {
			srv.Handler = s.counted(h)
			srv.ConnContext, srv.ConnState = s.markConn, s.connState
		}
		mode := "off"
		if useTLS {
			// HTTP/2 where the client offers it, as net/http negotiates.
			srv.TLSConfig = s.tls.serverConfig("h2", "http/1.1")
			mode = s.tls.mode()
		} else if h2c {
			// HTTP/2 with prior knowledge besides HTTP/1: how gRPC
			// clients speak in plaintext. An upgrade to h2c is still
			// not taken (net/http offers none; see hopByHop).
			srv.Protocols = new(http.Protocols)
			srv.Protocols.SetHTTP1(true)
			srv.Protocols.SetUnencryptedHTTP2(true)
		}
		s.log.Info("listening", "listener", name, "addr", l.Addr().String(), "tls", mode)
		go func() {
			var err error
			if useTLS {
				err = srv.ServeTLS(l, "", "")
			} else {
				err = srv.Serve(l)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s listener: %w", name, err)
			}
		}()
		return srv
	}
	if s.lis.proxy != nil {
		s.servers = append(s.servers, serve("proxy", s.lis.proxy, http.HandlerFunc(s.serveProxy), s.tls != nil, true, true))
	}
	if s.lis.check != nil {
		s.servers = append(s.servers, serve("check", s.lis.check, s.checkMux(), s.tls != nil, false, true))
	}
	if s.lis.admin != nil {
		s.admin = serve("admin", s.lis.admin, s.adminMux(), false, false, false)
	}
	if s.lis.grpc != nil {
		// A fixed pool of stream workers reuses goroutines (and their grown
		// stacks) across calls instead of starting one per call: with many
		// callers that is a tenth of the CPU.
		opts := []grpc.ServerOption{
			grpc.NumStreamWorkers(uint32(64 * runtime.GOMAXPROCS(0))),
			grpc.MaxRecvMsgSize(grpcMaxRecvMsgSize),
			grpc.MaxConcurrentStreams(grpcMaxStreamsPerConn),
			grpc.StatsHandler(&undecodedRLS{s: s}),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcMinPingInterval, PermitWithoutStream: true}),
		}
		if age := s.o.GRPCMaxConnectionAge; age > 0 {
			opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: age, MaxConnectionAgeGrace: grpcMaxConnectionAgeGrace}))
		}
		mode := "off"
		if s.tls != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls.serverConfig("h2"))))
			mode = s.tls.mode()
		}
		s.grpc = grpc.NewServer(opts...)
		rlsv3.RegisterRateLimitServiceServer(s.grpc, countedRLS{s.rls, s.m})
		healthpb.RegisterHealthServer(s.grpc, drainingHealth{s.rls.Health(), &s.draining})
		s.log.Info("listening", "listener", "grpc", "addr", s.lis.grpc.Addr().String(), "tls", mode)
		go func() {
			if err := s.grpc.Serve(s.lis.grpc); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("gRPC listener: %w", err)
			}
		}()
	}
	s.hello()
	if s.watch != nil {
		go s.watch.run(ctx, s.o.WatchInterval, s.configChanged)
	}
	if s.tlsWatch != nil {
		go s.tlsWatch.run(ctx, s.o.WatchInterval, s.tlsChanged)
	}
	if s.st.breaker != nil {
		go s.probeWhileDown(ctx, time.Second)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		s.log.Error("listener failed; shutting down", "error", runErr)
	}
	s.shutdown()
	return runErr
}

// probeWhileDown hands the breaker in front of Redis a decision of its own
// every interval while Redis is known down and the breaker decided
// nothing since the interval before, which the breaker sends as its probe
// when its backoff allows, and otherwise answers at once: so Redis is
// probed, and found back, whether requests come or not: an idle
// instance, or one out of the rotation, would otherwise report Redis down
// (sluice_redis_down, /readyz) until its next request, however long Redis
// had been back. The decision is readiness's (readyProbe).
// On a cluster it probes the slot of its key alone; requests probe the
// others.
func (s *Server) probeWhileDown(ctx context.Context, interval time.Duration) {
	decided := func(st sluice.FallbackStats) uint64 { return st.Primary + st.Fallback }
	seen := decided(s.st.breaker.Stats())
	every(ctx, interval, func() {
		st := s.st.breaker.Stats()
		if n := decided(st); !st.Down || n != seen {
			seen = n // up, or requests came: they probe
			return
		}
		pctx, cancel := context.WithTimeout(ctx, interval)
		_, _ = s.st.breaker.Decide(pctx, readyProbe(s.gen.Load()))
		cancel()
		seen = decided(s.st.breaker.Stats())
	})
}

// hello logs where to look, for someone who just started the server.
func (s *Server) hello() {
	a := s.Addrs()
	if s.demo {
		msg := "running the built-in demo configuration (no --config given)"
		if a.Proxy != "" {
			scheme := "http://"
			if s.tls != nil {
				scheme = "https://"
			}
			msg += "; try: curl -i " + scheme + a.Proxy + "/hello"
		}
		var attrs []any
		if a.Admin != "" {
			attrs = append(attrs, "dashboard", "http://"+a.Admin+"/")
		}
		s.log.Info(msg, attrs...)
		return
	}
	if a.Admin != "" {
		s.log.Info("admin endpoints", "dashboard", "http://"+a.Admin+"/", "metrics", "http://"+a.Admin+"/metrics")
	}
}

// counted counts the requests h serves in s.serving, for the shutdown and
// sluice_inflight_requests, and in s.upgraded the ones that take their
// connection over, until they end.
func (s *Server) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serving.Add(1)
		defer s.serving.Add(-1)
		if m, ok := r.Context().Value(connMarkKey{}).(*connMark); ok {
			// HTTP/1 serves one request at a time on a connection: the
			// one taking it over is this one.
			defer func() {
				if m.hijacked.Swap(false) {
					s.upgraded.Add(-1)
				}
			}()
		}
		h.ServeHTTP(w, r)
	})
}

// connMark tells a request's handler, through its context, that its
// connection was taken over (http.StateHijacked), which net/http tells
// ConnState alone.
type connMark struct{ hijacked atomic.Bool }

type connMarkKey struct{}

// markConn gives connection c a connMark, in its requests' context
// (http.Server.ConnContext).
func (s *Server) markConn(ctx context.Context, c net.Conn) context.Context {
	m := new(connMark)
	s.marks.Store(c, m)
	return context.WithValue(ctx, connMarkKey{}, m)
}

// connState marks a connection taken over, and counts it in s.upgraded
// until its handler ends (see counted); net/http reports every
// connection's end, closed or taken over (http.Server.ConnState).
func (s *Server) connState(c net.Conn, st http.ConnState) {
	switch st {
	case http.StateHijacked:
		if m, ok := s.marks.LoadAndDelete(c); ok {
			s.upgraded.Add(1)
			m.(*connMark).hijacked.Store(true)
		}
	case http.StateClosed:
		s.marks.Delete(c)
	}
}

// shutdown stops every listener, letting requests in flight finish within
// the shutdown timeout. The admin listener stops last, so that probes
// read 503 from /readyz, and scrapers the metrics, while the others
// drain.
func (s *Server) shutdown() {
	// Requests still in flight are cut at the end of the timeout, after
	// the delay: none is held back past it, which would hold a unit or a
	// turn, and a client, for an answer that never comes.
	s.drain.Begin(s.clock.Now().Add(max(s.o.ShutdownDelay, 0) + s.o.ShutdownTimeout))
	s.draining.Store(true)
	if s.rls != nil {
		s.rls.Health().Shutdown()
	}
	if d := s.o.ShutdownDelay; d > 0 {
		s.log.Info("shutting down: serving on while load balancers learn of it", "delay", d.String())
		time.Sleep(d)
	}
	s.log.Info("shutting down", "timeout", s.o.ShutdownTimeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), s.o.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var late atomic.Bool // a listener still had connections at the timeout
	for _, srv := range s.servers {
		wg.Go(func() {
			if srv.Shutdown(ctx) != nil {
				late.Store(true)
			}
		})
	}
	if s.grpc != nil {
		wg.Go(func() {
			done := make(chan struct{})
			go func() { s.grpc.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				s.log.Warn("gRPC calls still in flight at the shutdown timeout were cut")
				s.grpc.Stop()
			}
		})
	}
	wg.Wait()
	if late.Load() {
		// Counted before Close, whose connections' handlers take a
		// moment to end.
		if n := s.serving.Load() - s.upgraded.Load(); n > 0 {
			s.log.Warn("requests still in flight at the shutdown timeout were cut", "requests", n)
		} else {
			s.log.Info("connections still open at the shutdown timeout, with no request under way, were closed")
		}
		for _, srv := range s.servers {
			srv.Close()
		}
	}
	// Upgraded connections (websockets) are no longer the http.Servers'
	// to wait for or close: their handlers are, until the timeout, which
	// cancels their context (the proxy then closes both ends). Polled,
	// as http.Server.Shutdown polls its connections.
	for s.serving.Load() > 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.upgraded.Load(); n > 0 {
		s.log.Warn("requests still open at the shutdown timeout (websockets, other upgrades) were cut", "requests", n)
	}
	if s.serving.Load() > 0 {
		s.hardStop()
	}
	if s.admin != nil {
		if err := s.admin.Shutdown(ctx); err != nil {
			s.admin.Close()
		}
	}
	s.log.Info("stopped")
}

// drainingHealth is the gRPC health service, whose Watch streams end once
// they have told the client NOT_SERVING at shutdown: GracefulStop waits
// for every stream, and a client watching the health (grpc-go's
// client-side health checking) would hold it for the whole timeout.
type drainingHealth struct {
	*health.Server
	draining *atomic.Bool
}

func (h drainingHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// A pointer: health.Server keys its watchers by the stream.
	return h.Server.Watch(req, &endingWatch{Health_WatchServer: stream, ctx: ctx, end: cancel, draining: h.draining})
}

// endingWatch ends a Watch, through its context, once it has sent
// NOT_SERVING while the server drains.
type endingWatch struct {
	healthpb.Health_WatchServer
	ctx      context.Context
	end      context.CancelFunc
	draining *atomic.Bool
}

func (w *endingWatch) Context() context.Context { return w.ctx }

func (w *endingWatch) Send(m *healthpb.HealthCheckResponse) error {
	err := w.Health_WatchServer.Send(m)
	if m.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING && w.draining.Load() {
		w.end()
	}
	return err
}
