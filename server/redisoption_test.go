package server

import (
	"crypto/tls"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

// What a store section turns into, field by field, with no Redis and no
// files: a fake stands for storeTLS, naming its result after the base it
// was given ("none" for nil), so that each row shows both which base the
// files' settings start from and that their result is the one used.
func TestRedisClientOption(t *testing.T) {
	files := policy.StoreTLS{CA: "ca.pem"}
	errFiles := errors.New("store.tls.ca: ca.pem: no such file")
	for _, c := range []struct {
		name   string
		cfg    policy.StoreConfig
		tlsErr error // the fake storeTLS's error

		err         string // the whole error text; "" for none
		addrs       []string
		where       string
		db          int
		user, pass  string
		unix        bool   // dialled over a unix socket
		tlsName     string // co.TLSConfig's ServerName; "" means no TLS
		master      string
		sentinelTLS string // co.Sentinel.TLSConfig's ServerName; "" means none
	}{
		{name: "URL", cfg: policy.StoreConfig{Redis: "redis://10.0.0.1:6380/2"},
			addrs: []string{"10.0.0.1:6380"}, where: "redis://10.0.0.1:6380/2", db: 2},
		{name: "URL, default port", cfg: policy.StoreConfig{Redis: "redis://cache"},
			addrs: []string{"cache:6379"}, where: "redis://cache"},
		{name: "URL with ACL user", cfg: policy.StoreConfig{Redis: "redis://sluice:secret@cache:6379/0"},
			addrs: []string{"cache:6379"}, where: "[cache:6379] (password hidden)", user: "sluice", pass: "secret"},
		{name: "URL with addr=", cfg: policy.StoreConfig{Redis: "redis://a:7000?addr=b:7001&addr=c:7002"},
			addrs: []string{"a:7000", "b:7001", "c:7002"}, where: "redis://a:7000?addr=b:7001&addr=c:7002"},
		{name: "unix socket", cfg: policy.StoreConfig{Redis: "unix:///run/redis.sock"},
			addrs: []string{"/run/redis.sock"}, where: "unix:///run/redis.sock", unix: true},
		{name: "rediss", cfg: policy.StoreConfig{Redis: "rediss://redis.example.com"},
			addrs: []string{"redis.example.com:6379"}, where: "rediss://redis.example.com", tlsName: "redis.example.com"},
		{name: "rediss with files", cfg: policy.StoreConfig{Redis: "rediss://redis.example.com", TLS: files},
			addrs: []string{"redis.example.com:6379"}, where: "rediss://redis.example.com", tlsName: "redis.example.com+files"},
		{name: "redis with files", cfg: policy.StoreConfig{Redis: "redis://cache", TLS: files},
			addrs: []string{"cache:6379"}, where: "redis://cache", tlsName: "none+files"},
		{name: "URL with master_set and files", cfg: policy.StoreConfig{Redis: "redis://s1:26379?master_set=main", TLS: files},
			addrs: []string{"s1:26379"}, where: "redis://s1:26379?master_set=main", master: "main",
			tlsName: "none+files", sentinelTLS: "none+files"},
		{name: "cluster", cfg: policy.StoreConfig{Cluster: []string{"a:7000", "b:7001"}},
			addrs: []string{"a:7000", "b:7001"}, where: "cluster [a:7000 b:7001]"},
		{name: "cluster with files", cfg: policy.StoreConfig{Cluster: []string{"a:7000"}, TLS: files},
			addrs: []string{"a:7000"}, where: "cluster [a:7000]", tlsName: "none+files"},
		{name: "sentinel", cfg: policy.StoreConfig{SentinelMaster: "main", SentinelAddrs: []string{"s1:26379", "s2:26379"}},
			addrs: []string{"s1:26379", "s2:26379"}, where: `sentinel master "main" via [s1:26379 s2:26379]`, master: "main"},
		{name: "sentinel with files", cfg: policy.StoreConfig{SentinelMaster: "main", SentinelAddrs: []string{"s1:26379"}, TLS: files},
			addrs: []string{"s1:26379"}, where: `sentinel master "main" via [s1:26379]`, master: "main",
			tlsName: "none+files", sentinelTLS: "none+files"},

		{name: "bad port hides the password", cfg: policy.StoreConfig{Redis: "redis://u:secret@127.0.0.1:63x9/0"},
			err: `bad configuration: store.redis: invalid port ":63x9" after host`},
		{name: "bad scheme", cfg: policy.StoreConfig{Redis: "http://cache:6379"},
			err: "bad configuration: store.redis: redis: invalid URL scheme: http"},
		{name: "bad database", cfg: policy.StoreConfig{Redis: "redis://cache/x"},
			err: `bad configuration: store.redis: redis: invalid database number: "x"`},
		{name: "unix socket with files", cfg: policy.StoreConfig{Redis: "unix:///run/redis.sock", TLS: files},
			err: "bad configuration: store.tls: a unix:// socket has no TLS; give Redis's TCP address (rediss://host:port) or drop tls"},
		{name: "files that do not load", cfg: policy.StoreConfig{Redis: "rediss://cache", TLS: files}, tlsErr: errFiles,
			err: "bad configuration: store.tls.ca: ca.pem: no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			withTLS := func(base *tls.Config) (*tls.Config, error) {
				calls++
				name := "none"
				if base != nil {
					name = base.ServerName
				}
				return &tls.Config{ServerName: name + "+files"}, c.tlsErr
			}
			co, where, err := redisClientOption(c.cfg, withTLS)
			// The files are read when they are named and TLS can be had:
			// a row whose TLS is the fake's, or whose error is its.
			if want := strings.HasSuffix(c.tlsName, "+files") || c.tlsErr != nil; (calls == 1) != want || calls > 1 {
				t.Errorf("storeTLS called %d times; want it called: %v", calls, want)
			}
			if c.err != "" {
				if !errors.Is(err, ErrConfig) || err.Error() != c.err {
					t.Fatalf("error %v\nwant %s (ErrConfig)", err, c.err)
				}
				if c.tlsErr != nil && !errors.Is(err, c.tlsErr) {
					t.Errorf("error %v does not wrap storeTLS's", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(co.InitAddress, c.addrs) {
				t.Errorf("InitAddress %q, want %q", co.InitAddress, c.addrs)
			}
			if where != c.where {
				t.Errorf("where %q, want %q", where, c.where)
			}
			if co.SelectDB != c.db || co.Username != c.user || co.Password != c.pass {
				t.Errorf("db %d, user %q, password %q; want %d, %q, %q", co.SelectDB, co.Username, co.Password, c.db, c.user, c.pass)
			}
			if (co.DialCtxFn != nil) != c.unix {
				t.Errorf("dials a unix socket: %v, want %v", co.DialCtxFn != nil, c.unix)
			}
			if got := serverName(co.TLSConfig); got != c.tlsName {
				t.Errorf("TLS to Redis: %q, want %q", got, c.tlsName)
			}
			if co.Sentinel.MasterSet != c.master {
				t.Errorf("Sentinel.MasterSet %q, want %q", co.Sentinel.MasterSet, c.master)
			}
			if got := serverName(co.Sentinel.TLSConfig); got != c.sentinelTLS {
				t.Errorf("TLS to the Sentinels: %q, want %q", got, c.sentinelTLS)
			}
			if co.Sentinel.TLSConfig != nil && co.Sentinel.TLSConfig == co.TLSConfig {
				t.Errorf("the Sentinels share Redis's *tls.Config; want a clone")
			}
			// The store reads nothing through the client-side cache, and
			// an ACL need not allow CLIENT TRACKING.
			if !co.DisableCache {
				t.Errorf("DisableCache false: the client would send CLIENT TRACKING")
			}
		})
	}
}

// serverName names c for TestRedisClientOption: "" for no TLS.
func serverName(c *tls.Config) string {
	if c == nil {
		return ""
	}
	return c.ServerName
}
