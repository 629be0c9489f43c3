package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// The methods by which sluice.Fallback finds a store's partitions (its
// unexported interface partitioned).
var _ interface {
	Partition(key string) int
	FailedPartition(err error) int
	PartitionName(p int) string
	PartitionHolds(p int) bool
} = (*redis.Store)(nil)

// Partition finds a key's slot as Redis does for the key the store
// writes, without making that key: for every key of up to five bytes of
// '{', '}', 'a' and 'b', under prefixes with and without braces.
func TestPartitionKeySlot(t *testing.T) {
	var keys []string
	var grow func(k string)
	grow = func(k string) {
		keys = append(keys, k)
		if len(k) < 5 {
			for _, c := range "{}ab" {
				grow(k + string(c))
			}
		}
	}
	grow("")
	for _, prefix := range []string{"", "sluice:", "p}", "}{", "{p}:", "a{", "{}"} {
		for _, k := range keys {
			if got, want := redis.KeySlot(prefix, k), redis.Slot(redis.RedisKey(prefix, k)); got != want {
				t.Errorf("prefix %q, key %q: slot %d, want %d (the slot of %q)", prefix, k, got, want, redis.RedisKey(prefix, k))
			}
		}
	}
}

// On a cluster of three masters, each key's partition names the master
// that holds it, whatever the key's braces; there are three partitions,
// each holding slots; and Partition, on the path of every decision,
// allocates nothing.
func TestPartitionCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	client := newClient(t, c.Addrs()...)
	s := redis.New(client, redis.Options{Prefix: "part:"})
	t.Cleanup(s.Close)

	var keys []string
	for i := range 200 {
		switch i % 4 {
		case 0, 1:
			keys = append(keys, fmt.Sprintf("user=%d", i))
		case 2:
			keys = append(keys, fmt.Sprintf("{acct=%d}:day", i))
		case 3:
			keys = append(keys, fmt.Sprintf("ip=%d:{acct=%d}", i, i))
		}
	}
	// Keys whose braces do not make a tag.
	keys = append(keys, "", "}x", "x}", "{}{a}", "a}b", "{x", "}{")
	names := map[int]string{}
	for _, k := range keys {
		p := s.Partition(k)
		owner, err := c.Owner(s.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		if name := s.PartitionName(p); p == 0 || name != owner.Addr() {
			t.Errorf("%q: partition %d, named %q; its owner is %s", k, p, name, owner.Addr())
		}
		names[p] = s.PartitionName(p)
	}
	if len(names) != 3 {
		t.Errorf("partitions %v, want 3", names)
	}
	for p := range 5 {
		_, seen := names[p]
		if s.PartitionHolds(p) != seen {
			t.Errorf("PartitionHolds(%d) = %v, want %v", p, !seen, seen)
		}
		if !seen && s.PartitionName(p) != "" {
			t.Errorf("PartitionName(%d) = %q for no partition", p, s.PartitionName(p))
		}
	}
	// Keys long enough that making the Redis key would allocate (Go
	// concatenates short strings that do not escape on the stack).
	long := strings.Repeat("x", 40)
	for _, k := range []string{"user=1", "user=" + long, "{acct=7}:day" + long, "ip=3:{acct=3}", "a}b" + long} {
		if n := testing.AllocsPerRun(100, func() { s.Partition(k) }); n != 0 {
			t.Errorf("Partition(%q) allocates %v times", k, n)
		}
	}

	// An address that held no slot at the last reading is a new partition
	// when it holds slots again: a dead master restarted and failed back
	// to must not bring back the breaker its outage left down.
	t.Run("AddressBack", func(t *testing.T) {
		s := redis.New(client, redis.Options{})
		defer s.Close()
		// on returns the partition of the master named addr.
		on := func(addr string) int {
			for i := range 1000 {
				if p := s.Partition(fmt.Sprint("user=", i)); s.PartitionName(p) == addr {
					return p
				}
			}
			t.Fatalf("no key on %s", addr)
			return 0
		}
		redis.LoadSlots(s, "a:1", "b:1", "c:1")
		pa, pc := on("a:1"), on("c:1")
		redis.LoadSlots(s, "a:1", "b:1", "d:1")
		if s.PartitionHolds(pc) {
			t.Errorf("partition %d (c:1) holds slots after a reading without it", pc)
		}
		redis.LoadSlots(s, "a:1", "b:1", "c:1")
		back := on("c:1")
		if back == pc || s.PartitionHolds(pc) || !s.PartitionHolds(back) || s.PartitionName(pc) != "c:1" {
			t.Errorf("c:1 back: partition %d (before %d), holds %v and %v; want a new number, the old one holding nothing",
				back, pc, s.PartitionHolds(back), s.PartitionHolds(pc))
		}
		if p := on("a:1"); p != pa {
			t.Errorf("a:1, which kept its slots, changed partition: %d to %d", pa, p)
		}
	})

	// A resharding fails no call, so the map is read again when it is
	// old: the first call to find it so has it read in the background.
	t.Run("Aged", func(t *testing.T) {
		s := redis.New(client, redis.Options{DisableDenyCache: true})
		defer s.Close()
		ctx := context.Background()
		owner, err := c.Owner(s.Key("user=1"))
		if err != nil {
			t.Fatal(err)
		}
		redis.LoadSlots(s, "x:1", "y:1", "z:1") // as if the slots had moved since
		decide := func() {
			if _, err := s.Decide(ctx, rate.Request{Key: "user=1", Limit: huge, Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
		decide()
		if running, _ := redis.SlotsRefresh(s); running {
			t.Fatal("a call read the slots again, the map being new")
		}
		redis.AgeSlots(s)
		decide()
		waitFor(t, "the slots read again", func() bool { return s.PartitionName(s.Partition("user=1")) == owner.Addr() })
	})

	t.Run("PrefixWithTag", func(t *testing.T) {
		// Every key of this store is in the prefix's slot.
		tagged := redis.New(client, redis.Options{Prefix: "{p}:"})
		defer tagged.Close()
		owner, err := c.Owner("{p}")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys[:20] {
			if p := tagged.Partition(k); tagged.PartitionName(p) != owner.Addr() {
				t.Errorf("%q: partition %d, named %q; its owner is %s", k, p, tagged.PartitionName(p), owner.Addr())
			}
		}
	})

	// Close cancels a reading of the slots in flight, and no reading
	// starts after it.
	t.Run("Close", func(t *testing.T) {
		s := redis.New(client, redis.Options{})
		for _, n := range c.Nodes {
			n.Pause()
			defer n.Resume()
		}
		asked, before := time.Now(), redis.SlotsTries(s)
		redis.RefreshSlots(s)
		// Until its first node is asked: a reading that has started may
		// not have asked one yet, and one asked as Close comes is no
		// other node tried after it.
		waitFor(t, "a reading", func() bool {
			running, started := redis.SlotsRefresh(s)
			return running && started.After(asked) && redis.SlotsTries(s) > before
		})
		tries := redis.SlotsTries(s)
		s.Close()
		// The client ends the call to a paused node at its deadline, a
		// third of a second after it was sent, whatever its context; a
		// reading not cancelled would then try the other nodes.
		if running, _ := redis.SlotsRefresh(s); running {
			t.Error("Close returned with a reading running")
		}
		if n := redis.SlotsTries(s) - tries; n != 0 {
			t.Errorf("the reading cancelled by Close asked %d more nodes", n)
		}
		redis.RefreshSlots(s)
		if running, _ := redis.SlotsRefresh(s); running {
			t.Error("a reading started after Close")
		}
	})
}

// On a single server, no key has a partition: sluice.Fallback takes the
// store as one.
func TestPartitionSingleServer(t *testing.T) {
	srv := redistest.Start(t)
	s := redis.New(newClient(t, srv.Addr()), redis.Options{CallTimeout: 100 * time.Millisecond})
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Decide(ctx, rate.Request{Key: "a", Limit: huge, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	_, err := s.Decide(ctx, rate.Request{Key: "a", Limit: huge, Cost: 1})
	if err == nil {
		t.Fatal("a decision succeeded on a dead server")
	}
	if p, fp := s.Partition("a"), s.FailedPartition(err); p != 0 || fp != 0 {
		t.Errorf("Partition %d, FailedPartition %d (%v); want 0 and 0", p, fp, err)
	}
	if !s.PartitionHolds(0) || s.PartitionHolds(1) || s.PartitionName(1) != "" {
		t.Errorf("PartitionHolds(0) %v, PartitionHolds(1) %v, PartitionName(1) %q; want true, false and none",
			s.PartitionHolds(0), s.PartitionHolds(1), s.PartitionName(1))
	}
}

// A master dies and its replica takes over. The decisions on its keys
// that fail report its partition, those across slots too; once they
// succeed again, its keys are in a new partition, named after the new
// master, and the old one holds nothing. The other masters' keys keep
// their partitions throughout.
func TestPartitionFailover(t *testing.T) {
	c := redistest.StartClusterWithReplicas(t, 3, 1)
	client := newClient(t, c.Addrs()...)
	s := redis.New(client, redis.Options{Prefix: "pfail:", DisableDenyCache: true, CallTimeout: 200 * time.Millisecond})
	t.Cleanup(s.Close)
	master, replica := c.Nodes[0], c.Replicas[0]
	// Keys on the master, one on another master, and another on the
	// master in another slot.
	var dead, alive, deadIP string
	for i := 0; dead == "" || alive == "" || deadIP == ""; i++ {
		k, ip := fmt.Sprintf("user=%d", i), fmt.Sprintf("ip=%d", i)
		o, err := c.Owner(s.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		if o == master && dead == "" {
			dead = k
		} else if o != master && alive == "" {
			alive = k
		}
		if o, err := c.Owner(s.Key(ip)); err != nil {
			t.Fatal(err)
		} else if o == master && deadIP == "" {
			deadIP = ip
		}
	}
	old, other := s.Partition(dead), s.Partition(alive)
	if old == 0 || old == other || s.PartitionName(old) != master.Addr() {
		t.Fatalf("partitions %d (%q) and %d before the failover; want the first named %s", old, s.PartitionName(old), other, master.Addr())
	}
	ctx := context.Background()
	one := []rate.Request{{Key: dead, Limit: huge, Cost: 1}}
	// Across three slots, the healthy master's first or not (slot order
	// decides).
	across := []rate.Request{{Key: alive, Limit: huge, Cost: 1}, {Key: dead, Limit: huge, Cost: 1}, {Key: deadIP, Limit: huge, Cost: 1}}
	decide := func(reqs []rate.Request) error {
		_, err := s.DecideAll(ctx, reqs, make([]rate.Decision, len(reqs)))
		return err
	}
	for _, reqs := range [][]rate.Request{one, across} {
		if err := decide(reqs); err != nil {
			t.Fatal(err)
		}
	}

	master.Kill()
	for _, reqs := range [][]rate.Request{one, across} {
		err := decide(reqs)
		if err == nil {
			t.Fatalf("%v decided on a dead master", reqs)
		}
		if p := s.FailedPartition(err); p != old {
			t.Errorf("%v failed with partition %d (%v), want the dead master's %d", reqs, p, err, old)
		}
		if !strings.HasPrefix(err.Error(), "redis store: ") {
			t.Errorf("the error's text changed: %v", err)
		}
	}
	// Until the cluster agrees the master has failed (the node timeout),
	// the others decide.
	if err := decide([]rate.Request{{Key: alive, Limit: huge, Cost: 1}}); err != nil {
		t.Errorf("a decision on a healthy master: %v", err)
	}

	// Each failure names a partition, the dead master's or (once the
	// store has read the failover) its replica's.
	failures, unnamed := 0, 0
	waitFor(t, "a decision on the dead master's key", func() bool {
		err := decide(one)
		if err != nil {
			failures++
			if p := s.FailedPartition(err); p == 0 {
				if unnamed == 0 {
					t.Errorf("a failure names no partition: %v", err)
				}
				unnamed++
			}
		}
		return err == nil
	})
	if unnamed > 0 {
		t.Errorf("%d of %d failures name no partition", unnamed, failures)
	}
	if o, err := c.Owner(s.Key(dead)); err != nil || o != replica {
		t.Fatalf("the key's owner after the failover: %v, %v; want the replica", o, err)
	}
	// The store reads the slots again at most every half second, after
	// the last failure too, so within a second of it (and a reading's
	// bound) it knows the new master.
	resumed := time.Now()
	for s.Partition(dead) == old && time.Since(resumed) < 2*time.Second {
		time.Sleep(time.Millisecond)
	}
	now := s.Partition(dead)
	t.Logf("%d failures; partition %d (%s) became %d (%s) %v after decisions resumed",
		failures, old, s.PartitionName(old), now, s.PartitionName(now), time.Since(resumed))
	if now == 0 || now == other || s.PartitionName(now) != replica.Addr() {
		t.Errorf("partition %d named %q after the failover; want a new one named %s", now, s.PartitionName(now), replica.Addr())
	}
	if s.PartitionName(old) != master.Addr() {
		t.Errorf("the old partition's name changed to %q", s.PartitionName(old))
	}
	if s.PartitionHolds(old) || !s.PartitionHolds(now) {
		t.Errorf("PartitionHolds: old %v, new %v; want false and true", s.PartitionHolds(old), s.PartitionHolds(now))
	}
	if p := s.Partition(alive); p != other {
		t.Errorf("a healthy master's key moved from partition %d to %d", other, p)
	}
	// A failure now names the new partition.
	replica.Pause()
	err := decide(one)
	replica.Resume()
	if p := s.FailedPartition(err); err == nil || p != now {
		t.Errorf("a decision on the paused new master: %v, partition %d; want an error in %d", err, p, now)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v: want context.DeadlineExceeded, the CallTimeout", err)
	}
}

// A Fallback over a cluster takes its masters one by one: while one master
// is dead or hung, its keys are decided by the failure mode, without
// calls but the probes, and every other master's keys are still decided by
// their masters, past the node timeout (2s here; the cluster is set not to
// require full coverage, so the others keep answering). A hung master's
// keys are decided by it again once it answers a probe.
//
// A loaded machine may hold a call to a healthy master past CallTimeout,
// which takes that master's partition down too, as it should, until a
// probe: that master's keys may then be decided by the mode, from that
// call until the partition answers again, and only then.
func TestPartitionFallback(t *testing.T) {
	const callTimeout = 100 * time.Millisecond
	for _, c := range []struct {
		name    string
		stop    func(*redistest.Server)
		resume  func(*redistest.Server)
		stopFor time.Duration
	}{
		{"killed", (*redistest.Server).Kill, nil, 2500 * time.Millisecond},
		{"hung", (*redistest.Server).Pause, (*redistest.Server).Resume, 500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := redistest.StartCluster(t, 3)
			for _, n := range cl.Nodes {
				n.MustDo("CONFIG", "SET", "cluster-require-full-coverage", "no")
			}
			s := redis.New(newClient(t, cl.Addrs()...), redis.Options{Prefix: "pfb:", DisableDenyCache: true, CallTimeout: callTimeout})
			t.Cleanup(s.Close)
			f := sluice.NewFallback(s, sluice.FallbackOptions{
				Mode: sluice.FailClosed, Timeout: -1, MaxSilence: 100 * time.Millisecond,
				MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
			})
			dead := cl.Nodes[0]
			onDead := map[string]bool{}
			var keys []string
			for i := range 60 {
				k := fmt.Sprintf("user=%d", i)
				o, err := cl.Owner(s.Key(k))
				if err != nil {
					t.Fatal(err)
				}
				keys, onDead[k] = append(keys, k), o == dead
			}
			ctx := context.Background()
			// slow says whether the call took CallTimeout or longer.
			decide := func(k string) (src sluice.Source, slow bool) {
				start := time.Now()
				_, src, err := f.DecideAllSource(ctx, []rate.Request{{Key: k, Limit: huge, Cost: 1}}, make([]rate.Decision, 1))
				if err != nil {
					t.Fatalf("%s: %v", k, err)
				}
				return src, time.Since(start) >= callTimeout
			}
			for _, k := range keys {
				if src, _ := decide(k); src != sluice.SourcePrimary {
					t.Fatalf("healthy cluster: %s decided by %v", k, src)
				}
			}
			c.stop(dead)
			stopped := time.Now()
			counts := map[bool]map[sluice.Source]int{true: {}, false: {}}
			// Of the healthy masters' partitions: which a slow call took
			// down, how many times that happened, and how many of their
			// keys the mode decided meanwhile.
			slowDown := map[int]bool{}
			slowOutages, excused := 0, 0
			for time.Since(stopped) < c.stopFor {
				for _, k := range keys {
					src, slow := decide(k)
					counts[onDead[k]][src]++
					if onDead[k] {
						continue
					}
					p := s.Partition(k)
					switch {
					case src == sluice.SourcePrimary:
						slowDown[p] = false
					case slow:
						if !slowDown[p] {
							slowOutages++
						}
						slowDown[p] = true
						excused++
					case slowDown[p]:
						excused++
					}
				}
			}
			t.Logf("over %v: dead master's keys %v, the others' %v, %d of them in %d outages a slow call began; stats %+v",
				c.stopFor, counts[true], counts[false], excused, slowOutages, f.Stats())
			healthy := 0
			for _, n := range counts[false] {
				healthy += n
			}
			if n := counts[false][sluice.SourcePrimary]; n == 0 || n+excused != healthy {
				t.Errorf("the healthy masters' keys were decided by %v, %d by the mode after a slow call; want the primary only, but those", counts[false], excused)
			}
			if counts[true][sluice.SourceFailClosed] == 0 || counts[true][sluice.SourcePrimary] != 0 {
				t.Errorf("the dead master's keys were decided by %v, want the failure mode only", counts[true])
			}
			st := f.Stats()
			outages := uint64(1 + slowOutages)
			if !st.Down || st.Outages != outages || st.Probes == 0 || st.Probes > outages*(uint64(c.stopFor/(20*time.Millisecond))+1) {
				t.Errorf("stats %+v: want down, %d outages, a few probes", st, outages)
			}
			if c.resume == nil {
				return
			}
			c.resume(dead)
			waitFor(t, "every master's keys decided by it again", func() bool {
				for _, k := range keys {
					if src, _ := decide(k); src != sluice.SourcePrimary {
						return false
					}
				}
				return true
			})
			if st := f.Stats(); st.Down || st.Recoveries != st.Outages {
				t.Errorf("stats %+v: want up, a recovery for each outage", st)
			}
		})
	}
}

// A call to a hung master that ends by a deadline has the cluster's slots
// read again, whichever deadline it is: the store's CallTimeout, its
// caller's (Envoy's 20ms, below the server's timeout), or a Fallback's
// Timeout (the library's default, 50ms, with no CallTimeout). A hung
// master shows that way, and once its replica has taken its place, the
// reading is what makes that replica a partition of its own.
func TestPartitionReadAfterDeadline(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	client := newClient(t, c.Addrs()...)
	hung := c.Nodes[0]
	keyOn := func(s *redis.Store) string {
		for i := 0; ; i++ {
			k := fmt.Sprintf("user=%d", i)
			if o, err := c.Owner(s.Key(k)); err != nil {
				t.Fatal(err)
			} else if o == hung {
				return k
			}
		}
	}
	for _, tc := range []struct {
		name   string
		opts   redis.Options
		decide func(s *redis.Store, k string) error
	}{
		{"CallTimeout", redis.Options{CallTimeout: 50 * time.Millisecond}, func(s *redis.Store, k string) error {
			_, err := s.Decide(context.Background(), rate.Request{Key: k, Limit: huge, Cost: 1})
			return err
		}},
		{"caller deadline", redis.Options{CallTimeout: 200 * time.Millisecond}, func(s *redis.Store, k string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			_, err := s.Decide(ctx, rate.Request{Key: k, Limit: huge, Cost: 1})
			return err
		}},
		{"Fallback Timeout", redis.Options{}, func(s *redis.Store, k string) error {
			f := sluice.NewFallback(s, sluice.FallbackOptions{Mode: sluice.FailError})
			_, err := f.Decide(context.Background(), rate.Request{Key: k, Limit: huge, Cost: 1})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redis.New(client, tc.opts)
			defer s.Close()
			k := keyOn(s)
			hung.Pause()
			err := tc.decide(s, k)
			hung.Resume()
			if err == nil {
				t.Fatal("a decision on a hung master succeeded")
			}
			running, _ := redis.SlotsRefresh(s)
			t.Logf("%v; a reading of the slots started: %v", err, running)
			if !running {
				t.Errorf("a call to a hung master failed (%v) and no reading of the slots followed", err)
			}
		})
	}
}

// Partition is on the path of every decision through a Fallback.
func BenchmarkPartition(b *testing.B) {
	c := redistest.StartCluster(b, 3)
	s := redis.New(newClient(b, c.Addrs()...), redis.Options{Prefix: "sluice:"})
	b.Cleanup(s.Close)
	for _, key := range []string{"user=12345", "route=/api/v1/orders|ip=203.0.113.7|plan=free"} {
		b.Run(strconv.Itoa(len(key))+"B", func(b *testing.B) {
			for b.Loop() {
				if s.Partition(key) == 0 {
					b.Fatal("no partition")
				}
			}
		})
	}
}
