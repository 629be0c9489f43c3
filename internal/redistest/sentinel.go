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
// returns once the sentinel names master's address for set. For a master
// started with StartTLS, the sentinel serves TLS with the master's files,
// requires client certificates as the master does, and reaches the master
// over TLS, presenting its client certificate (set it: the master
// requires one); the harness connects to it as to the master.
func StartSentinel(t testing.TB, master *Server, set string) *Server {
	t.Helper()
	mustHave(t, "redis-server")
	s := &Server{t: t, dir: serverDir(t), tlsFiles: master.tlsFiles, tlsClient: master.tlsClient}
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
