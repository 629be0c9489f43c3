package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFileWatch(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The layout of a Kubernetes ConfigMap volume: config.yaml → ..data/config.yaml,
	// ..data → ..v1; an update writes ..v2 and swaps ..data.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(dir, "..v1"), 0o755))
	write("..v1/config.yaml", "a: 1\n")
	must(os.Symlink("..v1", filepath.Join(dir, "..data")))
	must(os.Symlink("..data/config.yaml", filepath.Join(dir, "config.yaml")))

	w := &fileWatch{paths: []string{filepath.Join(dir, "config.yaml")}}
	if w.changed() {
		t.Fatal("first read reported as a change")
	}
	if w.changed() {
		t.Fatal("unchanged file reported as a change")
	}
	write("..v1/config.yaml", "a: 1\n") // same bytes rewritten
	if w.changed() {
		t.Fatal("rewrite of the same bytes reported as a change")
	}
	// The symlink swap.
	must(os.Mkdir(filepath.Join(dir, "..v2"), 0o755))
	write("..v2/config.yaml", "a: 2\n")
	must(os.Symlink("..v2", filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	settle(t, w, "symlink swap")
	// A file gone at one poll only is no change (TestFileWatchGone has
	// more); the content that follows it settles as any does.
	must(os.Remove(filepath.Join(dir, "..data")))
	if w.changed() {
		t.Fatal("missing file reported as a change at its first poll")
	}
	must(os.Symlink("..v1", filepath.Join(dir, "..data")))
	settle(t, w, "content back to v1")
}

// A directory counts by the files the Envoy loader reads (rls.ConfigFiles):
// every file, whatever its name, in it and under it, but for names
// starting with a dot. A new one, or a change in one, is a change.
func TestFileWatchDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\n")
	w := &fileWatch{paths: []string{dir}}
	if w.changed() {
		t.Fatal("first read reported as a change")
	}
	write(".hidden.yaml", "domain: h\n")
	write(".git/config", "not configuration")
	// Two polls: a change would count at the second.
	if first, second := w.changed(), w.changed(); first || second {
		t.Fatal("a file the loader ignores counted as a change")
	}
	write("b.yml", "domain: b\n")
	settle(t, w, "a new .yml file")
	write("ratelimit", "domain: c\n")
	settle(t, w, "a new file with no extension")
	write("sub/d.conf", "domain: d\n")
	settle(t, w, "a new file in a subdirectory")
	write("a.yaml", "domain: a2\n")
	settle(t, w, "a changed .yaml file")
}

// settle checks that w reports a change on the second poll after it, once
// the new content has been read twice, and not on the first.
func settle(t *testing.T, w *fileWatch, what string) {
	t.Helper()
	if w.changed() {
		t.Fatalf("%s: reported at the first poll, before it settled", what)
	}
	if !w.changed() {
		t.Fatalf("%s: not seen at the second poll", what)
	}
	if w.changed() {
		t.Fatalf("%s: reported twice", what)
	}
}

// A file caught half-written is not reloaded: only content read the same
// at two polls in a row is a change, and content that goes back to what
// is in force before it settles is none.
func TestFileWatchWaitsForTheWriteToEnd(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sluice.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const whole = "policies:\n  - name: a\n    limits: [\"1/s\"]\n  - name: b\n    limits: [\"2/s\"]\n"
	write(whole)
	w := &fileWatch{paths: []string{p}}
	w.changed()
	write(whole[:len(whole)/2]) // a writer half-way through
	if w.changed() {
		t.Fatal("a half-written file reported as a change")
	}
	write(whole + "  - name: c\n    limits: [\"3/s\"]\n") // the write ends
	if w.changed() {
		t.Fatal("content different from the last poll's reported as a change")
	}
	if !w.changed() {
		t.Fatal("the settled content not seen")
	}
	// Changed and changed back between polls: nothing to reload.
	write("policies: []\n")
	if w.changed() {
		t.Fatal("a change reported at its first poll")
	}
	write(whole + "  - name: c\n    limits: [\"3/s\"]\n")
	for range 2 {
		if w.changed() {
			t.Fatal("content back to what is in force reported as a change")
		}
	}
}

// A change written after New loaded the file and before Run started
// watching it is still seen: the watch starts from the content New
// loaded.
func TestWatchSeesAChangeBeforeRun(t *testing.T) {
	up := newUpstream(t)
	ts := newServer(t, limit3, Options{Upstream: up.URL, WatchInterval: 5 * time.Millisecond})
	writeFile(t, ts.dir, "sluice.yaml", strings.Replace(limit3, "3/m", "1/m", 1))
	ts.run()
	eventually(t, "the change made before Run to be reloaded", func() bool {
		return strings.HasSuffix(ts.metric(`sluice_config_reloads_total{result="success"}`), " 1")
	})
	if got := []int{ts.status("/"), ts.status("/")}; got[1] != 429 {
		t.Fatalf("after the reload: %v, want the new 1/m", got)
	}
}

// unchanged tells whether the files still hold the content changed last
// settled on.
func TestFileWatchUnchanged(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(p, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := &fileWatch{paths: []string{p}}
	w.changed()
	if !w.unchanged() {
		t.Fatal("the content in force reported changed")
	}
	os.WriteFile(p, []byte("ab"), 0o644)
	if w.unchanged() {
		t.Fatal("new content reported unchanged")
	}
	w.changed()
	w.changed() // settled: in force now
	if !w.unchanged() {
		t.Fatal("the settled content reported changed")
	}
	os.Remove(p)
	if w.unchanged() {
		t.Fatal("a file gone reported unchanged")
	}
	// The load that found the files changed was dropped: the content it
	// meant to load is not in force, and when the files settle on it
	// again, that is a change to act on.
	os.WriteFile(p, []byte("ab"), 0o644)
	if w.changed() || !w.changed() {
		t.Fatal("the content of a dropped load, settled again, not reported as a change")
	}
}

// A configuration the watcher loads serves only if the files still hold,
// once it is loaded, the content the watcher saw settle: a write that
// began meanwhile may have been caught half-way. Such a load is dropped,
// neither a success nor a failure, and the previous configuration keeps
// serving.
func TestReloadDropsALoadTheFilesChangedUnder(t *testing.T) {
	up := newUpstream(t)
	ts := newServer(t, limit3, Options{Upstream: up.URL})
	ts.run()
	writeFile(t, ts.dir, "sluice.yaml", strings.Replace(limit3, "3/m", "1/m", 1))
	if err := ts.reloadConfig(func() bool { return false }); err != nil {
		t.Fatalf("a load the files changed under: %v, want no error", err)
	}
	if got := []int{ts.status("/"), ts.status("/")}; got[1] != 200 {
		t.Fatalf("after a dropped load: %v, want the previous 3/m serving", got)
	}
	if m := ts.metric(`sluice_config_reloads_total{result="success"}`); !strings.HasSuffix(m, " 0") {
		t.Errorf("a dropped load counted: %s", m)
	}
	if m := ts.metric(`sluice_config_reloads_total{result="failure"}`); !strings.HasSuffix(m, " 0") {
		t.Errorf("a dropped load counted: %s", m)
	}
	// Caught half written, a file may not load at all: no failure either.
	writeFile(t, ts.dir, "sluice.yaml", "policies: [")
	if err := ts.reloadConfig(func() bool { return false }); err != nil {
		t.Fatalf("a load of a half-written file: %v, want no error", err)
	}
	if m := ts.metric(`sluice_config_reloads_total{result="failure"}`); !strings.HasSuffix(m, " 0") {
		t.Errorf("a half-written file counted as a failure: %s", m)
	}
	writeFile(t, ts.dir, "sluice.yaml", strings.Replace(limit3, "3/m", "1/m", 1))
	if err := ts.reloadConfig(func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	if got := []int{ts.status("/"), ts.status("/")}; got[0] != 200 || got[1] != 429 {
		t.Fatalf("after the load: %v, want the new 1/m, counted afresh", got)
	}
	if m := ts.metric(`sluice_config_reloads_total{result="success"}`); !strings.HasSuffix(m, " 1") {
		t.Errorf("the load not counted: %s", m)
	}
}
