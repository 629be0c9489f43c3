package server

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// On a Redis Cluster, a dead master sends only its own keys to
// on_store_error: through the proxy, a client whose key it held gets the
// closed policy's 503 on every request, while a client whose key another
// master holds is limited by Redis as before, its 4th request of 3 an hour
// refused with 429. Only the call that found the master dead reaches it:
// the server's clock stands still, so no probe is ever due, and every
// other request on its keys is counted as not sent (kind down).
func TestClusterMasterDown(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	for _, n := range cl.Nodes {
		// Past the node timeout (2s), the healthy masters keep answering
		// for their slots; the test ends well before, but a slow machine
		// must not turn a healthy master's keys into failures.
		n.MustDo("CONFIG", "SET", "cluster-require-full-coverage", "no")
	}
	up := newUpstream(t)
	// No deny cache: every refusal is Redis's own, and a dead master's key
	// cannot be refused from memory instead of failing.
	ts := startServer(t, `
store: {cluster: ["`+strings.Join(cl.Addrs(), `", "`)+`"], timeout: 200ms, deny_cache: false}
policies:
  - name: api
    key: "header:X-Id"
    limits: ["3/h"]
    on_store_error: closed
`, Options{Upstream: up.URL})
	send := func(id string) (*http.Response, string) {
		t.Helper()
		return get(t, ts.Addrs().Proxy, "/", "X-Id", id)
	}
	sizes := func() []int {
		t.Helper()
		var ns []int
		for _, n := range cl.Nodes {
			k, err := strconv.Atoi(n.MustDo("DBSIZE"))
			if err != nil {
				t.Fatal(err)
			}
			ns = append(ns, k)
		}
		return ns
	}

	// Which master holds a client's key is found the way the server
	// makes it: its first request (of 3 allowed) adds one key to one
	// master. The key's name (policy, limit hash, prefix) is the
	// server's business.
	const perMaster = 3
	keys := make([][]string, len(cl.Nodes)) // client ids by master
	first := map[string]time.Time{}         // each client's first request
	for i := 0; len(keys[0]) < perMaster || len(keys[1]) < perMaster || len(keys[2]) < perMaster; i++ {
		if i == 100 {
			t.Fatalf("100 clients and still not %d on each master: %v", perMaster, keys)
		}
		id := fmt.Sprintf("client-%d", i)
		before := sizes()
		at := time.Now()
		if resp, body := send(id); resp.StatusCode != 200 {
			t.Fatalf("%s, healthy cluster: %d %s", id, resp.StatusCode, body)
		}
		after, grew := sizes(), -1
		for m := range after {
			switch after[m] - before[m] {
			case 0:
			case 1:
				if grew < 0 {
					grew = m
					continue
				}
				fallthrough
			default:
				t.Fatalf("%s: keys per master went from %v to %v, want one new key", id, before, after)
			}
		}
		if grew < 0 {
			t.Fatalf("%s: no master holds a new key (%v)", id, after)
		}
		if len(keys[grew]) < perMaster {
			keys[grew] = append(keys[grew], id)
			first[id] = at
		}
	}
	dead, healthy := keys[0], slices.Concat(keys[1], keys[2])

	cl.Nodes[0].Kill()
	killed := time.Now()
	deadN := 0 // requests on the dead master's keys
	refusedByStore := func(id string) {
		t.Helper()
		resp, body := send(id)
		deadN++
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, `"status":503`) {
			t.Fatalf("%s, its master dead: %d, Retry-After %q, %s; want on_store_error: closed's 503, Retry-After 1",
				id, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	// A refusal's wait is Redis's: 20 minutes for the 4th of 3 an hour,
	// less the time since the client's first request, rounded up.
	refusedByRedis := func(id string) {
		t.Helper()
		resp, body := send(id)
		wait := 1200 - int(math.Ceil(time.Since(first[id]).Seconds()))
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != 429 || err != nil || ra < wait || ra > 1200 || resp.Header.Get("X-Ratelimit-Remaining") != "0" {
			t.Fatalf("%s, its master healthy, over its limit: %d, Retry-After %q, Remaining %q, %s; want 429 with Retry-After in [%d, 1200] from Redis",
				id, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("X-Ratelimit-Remaining"), body, wait)
		}
	}
	// Each healthy client spends its last two requests and is refused
	// the next, between requests on the dead master's keys: the first of
	// those takes its master down, and the healthy keys must not follow.
	for i, id := range healthy {
		refusedByStore(dead[i%len(dead)])
		for n, remaining := range []string{"1", "0"} {
			resp, body := send(id)
			if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Remaining") != remaining {
				t.Fatalf("%s, its master healthy, request %d of 3: %d, Remaining %q, %s; want 200, %s remaining",
					id, n+2, resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining"), body, remaining)
			}
		}
		refusedByRedis(id)
	}
	// And so on for a while: a master's outage must not spread with time.
	for time.Since(killed) < 300*time.Millisecond {
		for i := range healthy {
			refusedByRedis(healthy[i])
			refusedByStore(dead[i%len(dead)])
		}
	}

	st := ts.st.breaker.Stats()
	t.Logf("%d requests on the dead master's keys, %d rounds of the others', over %v; breaker %+v",
		deadN, deadN/len(healthy)-1, time.Since(killed).Round(time.Millisecond), st)
	if !st.Down || st.Outages != 1 || st.Failures != 1 || st.Probes != 0 {
		t.Errorf("breaker %+v: want down, 1 outage, 1 call sent to the dead master (the failure), no probe", st)
	}
	for _, c := range []struct {
		metric string
		want   int
	}{
		{`sluice_store_errors_total{kind="down"}`, deadN - 1}, // all but the failure: not sent
		{`sluice_decisions_total{policy="api",result="unavailable"}`, deadN},
		{`sluice_fallback_decisions_total{policy="api"}`, deadN},
		{`sluice_redis_down`, 1},
		{`sluice_redis_outages_total`, 1},
	} {
		if got := ts.counter(c.metric); got != c.want {
			t.Errorf("%s %d, want %d", c.metric, got, c.want)
		}
	}
	if got := ts.storeErrors(); got != deadN {
		t.Errorf("%d store errors, want %d: one per request on the dead master's keys, none on the others'", got, deadN)
	}
	logs := ts.logs.String()
	if n := strings.Count(logs, "sluice: store unavailable"); n != 1 || !strings.Contains(logs, "partition="+cl.Nodes[0].Addr()) {
		t.Errorf("%d lines of the store unavailable, want 1 naming partition %s:\n%s", n, cl.Nodes[0].Addr(), logs)
	}
	// The breaker logs each master's outage; the policies, which see one
	// store, log none, or they would log a failure and a recovery at each
	// turn between a dead master's key and a live one's.
	if n := strings.Count(logs, "rate limit store"); n != 0 {
		t.Errorf("%d lines of the policies on the store, want none:\n%s", n, logs)
	}

	// Ready while any master answers, whichever node a PING would have
	// gone to: every instance shares the dead master. Not once none does.
	ready := func() int {
		t.Helper()
		ts.ready.forget()
		resp, _ := get(t, ts.Addrs().Admin, "/readyz")
		return resp.StatusCode
	}
	for i := range 6 {
		if got := ready(); got != http.StatusOK {
			t.Fatalf("/readyz %d, one master dead, check %d: want 200", got, i)
		}
	}
	cl.Nodes[1].Kill()
	cl.Nodes[2].Kill()
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d with every master dead, want 503", got)
	}
}

// On a Redis Cluster, the limits of one key of a policy share a slot: a
// request is one script call, all or nothing, not a check and a commit
// per slot.
func TestClusterLimitsOfAKeyShareASlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	up := newUpstream(t)
	ts := startServer(t, `
store: {cluster: ["`+strings.Join(cl.Addrs(), `", "`)+`"], timeout: 500ms}
policies:
  - {name: api, key: "header:X-Id", limits: ["10/s", "100/h", "1000/d"]}
`, Options{Upstream: up.URL})
	for i := range 6 {
		if resp, body := get(t, ts.Addrs().Proxy, "/", "X-Id", fmt.Sprint("client-", i)); resp.StatusCode != 200 {
			t.Fatalf("client-%d: %d %s", i, resp.StatusCode, body)
		}
	}
	if got := ts.metric("sluice_redis_cross_slot_total"); !strings.HasSuffix(got, " 0") {
		t.Errorf("%s, want no request across slots", got)
	}
	total := 0
	for _, n := range cl.Nodes {
		k, err := strconv.Atoi(n.MustDo("DBSIZE"))
		if err != nil {
			t.Fatal(err)
		}
		if k%3 != 0 {
			t.Errorf("%s holds %d keys: a client's three limits are not together", n.Addr(), k)
		}
		total += k
	}
	if total != 18 {
		t.Errorf("%d keys in the cluster, want 18 (6 clients, 3 limits)", total)
	}
}
