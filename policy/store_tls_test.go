package policy

import (
	"errors"
	"strings"
	"testing"
)

// The store section's tls mapping names the files of TLS to Redis, for
// any of redis, cluster and sentinel; Load keeps the paths and reads no
// file (sluice serve does, as it opens the store).
func TestStoreTLS(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want StoreConfig
	}{
		{"rediss with all three", `
store:
  redis: "rediss://redis.internal:6380/0"
  tls: {ca: /etc/sluice/redis-ca.crt, cert: /etc/sluice/client.crt, key: /etc/sluice/client.key}
`, StoreConfig{Redis: "rediss://redis.internal:6380/0",
			TLS: StoreTLS{CA: "/etc/sluice/redis-ca.crt", Cert: "/etc/sluice/client.crt", Key: "/etc/sluice/client.key"}}},
		{"redis with a CA", `
store: {redis: "redis://10.0.0.1:6380", tls: {ca: ca.pem}}
`, StoreConfig{Redis: "redis://10.0.0.1:6380", TLS: StoreTLS{CA: "ca.pem"}}},
		{"cluster with a client certificate", `
store:
  cluster: ["10.0.0.1:6379"]
  tls:
    cert: client.crt
    key: client.key
`, StoreConfig{Cluster: []string{"10.0.0.1:6379"}, TLS: StoreTLS{Cert: "client.crt", Key: "client.key"}}},
		{"sentinel", `
store:
  sentinel: {master: m, addrs: ["10.0.0.1:26379"]}
  tls: {ca: ca.pem, cert: c.pem, key: k.pem}
`, StoreConfig{SentinelMaster: "m", SentinelAddrs: []string{"10.0.0.1:26379"}, TLS: StoreTLS{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}}},
	}
	for _, tt := range tests {
		set, err := Load("f.yaml", []byte(tt.yaml+"policies: [{name: a, limits: [\"1/s\"]}]\n"))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got := set.Store()
		if !got.Equal(tt.want) {
			t.Errorf("%s: Store() = %+v, want %+v", tt.name, got, tt.want)
		}
		if !got.TLS.On() {
			t.Errorf("%s: TLS.On() = false", tt.name)
		}
		// A changed file is a changed store: a reload says a restart is
		// needed.
		other := got
		other.TLS.CA += ".new"
		if got.Equal(other) {
			t.Errorf("%s: Equal ignores the CA file", tt.name)
		}
	}
}

func TestStoreTLSErrors(t *testing.T) {
	tests := []struct {
		yaml      string
		line, col int
		want      string
	}{
		{`
store:
  redis: "rediss://r:6380"
  tls:
    cert: client.crt
`, 5, 11, "store.tls.cert needs store.tls.key"},
		{`
store:
  redis: "rediss://r:6380"
  tls:
    ca: ca.pem
    key: client.key
`, 6, 10, "store.tls.key needs store.tls.cert"},
		{`
store:
  redis: "rediss://r:6380"
  tls: {ca: ca.pem, crt: client.crt, key: client.key}
`, 4, 21, `unknown field "crt" in store.tls; did you mean "cert"? (allowed: ca, cert, key)`},
		{`
store: {redis: "rediss://r:6380", tls: {}}
`, 2, 40, "store.tls names none of ca, cert and key"},
		{`
store: {redis: "rediss://r:6380", tls: yes}
`, 2, 40, "store.tls must be a mapping with fields ca, cert, key"},
		{`
store: {redis: "rediss://r:6380", tls: {ca: ""}}
`, 2, 45, "store.tls.ca must name a file"},
		{`
store: {redis: "rediss://r:6380", tls: {ca: [a.pem]}}
`, 2, 45, "store.tls.ca must be a string"},
		{`
store: {redis: "unix:///run/redis.sock", tls: {ca: ca.pem}}
`, 2, 42, "store.tls: a unix:// socket has no TLS"},
	}
	for _, tt := range tests {
		_, err := Load("f.yaml", []byte(tt.yaml+"policies: [{name: a, limits: [\"1/s\"]}]\n"))
		var perr *Error
		if !errors.As(err, &perr) {
			t.Fatalf("%q: Load = %v, want an *Error", tt.yaml, err)
		}
		p := perr.Problems[0]
		if len(perr.Problems) != 1 || p.Line != tt.line || p.Column != tt.col || !strings.Contains(p.Message, tt.want) {
			t.Errorf("%q: %v, want one problem, at %d:%d, with %q", tt.yaml, err, tt.line, tt.col, tt.want)
		}
	}
}
