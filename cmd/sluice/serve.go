package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/gcfloor"
	"github.com/sluicehq/sluice/internal/logpace"
	"github.com/sluicehq/sluice/server"
)

const serveUsage = `Usage: sluice serve [flags]

Runs sluice as a server: a reverse proxy that enforces a policy file, check
endpoints for NGINX (auth_request) and Traefik (forwardAuth), Envoy's rate
limit service, and an admin listener with metrics and a dashboard.

With no flags it runs a built-in demo: two policies in memory in front of a
demo upstream that answers JSON. Try:

  sluice serve
  curl -i http://127.0.0.1:8080/hello

Examples:

  sluice serve --config sluice.yaml --upstream http://127.0.0.1:3000
  sluice serve --config sluice.yaml                  # check endpoints only
  sluice serve --envoy-config /etc/ratelimit/config  # Envoy's service
  sluice serve --print-demo-config > sluice.yaml

Flags (each may also be set by the environment variable shown; a flag
wins over its variable):

  --config FILE           the policy file (SLUICE_CONFIG). Default: the
                          built-in demo, unless --envoy-config is given.
  --envoy-config PATH     a file, or a directory whose files are all read,
                          recursively, but for names starting with a dot,
                          as Envoy's reference rate limit service reads
                          them, in its format; repeatable
                          (SLUICE_ENVOY_CONFIG, comma-separated). Turns the
                          gRPC listener on.
  --envoy-headers         add RateLimit-Policy and RateLimit, and
                          Retry-After when over a limit, to the answers of
                          Envoy's rate limit service, for Envoy to put on
                          its response (SLUICE_ENVOY_HEADERS). Default off,
                          as the reference service's
                          LIMIT_RESPONSE_HEADERS_ENABLED.
  --envoy-refused-consume-nothing
                          decide the descriptors of an Envoy request all or
                          nothing: a request over one limit spends from
                          none, and refused hits never count
                          (SLUICE_ENVOY_REFUSED_CONSUME_NOTHING). Default
                          off: as in the reference, each descriptor is
                          decided on its own and refused hits count. In
                          either mode a fixed window keeps its count when
                          a reload changes requests_per_unit, and shares
                          it with an override of its unit; with the flag,
                          sliding_window and sliding_log keep theirs too.
                          Switching the flag starts every counter afresh.
  --upstream URL          where the reverse proxy forwards allowed requests
                          (SLUICE_UPSTREAM), or "demo" for the demo
                          upstream. Default: none (no proxy listener),
                          except on the demo config.
  --upstream-timeout DUR  how long the proxy waits to connect to the
                          upstream and for its response headers before it
                          answers 504, as NGINX's proxy_read_timeout; a
                          response that has begun streams as long as it
                          takes; 0 means no bound (SLUICE_UPSTREAM_TIMEOUT).
                          Default 1m.
  --preserve-host         send the client's Host header to the upstream
                          (SLUICE_PRESERVE_HOST). Default: the upstream's
                          own host; the client's is in X-Forwarded-Host.
  --redis URL             keep the counters in this Redis, overriding the
                          policy file's store section (SLUICE_REDIS):
                          redis://[user:pass@]host:6379/0, rediss:// for
                          TLS, ?addr=host2:6379 for more cluster seeds,
                          ?master_set=NAME for Sentinel. Give a URL with a
                          password in SLUICE_REDIS: every user of the
                          machine can read a command's arguments (ps).
  --max-keys N            the most keys a store in memory holds, overriding
                          the policy file's store.max_keys (SLUICE_MAX_KEYS);
                          past it a new key evicts an old one. Default
                          1048576.
  --listen ADDR           the reverse proxy (SLUICE_LISTEN).
                          Default 127.0.0.1:8080.
  --check-listen ADDR     the check endpoints, /check (Traefik) and
                          /check/nginx (SLUICE_CHECK_LISTEN).
                          Default 127.0.0.1:8081.
  --grpc-listen ADDR      Envoy's rate limit service (SLUICE_GRPC_LISTEN).
                          Default 127.0.0.1:8082.
  --grpc-max-connection-age DUR
                          how long a gRPC connection lasts before its
                          client is asked to open another, so that an Envoy
                          reaching sluice through one address spreads over
                          instances added since; 0 means no bound
                          (SLUICE_GRPC_MAX_CONNECTION_AGE). Default 24h, as
                          Envoy's reference service.
  --admin-listen ADDR     /metrics, /healthz, /readyz, /debug/top and the
                          dashboard (SLUICE_ADMIN_LISTEN).
                          Default 127.0.0.1:9090.
                          Any listener can be turned off with "off".
  --admin-host NAME       also serve the dashboard, /debug/top and
                          /debug/pprof/ when reached by this name, such as
                          the one operators browse to; repeatable or
                          comma-separated (SLUICE_ADMIN_HOST). Otherwise
                          they answer only by an IP address, localhost or
                          a name under .localhost, and 421 by any other
                          name, so that a web page cannot read them
                          through a browser by DNS rebinding. /metrics,
                          /healthz and /readyz answer by any name.
  --tls-cert FILE         serve the proxy, check and gRPC listeners over
                          TLS (1.2 at least; HTTP/2 where the client
                          offers it) with this PEM certificate chain, the
                          leaf first (SLUICE_TLS_CERT). Needs --tls-key.
                          The admin listener stays plain HTTP.
  --tls-key FILE          the PEM private key of --tls-cert
                          (SLUICE_TLS_KEY).
  --tls-client-ca FILE    require, on the TLS listeners, a client
                          certificate signed by a CA of this PEM file
                          (mutual TLS) (SLUICE_TLS_CLIENT_CA).
                          The TLS files are reloaded on SIGHUP and when
                          they change, as the configuration is; a pair
                          that does not load keeps the previous one.
  --playground            let the dashboard run simulations (SLUICE_PLAYGROUND);
                          each may take a core for ten seconds, so it is off
                          unless asked, except on the demo config, where
                          --playground=false turns it off.
  --pprof                 serve /debug/pprof/ on the admin listener
                          (SLUICE_PPROF); it refuses what a browser sends
                          for a page of another origin, and profiles or
                          traces over 60 seconds.
  --watch-interval DUR    how often the configuration and TLS files are
                          checked for changes; 0 turns watching off (SIGHUP
                          still reloads) (SLUICE_WATCH_INTERVAL). Default 2s.
  --shutdown-delay DUR    how long to go on serving after SIGTERM or SIGINT,
                          /readyz answering 503, before the listeners close:
                          the few seconds a load balancer or Kubernetes
                          still sends traffic to a terminating instance
                          (SLUICE_SHUTDOWN_DELAY). Default 0: none.
  --shutdown-timeout DUR  how long requests in flight may take to finish
                          after SIGTERM or SIGINT, and after the delay
                          (SLUICE_SHUTDOWN_TIMEOUT). Default 15s. No request
                          is held (max_delay, a leaky_bucket's turn) past
                          its end: one held at the signal that would be is
                          answered 503, and one that comes after the
                          signal, the delay included, is refused 429.
  --body-timeout DUR      how long the proxy and the check endpoint wait for
                          the next bytes of a request body before they cut
                          the request (408), as NGINX's client_body_timeout;
                          not gRPC calls, whose streams may idle; 0 means
                          no bound (SLUICE_BODY_TIMEOUT). Default 1m.
  --request-buffer SIZE   how much of an allowed request's body the proxy
                          reads before it asks the upstream, as NGINX's
                          proxy_request_buffering: a body that fits goes
                          whole, so a client trickling it holds no upstream
                          connection; a larger one, or a gRPC call's,
                          streams on; 0 turns it off
                          (SLUICE_REQUEST_BUFFER). Default 64KiB.
  --send-timeout DUR      how long the proxy waits for a client to take the
                          next bytes of a response, or of a websocket,
                          before it cuts it (and the upstream's), as
                          NGINX's send_timeout; a websocket may idle both
                          ways; 0 means no bound (SLUICE_SEND_TIMEOUT).
                          Default 1m.
  --max-header-bytes SIZE bounds a request's line and header fields on the
                          proxy, check and admin listeners, as Envoy's 60
                          KiB bound does: past SIZE, and net/http's 4 KiB
                          of read slack over HTTP/1, it is answered 431
                          (SLUICE_MAX_HEADER_BYTES). Default 64KiB.
  --gc-heap-floor SIZE    let the heap grow to SIZE before the garbage
                          collector runs, such as 64MiB (bytes, or units B,
                          KiB, MiB, GiB, TiB, as GOMEMLIMIT takes them);
                          above it the collector runs as GOGC says; 0
                          turns it off (SLUICE_GC_HEAP_FLOOR). Default
                          64MiB.
  --log-format FORMAT     text or json (SLUICE_LOG_FORMAT). Default text.
  --log-level LEVEL       debug, info, warn or error (SLUICE_LOG_LEVEL).
                          Default info.
  --print-demo-config     print the built-in demo configuration and exit.
  --help                  show this help.

Signals: SIGHUP reloads the configuration and the TLS files (Windows has
none: a change of the files reloads them); SIGTERM and SIGINT stop the
server gracefully, and a second one during the drain stops
it at once (exit 1), cutting the requests still in flight.

Exit codes: 0 stopped by a signal, 1 failed at run time (a listener could
not open, Redis refused the connection at start: a password, TLS) or
stopped at once by a second signal, 2 usage error, 3 a configuration file
or the TLS files do not load at start. A Redis not there at start stops
nothing: the server serves by each policy's on_store_error, and connects
when Redis answers.
`

