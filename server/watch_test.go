package server

import (
	"os"
	"path/filepath"
	"testing"
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
	if !w.changed() {
		t.Fatal("symlink swap not seen")
	}
	// A file that disappears is not a change; its return with new content is.
	must(os.Remove(filepath.Join(dir, "..data")))
	if w.changed() {
		t.Fatal("missing file reported as a change")
	}
	must(os.Symlink("..v1", filepath.Join(dir, "..data")))
	if !w.changed() {
		t.Fatal("content back to v1 not seen")
	}
}

// A directory counts by its .yaml and .yml files: a new one, or a change
// in one, is a change; other files are not.
func TestFileWatchDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\n")
	w := &fileWatch{paths: []string{dir}}
	if w.changed() {
		t.Fatal("first read reported as a change")
	}
	write("notes.txt", "not configuration")
	write(".hidden.yaml", "domain: h\n")
	if w.changed() {
		t.Fatal("a file the loader ignores counted as a change")
	}
	write("b.yml", "domain: b\n")
	if !w.changed() {
		t.Fatal("a new .yml file not seen")
	}
	write("a.yaml", "domain: a2\n")
	if !w.changed() {
		t.Fatal("a changed .yaml file not seen")
	}
}
