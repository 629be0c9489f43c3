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
//   - store.go: [Store], [Options], [Stats]; Decide, DecideKey, DecideKeyInto and
//     DecideAll run the steps of package rate under a shard's mutex.
//   - table.go: a shard's table: open addressing in Robin Hood order over
//     entries of one cache line each, which hold the key (up to 26 bytes;
//     longer keys go to an arena), its hash and its state, and no
//     pointer; expiry, eviction and resizing.
//   - hash.go: the keys' hash, seeded per store.
//   - clock.go: how the store reads the system clock: one monotonic read
//     per decision, placed on the wall clock read once a second (every
//     millisecond while it slews a step back).
//   - prefetch_*.s: a decision asks the CPU for the key's table line and
//     its shard's lock while it reads the clock, so that among many keys
//     it does not wait for them one after the other under the lock.
//
// Memory: an idle key costs about 100 bytes, its 64-byte line in a table
// kept 60% to 75% full while keys come, key included when it is up to 26
// bytes long (a longer key adds its bytes to the arena). When keys go, a
// table shrinks once it is less than a quarter full, so after a burst a
// key may cost up to 256 bytes. The garbage collector never scans the
// tables. Keys whose state is fresh cost nothing: they are deleted when a
// decision leaves them fresh, and reclaimed a few at a time once time has
// made them fresh.
//
// A sliding_log key holds more, beyond those 100 bytes: a timestamp of 8
// bytes for every unit it admitted in the last period, in an array that
// grows by doubling up to the limit's count and, once full and sliding,
// keeps an eighth more room so as not to be copied at every request:
// about 9 to 9.5 bytes a unit of the count, the array rounded up to Go's
// allocation sizes. MaxKeys bounds the keys, not their bytes: a
// sliding_log of 1000/h per client address, over a million clients who
// each use their 1000, holds 8 to 10 GB of timestamps, where a million
// keys of any other algorithm take about 100 MB. See [Store] for
// what eviction forgets.
//
// Time is read from Options.Clock once per decision, in microseconds; tests
// pin it with a fake clock (package ratetest).
//
// BENCHMARKS.md, at the repository root, has what a decision and an idle
// key cost, next to other Go rate limiters.
package memory
