package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// StartSentinel starts a Redis Sentinel on a free loopback port that
// watches master under the name set, and stops it when the test ends. It
// returns once the sentinel names master's address for set.
func StartSentinel(t testing.TB, master *Server, set string) *Server {
	t.Helper()
	mustHave(t, "redis-server")
	s := &Server{t: t, dir: t.TempDir()}
	// The sentinel rewrites its config file: it gets one of its own.
	s.conf = filepath.Join(s.dir, "sentinel.conf")
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\n", set, master.Port(), set)
	if err := os.WriteFile(s.conf, []byte(conf), 0o644); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s.startFree()
	t.Cleanup(s.stop)
	deadline := time.Now().Add(startTimeout)
	for {
		r, err := s.Do("SENTINEL", "get-master-addr-by-name", set)
		if err == nil && strings.Contains(r, fmt.Sprint(master.Port())) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: the sentinel does not name the master for %s: %q, %v", set, r, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
