// Package sim replays traffic against sluice's algorithms, to show what a
// limit does: one column per second, what passed and what was refused.
//
// A simulation is instant and reproducible. It calls the same definitions
// the stores call ([rate.Limit.Step] over a state per key, time in integer
// microseconds) with the scenario's own time: no clock, no sleep, and a
// seeded random source where a scenario has random arrivals.
//
// # Where to start
//
// [Run] replays a [Scenario] and returns a [Result]; [WriteText],
// [WriteSVG] and encoding/json show it. [Builtin] and [Builtins] give the
// classic scenarios ("sluice sim --list" lists them):
//
//	boundary      twice the limit around a fixed-window boundary
//	calm-burst    a burst on a calm client's key: windows starve the client, buckets do not
//	flood         3 instances with their own counters let 3 times the limit through
//	token-bucket  a bucket of 5: what it passes, burst after burst
//	steady        a client at exactly the limit, and the sliding window that refuses it
//	clients       random arrivals on four keys: one noisy client spends only its own quota
//
// A Scenario is traffic ([Event] values, built by hand, with [Steady],
// [Burst] and [Poisson], or read by [ReadCSV]) and a limit, decided by
// each algorithm in each [Setup]: one limiter, instances behind a
// round-robin balancer each with its own counter, or instances sharing one
// counter. Its MaxDelay is the wait of a policy's max_delay, applied as
// the stores apply it: gcra and token_bucket hold a request past the
// burst until its unit refills, leaky_bucket bounds a turn, and a request
// a window refused waits once for its Retry-After, if within it, and is
// decided again, as sluice serve has it wait.
//
// # Output
//
// The JSON form of a Result, what "sluice sim --json" prints, is
//
//	{"scenario": "flood", "results": [
//	  {"algorithm": "fixed_window", "setup": "own-counters", "passed": 30, "refused": 70,
//	   "per_second": [{"t": 0, "passed": 10, "refused": 0}, …]},
//	  …]}
//
// with one entry in results per algorithm and setup, and one entry in
// per_second for every second of the scenario. Counts are requests, not
// units of cost, each in the second it arrived, whenever it went ahead.
// The algorithm and setup names are those of [rate.Algorithm.String] and
// [Setup.String]. Where not 0, a row and each second add held, how many
// of those passed were held back first (a leaky_bucket's turn, a unit
// within MaxDelay, a window's refusal waited out within it), and a row
// adds max_delay_ns, the longest of those
// waits, and over_capacity, the requests costing more than the capacity;
// a row of 2 to [MaxClients] clients adds clients, each one's totals
// (see [Row]).
//
// The text table and the SVG picture count by the same seconds: the
// table's cells read "passed (N held) ✕refused", the picture draws the
// held requests as the paler top of a column's green. The picture has one
// row per result and one column per second, and reads without a legend;
// see [WriteSVG]. Both outputs are safe to serve
// from an HTTP handler: Run is bounded by [MaxEvents] and [MaxSeconds],
// and everything written is escaped.
//
// # Files
//
//   - scenario.go: Scenario, Event, Setup, the bounds, validation, and
//     ParseNames, the one reading of a user's list of algorithms or
//     setups that the command line and the dashboard share.
//   - run.go: Run, Result, Row and its JSON form, the replay.
//   - traffic.go: the traffic patterns (Steady, Burst, Poisson).
//   - builtin.go: the built-in scenarios, their descriptions, and which
//     settings of a run change the figures those give ([Changes],
//     [NoteChanges]).
//   - csv.go: ReadCSV, traffic from a file.
//   - text.go, svg.go: the terminal table and the picture.
package sim
