//go:build !race

package rate

const raceEnabled = false
