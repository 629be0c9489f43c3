//go:build !windows

package server

import "syscall"

// unreachableErrnos are the errors of a dial that found no Redis there
// (see unreachable).
var unreachableErrnos = []syscall.Errno{syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
	syscall.EHOSTDOWN, syscall.ENETDOWN, syscall.ETIMEDOUT, syscall.EADDRNOTAVAIL, syscall.ENOENT}

// errConnReset is a connection reset by its peer, as tlsHint reads it:
// syscall.ECONNRESET itself outside Windows.
const errConnReset = syscall.ECONNRESET
