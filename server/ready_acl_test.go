package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// On a Redis Cluster whose ACL refuses sluice's script, every decision
// fails on every master, whatever the instance: /readyz must say so,
// though every node answers PING. The mistake the docs warn about first
// (a key pattern without the '{' sluice's keys start with: NOPERM), then
// a user without a command the script runs (the script's own refusal).
// A master that is down, even the one holding the probe's key, is that
// master's outage and leaves the instance ready, as before.
func TestReadyClusterACLRefusesTheScript(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	for _, n := range cl.Nodes {
		// A master killed below must not take the others' slots with it.
		n.MustDo("CONFIG", "SET", "cluster-require-full-coverage", "no")
	}
	up := newUpstream(t)
	ts := startServer(t, `
store: {cluster: ["`+strings.Join(cl.Addrs(), `", "`)+`"], timeout: 200ms, deny_cache: false}
policies:
  - {name: api, key: "header:X-Id", limits: ["100/h"], on_store_error: closed}
`, Options{Upstream: up.URL})
	ready := func() (int, string) {
		t.Helper()
		ts.ready.forget()
		resp, body := get(t, ts.Addrs().Admin, "/readyz")
		return resp.StatusCode, body
	}
	acl := func(rules ...string) {
		t.Helper()
		for _, n := range cl.Nodes {
			n.MustDo(append([]string{"ACL", "SETUSER", "default"}, rules...)...)
		}
	}
	// Clients on every master, most likely: 9 keys over 3 masters.
	requests := func(want int, when string) {
		t.Helper()
		for i := range 9 {
			if resp, body := get(t, ts.Addrs().Proxy, "/", "X-Id", fmt.Sprint("client-", i)); resp.StatusCode != want {
				t.Fatalf("client-%d, %s: %d %s; want %d", i, when, resp.StatusCode, body, want)
			}
		}
	}

	if code, body := ready(); code != http.StatusOK {
		t.Fatalf("/readyz, healthy cluster: %d %q; want 200", code, body)
	}
	requests(http.StatusOK, "healthy cluster")

	for _, c := range []struct {
		name  string
		rules []string
		says  string // what /readyz's body must name
	}{
		{"keys without the braces", []string{"resetkeys", "~sluice:*"}, "NOPERM"},
		{"no TIME", []string{"allkeys", "-time"}, "can't run this command"},
	} {
		acl(c.rules...)
		requests(http.StatusServiceUnavailable, "ACL with "+c.name)
		if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, c.says) {
			t.Errorf("/readyz, ACL with %s on every node: %d %q; want 503 naming %s", c.name, code, body, c.says)
		} else {
			t.Logf("/readyz, ACL with %s: %s", c.name, body)
		}
		acl("allkeys", "+time")
		if code, body := ready(); code != http.StatusOK {
			t.Errorf("/readyz, ACL fixed after %s: %d %q; want 200", c.name, code, body)
		}
	}

	// The probe's own master down: its decision fails, not by an ACL, and
	// the others answer PING.
	// The Redis store writes a key without a hash tag in braces.
	owner, err := cl.Owner("{" + readyProbe(ts.gen.Load()).Key + "}")
	if err != nil {
		t.Fatal(err)
	}
	owner.Kill()
	for i := range 3 {
		if code, body := ready(); code != http.StatusOK {
			t.Fatalf("/readyz, the probe's master %s dead, check %d: %d %q; want 200", owner.Addr(), i, code, body)
		}
	}
}
