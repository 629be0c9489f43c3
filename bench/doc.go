// Package bench compares sluice with other Go rate limiters: one hot key,
// a million keys and the memory an idle key costs (bench_test.go), HTTP
// middleware (middleware_test.go), and Redis round trips against one local
// redis-server (redis_test.go). It is a module of its own so that the
// peers it measures never enter sluice's dependencies. BENCHMARKS.md at
// the repository root has the results and the commands that produced them.
//
// TestMatchesReference (reference_test.go) sends Envoy's reference rate
// limit service and sluice serve the same 200 ShouldRateLimit calls, with
// the same configuration, and checks that they answer alike, field by
// field: the claim that switching from the reference changes nothing. It
// builds and starts both, and waits for a minute with room for the calls
// (up to 40s):
//
//	cd bench && go test -run TestMatchesReference -v .
package bench
