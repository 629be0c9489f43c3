package server

import "syscall"

// Windows Sockets error codes (winerror.h), which package syscall does
// not name.
const (
	wsaeNetDown      syscall.Errno = 10050
	wsaeNetUnreach   syscall.Errno = 10051
	wsaeAddrNotAvail syscall.Errno = 10049
	wsaeTimedOut     syscall.Errno = 10060
	wsaeConnRefused  syscall.Errno = 10061
	wsaeHostDown     syscall.Errno = 10064
	wsaeHostUnreach  syscall.Errno = 10065
)

// unreachableErrnos are the errors of a dial that found no Redis there
// (see unreachable). Windows reports them as its own WSA codes, which
// errors.Is does not match to syscall.ECONNREFUSED and the others, made-up
// numbers there: a Redis not yet started stopped sluice serve from
// starting, where elsewhere it starts and serves by on_store_error.
var unreachableErrnos = []syscall.Errno{wsaeConnRefused, wsaeHostUnreach, wsaeNetUnreach,
	wsaeHostDown, wsaeNetDown, wsaeTimedOut, wsaeAddrNotAvail, syscall.ENOENT}

// errConnReset is a connection reset by its peer, as tlsHint reads it.
const errConnReset = syscall.WSAECONNRESET
