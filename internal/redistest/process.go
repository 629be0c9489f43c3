package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// DieWithTest makes cmd, before it is started, end when the test process
// that starts it ends. A test binary killed by its -timeout panic or by
// Ctrl-C runs neither t.Cleanup nor its TestMain's teardown, and a process
// it started would live on, re-parented to init and holding its port.
// Only Linux can do this (the kernel sends the child SIGKILL); elsewhere
// DieWithTest does nothing.
func DieWithTest(cmd *exec.Cmd) { dieWithParent(cmd) }

// TempDir makes a directory for the files of this test process, named
// prefix-<pid>-<random> in the system's temporary directory, after
// removing those of that name whose process is gone: a test binary killed
// by its -timeout panic or by Ctrl-C runs no cleanup and would leave its
// directory for good. The caller removes the directory when done.
func TempDir(prefix string) (string, error) {
	removeStale(prefix)
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s-%d-", prefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("redistest: %w", err)
	}
	return dir, nil
}

// serverDir returns a directory for a server of test t, removed as the
// test ends, after the server stops (cleanups run last first). It is not
// t.TempDir, which a killed test run leaves for good.
func serverDir(t testing.TB) string {
	t.Helper()
	dir, err := TempDir("redistest")
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// removeStale removes the directories TempDir(prefix) made for processes
// that are gone. A process that cannot be told gone keeps its directory.
func removeStale(prefix string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"-*-*"))
	for _, dir := range dirs {
		rest := strings.TrimPrefix(filepath.Base(dir), prefix+"-")
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() || alive(pid) {
			continue
		}
		if fi, err := os.Lstat(dir); err == nil && fi.IsDir() {
			_ = os.RemoveAll(dir) // another user's fails, and stays
		}
	}
}

// alive reports whether process pid may still run: only a process the
// system says is gone is not alive. A pid taken since by another process
// counts as alive, and its directory waits for a later run.
func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false // Windows: no such process
	}
	defer p.Release()
	return !errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}
