//go:build race

package rate

// raceEnabled is true under the race detector, which slows the exact model
// down tenfold and has nothing to find in single-goroutine tests.
const raceEnabled = true
