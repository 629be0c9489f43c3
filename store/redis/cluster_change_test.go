package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// What the store does while a Redis Cluster changes under it: a slot
// migrating between masters, a replica taking over from its master, a
// master restarted empty. Decisions take Redis's TIME throughout; the
// limits are large enough that nothing is refused, so that every decision
// made is one unit consumed, and a key's Remaining at the end shows
// whether any was counted twice.

// huge admits everything the tests send. Its windows are 1000 hours long:
// one ends every six weeks, hardly ever during a test.
var huge = rate.Limit{Algorithm: rate.FixedWindow, Count: 1 << 40, Period: 1000 * time.Hour}

// slotKeys returns n request keys made from format with a number, whose
// Redis keys under s share the slot of the first.
func slotKeys(t *testing.T, s *redis.Store, format string, n int) []string {
	t.Helper()
	var keys []string
	var sl uint16
	for i := 0; len(keys) < n; i++ {
		if i > 1<<24 {
			t.Fatalf("only %d keys like %q in one slot", len(keys), format)
		}
		k := fmt.Sprintf(format, i)
		if len(keys) == 0 {
			sl = redis.Slot(s.Key(k))
		} else if redis.Slot(s.Key(k)) != sl {
			continue
		}
		keys = append(keys, k)
	}
	return keys
}

// moveOf returns the slot of request key k, the master that holds it, and
// another master to move it to.
func moveOf(t *testing.T, c *redistest.Cluster, s *redis.Store, k string) (slot int, from, to *redistest.Server) {
	t.Helper()
	slot = int(redis.Slot(s.Key(k)))
	from, err := c.SlotOwner(slot)
	if err != nil {
		t.Fatal(err)
	}
	to = c.Nodes[0]
	if to == from {
		to = c.Nodes[1]
	}
	return slot, from, to
}

// clusterLoad decides requests from many goroutines until stopped, and
// counts what was decided per key and what failed.
type clusterLoad struct {
	t       *testing.T
	s       *redis.Store
	done    atomic.Int64 // decisions made
	failed  atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	used    map[string]int64 // units consumed per request key
	maybe   map[string]int64 // units that failed calls may have consumed
	errs    map[string]int   // failures per first line of the error
	example map[string]error
}

