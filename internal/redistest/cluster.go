package redistest

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of masters without replicas, each a [Server]
// with cluster mode enabled, its slots assigned by redis-cli.
type Cluster struct {
	// Nodes are the masters, in the order their slot ranges were assigned.
	Nodes []*Server
}

// StartCluster starts a Redis Cluster of n masters (at least 3, as
// redis-cli requires) on free loopback ports and waits until every node
// reports cluster_state:ok. Cleanup is registered with t.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", n)
	}
	mustHave(t, "redis-server")
	mustHave(t, "redis-cli")
	c := &Cluster{}
	for range n {
		s := &Server{t: t, dir: t.TempDir()}
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
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(startTimeout)
	for _, s := range c.Nodes {
		for {
			info, err := s.Do("CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ok after %v: %v\n%s", s.Addr(), startTimeout, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Owner returns the node that serves key's slot, as CLUSTER KEYSLOT and
// CLUSTER NODES on the first node tell.
func (c *Cluster) Owner(key string) (*Server, error) {
	slotText, err := c.Nodes[0].Do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		return nil, err
	}
	var slot int
	if _, err := fmt.Sscan(slotText, &slot); err != nil {
		return nil, fmt.Errorf("CLUSTER KEYSLOT %q: %q", key, slotText)
	}
	nodes, err := c.Nodes[0].Do("CLUSTER", "NODES")
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
	for _, s := range c.Nodes {
		if s.Addr() == addr {
			return s, nil
		}
	}
	return nil, fmt.Errorf("unknown node %s", addr)
}
