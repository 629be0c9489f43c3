package redistest

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestServerKillRestartPause(t *testing.T) {
	s := Start(t)
	if got := s.MustDo("SET", "k", "v"); got != "OK" {
		t.Fatalf("SET = %q", got)
	}
	if got := s.MustDo("GET", "k"); got != "v" {
		t.Fatalf("GET = %q, want v", got)
	}
	if got := s.Info("server")["tcp_port"]; got != strconv.Itoa(s.Port()) {
		t.Fatalf("INFO tcp_port = %q, want %d", got, s.Port())
	}

	// Three script calls: two EVALs and an EVALSHA of the script they loaded.
	for _, args := range [][]string{
		{"EVAL", "return 1", "0"},
		{"EVAL", "return 1", "0"},
		{"EVALSHA", s.MustDo("SCRIPT", "LOAD", "return 1"), "0"},
	} {
		if got := s.MustDo(args...); got != "1" {
			t.Fatalf("%s = %q, want 1", args[0], got)
		}
	}
	if calls, usec := s.ScriptStats(); calls != 3 || usec < 0 {
		t.Fatalf("ScriptStats = %d calls, %d µs; want 3 calls", calls, usec)
	}

	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	before := s.Log()
	s.Restart()
	if log := s.Log(); !strings.HasPrefix(log, before) || !strings.Contains(log[len(before):], "Ready to accept connections") {
		t.Fatalf("the log after a restart does not go on with the restarted server's:\n%s", log)
	}
	if got := s.MustDo("GET", "k"); got != "" {
		t.Fatalf("GET after restart = %q, want nothing (no persistence)", got)
	}

	s.Pause()
	if stopped, err := isStopped(s.Pid()); err != nil || !stopped {
		t.Fatalf("Pause returned with the process not stopped: %t, %v", stopped, err)
	}
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("PING\r\n"))
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(make([]byte, 16)); err == nil {
		t.Fatalf("paused server answered %d bytes", n)
	}
	s.Resume()
	if got := s.MustDo("PING"); got != "PONG" {
		t.Fatalf("PING after Resume = %q", got)
	}
}

// A server started on a port another redis-server holds does not take
// that one's PONG for its own: the start fails, and the other server
// runs on.
func TestStartOnTakenPort(t *testing.T) {
	other := Start(t)
	s := &Server{t: t, dir: t.TempDir(), port: other.Port()}
	if err := s.start(); err == nil {
		s.stop()
		t.Fatalf("a redis-server started on port %d, which pid %d holds", other.Port(), other.Pid())
	} else {
		t.Log(err)
	}
	if s.Pid() != 0 {
		t.Errorf("the failed start left pid %d", s.Pid())
	}
	if got := other.Info("server")["process_id"]; got != strconv.Itoa(other.Pid()) {
		t.Errorf("port %d answered by pid %s, want %d", other.Port(), got, other.Pid())
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	owners := map[string]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		s, err := c.Owner(k)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.MustDo("SET", k, "1"); got != "OK" {
			t.Fatalf("SET %s on its owner = %q", k, got)
		}
		owners[s.Addr()] = true
		for _, other := range c.Nodes {
			if other == s {
				continue
			}
			if _, err := other.Do("SET", k, "1"); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
				t.Fatalf("SET %s on a node that does not own it: err = %v, want MOVED", k, err)
			}
		}
	}
	if len(owners) != 3 {
		t.Fatalf("8 keys landed on %d masters, want 3", len(owners))
	}
}

// A slot moves between masters with its keys, ASK and TRYAGAIN answering
// in between, and a replica takes over from its master.
func TestClusterChanges(t *testing.T) {
	c := StartClusterWithReplicas(t, 3, 1)
	if len(c.Replicas) != 3 {
		t.Fatalf("%d replicas, want 3", len(c.Replicas))
	}
	from, err := c.Owner("{m}a")
	if err != nil {
		t.Fatal(err)
	}
	to := c.Nodes[0]
	if to == from {
		to = c.Nodes[1]
	}
	from.MustDo("SET", "{m}a", "1")
	from.MustDo("SET", "{m}b", "2")
	slot := c.Slot("{m}a")

	c.BeginMigration(slot, from, to)
	if got := from.MustDo("GET", "{m}a"); got != "1" {
		t.Errorf("GET of a key not yet moved = %q, want 1", got)
	}
	if _, err := from.Do("GET", "{m}c"); err == nil || !strings.HasPrefix(err.Error(), "ASK") {
		t.Errorf("GET of a missing key while migrating: %v, want ASK", err)
	}
	if n := c.MigrateKeys(slot, from, to, 1); n != 1 {
		t.Fatalf("moved %d keys, want 1", n)
	}
	// One key on each side: several keys at once cannot be served.
	if _, err := from.Do("MGET", "{m}a", "{m}b"); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") && !strings.HasPrefix(err.Error(), "ASK") {
		t.Errorf("MGET across the migration on the source: %v, want ASK or TRYAGAIN", err)
	}
	for c.MigrateKeys(slot, from, to, 10) > 0 {
	}
	c.EndMigration(slot, to)
	if o, err := c.Owner("{m}a"); err != nil || o != to {
		t.Fatalf("owner after the move: %v, %v; want %s", o, err, to.Addr())
	}
	if got := to.MustDo("MGET", "{m}a", "{m}b"); got != "1\n2" {
		t.Errorf("MGET on the new owner = %q", got)
	}
	if _, err := from.Do("GET", "{m}a"); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
		t.Errorf("GET on the old owner: %v, want MOVED", err)
	}

	// The new owner's replica takes over, with the keys.
	var replica *Server
	for i, m := range c.Nodes {
		if m == to {
			replica = c.Replicas[i]
		}
	}
	c.Failover(replica)
	if o, err := c.Owner("{m}a"); err != nil || o != replica {
		t.Fatalf("owner after the failover: %v, %v; want %s", o, err, replica.Addr())
	}
	if got := replica.MustDo("GET", "{m}b"); got != "2" {
		t.Errorf("GET on the promoted replica = %q, want 2", got)
	}
}
