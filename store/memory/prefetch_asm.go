//go:build amd64 || arm64

package memory

// prefetch asks the CPU to bring the cache lines at a and b into its
// cache, and returns without waiting for them. It never faults: any
// address will do, and a stale one costs only the wasted fetch.
//
//go:noescape
func prefetch(a, b uintptr)
