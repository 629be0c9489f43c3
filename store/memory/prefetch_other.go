//go:build !amd64 && !arm64

package memory

// prefetch does nothing where sluice has no prefetch instruction for the
// CPU: the decision then waits for the lines under the shard's lock.
func prefetch(a, b uintptr) {}
