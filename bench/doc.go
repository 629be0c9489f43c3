// Package bench compares sluice with other Go rate limiters: one hot key,
// a million keys and the memory an idle key costs (bench_test.go), HTTP
// middleware (middleware_test.go), and Redis round trips against one local
// redis-server (redis_test.go). It is a module of its own so that the
// peers it measures never enter sluice's dependencies. BENCHMARKS.md at
// the repository root has the results and the commands that produced them.
package bench
