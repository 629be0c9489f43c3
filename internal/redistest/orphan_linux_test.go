package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// orphanEnv, set, makes the test binary the process that
// TestServerEndsWithTestProcess kills: it starts a server with Main,
// prints the server's pid and directory, and waits to be killed.
const orphanEnv = "REDISTEST_ORPHAN"

func TestMain(m *testing.M) {
	if os.Getenv(orphanEnv) != "" {
		s, _, err := Main()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("%d %s\n", s.Pid(), s.dir)
		_, _ = io.Copy(io.Discard, os.Stdin) // until killed
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// A test binary killed by its -timeout panic or by Ctrl-C runs neither
// t.Cleanup nor its TestMain's teardown. Its servers end with it all the
// same, and the next test process to call Main removes the directory it
// left.
func TestServerEndsWithTestProcess(t *testing.T) {
	mustHave(t, "redis-server")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), orphanEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the test process printed no server: %v", err)
	}
	pidText, dir, _ := strings.Cut(strings.TrimSpace(line), " ")
	pid, err := strconv.Atoi(pidText)
	if err != nil || dir == "" {
		t.Fatalf("the test process printed %q, want a pid and a directory", line)
	}
	t.Cleanup(func() {
		// So that a failure leaves nothing either.
		if !gone(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = os.RemoveAll(dir)
	})

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Errorf("redis-server (pid %d) outlived the test process that started it: %v", pid, err)
	}

	_, stop, err := Main()
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Main left %s of a test process that is gone: %v", dir, err)
	}
}

// gone reports whether process pid has exited: it is not there, or it is
// a zombie its new parent has yet to reap.
func gone(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')') // comm may hold spaces
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// waitGone waits until process pid, which need not be a child, has
// exited, or timeout has passed: a pidfd becomes readable when its
// process exits (Linux 5.3 on).
func waitGone(pid int, timeout time.Duration) error {
	const sysPidfdOpen = 434 // the same number on every architecture
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno == syscall.ESRCH {
		return nil
	}
	if errno != 0 {
		return fmt.Errorf("pidfd_open: %w", errno)
	}
	if err := syscall.SetNonblock(int(fd), true); err != nil {
		syscall.Close(int(fd))
		return err
	}
	f := os.NewFile(fd, "pidfd")
	defer f.Close()
	if err := f.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Read(func(uintptr) bool { return gone(pid) })
}
