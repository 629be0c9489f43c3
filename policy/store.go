package policy

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// StoreConfig is the file's store section: where a server keeps its
// counters. The policy package only reads it; `sluice serve` acts on it.
// The zero value means the in-memory store of one process.
//
//	store:
//	  redis: "redis://127.0.0.1:6379/0"   # one server (any rueidis URL)
//	  # cluster: ["10.0.0.1:6379", "10.0.0.2:6379"]  # Redis Cluster seeds
//	  # sentinel: {master: mymaster, addrs: ["10.0.0.1:26379"]}
//	  # tls: {ca: ca.crt, cert: client.crt, key: client.key}  # TLS to Redis
//	  timeout: 50ms                        # bound on each Redis call
//	  deny_cache: true                     # refuse known refusals locally
//	  max_keys: 1048576                    # keys a store in memory holds
//
// At most one of Redis, Cluster and Sentinel is set. Load reads no file
// the section names: TLS's files are read as the store is opened.
type StoreConfig struct {
	// Redis is the URL of a Redis server, as rueidis.ParseURL reads it:
	// redis://[user:pass@]host:port/db, rediss:// for TLS, extra addr=
	// parameters for a cluster, master_set= for Sentinel. Load checks
	// its scheme and that it parses as a URL; the rest (the database
	// number, the query's options) is the Redis client's to read, which
	// sluice serve and sluice check do.
	Redis string
	// Cluster lists the seed addresses (host:port) of a Redis Cluster.
	Cluster []string
	// SentinelMaster and SentinelAddrs name a Sentinel-managed master and
	// the Sentinels (host:port) that know where it is.
	SentinelMaster string
	SentinelAddrs  []string
	// TLS names the files of TLS to Redis (tls:): a private CA, a client
	// certificate. Any of them turns TLS on, whatever Redis, Cluster or
	// Sentinel says; its zero value leaves TLS to the URL's scheme.
	TLS StoreTLS
	// Timeout bounds each call to Redis; a decision waits at most about
	// twice as long, as it may queue behind a call on the wire (see
	// redis.Options.CallTimeout). Zero means the server's default.
	Timeout time.Duration
	// NoDenyCache turns the Redis store's deny cache off (deny_cache:
	// false). It is on by default.
	NoDenyCache bool
	// MaxKeys bounds how many keys a store kept in the server's memory
	// holds: the memory store, and with Redis the local store that
	// on_store_error: local decides in while Redis is down. A new key past
	// the bound evicts an old one, which starts again from fresh. Zero
	// means the memory store's default (memory.DefaultMaxKeys).
	MaxKeys int
}

// StoreTLS is the store section's tls mapping: the PEM files of TLS to
// Redis, as paths (relative ones from the server's working directory).
// Its zero value adds nothing: TLS is then on only with a rediss:// URL,
// which verifies Redis against the system's roots and presents no
// certificate. Any field set turns TLS on, with TLS 1.2 at least, for
// every connection the store makes: to a rediss:// or redis:// URL's
// server, to each node of a Cluster, and with Sentinel to the Sentinels
// and to the master they name alike.
//
//	tls:
//	  ca: /etc/sluice/redis-ca.crt     # verify Redis with these CAs
//	  cert: /etc/sluice/redis-client.crt  # present this certificate chain
//	  key: /etc/sluice/redis-client.key   # and its private key
//
// The name checked in Redis's certificate is a rediss:// URL's host, as
// the Redis client sets it, and otherwise the host of each address
// dialled: a Cluster's nodes, a Sentinel's master, as they are announced.
type StoreTLS struct {
	// CA holds the CAs (PEM) that verify Redis's certificate, instead of
	// the system's roots. Empty means the system's roots.
	CA string
	// Cert and Key, both or neither, are the client certificate chain
	// (PEM, the leaf first) and its private key, for a Redis that
	// requires client certificates (tls-auth-clients yes, Redis's default
	// once TLS is on).
	Cert, Key string
}

// On reports whether t turns TLS on: whether any file is named.
func (t StoreTLS) On() bool { return t != StoreTLS{} }

// IsRedis reports whether the section names a Redis store.
func (c StoreConfig) IsRedis() bool {
	return c.Redis != "" || len(c.Cluster) > 0 || c.SentinelMaster != ""
}

// Equal reports whether c and o describe the same store.
func (c StoreConfig) Equal(o StoreConfig) bool {
	return c.Redis == o.Redis && slices.Equal(c.Cluster, o.Cluster) &&
		c.SentinelMaster == o.SentinelMaster && slices.Equal(c.SentinelAddrs, o.SentinelAddrs) &&
		c.TLS == o.TLS && c.Timeout == o.Timeout && c.NoDenyCache == o.NoDenyCache && c.MaxKeys == o.MaxKeys
}

// Store returns the file's store section; its zero value when there is
// none.
func (s *Set) Store() StoreConfig { return s.store }

// storeFields are the fields of the store section.
var storeFields = []string{"redis", "cluster", "sentinel", "tls", "timeout", "deny_cache", "max_keys"}

// storeTLSFields are the fields of the store section's tls mapping.
var storeTLSFields = []string{"ca", "cert", "key"}