// Exit codes of sluice serve.
const (
	exitOK        = 0
	exitFailure   = 1
	exitUsage     = 2
	exitBadConfig = 3
)

// listFlag is a repeatable flag.
type listFlag struct {
	vals []string
}

func (l *listFlag) String() string { return strings.Join(l.vals, ",") }

func (l *listFlag) Set(v string) error {
	l.vals = append(l.vals, v)
	return nil
}

// serveFlags parses the flags and environment of sluice serve.
type serveFlags struct {
	o                                                                   server.Options
	envoy, adminHost                                                    listFlag
	watch, shutdown, bodyTimeout, sendTimeout, upstreamTimeout, grpcAge time.Duration
	logFormat                                                           string
	logLevel                                                            string
	gcFloor                                                             string
	gcFloorBytes                                                        uint64
	maxHeader                                                           string
	requestBuffer                                                       string
	printDemo                                                           bool
	// fromEnv names the variable each flag set by the environment took
	// its value from, for messages about the value.
	fromEnv map[string]string
}

// name returns what set the flag of that name, for a message about its
// value: its environment variable, or else the flag.
func (f *serveFlags) name(flagName string) string {
	if key, ok := f.fromEnv[flagName]; ok {
		return key
	}
	return "--" + flagName
}

// serveEnv names the environment variable of each flag that has one but
// the lists, --envoy-config and --admin-host (see parseServeFlags).
var serveEnv = map[string]string{
	"config": "SLUICE_CONFIG", "upstream": "SLUICE_UPSTREAM", "preserve-host": "SLUICE_PRESERVE_HOST",
	"envoy-headers": "SLUICE_ENVOY_HEADERS", "envoy-refused-consume-nothing": "SLUICE_ENVOY_REFUSED_CONSUME_NOTHING",
	"redis": "SLUICE_REDIS", "max-keys": "SLUICE_MAX_KEYS", "listen": "SLUICE_LISTEN", "check-listen": "SLUICE_CHECK_LISTEN",
	"grpc-listen": "SLUICE_GRPC_LISTEN", "grpc-max-connection-age": "SLUICE_GRPC_MAX_CONNECTION_AGE", "admin-listen": "SLUICE_ADMIN_LISTEN", "pprof": "SLUICE_PPROF", "playground": "SLUICE_PLAYGROUND",
	"tls-cert": "SLUICE_TLS_CERT", "tls-key": "SLUICE_TLS_KEY", "tls-client-ca": "SLUICE_TLS_CLIENT_CA",
	"watch-interval": "SLUICE_WATCH_INTERVAL", "shutdown-timeout": "SLUICE_SHUTDOWN_TIMEOUT", "shutdown-delay": "SLUICE_SHUTDOWN_DELAY",
	"body-timeout": "SLUICE_BODY_TIMEOUT", "send-timeout": "SLUICE_SEND_TIMEOUT", "upstream-timeout": "SLUICE_UPSTREAM_TIMEOUT",
	"log-format": "SLUICE_LOG_FORMAT", "log-level": "SLUICE_LOG_LEVEL", "gc-heap-floor": "SLUICE_GC_HEAP_FLOOR",
	"max-header-bytes": "SLUICE_MAX_HEADER_BYTES", "request-buffer": "SLUICE_REQUEST_BUFFER",
}

