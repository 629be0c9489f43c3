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
	s.Restart()
	if got := s.MustDo("GET", "k"); got != "" {
		t.Fatalf("GET after restart = %q, want nothing (no persistence)", got)
	}

	s.Pause()
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
