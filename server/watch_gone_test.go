package server

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A file that goes is a state of the files like a content: gone at two
// polls in a row, one poll apart, it is a change, the caller's reload of
// it fails, and that happens once however long the file stays gone. Its
// return, with the content it had or another, is a change again. Gone at
// one poll only, as a file a writer replaces by a rename may be, it is
// nothing: the content that follows settles as any does.
func TestFileWatchGone(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sluice.yaml")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(content string) func() {
		return func() { must(os.WriteFile(p, []byte(content), 0o644)) }
	}
	remove := func() { must(os.Remove(p)) }
	away := func() { must(os.Rename(p, p+".old")) }
	back := func() { must(os.Rename(p+".old", p)) }
	dangle := func() { must(os.Symlink(filepath.Join(dir, "nothing"), p)) }
	poll := func() {}
	w := &fileWatch{paths: []string{p}}
	for i, step := range []struct {
		what string
		do   func()
		want bool // changed reports a change
	}{
		{"the first read", write("a"), false},
		{"deleted: gone at one poll", remove, false},
		{"gone at the second poll: a change", poll, true},
		{"still gone", poll, false},
		{"still gone", poll, false},
		{"back with the same content", write("a"), false},
		{"back at the second poll: a change", poll, true},
		{"unchanged", poll, false},
		{"moved away", away, false},
		{"moved away, at the second poll", poll, true},
		{"still away", poll, false},
		{"moved back", back, false},
		{"moved back, at the second poll", poll, true},
		{"deleted, to be replaced", remove, false},
		{"replaced after one poll without it", write("b"), false},
		{"the new content settled: one change", poll, true},
		{"unchanged", poll, false},
		{"replaced by a link to nothing", func() { remove(); dangle() }, false},
		{"a link to nothing, at the second poll", poll, true},
		{"the link goes", remove, false},
		{"still gone, the link or not", poll, false},
		{"back with new content", write("c"), false},
		{"back, at the second poll", poll, true},
	} {
		step.do()
		if got := w.changed(); got != step.want {
			t.Fatalf("step %d, %s: changed() = %v, want %v", i, step.what, got, step.want)
		}
	}
}

// A file that cannot be read is as one that is gone. Its mode keeps
// anyone but root from reading it; root reads it whatever its mode, so
// run as root (as CI is), the test reads the files as nobody instead:
// it polls on a thread of its own whose filesystem user is nobody's,
// which drops the capabilities that let root pass over a mode.
func TestFileWatchUnreadable(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(p, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	poll := func(f func()) { f() }
	if os.Geteuid() == 0 {
		// nobody must reach the file for its mode to be what stops the
		// read: rls.Files stats it first, and a stat that fails is
		// another branch of hash than the read that does.
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		poll = func(f func()) {
			t.Helper()
			asNobody(t, f)
		}
	}
	w := &fileWatch{paths: []string{p}}
	poll(func() { w.changed() })
	if err := os.Chmod(p, 0); err != nil {
		t.Fatal(err)
	}
	poll(func() {
		// The branch under test: the file is there, and its read fails.
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the unreadable file cannot be reached: %v", err)
		}
		if _, err := os.ReadFile(p); !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("reading the unreadable file: %v, want a permission error", err)
		}
		settle(t, w, "the file made unreadable")
	})
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	poll(func() { settle(t, w, "the file readable again") })
}

// A directory is gone when it is, and when it holds no file the Envoy
// loader reads (it refuses to load none); a file gone from it while
// others stay is a change of its content.
func TestFileWatchDirectoryGone(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "envoy")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(dir, 0o755))
	must(os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("domain: b\n"), 0o644))
	w := &fileWatch{paths: []string{dir}}
	w.changed()
	must(os.Rename(dir, dir+".old"))
	settle(t, w, "the directory moved away")
	must(os.Rename(dir+".old", dir))
	settle(t, w, "the directory moved back")
	must(os.Remove(filepath.Join(dir, "b.yaml")))
	settle(t, w, "one file of two deleted")
	must(os.Remove(filepath.Join(dir, "a.yaml")))
	settle(t, w, "the last file deleted")
	must(os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\n"), 0o644))
	settle(t, w, "a file back")
}

