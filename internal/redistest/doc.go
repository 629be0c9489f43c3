// Package redistest starts real redis-server processes for tests: a single
// server, or a Redis Cluster of several masters (and replicas), each on
// free loopback ports, in a temporary directory, without persistence. Tests that need
// Redis call [Start] or [StartCluster]; cleanup is registered with
// testing.TB.
//
// A server can be killed and restarted on the same port, or paused and
// resumed, to test what a client does when Redis goes away; a cluster can
// move a slot between masters or promote a replica under a client.
//
// There is no skipping: when redis-server is not installed the test fails
// and says to run `make deps`.
//
// # Files
//
//   - redistest.go: Server (Start, StartTLS, Kill,
//     Restart, Pause, Resume, Do, Info, ScriptStats, Log) and a minimal RESP
//     client, so the harness needs no Redis library.
//   - cluster.go: Cluster (StartCluster, StartClusterWithReplicas, Owner,
//     SlotOwner), and changing it under a client: slot migration
//     (BeginMigration, MigrateKey, MigrateKeys, EndMigration) and
//     failover (Failover, WaitMaster, WaitOK).
//   - process.go: what keeps a killed test run from leaving processes and
//     directories behind (DieWithTest, TempDir), for the sluice binary's
//     tests too; process_linux.go has the parent-death signal.
package redistest
