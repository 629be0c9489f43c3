package rate

import "fmt"

// Algorithm names a rate limiting algorithm. The zero value is GCRA, the
// default everywhere a limit does not name one.
//
// The names are the same in config files, on the command line, in JSON and
// in metric labels: see [Algorithm.String].
type Algorithm uint8

// The algorithms. See the package documentation for which to pick when.
const (
	// GCRA is the generic cell rate algorithm: a token bucket kept as one
	// number, the theoretical arrival time. It admits exactly what
	// TokenBucket admits.
	GCRA Algorithm = iota
	// TokenBucket refills Count tokens per Period up to Burst tokens; a
	// request takes cost tokens.
	TokenBucket
	// LeakyBucket shapes traffic: it admits requests into a queue of Burst
	// places drained at Count per Period, and tells each request the Delay
	// it must wait for its turn. A request waits for the first of its
	// places only, so with a MaxDelay a request of cost c can pass where
	// Decision.Remaining, which counts unit requests, is below c.
	LeakyBucket
	// FixedWindow counts requests in windows of Period aligned to the Unix
	// epoch (so a day is a UTC day), or in UTC calendar months.
	FixedWindow
	// SlidingWindow estimates the count over the last Period from the
	// current window's count and the previous window's count weighted by
	// how much of it still overlaps.
	SlidingWindow
	// SlidingLog keeps the time of every admitted request in the last
	// Period: exact, and memory proportional to Count.
	SlidingLog

	numAlgorithms = iota
)

var algorithmNames = [numAlgorithms]string{
	GCRA:          "gcra",
	TokenBucket:   "token_bucket",
	LeakyBucket:   "leaky_bucket",
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	SlidingLog:    "sliding_log",
}

// Algorithms lists every algorithm, in a stable order.
func Algorithms() []Algorithm {
	return []Algorithm{FixedWindow, SlidingLog, SlidingWindow, TokenBucket, LeakyBucket, GCRA}
}

// String returns the algorithm's name: gcra, token_bucket, leaky_bucket,
// fixed_window, sliding_window or sliding_log.
func (a Algorithm) String() string {
	if a.Valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the algorithm with the given name.
func ParseAlgorithm(name string) (Algorithm, error) {
	for a, n := range algorithmNames {
		if n == name {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want one of fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra)", name)
}

// MarshalText implements [encoding.TextMarshaler].
func (a Algorithm) MarshalText() ([]byte, error) {
	if int(a) >= len(algorithmNames) {
		return nil, fmt.Errorf("invalid algorithm %d", uint8(a))
	}
	return []byte(algorithmNames[a]), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// Valid reports whether a names one of the algorithms.
func (a Algorithm) Valid() bool { return int(a) < numAlgorithms }

// HasBurst reports whether the algorithm has a burst, a capacity distinct
// from its count per period: gcra, token_bucket and leaky_bucket do.
func (a Algorithm) HasBurst() bool {
	return a == GCRA || a == TokenBucket || a == LeakyBucket
}