// Once the files have settled on being gone, they still are when the
// caller's load is done: the load failed because they are gone, which is
// the failure to count, not a write caught half-way.
func TestFileWatchUnchangedGone(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(p, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := &fileWatch{paths: []string{p}}
	w.changed()
	os.Remove(p)
	settle(t, w, "the file deleted")
	if !w.unchanged() {
		t.Fatal("files settled on being gone, still gone, reported changed")
	}
	// Back before the load of the gone file is done: that load is dropped,
	// and the content, settled, is a change to act on.
	os.WriteFile(p, []byte("a"), 0o644)
	if w.unchanged() {
		t.Fatal("a file back reported unchanged")
	}
	settle(t, w, "the file back")
}

// A configuration file deleted or moved away while it serves is a bad
// file: the watcher's reload fails as Reload's would, logged with why and
// counted once, however long the file stays gone, and the previous
// configuration keeps serving; once the file is back, whatever its
// content, it reloads.
func TestReloadWhenTheFileIsGone(t *testing.T) {
	up := newUpstream(t)
	ts := startServer(t, limit3, Options{Upstream: up.URL, WatchInterval: 5 * time.Millisecond})
	p := ts.o.ConfigFile
	reloads := func(result, n string) func() bool {
		return func() bool {
			return strings.HasSuffix(ts.metric(`sluice_config_reloads_total{result="`+result+`"}`), " "+n)
		}
	}
	lastReload := func(when, want string) {
		t.Helper()
		if got := ts.metric("sluice_config_last_reload_successful "); got != "sluice_config_last_reload_successful "+want {
			t.Errorf("%s: %q, want %s", when, got, want)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, tt := range []struct {
		what       string
		gone, back func()
		serving    []int // statuses of requests while it is gone
	}{
		{"deleted", func() { must(os.Remove(p)) }, func() { writeFile(t, ts.dir, "sluice.yaml", limit3) }, []int{200, 200, 200, 429}},
		{"moved away", func() { must(os.Rename(p, p+".old")) }, func() { must(os.Rename(p+".old", p)) }, []int{429}},
	} {
		n := string(rune('1' + i))
		tt.gone()
		eventually(t, tt.what+": the failed reload to be counted", reloads("failure", n))
		lastReload(tt.what, "0")
		var got []int
		for range tt.serving {
			got = append(got, ts.status("/"))
		}
		if !slices.Equal(got, tt.serving) {
			t.Errorf("%s: %v, want %v: the previous 3/m serving", tt.what, got, tt.serving)
		}
		tt.back()
		eventually(t, tt.what+": the file back to be reloaded", reloads("success", n))
		lastReload(tt.what+", then back", "1")
		if ts.metric(`sluice_config_reloads_total{result="failure"} `+n) == "" {
			t.Errorf("%s: the failure counted more than once: %s", tt.what, ts.metric(`sluice_config_reloads_total{result="failure"}`))
		}
	}
	logs := ts.logs.String()
	if got := strings.Count(logs, "reload failed"); got != 2 {
		t.Errorf("%d reload failures logged, want 2, one per disappearance:\n%s", got, logs)
	}
	if !strings.Contains(logs, p) || !strings.Contains(logs, "no such file or directory") {
		t.Errorf("the failure is not logged with the file and why:\n%s", logs)
	}
}

// The Envoy configuration directories are watched alike: a directory gone
// fails its reload, once, and the previous limits keep serving until it
// is back.
func TestEnvoyReloadWhenTheDirectoryIsGone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "envoy")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "edge.yaml", "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	ts := startServer(t, "", Options{EnvoyConfigs: []string{dir}, WatchInterval: 5 * time.Millisecond})
	c, _ := envoyClient(t, ts)
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the failed reload to be counted", func() bool {
		return strings.HasSuffix(ts.metric(`sluice_config_reloads_total{result="failure"}`), " 1")
	})
	if r := ask(t, c, "edge", "k", "v"); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Fatalf("with the directory gone: %v, want the previous limits", r)
	}
	if err := os.Rename(dir+".old", dir); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the directory back to be reloaded", func() bool {
		return strings.HasSuffix(ts.metric(`sluice_config_reloads_total{result="success"}`), " 1")
	})
	if m := ts.metric(`sluice_config_reloads_total{result="failure"}`); !strings.HasSuffix(m, " 1") {
		t.Errorf("the failure counted more than once: %s", m)
	}
}

// The TLS files are watched alike: a certificate gone fails the TLS
// reload, once, and the previous certificate keeps serving.
func TestTLSReloadWhenAFileIsGone(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	crt, key := ca.serverFiles(dir, 1)
	ts := startServer(t, checkPolicy, Options{TLSCert: crt, TLSKey: key, WatchInterval: 5 * time.Millisecond})
	if err := os.Rename(crt, crt+".old"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the failed TLS reload to be counted", func() bool {
		return strings.HasSuffix(ts.metric(`sluice_tls_reloads_total{result="failure"}`), " 1")
	})
	if got := serial(t, ts.Addrs().Check, ca.pool); got != "1" {
		t.Errorf("with the certificate gone: serial %s, want the previous 1", got)
	}
	if err := os.Rename(crt+".old", crt); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the certificate back to be reloaded", func() bool {
		return strings.HasSuffix(ts.metric(`sluice_tls_reloads_total{result="success"}`), " 1")
	})
	if m := ts.metric(`sluice_tls_reloads_total{result="failure"}`); !strings.HasSuffix(m, " 1") {
		t.Errorf("the failure counted more than once: %s", m)
	}
}
