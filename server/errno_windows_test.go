package server

import (
	"net"
	"os"
	"syscall"
	"testing"
)

// A refused connect on Windows (WSAECONNREFUSED, 10061, from connectex)
// is a Redis not there yet: sluice serve starts and serves by
// on_store_error, as elsewhere, rather than stop.
func TestUnreachableWindows(t *testing.T) {
	for _, no := range []syscall.Errno{10061, 10060, 10065, 10051} {
		err := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connectex", no)}
		if !unreachable(err) {
			t.Errorf("a dial failing with errno %d: not unreachable", int(no))
		}
	}
}
