package redis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// A Redis Cluster of three masters: keys spread over all of them, each
// decided on its owner; the keys of one request that share a hash tag are
// decided in one script call on one node; keys in different slots are
// decided by checking and then committing (see cross_slot_test.go); and
// the conformance suite passes, with its groups in one slot and spread
// over several.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	client := newClient(t, c.Addrs()...)
	ctx := context.Background()

	t.Run("Slot", func(t *testing.T) {
		for _, k := range []string{"a", "{a}b", "x{}y", "{}{a}", "{acct=7}:s", "user:{42}", "日本"} {
			want, err := c.Nodes[0].Do("CLUSTER", "KEYSLOT", k)
			if err != nil {
				t.Fatal(err)
			}
			if got := strconv.Itoa(int(redis.Slot(k))); got != want {
				t.Errorf("slot(%q) = %s, CLUSTER KEYSLOT says %s", k, got, want)
			}
		}
	})

	t.Run("KeysSpread", func(t *testing.T) {
		s := redis.New(client, redis.Options{Prefix: "spread:"})
		l := rate.Limit{Algorithm: rate.GCRA, Count: 3, Period: time.Hour}
		owners := map[string]int{}
		for i := range 30 {
			key := "user=" + strconv.Itoa(i)
			admitted := 0
			for range 5 {
				d, err := s.Decide(ctx, rate.Request{Key: key, Limit: l, Cost: 1})
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted++
				}
			}
			if admitted != 3 {
				t.Errorf("%s: %d of 5 admitted, want 3", key, admitted)
			}
			owner, err := c.Owner(s.Key(key))
			if err != nil {
				t.Fatal(err)
			}
			if v := owner.MustDo("GET", s.Key(key)); v == "" {
				t.Errorf("%s: no state on its owner %s", key, owner.Addr())
			}
			owners[owner.Addr()]++
		}
		if len(owners) != 3 {
			t.Errorf("30 keys on %d masters (%v), want all 3", len(owners), owners)
		}
	})

	t.Run("MultiLimitOneSlot", func(t *testing.T) {
		s := redis.New(client, redis.Options{})
		// Without the tag these keys hash to different slots.
		if redis.Slot("acct=7:s") == redis.Slot("acct=7:day") {
			t.Fatal("test keys share a slot even untagged; pick others")
		}
		reqs := []rate.Request{
			{Key: "{acct=7}:s", Limit: rate.Limit{Algorithm: rate.GCRA, Count: 2, Period: time.Second}, Cost: 1},
			{Key: "{acct=7}:day", Limit: rate.Limit{Algorithm: rate.FixedWindow, Count: 3, Period: 24 * time.Hour}, Cost: 1},
		}
		out := make([]rate.Decision, 2)
		admitted := 0
		for range 5 {
			d, err := s.DecideAll(ctx, reqs, out)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		// The per-second bucket of 2 stops the third at once; the day's
		// window saw only the 2 admitted.
		if admitted != 2 || out[1].Remaining != 1 {
			t.Errorf("admitted %d, day remaining %d; want 2 and 1", admitted, out[1].Remaining)
		}
		owner, err := c.Owner(s.Key(reqs[0].Key))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reqs {
			// One byte of algorithm and three float64s.
			if v := owner.MustDo("GET", s.Key(r.Key)); len(v) != 25 {
				t.Errorf("%s: state %q on %s, want it on the tag's owner", r.Key, v, owner.Addr())
			}
		}
		if st := s.Stats(); st.CrossSlot != 0 || st.ScriptCalls+st.DenyCacheHits != 5 {
			t.Errorf("stats %+v, want 5 decisions in a script call each or by the deny cache, none across slots", st)
		}
	})

	// The conformance suite passes on the cluster too: its groups share a
	// hash tag.
	t.Run("Conformance", func(t *testing.T) { testConformanceOn(t, client) })
	t.Run("ConformanceAcrossSlots", func(t *testing.T) { testConformanceAcrossSlots(t, client) })
	t.Run("Login", func(t *testing.T) { testLoginAcrossSlots(t, c, client) })
	t.Run("Race", func(t *testing.T) { testRaceAcrossSlots(t, client) })
	t.Run("Refund", func(t *testing.T) { testRefundAcrossSlots(t, c, client) })
	t.Run("RefundFails", func(t *testing.T) { testRefundFails(t, c, client) })
	t.Run("SharedKeyUnderLoad", func(t *testing.T) { testSharedKeyUnderLoad(t, client) })
}
