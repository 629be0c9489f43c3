package server

import (
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// New reports the first problem of its Options, in a fixed order: with
// problems i and later all present, the error is problem i's, word for
// word. A command's users see these texts, and fix them one at a time.
func TestNewOptionsErrorOrder(t *testing.T) {
	// base is valid as far as the checks go; New never reads its file,
	// as every row fails before.
	base := Options{ConfigFile: "sluice.yaml", Upstream: "http://127.0.0.1:1"}
	problems := []struct {
		name  string
		apply func(*Options)
		want  string
	}{
		{"upstream", func(o *Options) { o.Upstream = "ftp://up" },
			`bad options: upstream "ftp://up": want an http://, https:// or h2c:// URL, or "demo"`},
		{"no policy file", func(o *Options) { o.ConfigFile = "" },
			"bad options: a reverse proxy needs a policy file (--config)"},
		{"gRPC off", func(o *Options) { o.EnvoyConfigs, o.GRPCListen = []string{"envoy.yaml"}, Off },
			"bad options: the gRPC listener is off, but Envoy configurations are given"},
		{"Redis URL", func(o *Options) { o.RedisURL = "redis://u:secret@127.0.0.1:6379/x" },
			`bad options: the Redis URL: redis: invalid database number: "x" (want redis://[user:pass@]host:6379/0, or rediss:// for TLS)`},
		{"listen", func(o *Options) { o.Listen = "http://0.0.0.0:8080" },
			`bad options: --listen "http://0.0.0.0:8080": want host:port with no scheme, such as 0.0.0.0:8080`},
		{"admin listen", func(o *Options) { o.AdminListen = "9090" },
			`bad options: --admin-listen "9090": want host:port, such as 127.0.0.1:8080 (or :8080 for every address), or off`},
		{"admin host", func(o *Options) { o.AdminHosts = []string{"*.example.com"} },
			`bad options: admin host "*.example.com" (--admin-host, SLUICE_ADMIN_HOST): want a host name such as dash.example.com, with no scheme, path or wildcard (IP addresses and localhost need none)`},
		{"cert without key", func(o *Options) { o.TLSCert = "cert.pem" },
			"bad options: --tls-cert and --tls-key go together: give both, or neither"},
		{"client CA without cert", func(o *Options) { o.TLSClientCA = "ca.pem" },
			"bad options: client certificates (--tls-client-ca) need TLS: give --tls-cert and --tls-key too"},
	}
	for i, p := range problems {
		t.Run(p.name, func(t *testing.T) {
			o := base
			for _, q := range problems[i:] {
				q.apply(&o)
			}
			srv, err := New(o)
			if srv != nil || !errors.Is(err, ErrOptions) || err.Error() != p.want {
				t.Fatalf("New with problems %q and after: %v, %v\nwant %s", p.name, srv, err, p.want)
			}
		})
	}
}

// withDefaults fills what is left at zero, keeps what is set, and reads a
// negative value as each field's doc comment says: no bound (or off) for
// some, the default for others.
func TestOptionsWithDefaults(t *testing.T) {
	defaults := Options{
		WatchInterval: DefaultWatchInterval, ShutdownTimeout: DefaultShutdownTimeout,
		BodyTimeout: DefaultBodyTimeout, SendTimeout: DefaultSendTimeout,
		UpstreamTimeout: DefaultUpstreamTimeout, MaxHeaderBytes: DefaultMaxHeaderBytes,
		GRPCMaxConnectionAge: DefaultGRPCMaxConnectionAge, TopKeys: DefaultTopKeys,
	}
	set := Options{
		WatchInterval: 3 * time.Second, ShutdownTimeout: 4 * time.Second,
		BodyTimeout: 5 * time.Second, SendTimeout: 6 * time.Second,
		UpstreamTimeout: 7 * time.Second, MaxHeaderBytes: 8 << 10,
		GRPCMaxConnectionAge: 9 * time.Hour, TopKeys: 10,
	}
	negative := Options{
		WatchInterval: -1, ShutdownTimeout: -1, BodyTimeout: -1, SendTimeout: -1,
		UpstreamTimeout: -1, MaxHeaderBytes: -1, GRPCMaxConnectionAge: -1, TopKeys: -1,
	}
	for _, c := range []struct {
		name    string
		in, out Options
	}{
		{"zero", Options{}, defaults},
		{"set", set, set},
		{"negative", negative, Options{
			WatchInterval: -1, ShutdownTimeout: DefaultShutdownTimeout, BodyTimeout: -1, SendTimeout: -1,
			UpstreamTimeout: -1, MaxHeaderBytes: DefaultMaxHeaderBytes, GRPCMaxConnectionAge: -1, TopKeys: DefaultTopKeys,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := c.in.withDefaults()
			if got.Logger == nil || got.Clock == nil {
				t.Errorf("Logger %v, Clock %v: want both set", got.Logger, got.Clock)
			}
			// The rest compares as a whole: a field added to the defaults
			// without a row here fails the zero row.
			got.Logger, got.Clock = nil, nil
			if !reflect.DeepEqual(got, c.out) {
				t.Errorf("withDefaults:\n got %+v\nwant %+v", got, c.out)
			}
		})
	}
	logger, clock := slog.New(slog.DiscardHandler), rate.SystemClock{}
	if got := (Options{Logger: logger, Clock: clock}).withDefaults(); got.Logger != logger || got.Clock != clock {
		t.Errorf("withDefaults replaced a Logger or Clock given")
	}
}
