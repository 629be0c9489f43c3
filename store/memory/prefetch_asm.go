//go:build amd64 || arm64

package memory

// prefetch asks the CPU to bring the cache line at addr into its cache,
// and returns without waiting for it. It never faults: any address will do,
// a stale one costs only the wasted fetch.
//
//go:noescape
func prefetch(addr uintptr)