// startLoad starts callers goroutines, each deciding requests that pick
// returns, with a deadline of timeout each.
func startLoad(t *testing.T, s *redis.Store, callers int, timeout time.Duration, pick func(*rand.Rand) []rate.Request) *clusterLoad {
	l := &clusterLoad{t: t, s: s, stop: make(chan struct{}), used: map[string]int64{}, maybe: map[string]int64{}, errs: map[string]int{}, example: map[string]error{}}
	for c := range callers {
		l.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			out := make([]rate.Decision, 4)
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				reqs := pick(rng)
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				d, err := s.DecideAll(ctx, reqs, out)
				cancel()
				l.mu.Lock()
				if err != nil {
					l.failed.Add(1)
					kind := err.Error()
					if i := strings.IndexAny(kind, "\n"); i >= 0 {
						kind = kind[:i]
					}
					l.errs[kind]++
					l.example[kind] = err
					for _, r := range reqs {
						l.maybe[r.Key] += r.Cost
					}
				} else {
					if !d.Allowed {
						l.t.Errorf("%v refused: %v", reqs, d)
					}
					for _, r := range reqs {
						l.used[r.Key] += r.Cost
					}
					l.done.Add(1)
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

// progress waits until n more decisions have been made, or fails the test
// after a while.
func (l *clusterLoad) progress(n int64) {
	l.t.Helper()
	target := l.done.Load() + n
	deadline := time.Now().Add(20 * time.Second)
	for l.done.Load() < target {
		if time.Now().After(deadline) {
			l.t.Fatalf("only %d of %d decisions made after 20s (%d failed: %v)", l.done.Load(), target, l.failed.Load(), l.errors())
		}
		time.Sleep(time.Millisecond)
	}
}

// end stops the load and waits for it.
func (l *clusterLoad) end() {
	close(l.stop)
	l.wg.Wait()
}

// failures returns how many decisions failed with an error that says
// what.
func (l *clusterLoad) failures(what string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, c := range l.errs {
		if strings.Contains(k, what) {
			n += c
		}
	}
	return n
}

func (l *clusterLoad) errors() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for k, n := range l.errs {
		fmt.Fprintf(&b, "\n\t%d× %v", n, l.example[k])
	}
	return b.String()
}

// checkUsed fails the test unless every key's state in Redis has consumed
// what the load was told was decided, and at most what the calls that
// failed asked for besides (a call that times out on the wire may have
// run): a unit counted twice (a script that ran and was sent again) shows
// as less remaining.
func (l *clusterLoad) checkUsed() { l.checkUsedExcept(nil) }

// checkUsedExcept is checkUsed, except that the keys for which lost
// reports true may have lost units (their master died before its replica
// had them), but not have counted any twice.
func (l *clusterLoad) checkUsedExcept(lost func(key string) bool) {
	l.t.Helper()
	for k, used := range l.used {
		if lost != nil && lost(k) {
			used = 0
		}
		d, err := l.s.Decide(context.Background(), rate.Request{Key: k, Limit: huge, Cost: 0})
		if err != nil {
			l.t.Fatal(err)
		}
		if got := huge.Count - d.Remaining; got < used || got > used+l.maybe[k] {
			l.t.Errorf("%s: Redis counts %d units, %d were decided and %d more asked for by calls that failed", k, got, used, l.maybe[k])
		}
	}
}

// A slot migrates from one master to another, step by step as redis-cli
// --cluster reshard moves it, while decisions on its keys run: single
// keys (coalesced into batches of several keys under load), requests over
// several keys with the slot's tag, and requests across this slot and one
// on another master. Some keys exist before the migration, others are
// new. No decision fails, and none is counted twice.
//
// While the slot migrates, its old master serves the keys it still holds
// and redirects the others with ASK; the new master serves what is asked
// with ASKING, except a script on several keys of which it lacks some: it
// answers TRYAGAIN, which is the case for a batch of new keys, or one
// whose keys are on both sides. The script has not run then, and the store
// sends it again after a moment, or splits a batch into its callers'
// groups.
func TestClusterMigration(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	client := newClient(t, c.Addrs()...)
	s := redis.New(client, redis.Options{Prefix: "mig:", DisableDenyCache: true})

	singles := slotKeys(t, s, "user=%d", 12)
	var pairs [][2]string
	for _, k := range singles[:4] {
		pairs = append(pairs, [2]string{"{" + k + "}:s", "{" + k + "}:day"})
	}
	slot, from, to := moveOf(t, c, s, singles[0])
	// The other half of a request across slots, on the third master.
	var elsewhere string
	for i := 0; elsewhere == ""; i++ {
		k := fmt.Sprintf("ip=%d", i)
		if o, err := c.Owner(s.Key(k)); err != nil {
			t.Fatal(err)
		} else if o != from && o != to {
			elsewhere = k
		}
	}

	// Half the keys exist before the migration.
	ctx := context.Background()
	for _, k := range singles[:6] {
		if _, err := s.Decide(ctx, rate.Request{Key: k, Limit: huge, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pairs[:2] {
		if _, err := s.DecideAll(ctx, []rate.Request{{Key: p[0], Limit: huge, Cost: 1}, {Key: p[1], Limit: huge, Cost: 1}}, make([]rate.Decision, 2)); err != nil {
			t.Fatal(err)
		}
	}

	l := startLoad(t, s, 16, 2*time.Second, func(rng *rand.Rand) []rate.Request {
		switch rng.IntN(4) {
		case 0:
			p := pairs[rng.IntN(len(pairs))]
			return []rate.Request{{Key: p[0], Limit: huge, Cost: 1}, {Key: p[1], Limit: huge, Cost: 1}}
		case 1:
			return []rate.Request{{Key: singles[rng.IntN(len(singles))], Limit: huge, Cost: 1}, {Key: elsewhere, Limit: huge, Cost: 1}}
		default:
			return []rate.Request{{Key: singles[rng.IntN(len(singles))], Limit: huge, Cost: 1}}
		}
	})
	l.progress(200)
	c.BeginMigration(slot, from, to)
	// The new master has lost its scripts (say, it restarted): a script
	// redirected to it by ASK is answered NOSCRIPT first.
	to.MustDo("SCRIPT", "FLUSH")
	l.progress(200)
	for c.MigrateKeys(slot, from, to, 1) > 0 {
		l.progress(20)
	}
	l.progress(200)
	c.EndMigration(slot, to)
	l.progress(200)
	l.end()
	// The units decided before the load.
	for _, k := range singles[:6] {
		l.used[k]++
	}
	for _, p := range pairs[:2] {
		l.used[p[0]]++
		l.used[p[1]]++
	}

	st := s.Stats()
	t.Logf("%d decisions, %d failed; stats %+v", l.done.Load(), l.failed.Load(), st)
	if n := l.failed.Load(); n > 0 {
		t.Errorf("%d decisions failed while a slot migrated:%s", n, l.errors())
	}
	if st.CoalescedBatches == 0 || st.TryAgain == 0 {
		t.Errorf("stats %+v: the load did not test batches answered TRYAGAIN", st)
	}
	if noScripts(to) == 0 {
		t.Error("the new master never answered NOSCRIPT")
	}
	if o, err := c.Owner(s.Key(singles[0])); err != nil || o != to {
		t.Fatalf("owner after the migration: %v, %v", o, err)
	}
	l.checkUsed()
}

// A slot left half migrated (a resharding that stopped midway, until
// redis-cli --cluster fix) keeps serving each of its keys, by ASK for
// those moved or new; so does the store, for decisions on single keys
// that coalescing has put in one batch, which neither master can serve
// whole. A request over several keys of the slot, some moved and some
// not, cannot be decided until the migration ends: it fails when its
// CallTimeout passes, with Redis's TRYAGAIN, and holds up no other
// decision of the slot meanwhile.
func TestClusterMigrationStuck(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	client := newClient(t, c.Addrs()...)
	s := redis.New(client, redis.Options{Prefix: "stuck:", DisableDenyCache: true, CallTimeout: 5 * time.Second})

	singles := slotKeys(t, s, "user=%d", 24)
	slot, from, to := moveOf(t, c, s, singles[0])
	ctx := context.Background()
	pair := []rate.Request{{Key: "{" + singles[0] + "}:s", Limit: huge, Cost: 1}, {Key: "{" + singles[0] + "}:day", Limit: huge, Cost: 1}}
	for _, k := range singles[:16] {
		if _, err := s.Decide(ctx, rate.Request{Key: k, Limit: huge, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DecideAll(ctx, pair, make([]rate.Decision, 2)); err != nil {
		t.Fatal(err)
	}
	c.BeginMigration(slot, from, to)
	// Keys 0-3 and 8-11 move, 4-7 and 12-15 stay, 16-23 are new; one of
	// the pair's moves.
	for _, k := range append(singles[:4:4], singles[8:12]...) {
		c.MigrateKey(s.Key(k), from, to)
	}
	c.MigrateKey(s.Key(pair[0].Key), from, to)

	// With the old master paused, two decisions on keys it holds take the
	// slot's places on the wire, and the others queue: they go in one
	// batch when it wakes.
	from.Pause()
	var wg sync.WaitGroup
	keys := []string{singles[6], singles[7], singles[0], singles[1], singles[4], singles[5], singles[16], singles[17]}
	errs := make([]error, len(keys))
	for i, k := range keys {
		wg.Go(func() {
			_, errs[i] = s.Decide(ctx, rate.Request{Key: k, Limit: huge, Cost: 1})
		})
		if i == 1 {
			waitFor(t, "two calls on the wire", func() bool { return redis.InFlight(s, k) == 2 })
		}
	}
	waitFor(t, "six decisions queued", func() bool { return redis.Queued(s, singles[0]) == 6 })
	from.Resume()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", keys[i], err)
		}
	}
	if st := s.Stats(); st.CoalescedBatches != 1 || st.TryAgain != 1 {
		t.Errorf("stats %+v, want one batch, answered TRYAGAIN", st)
	}
	for _, k := range keys {
		want := int64(2)
		if k == singles[16] || k == singles[17] {
			want = 1
		}
		if d, err := s.Decide(ctx, rate.Request{Key: k, Limit: huge, Cost: 0}); err != nil || huge.Count-d.Remaining != want {
			t.Errorf("%s: %v, %v; want %d units used", k, d, err, want)
		}
	}

	// The pair, with one key on each side, under a short CallTimeout.
	const timeout = 200 * time.Millisecond
	short := redis.New(client, redis.Options{Prefix: "stuck:", DisableDenyCache: true, CallTimeout: timeout})
	start := time.Now()
	_, err := short.DecideAll(ctx, pair, make([]rate.Decision, 2))
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "TRYAGAIN") {
		t.Errorf("a request over keys on both sides of a migration: %v, want TRYAGAIN", err)
	}
	if took < timeout/2 || took > timeout+time.Second {
		t.Errorf("it failed after %v, want about the CallTimeout of %v", took, timeout)
	}

	// Under load, with a CallTimeout of 50ms, no decision on a single key
	// fails: batches answered TRYAGAIN go as their groups at once, rather
	// than wait and be batched again.
	busy := redis.New(client, redis.Options{Prefix: "stuck:", DisableDenyCache: true, CallTimeout: 50 * time.Millisecond})
	l := startLoad(t, busy, 32, 2*time.Second, func(rng *rand.Rand) []rate.Request {
		return []rate.Request{{Key: singles[rng.IntN(len(singles))], Limit: huge, Cost: 1}}
	})
	l.progress(2000)
	l.end()
	st := busy.Stats()
	t.Logf("under load: %d decisions, %d failed; stats %+v", l.done.Load(), l.failed.Load(), st)
	// On a loaded machine a call may take longer than 50ms now and then:
	// only a TRYAGAIN is the store's failure here.
	if n := l.failures("TRYAGAIN"); n > 0 {
		t.Errorf("%d decisions on single keys failed under load:%s", n, l.errors())
	}
	if st.TryAgain == 0 {
		t.Errorf("no batch was answered TRYAGAIN: stats %+v", st)
	}
}

// waitFor polls cond until it holds, or fails the test after a while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// spreadLoad returns what startLoad needs to decide, over keys made from
// format on every master: single keys, requests over two keys with one
// tag, and requests over two keys in different slots.
func spreadLoad(format string, n int) (keys []string, pick func(*rand.Rand) []rate.Request) {
	for i := range n {
		keys = append(keys, fmt.Sprintf(format, i))
	}
	return keys, func(rng *rand.Rand) []rate.Request {
		k := keys[rng.IntN(len(keys))]
		switch rng.IntN(4) {
		case 0:
			return []rate.Request{{Key: "{" + k + "}:s", Limit: huge, Cost: 1}, {Key: "{" + k + "}:day", Limit: huge, Cost: 1}}
		case 1:
			return []rate.Request{{Key: k, Limit: huge, Cost: 1}, {Key: keys[rng.IntN(len(keys))] + ":ip", Limit: huge, Cost: 1}}
		default:
			return []rate.Request{{Key: k, Limit: huge, Cost: 1}}
		}
	}
}

// A replica takes over from its master by CLUSTER FAILOVER (its master
// stops writes until the replica has caught up, then redirects with
// MOVED) while decisions run over every master: none fails, none is lost
// or counted twice. The new master has not run the script before: the
// client loads it there on NOSCRIPT.
//
// None fails but by Redis's word that the cluster is down: the old master
// tells the others it is a replica now, and the new master that it holds
// the slots, each in a message of its own. A master that has the first
// before the second, as may happen on a loaded machine, holds the slots
// unassigned in between and declares the cluster down, answering
// CLUSTERDOWN for its own slots too, until the second comes, a few
// milliseconds later. The store passes that on, as it must: a decision
// failed so counts as none of the store's failures if a node logged that
// it declared the cluster down.
func TestClusterFailover(t *testing.T) {
	c := redistest.StartClusterWithReplicas(t, 3, 1)
	client := newClient(t, c.Addrs()...)
	s := redis.New(client, redis.Options{Prefix: "failover:", DisableDenyCache: true, CallTimeout: time.Second})
	_, pick := spreadLoad("user=%d", 24)
	master, replica := c.Nodes[0], c.Replicas[0]
	nodes := append(append([]*redistest.Server(nil), c.Nodes...), c.Replicas...)
	logged := make([]int, len(nodes)) // how much of each node's log was there before
	for i, n := range nodes {
		logged[i] = len(n.Log())
	}

	l := startLoad(t, s, 16, 2*time.Second, pick)
	l.progress(300)
	if n := replica.Info("memory")["number_of_cached_scripts"]; n != "0" {
		t.Logf("the replica has %s scripts cached before it takes over", n)
	}
	start := time.Now()
	c.Failover(replica)
	t.Logf("failover took %v", time.Since(start))
	l.progress(300)
	l.end()

	st := s.Stats()
	t.Logf("%d decisions, %d failed; stats %+v", l.done.Load(), l.failed.Load(), st)
	failed := l.failed.Load()
	if down := l.failures("CLUSTERDOWN"); down > 0 {
		var declared []string
		for i, n := range nodes {
			if log := n.Log(); len(log) > logged[i] && strings.Contains(log[logged[i]:], "Cluster state changed: fail") {
				declared = append(declared, n.Addr())
			}
		}
		if len(declared) > 0 {
			t.Logf("%d decisions failed with CLUSTERDOWN: %v declared the cluster down", down, declared)
			failed -= int64(down)
		}
	}
	if failed > 0 {
		t.Errorf("%d decisions failed during a failover:%s", failed, l.errors())
	}
	if r := master.MustDo("ROLE"); !strings.HasPrefix(r, "slave") {
		t.Errorf("the old master's role: %q", r)
	}
	if calls, _ := replica.ScriptStats(); calls == 0 || noScripts(replica) == 0 {
		t.Errorf("the new master ran %d scripts and answered NOSCRIPT %d times, want some of each", calls, noScripts(replica))
	}
	l.checkUsed()
}

// noScripts returns how many times srv has answered NOSCRIPT.
func noScripts(srv *redistest.Server) int {
	var n int
	fmt.Sscanf(srv.Info("errorstats")["errorstat_NOSCRIPT"], "count=%d", &n)
	return n
}

// A master dies under load and its replica takes over once the others
// agree it has failed (the node timeout, 2s here, and an election). In
// between, decisions on its slots fail at once, and so do all decisions
// once the cluster declares itself down (CLUSTERDOWN, until the replica
// has won), and a Fallback decides them by its failure mode without an
// error. Then decisions resume by themselves, within a second or so:
// the client finds the new master as failed calls make it refresh its
// map of the cluster, and loads the script there. Decisions the master
// made but had not yet passed to its replica are lost (Redis replicates
// asynchronously); none is counted twice.
func TestClusterMasterKilled(t *testing.T) {
	c := redistest.StartClusterWithReplicas(t, 3, 1)
	client := newClient(t, c.Addrs()...)
	s := redis.New(client, redis.Options{Prefix: "killed:", DisableDenyCache: true, CallTimeout: 200 * time.Millisecond})
	f := sluice.NewFallback(s, sluice.FallbackOptions{
		Mode: sluice.FailClosed, Timeout: -1, MaxSilence: 200 * time.Millisecond,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	})
	keys, pick := spreadLoad("user=%d", 24)
	master, replica := c.Nodes[0], c.Replicas[0]
	var onMaster []string
	for _, k := range keys {
		if o, err := c.Owner(s.Key(k)); err != nil {
			t.Fatal(err)
		} else if o == master {
			onMaster = append(onMaster, k)
		}
	}
	if len(onMaster) == 0 {
		t.Fatal("no key on the first master")
	}
	ctx := context.Background()
	probe := rate.Request{Key: onMaster[0], Limit: huge, Cost: 1}

	l := startLoad(t, s, 8, 2*time.Second, pick)
	l.progress(300)
	killed := time.Now()
	master.Kill()

	// While the master is down, the Fallback decides by its mode.
	var fallbackErrs, byMode int
	for f.Stats().Outages == 0 || byMode < 10 {
		if time.Since(killed) > 20*time.Second {
			t.Fatalf("the Fallback never decided by its mode: stats %+v", f.Stats())
		}
		d, src, err := f.DecideAllSource(ctx, []rate.Request{probe}, make([]rate.Decision, 1))
		switch {
		case err != nil:
			fallbackErrs++
		case src == sluice.SourceFailClosed:
			if d.Allowed {
				t.Fatal("fail_closed allowed a request")
			}
			byMode++
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.WaitMaster(replica)
	promoted := time.Since(killed)

	// Decisions resume by themselves.
	waitFor(t, "a decision on the dead master's slot", func() bool {
		_, err := s.Decide(ctx, probe)
		return err == nil
	})
	resumed := time.Since(killed)
	waitFor(t, "the Fallback deciding by the store again", func() bool {
		_, src, err := f.DecideAllSource(ctx, []rate.Request{probe}, make([]rate.Decision, 1))
		return err == nil && src == sluice.SourcePrimary
	})
	recovered := time.Since(killed)
	l.progress(100) // calls sent before decisions resumed have ended
	failedBefore := l.failed.Load()
	l.progress(300)
	l.end()
	t.Logf("killed; replica promoted after %v, decisions resumed after %v, the Fallback's after %v; Fallback stats %+v", promoted, resumed, recovered, f.Stats())
	t.Logf("%d decisions, %d failed:%s", l.done.Load(), l.failed.Load(), l.errors())
	if fallbackErrs > 0 {
		t.Errorf("the Fallback returned %d errors while the master was down", fallbackErrs)
	}
	if resumed-promoted > 5*time.Second {
		t.Errorf("decisions resumed %v after the replica was promoted", resumed-promoted)
	}
	if n := l.failed.Load() - failedBefore; n > 0 {
		t.Errorf("%d decisions failed after decisions had resumed", n)
	}
	if calls, _ := replica.ScriptStats(); calls == 0 || noScripts(replica) == 0 {
		t.Errorf("the new master ran %d scripts and answered NOSCRIPT %d times, want some of each", calls, noScripts(replica))
	}
	onDead := map[string]bool{}
	for _, k := range onMaster {
		onDead[k], onDead["{"+k+"}:s"], onDead["{"+k+"}:day"] = true, true, true
	}
	for _, k := range keys {
		if o, err := c.Owner(s.Key(k + ":ip")); err == nil && o == replica {
			onDead[k+":ip"] = true
		}
	}
	l.checkUsedExcept(func(k string) bool { return onDead[k] })
}

// A master without a replica restarts empty (its script cache too) and
// rejoins the cluster with its slots: once the cluster is ok again, no
// decision on its keys fails, though the client's connections to the old
// process are dead and the script must be loaded again (NOSCRIPT).
func TestClusterNodeRestartedEmpty(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	client := newClient(t, c.Addrs()...)
	s := redis.New(client, redis.Options{Prefix: "restart:", DisableDenyCache: true})
	master := c.Nodes[0]
	var onMaster []string
	for i := 0; len(onMaster) < 64; i++ {
		k := fmt.Sprintf("user=%d", i)
		if o, err := c.Owner(s.Key(k)); err != nil {
			t.Fatal(err)
		} else if o == master {
			onMaster = append(onMaster, k)
		}
	}
	ctx := context.Background()
	decideAll := func() (failed int, used []int64) {
		var wg sync.WaitGroup
		errs := make([]error, len(onMaster))
		used = make([]int64, len(onMaster))
		for i, k := range onMaster {
			wg.Go(func() {
				_, errs[i] = s.Decide(ctx, rate.Request{Key: k, Limit: huge, Cost: 1})
				if errs[i] == nil {
					var d rate.Decision
					d, errs[i] = s.Decide(ctx, rate.Request{Key: k, Limit: huge, Cost: 0})
					used[i] = huge.Count - d.Remaining
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				if failed == 0 {
					t.Log(err)
				}
				failed++
			}
		}
		return failed, used
	}
	if n, _ := decideAll(); n > 0 {
		t.Fatalf("%d decisions failed before the restart", n)
	}
	master.Kill()
	master.Restart()
	if n := master.Info("memory")["number_of_cached_scripts"]; n != "0" {
		t.Fatalf("%s scripts cached after a restart", n)
	}
	c.WaitOK()
	failed, used := decideAll()
	if failed > 0 {
		t.Errorf("%d of %d decisions failed after the master restarted", failed, len(onMaster))
	}
	for i, u := range used {
		if failed == 0 && u != 1 {
			t.Errorf("%s: %d units used after the restart, want 1", onMaster[i], u)
		}
	}
	if noScripts(master) == 0 {
		t.Error("the restarted master never answered NOSCRIPT")
	}
	t.Logf("stats %+v", s.Stats())
}
