//go:build !windows

package redistest

import (
	"os"
	"syscall"
)

// sigStop and sigCont pause and resume a server (Server.Pause).
var sigStop, sigCont os.Signal = syscall.SIGSTOP, syscall.SIGCONT
