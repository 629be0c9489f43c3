package server

import (
	"runtime"
	"syscall"
	"testing"
)

// asNobody runs f on a thread of its own whose filesystem user is
// nobody's, which drops the capabilities that let root read a file
// whatever its mode.
func asNobody(t *testing.T, f func()) {
	t.Helper()
	runtime.LockOSThread()
	if err := syscall.Setfsuid(65534); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer func() {
		// The thread goes back to the others only as root; otherwise it
		// stays locked and ends with the test.
		if err := syscall.Setfsuid(0); err == nil && fsuidIsRoot() {
			runtime.UnlockOSThread()
		}
	}()
	f()
}

// fsuidIsRoot reports whether the calling thread's filesystem user is
// root: setfsuid reports no error, only the previous filesystem user,
// which an invalid one (-1) asks for without changing it.
func fsuidIsRoot() bool {
	prev, _, _ := syscall.RawSyscall(syscall.SYS_SETFSUID, ^uintptr(0), 0, 0)
	return prev == 0
}