// CheckRedisURL reports what is wrong with s as the URL of a Redis
// server, or nil: the checks the loader makes on store.redis, for a URL
// given elsewhere (sluice serve's --redis). Its errors show the URL with
// its password redacted, or not at all. Beyond the scheme, each addr=
// (a further seed of a Cluster or a Sentinel) needs a port: rueidis
// reads one without as the URL's own host on 6379, and would never dial
// the host written.
func CheckRedisURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		// A *url.Error, which quotes the URL: say what it wraps.
		return fmt.Errorf("is not a URL: %w", errors.Unwrap(err))
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix" {
		return fmt.Errorf("%q: want a redis://, rediss:// or unix:// URL", u.Redacted())
	}
	for _, a := range u.Query()["addr"] {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%q: addr=%q needs a port, as in addr=%s", u.Redacted(), a, net.JoinHostPort(strings.Trim(a, "[]"), "6379"))
		}
	}
	return nil
}

func (ld *loader) storeSection(f field) StoreConfig {
	var c StoreConfig
	if f.val == nil {
		return c
	}
	m := ld.fields(f.val, "store", storeFields...)
	kinds := 0
	if v, ok := m["redis"]; ok {
		kinds++
		if s, ok := ld.str(v.val, "store.redis"); ok {
			// The URL may hold a password: errors show it redacted, or
			// not at all (the line says where it is).
			if err := CheckRedisURL(s); err != nil {
				ld.errf(v.val, "store.redis %v", err)
			} else {
				c.Redis = s
			}
		}
	}
	if v, ok := m["cluster"]; ok {
		kinds++
		c.Cluster = ld.addrs(v.val, "store.cluster")
		if len(ld.list(v.val, "store.cluster")) == 0 {
			ld.errf(v.val, "store.cluster needs at least one seed address, e.g. [\"10.0.0.1:6379\"]")
		}
	}
	if v, ok := m["sentinel"]; ok {
		kinds++
		sm := ld.fields(v.val, "store.sentinel", "master", "addrs")
		if mv, ok := sm["master"]; ok {
			c.SentinelMaster, _ = ld.str(mv.val, "store.sentinel.master")
		}
		if av, ok := sm["addrs"]; ok {
			c.SentinelAddrs = ld.addrs(av.val, "store.sentinel.addrs")
		}
		if sm != nil && (c.SentinelMaster == "" || len(c.SentinelAddrs) == 0) {
			ld.errf(v.val, "store.sentinel needs master (the master's name) and addrs (the Sentinels, host:port)")
		}
	}
	if kinds > 1 {
		ld.errf(f.key, "store names more than one of redis, cluster and sentinel; pick one")
	}
	if v, ok := m["tls"]; ok {
		c.TLS = ld.storeTLS(v.val)
		if c.TLS.On() && strings.HasPrefix(c.Redis, "unix:") {
			ld.errf(v.key, "store.tls: a unix:// socket has no TLS; give Redis's TCP address (rediss://host:port) or drop tls")
		}
	}
	if v, ok := m["timeout"]; ok {
		if d, ok := ld.duration(v.val, "store.timeout"); ok {
			if d <= 0 {
				ld.errf(v.val, "store.timeout must be above zero")
			}
			c.Timeout = d
		}
	}
	if v, ok := m["deny_cache"]; ok {
		if b, ok := ld.boolean(v.val, "store.deny_cache"); ok {
			c.NoDenyCache = !b
		}
	}
	if v, ok := m["max_keys"]; ok {
		// At most what an int holds: on a 32-bit platform a larger
		// bound would wrap, to none or to 1.
		if n, ok := ld.integer(v.val, "store.max_keys", 1, min(1<<40, math.MaxInt)); ok {
			c.MaxKeys = int(n)
		}
	}
	return c
}

// storeTLS reads the store section's tls mapping. The files are only
// named here: sluice serve reads them as it opens the store, so that a
// file checked elsewhere (sluice check in a pipeline) need not exist.
func (ld *loader) storeTLS(n *yaml.Node) StoreTLS {
	var t StoreTLS
	m := ld.fields(n, "store.tls", storeTLSFields...)
	if m == nil {
		return t
	}
	file := func(name string, to *string) {
		v, ok := m[name]
		if !ok {
			return
		}
		s, ok := ld.str(v.val, "store.tls."+name)
		if ok && s == "" {
			ld.errf(v.val, "store.tls.%s must name a file", name)
		}
		*to = s
	}
	file("ca", &t.CA)
	file("cert", &t.Cert)
	file("key", &t.Key)
	switch cert, key := m["cert"], m["key"]; {
	case len(m) < len(resolve(n).Content)/2:
		// A field was refused (a misspelt cert, say): that is the problem.
	case len(m) == 0:
		ld.errf(n, "store.tls names none of ca, cert and key; for TLS with the system's roots and no client certificate, a rediss:// URL is enough")
	case cert.val != nil && key.val == nil:
		ld.errf(cert.val, "store.tls.cert needs store.tls.key, the client certificate's private key")
	case key.val != nil && cert.val == nil:
		ld.errf(key.val, "store.tls.key needs store.tls.cert, the client certificate it is the key of")
	}
	return t
}

// addrs reads a list of host:port addresses.
func (ld *loader) addrs(n *yaml.Node, what string) []string {
	var out []string
	for _, an := range ld.list(n, what) {
		s, ok := ld.str(an, "an address")
		if !ok {
			continue
		}
		if _, port, err := net.SplitHostPort(s); err != nil || port == "" {
			ld.errf(an, "%s: %q is not host:port", what, s)
			continue
		}
		out = append(out, s)
	}
	return out
}