// wants says what a flag of the standard kinds takes, for a variable's
// value it could not parse: the flag package's own message is "parse
// error", which names neither.
func wants(fl *flag.Flag) string {
	g, ok := fl.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case bool:
		return " (want true or false)"
	case time.Duration:
		return " (want a duration, such as 500ms, 30s or 2m)"
	case int, int64, uint, uint64:
		return " (want a whole number)"
	}
	return ""
}

func parseServeFlags(args []string, getenv func(string) string, stderr io.Writer) (*serveFlags, error) {
	f := &serveFlags{fromEnv: map[string]string{}}
	fs := f.flagSet()
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (the policy file goes after --config)", fs.Arg(0))
	}
	// A flag wins over its variable: the environment sets only the flags
	// the command line left alone, in the order of their names, so that
	// of several bad values the same one is named every time.
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	for _, name := range slices.Sorted(maps.Keys(serveEnv)) {
		key := serveEnv[name]
		if v := getenv(key); v != "" && !given[name] {
			if err := fs.Set(name, v); err != nil {
				return nil, fmt.Errorf("%s=%q: %w%s", key, v, err, wants(fs.Lookup(name)))
			}
			f.fromEnv[name] = key
		}
	}
	for _, e := range []struct {
		name, key string
		l         *listFlag
	}{{"envoy-config", "SLUICE_ENVOY_CONFIG", &f.envoy}, {"admin-host", "SLUICE_ADMIN_HOST", &f.adminHost}} {
		if v := getenv(e.key); v != "" && !given[e.name] {
			for _, p := range strings.Split(v, ",") {
				if p = strings.TrimSpace(p); p != "" {
					e.l.vals = append(e.l.vals, p)
				}
			}
		}
	}
	// The playground is on by default on the demo: only a value given,
	// false, turns it off there.
	if (given["playground"] || f.fromEnv["playground"] != "") && !f.o.Playground {
		f.o.NoPlayground = true
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return nil, fmt.Errorf("%s %q: want text or json", f.name("log-format"), f.logFormat)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("%s %q: want debug, info, warn or error", f.name("log-level"), f.logLevel)
	}
	// net.Listen's own message ("missing port in address") names no
	// flag, and came only as the listener opened, after the files were
	// read (exit 1); a listener not wanted (gRPC without Envoy files)
	// never read its value at all.
	for _, l := range []struct {
		name string
		addr string
	}{{"listen", f.o.Listen}, {"check-listen", f.o.CheckListen}, {"grpc-listen", f.o.GRPCListen}, {"admin-listen", f.o.AdminListen}} {
		if err := server.CheckListenAddr(l.addr); err != nil {
			return nil, fmt.Errorf("%s %q: %w", f.name(l.name), l.addr, err)
		}
	}
	f.o.EnvoyConfigs = f.envoy.vals
	var err error
	if f.o.AdminHosts, err = adminHosts(f.adminHost.vals); err != nil {
		return nil, err
	}
	switch {
	case f.watch < 0:
		return nil, fmt.Errorf("%s must not be negative (0 turns watching off)", f.name("watch-interval"))
	case f.watch == 0:
		f.o.WatchInterval = -1
	default:
		f.o.WatchInterval = f.watch
	}
	if f.shutdown <= 0 {
		return nil, fmt.Errorf("%s must be above zero", f.name("shutdown-timeout"))
	}
	f.o.ShutdownTimeout = f.shutdown
	if f.o.ShutdownDelay < 0 {
		return nil, fmt.Errorf("%s must not be negative", f.name("shutdown-delay"))
	}
	if f.o.MaxKeys < 0 || f.o.MaxKeys > min(1<<40, math.MaxInt) {
		return nil, fmt.Errorf("%s must be between 0 and %d, as store.max_keys (0 means the policy file's, or 1048576)", f.name("max-keys"), min(1<<40, math.MaxInt))
	}
	if f.o.UpstreamTimeout, err = bound(f.name("upstream-timeout"), f.upstreamTimeout); err != nil {
		return nil, err
	}
	if f.o.BodyTimeout, err = bound(f.name("body-timeout"), f.bodyTimeout); err != nil {
		return nil, err
	}
	if f.o.SendTimeout, err = bound(f.name("send-timeout"), f.sendTimeout); err != nil {
		return nil, err
	}
	if f.o.GRPCMaxConnectionAge, err = bound(f.name("grpc-max-connection-age"), f.grpcAge); err != nil {
		return nil, err
	}
	if f.gcFloorBytes, err = parseSize(f.gcFloor); err != nil {
		return nil, fmt.Errorf("%s %q: %w, or 0 to turn it off", f.name("gc-heap-floor"), f.gcFloor, err)
	}
	switch n, err := parseSize(f.maxHeader); {
	case err != nil:
		return nil, fmt.Errorf("%s %q: %w", f.name("max-header-bytes"), f.maxHeader, err)
	case n < 1<<10 || n > 1<<30:
		return nil, fmt.Errorf("%s %q: want between 1KiB and 1GiB", f.name("max-header-bytes"), f.maxHeader)
	default:
		f.o.MaxHeaderBytes = int(n)
	}
	switch n, err := parseSize(f.requestBuffer); {
	case err != nil:
		return nil, fmt.Errorf("%s %q: %w, or 0 to turn it off", f.name("request-buffer"), f.requestBuffer, err)
	case n > 1<<30:
		return nil, fmt.Errorf("%s %q: want at most 1GiB", f.name("request-buffer"), f.requestBuffer)
	case n == 0:
		f.o.RequestBuffer = -1
	default:
		f.o.RequestBuffer = int(n)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if f.logFormat == "json" {
		f.o.Logger = slog.New(slog.NewJSONHandler(stderr, opts))
	} else {
		f.o.Logger = slog.New(slog.NewTextHandler(stderr, opts))
	}
	return f, nil
}

