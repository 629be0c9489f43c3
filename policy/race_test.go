//go:build race

package policy

// raceEnabled is true under the race detector, whose sync.Pool drops
// some of what is put back: allocation counts then measure the detector.
const raceEnabled = true
