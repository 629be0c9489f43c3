//go:build linux

package redistest

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel send the child SIGKILL when its parent
// ends. Strictly, when the thread that started it ends (go.dev/issue/27505):
// a Go program's threads end before the program only when a goroutine
// returns while locked to one by runtime.LockOSThread. The tests that start
// processes do not; were one to, the child would be killed early, failing
// a test, rather than left behind.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