// flagSet returns the flags of sluice serve, set into f.
func (f *serveFlags) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.o.ConfigFile, "config", "", "")
	fs.Var(&f.envoy, "envoy-config", "")
	fs.BoolVar(&f.o.EnvoyHeaders, "envoy-headers", false, "")
	fs.BoolVar(&f.o.EnvoyRefusedConsumeNothing, "envoy-refused-consume-nothing", false, "")
	fs.StringVar(&f.o.Upstream, "upstream", "", "")
	fs.BoolVar(&f.o.PreserveHost, "preserve-host", false, "")
	fs.StringVar(&f.o.RedisURL, "redis", "", "")
	fs.IntVar(&f.o.MaxKeys, "max-keys", 0, "")
	fs.StringVar(&f.o.Listen, "listen", server.DefaultListen, "")
	fs.StringVar(&f.o.CheckListen, "check-listen", server.DefaultCheckListen, "")
	fs.StringVar(&f.o.GRPCListen, "grpc-listen", server.DefaultGRPCListen, "")
	fs.DurationVar(&f.grpcAge, "grpc-max-connection-age", server.DefaultGRPCMaxConnectionAge, "")
	fs.StringVar(&f.o.AdminListen, "admin-listen", server.DefaultAdminListen, "")
	fs.Var(&f.adminHost, "admin-host", "")
	fs.StringVar(&f.o.TLSCert, "tls-cert", "", "")
	fs.StringVar(&f.o.TLSKey, "tls-key", "", "")
	fs.StringVar(&f.o.TLSClientCA, "tls-client-ca", "", "")
	fs.BoolVar(&f.o.Pprof, "pprof", false, "")
	fs.BoolVar(&f.o.Playground, "playground", false, "")
	fs.DurationVar(&f.watch, "watch-interval", server.DefaultWatchInterval, "")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", server.DefaultShutdownTimeout, "")
	fs.DurationVar(&f.o.ShutdownDelay, "shutdown-delay", 0, "")
	fs.DurationVar(&f.bodyTimeout, "body-timeout", server.DefaultBodyTimeout, "")
	fs.DurationVar(&f.sendTimeout, "send-timeout", server.DefaultSendTimeout, "")
	fs.DurationVar(&f.upstreamTimeout, "upstream-timeout", server.DefaultUpstreamTimeout, "")
	fs.StringVar(&f.gcFloor, "gc-heap-floor", "64MiB", "")
	fs.StringVar(&f.maxHeader, "max-header-bytes", "64KiB", "")
	fs.StringVar(&f.requestBuffer, "request-buffer", "64KiB", "")
	fs.StringVar(&f.logFormat, "log-format", "text", "")
	fs.StringVar(&f.logLevel, "log-level", "info", "")
	fs.BoolVar(&f.printDemo, "print-demo-config", false, "")
	return fs
}

