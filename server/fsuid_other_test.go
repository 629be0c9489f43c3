//go:build !linux

package server

import "testing"

// asNobody is Linux's alone (setfsuid): elsewhere a test run as root
// cannot make a file unreadable to itself, and skips.
func asNobody(t *testing.T, f func()) {
	t.Helper()
	t.Skip("reading as nobody needs Linux's setfsuid")
}
