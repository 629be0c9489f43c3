package redistest

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of masters, each a [Server] with cluster mode
// enabled, its slots assigned by redis-cli, and optionally replicas.
//
// The cluster can be changed under a client: a slot migrated between
// masters step by step ([Cluster.BeginMigration], [Cluster.MigrateKey] or
// [Cluster.MigrateKeys], [Cluster.EndMigration]), a replica promoted by
// CLUSTER FAILOVER ([Cluster.Failover]) or by killing its master and
// waiting ([Cluster.WaitMaster]).
type Cluster struct {
	// Nodes are the masters as started, in the order their slot ranges
	// were assigned. A failover does not change them: Nodes[i] stays the
	// server it was, master or not.
	Nodes []*Server
	// Replicas are the replicas, those of Nodes[i] at Replicas[i*r:(i+1)*r]
	// for r per master. Empty for StartCluster.
	Replicas []*Server
}

// StartCluster starts a Redis Cluster of n masters (at least 3, as
// redis-cli requires) on free loopback ports and waits until every node
// reports cluster_state:ok. Cleanup is registered with t.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWithReplicas(t, n, 0)
}

// StartClusterWithReplicas is StartCluster with r replicas per master, each
// in sync with its master and known as its replica to every master (so
// that the masters vote for it when its master fails) before it returns.
func StartClusterWithReplicas(t testing.TB, n, r int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", n)
	}
	mustHave(t, "redis-server")
	mustHave(t, "redis-cli")
	c := &Cluster{}
	for range n {
		c.Nodes = append(c.Nodes, startNode(t))
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cli := exec.Command("redis-cli", args...)
	DieWithTest(cli)
	out, err := cli.CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.waitOK(t, c.Nodes)
	if r <= 0 {
		return c
	}
	// A full sync waits 5s by default for more replicas to share it.
	for _, m := range c.Nodes {
		m.MustDo("CONFIG", "SET", "repl-diskless-sync-delay", "0")
	}
	// Replicas join all at once: each takes about a second to sync.
	type pair struct{ replica, master *Server }
	var pairs []pair
	for _, m := range c.Nodes {
		for range r {
			s := startNode(t)
			// It may be promoted, and then sync replicas of its own.
			s.MustDo("CONFIG", "SET", "repl-diskless-sync-delay", "0")
			s.MustDo("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(m.port), strconv.Itoa(m.busPort))
			pairs = append(pairs, pair{s, m})
			c.Replicas = append(c.Replicas, s)
		}
	}
	for _, p := range pairs {
		// CLUSTER REPLICATE needs the master known, which takes a handshake.
		mid := c.ID(p.master)
		poll(t, "replica "+p.replica.Addr()+" of "+p.master.Addr(), func() (bool, string) {
			r, err := p.replica.Do("CLUSTER", "REPLICATE", mid)
			return err == nil, fmt.Sprint(r, err)
		})
	}
	for _, p := range pairs {
		c.waitReplica(t, p.replica, p.master)
	}
	c.waitOK(t, c.all())
	return c
}

// waitReplica waits until s is in sync with its master m and every master
// knows it as m's replica.
func (c *Cluster) waitReplica(t tb, s, m *Server) {
	t.Helper()
	poll(t, "replica "+s.Addr()+" in sync", func() (bool, string) {
		info, err := s.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up"), info
	})
	sid, mid := c.ID(s), c.ID(m)
	for _, n := range c.Nodes {
		poll(t, n.Addr()+" knows replica "+s.Addr(), func() (bool, string) {
			return knows(n, sid, "slave", mid)
		})
	}
}

// knows reports whether CLUSTER NODES on n lists node id with flag and,
// unless master is empty, as master's replica; if not, what n said.
func knows(n *Server, id, flag, master string) (bool, string) {
	nodes, err := n.Do("CLUSTER", "NODES")
	// Each line: id addr@bus flags master ...
	for line := range strings.SplitSeq(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[0] == id && strings.Contains(f[2], flag) && (master == "" || f[3] == master) {
			return true, ""
		}
	}
	return false, fmt.Sprint(nodes, err)
}

// startNode starts a cluster-enabled server on free ports.
func startNode(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: serverDir(t)}
	var err error
	for range 5 {
		s.port, s.busPort = freePort(t), freePort(t)
		if s.port == s.busPort {
			continue
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: cluster node: %v", err)
	}
	t.Cleanup(s.stop)
	return s
}

// Addrs returns the masters' addresses (Nodes).
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// all returns the masters and the replicas.
func (c *Cluster) all() []*Server {
	return append(append([]*Server(nil), c.Nodes...), c.Replicas...)
}

// running returns the nodes whose process runs.
func (c *Cluster) running() []*Server {
	var rs []*Server
	for _, s := range c.all() {
		if s.Pid() != 0 {
			rs = append(rs, s)
		}
	}
	return rs
}

// Owner returns the node that serves key's slot, as CLUSTER KEYSLOT and
// CLUSTER NODES on the first node that answers tell.
func (c *Cluster) Owner(key string) (*Server, error) {
	var err error
	for _, s := range c.running() {
		var slotText string
		if slotText, err = s.Do("CLUSTER", "KEYSLOT", key); err != nil {
			continue
		}
		var slot int
		if _, err := fmt.Sscan(slotText, &slot); err != nil {
			return nil, fmt.Errorf("CLUSTER KEYSLOT %q: %q", key, slotText)
		}
		return c.slotOwner(s, slot)
	}
	return nil, fmt.Errorf("no node answers: %v", err)
}

// SlotOwner returns the master that serves slot, as the first node that
// answers tells.
func (c *Cluster) SlotOwner(slot int) (*Server, error) {
	var err error
	for _, s := range c.running() {
		var o *Server
		if o, err = c.slotOwner(s, slot); err == nil {
			return o, nil
		}
	}
	return nil, err
}

// slotOwner returns the master that serves slot, as CLUSTER NODES on s
// tells.
func (c *Cluster) slotOwner(s *Server, slot int) (*Server, error) {
	nodes, err := s.Do("CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	// Each line: id addr@bus flags master ping pong epoch state slot...
	for line := range strings.SplitSeq(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		for _, r := range f[8:] {
			var lo, hi int
			if n, _ := fmt.Sscanf(r, "%d-%d", &lo, &hi); n == 2 {
				if slot >= lo && slot <= hi {
					return c.byAddr(addr)
				}
			} else if n == 1 && lo == slot {
				return c.byAddr(addr)
			}
		}
	}
	return nil, fmt.Errorf("no node owns slot %d", slot)
}

func (c *Cluster) byAddr(addr string) (*Server, error) {
	for _, s := range c.all() {
		if s.Addr() == addr {
			return s, nil
		}
	}
	return nil, fmt.Errorf("unknown node %s", addr)
}

// ID returns s's cluster node ID (CLUSTER MYID).
func (c *Cluster) ID(s *Server) string {
	s.t.Helper()
	return s.MustDo("CLUSTER", "MYID")
}

// Slot returns key's slot, as CLUSTER KEYSLOT on a running node tells.
func (c *Cluster) Slot(key string) int {
	s := c.running()[0]
	s.t.Helper()
	n, err := strconv.Atoi(s.MustDo("CLUSTER", "KEYSLOT", key))
	if err != nil {
		s.t.Fatalf("redistest: CLUSTER KEYSLOT %q: %v", key, err)
	}
	return n
}

// BeginMigration starts moving slot from master from to master to, as
// redis-cli --cluster reshard does: to imports it, then from migrates it.
// Until EndMigration, from serves the slot's keys it still holds and
// answers ASK for the others, and to serves keys asked for with ASKING,
// answering TRYAGAIN to a command on several keys of which it lacks some.
func (c *Cluster) BeginMigration(slot int, from, to *Server) {
	from.t.Helper()
	sl := strconv.Itoa(slot)
	to.MustDo("CLUSTER", "SETSLOT", sl, "IMPORTING", c.ID(from))
	from.MustDo("CLUSTER", "SETSLOT", sl, "MIGRATING", c.ID(to))
}

// MigrateKeys moves up to n of slot's keys from from to to (MIGRATE, one
// key at a time) and returns how many it moved. The slot must be migrating
// (BeginMigration).
func (c *Cluster) MigrateKeys(slot int, from, to *Server, n int) int {
	from.t.Helper()
	keys := from.MustDo("CLUSTER", "GETKEYSINSLOT", strconv.Itoa(slot), strconv.Itoa(n))
	moved := 0
	for k := range strings.SplitSeq(keys, "\n") {
		// "NOKEY" if the key expired or was deleted meanwhile.
		if k != "" && migrate(k, from, to) == "OK" {
			moved++
		}
	}
	return moved
}

// migrate moves key from from to to (MIGRATE) and returns the reply: OK,
// or NOKEY if from does not hold it.
func migrate(key string, from, to *Server) string {
	from.t.Helper()
	return from.MustDo("MIGRATE", "127.0.0.1", strconv.Itoa(to.port), key, "0", "5000")
}

// MigrateKey moves key from from to to (MIGRATE), whose slot must be
// migrating (BeginMigration).
func (c *Cluster) MigrateKey(key string, from, to *Server) {
	from.t.Helper()
	if r := migrate(key, from, to); r != "OK" {
		from.t.Fatalf("redistest: MIGRATE %s to %s: %s", key, to.Addr(), r)
	}
}

// EndMigration assigns slot to master to, on to first, then on every
// other master, as redis-cli --cluster reshard does, and waits until every
// running node agrees.
func (c *Cluster) EndMigration(slot int, to *Server) {
	to.t.Helper()
	sl, id := strconv.Itoa(slot), c.ID(to)
	to.MustDo("CLUSTER", "SETSLOT", sl, "NODE", id)
	for _, s := range c.running() {
		if s == to || !c.isMaster(s) {
			continue
		}
		s.MustDo("CLUSTER", "SETSLOT", sl, "NODE", id)
	}
	for _, s := range c.running() {
		poll(to.t, s.Addr()+" sees slot "+sl+" on "+to.Addr(), func() (bool, string) {
			o, err := c.slotOwner(s, slot)
			return err == nil && o == to, fmt.Sprint(o, err)
		})
	}
}

// isMaster reports whether s says it is a master.
func (c *Cluster) isMaster(s *Server) bool {
	r, err := s.Do("ROLE")
	return err == nil && strings.HasPrefix(r, "master")
}

// Failover promotes replica to master by CLUSTER FAILOVER, which its
// master coordinates (it stops writes until the replica has caught up),
// and waits until every running node is ok with it as a master.
func (c *Cluster) Failover(replica *Server) {
	replica.t.Helper()
	replica.MustDo("CLUSTER", "FAILOVER")
	c.WaitMaster(replica)
}

// WaitMaster waits until s is a master (after a failover, by CLUSTER
// FAILOVER or because its master failed) and every running node reports
// cluster_state:ok.
func (c *Cluster) WaitMaster(s *Server) {
	s.t.Helper()
	poll(s.t, s.Addr()+" master", func() (bool, string) {
		r, err := s.Do("ROLE")
		return err == nil && strings.HasPrefix(r, "master"), fmt.Sprint(r, err)
	})
	id := c.ID(s)
	for _, n := range c.running() {
		poll(s.t, n.Addr()+" knows "+s.Addr()+" as a master", func() (bool, string) {
			return knows(n, id, "master", "")
		})
	}
	c.waitOK(s.t, c.running())
}

// WaitOK waits until every running node reports cluster_state:ok.
func (c *Cluster) WaitOK() {
	c.waitOK(c.Nodes[0].t, c.running())
}

func (c *Cluster) waitOK(t tb, nodes []*Server) {
	t.Helper()
	for _, s := range nodes {
		poll(t, s.Addr()+" cluster_state:ok", func() (bool, string) {
			info, err := s.Do("CLUSTER", "INFO")
			return err == nil && strings.Contains(info, "cluster_state:ok"), fmt.Sprint(info, err)
		})
	}
}

// clusterTimeout bounds how long the cluster may take to agree on a
// change: a failover after a master dies takes the node timeout (2s) and
// an election.
const clusterTimeout = 20 * time.Second

// poll calls f until it reports true, and fails the test with what f last
// said if that takes longer than clusterTimeout.
func poll(t tb, what string, f func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for {
		ok, last := f()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s: not after %v: %s", what, clusterTimeout, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