// runServe is "sluice serve".
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			io.WriteString(stdout, serveUsage)
			return exitOK
		}
	}
	f, err := parseServeFlags(args, os.Getenv, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\nRun 'sluice serve --help' for the flags.\n", err)
		return exitUsage
	}
	if f.printDemo {
		stdout.Write(server.DemoConfig)
		return exitOK
	}
	// SIGHUP is caught from here on: one that comes while the server
	// starts (connecting to Redis, say) is a reload once it runs, not the
	// end of the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// The first SIGTERM or SIGINT ends ctx (see main) and starts the
	// drain; a second one, from an operator who will not wait out
	// --shutdown-timeout, ends the process.
	stops := make(chan os.Signal, 2)
	signal.Notify(stops, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(stops)
	defer gcfloor.Start(f.gcFloorBytes).Stop()
	log := f.o.Logger
	defer routeStdLog(log, time.Now)()
	srv, err := server.NewContext(ctx, f.o)
	if err != nil {
		if errors.Is(err, server.ErrStopped) {
			// A signal while starting (waiting for Redis, say): no
			// listener was opened.
			log.Info("stopped while starting")
			return exitOK
		}
		if errors.Is(err, server.ErrOptions) {
			// Flags that cannot be used: no file was read, nothing opened.
			fmt.Fprintf(stderr, "sluice serve: %s\nRun 'sluice serve --help' for the flags.\n", strings.TrimPrefix(err.Error(), server.ErrOptions.Error()+": "))
			return exitUsage
		}
		if errors.Is(err, server.ErrConfig) {
			if f.logFormat == "json" {
				// A pipeline that reads the log as JSON would drop plain
				// lines, and with them why sluice did not start.
				server.LogConfigProblems(log, err)
			} else {
				fmt.Fprintf(stderr, "sluice serve: the configuration does not load:\n%s\n", strings.TrimPrefix(err.Error(), server.ErrConfig.Error()+": "))
			}
			return exitBadConfig
		}
		log.Error("cannot start", "error", err.Error())
		return exitFailure
	}

	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading the configuration")
				_ = srv.Reload(ctx) // a failure is logged and counted; the old configuration serves on
			}
		}
	}()
	go func() {
		for n := 0; ; {
			<-stops
			if n++; n == 2 {
				log.Warn("a second signal: stopping now, cutting the requests still in flight")
				os.Exit(exitFailure)
			}
		}
	}()
	if err := srv.Run(ctx); err != nil {
		log.Error("stopped on a failure", "error", err.Error())
		return exitFailure
	}
	return exitOK
}

