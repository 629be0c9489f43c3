// Package memory is the in-process store: every key's state lives in this
// process's memory. It is the default store of sluice.Limiter, and the
// one to use for a single instance, or for the local fallback of a shared
// store.
//
// Create one with [New] and use it as a sluice.Store:
//
//	s := memory.New(memory.Options{})             // system clock, DefaultMaxKeys
//	d, err := s.Decide(ctx, rate.Request{Key: "alice", Limit: lim, Cost: 1})
//
// The map of the package:
//
//   - store.go: [Store], [Options], [Stats]; Decide and DecideAll run the
//     steps of package rate under a shard's mutex.
//   - table.go: a shard's table: a dense slice of entries (so the sweeper
//     and eviction can walk and sample them) indexed by an open-addressing
//     slot table; expiry, eviction and shrinking.
//   - clock.go: how the store reads the system clock: one monotonic read
//     per decision, placed on the wall clock read once a second.
//
// Memory: an idle key costs its key string plus about 80 bytes (a 56-byte
// entry, its slot, and the slack of the growing slices); a sliding_log key
// also holds its timestamps. Keys whose state is fresh cost nothing: they
// are deleted when a decision leaves them fresh, and reclaimed a few at a
// time once time has made them fresh. MaxKeys bounds the total; see [Store]
// for what eviction forgets.
//
// Time is read from Options.Clock once per decision, in microseconds; tests
// pin it with a fake clock (package ratetest).
//
// BENCHMARKS.md, at the repository root, has what a decision and an idle
// key cost, next to other Go rate limiters.
package memory