// routeStdLog sends package log's standard logger to logger, paced (see
// logpace.Writer), with no date or prefix of its own, until the function
// it returns puts it back as it was: net/http's transport reports an
// upstream's misbehaviour there (a response on an idle connection, one
// longer than its Content-Length), whose plain lines would break a JSON
// log, one a response.
func routeStdLog(logger *slog.Logger, now func() time.Time) (restore func()) {
	out, flags, prefix := stdlog.Writer(), stdlog.Flags(), stdlog.Prefix()
	stdlog.SetOutput(&logpace.Writer{Log: logger, Now: now})
	stdlog.SetFlags(0)
	stdlog.SetPrefix("")
	return func() {
		stdlog.SetOutput(out)
		stdlog.SetFlags(flags)
		stdlog.SetPrefix(prefix)
	}
}

// bound turns a timeout flag, where 0 means no bound, into the Options
// value, where 0 means the default and a negative value no bound. name is
// what set it, for the message.
func bound(name string, d time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("%s must not be negative (0 means no bound)", name)
	case d == 0:
		return -1, nil
	}
	return d, nil
}

// adminHosts splits the values of --admin-host at commas, and refuses a
// port (or a URL): it would suggest the port is compared, which it is not.
// server.New refuses what is not a host name.
func adminHosts(vals []string) ([]string, error) {
	var names []string
	for _, v := range vals {
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			if strings.Contains(n, ":") {
				return nil, fmt.Errorf("--admin-host (SLUICE_ADMIN_HOST) %q: want a host name such as dash.example.com, with no scheme or port (IP addresses and localhost need none)", n)
			}
			names = append(names, n)
		}
	}
	return names, nil
}

// parseSize reads a size in bytes as GOMEMLIMIT is written: a number of
// bytes, or a number with one of the units B, KiB, MiB, GiB and TiB.
func parseSize(v string) (uint64, error) {
	num, shift := v, 0
	for i, unit := range []string{"TiB", "GiB", "MiB", "KiB", "B"} {
		if n, ok := strings.CutSuffix(v, unit); ok {
			num, shift = n, 10*(4-i)
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, errors.New("want a size such as 64MiB, in B, KiB, MiB, GiB or TiB")
	}
	if n > math.MaxUint64>>shift {
		return 0, errors.New("too large")
	}
	return n << shift, nil
}
