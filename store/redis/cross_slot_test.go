package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
	"github.com/sluicehq/sluice/store/storetest"
)

// untagged is a store that drops the hash tags of the conformance suite's
// keys ("{r}a" becomes "r-a"), so that each key is its own tag and the
// suite's groups spread over several cluster slots.
type untagged struct{ sluice.Store }

var untag = strings.NewReplacer("{", "", "}", "-").Replace

func (u untagged) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	r.Key = untag(r.Key)
	return u.Store.Decide(ctx, r)
}

func (u untagged) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	reqs = slices.Clone(reqs)
	for i := range reqs {
		reqs[i].Key = untag(reqs[i].Key)
	}
	return u.Store.DecideAll(ctx, reqs, out)
}

// With no other caller, a request across slots is decided exactly as one
// atomic call would decide it: the whole conformance suite passes with its
// groups spread over the cluster's slots.
func testConformanceAcrossSlots(t *testing.T, client rueidis.Client) {
	var mu sync.Mutex
	var stores []*redis.Store
	pinned := pinnedStores(client, redis.Options{DisableDenyCache: true})
	storetest.Run(t, func(t *testing.T) (sluice.Store, func(time.Time)) {
		s, set := pinned(t)
		mu.Lock()
		stores = append(stores, s.(*redis.Store))
		mu.Unlock()
		return untagged{s}, set
	})
	var cross, races uint64
	for _, s := range stores {
		st := s.Stats()
		cross += st.CrossSlot
		races += st.CrossSlotRaces
	}
	t.Logf("%d requests across slots", cross)
	if cross < 100 || races != 0 {
		t.Errorf("%d requests across slots, %d races; want many, and no race without concurrency", cross, races)
	}
}

// keyPair returns two request keys, made from the formats with a number,
// whose Redis keys under s live in different slots on different nodes,
// the first in the lower slot.
func keyPair(t *testing.T, c *redistest.Cluster, s *redis.Store, aFormat, bFormat string) (string, string) {
	t.Helper()
	a := fmt.Sprintf(aFormat, 0)
	ownerA, err := c.Owner(s.Key(a))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		b := fmt.Sprintf(bFormat, i)
		ownerB, err := c.Owner(s.Key(b))
		if err != nil {
			t.Fatal(err)
		}
		if ownerB != ownerA && redis.Slot(s.Key(a)) < redis.Slot(s.Key(b)) {
			return a, b
		}
	}
	t.Fatalf("no key like %q on another node in a higher slot than %q", bFormat, a)
	return "", ""
}

// A login is limited per account and per IP, keys with no common tag: the
// per-IP counter is one counter whichever account tries. Deciding both
// across the cluster's nodes gives, decision by decision, what the memory
// store gives deciding them together, and a refused login consumes from
// neither limit.
func testLoginAcrossSlots(t *testing.T, c *redistest.Cluster, client rueidis.Client) {
	ctx := context.Background()
	o, clk := pinnedOptions(redis.Options{Prefix: "login:"})
	s := redis.New(client, o)
	mem := memory.New(memory.Options{Clock: clk})

	perAccount := rate.Limit{Algorithm: rate.SlidingLog, Count: 3, Period: time.Hour}
	perIP := rate.Limit{Algorithm: rate.GCRA, Count: 5, Period: time.Hour}
	ip, alice := keyPair(t, c, s, "ip=192.0.2.%d", "account=alice%d")
	_, bob := keyPair(t, c, s, "ip=192.0.2.%d", "account=bob%d")
	login := func(account string) []rate.Request {
		return []rate.Request{{Key: account, Limit: perAccount, Cost: 1}, {Key: ip, Limit: perIP, Cost: 1}}
	}
	// decide decides reqs in both stores, requires the same decisions and
	// returns Redis's.
	decide := func(reqs []rate.Request) (rate.Decision, []rate.Decision) {
		t.Helper()
		got, want := make([]rate.Decision, len(reqs)), make([]rate.Decision, len(reqs))
		d, err := s.DecideAll(ctx, reqs, got)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mem.DecideAll(ctx, reqs, want); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%v:\n got  %v\n want %v (memory store)", reqs, got, want)
		}
		return d, got
	}
	remaining := func(key string, l rate.Limit) int64 {
		t.Helper()
		d, _ := decide([]rate.Request{{Key: key, Limit: l}})
		return d.Remaining
	}

	var admitted []bool
	for range 4 {
		d, _ := decide(login(alice))
		admitted = append(admitted, d.Allowed)
	}
	if !slices.Equal(admitted, []bool{true, true, true, false}) {
		t.Errorf("alice's 4 logins: %v, want 3 admitted, then refused by her account's limit", admitted)
	}
	if r := remaining(ip, perIP); r != 2 {
		t.Errorf("the IP has %d remaining after 3 logins, want 2: the refused one took nothing", r)
	}
	admitted = admitted[:0]
	for range 3 {
		d, outs := decide(login(bob))
		admitted = append(admitted, d.Allowed)
		if !d.Allowed && !outs[0].Allowed {
			t.Errorf("bob refused by his account's limit: %v", outs)
		}
	}
	if !slices.Equal(admitted, []bool{true, true, false}) {
		t.Errorf("bob's 3 logins from alice's IP: %v, want 2 admitted, then refused by the shared IP limit", admitted)
	}
	if r := remaining(bob, perAccount); r != 1 {
		t.Errorf("bob's account has %d remaining after 2 logins, want 1: the refused one took nothing", r)
	}
	// Later, the IP has refilled and alice's oldest attempts have left the log.
	clk.Advance(61 * time.Minute)
	for range 4 {
		decide(login(alice))
	}

	for _, k := range []string{ip, alice, bob} {
		owner, err := c.Owner(s.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		if v := owner.MustDo("GET", s.Key(k)); v == "" {
			t.Errorf("%s: no state on its owner %s", k, owner.Addr())
		}
	}
	if st := s.Stats(); st.CrossSlot != 11 || st.CrossSlotRaces != 0 {
		t.Errorf("stats %+v, want 11 requests across slots, no race", st)
	}
}

// When another caller spends between the check and the commit, the
// request is refused, and the slots committed before the refusal have
// consumed: the documented exception, counted in Stats. A request refused
// at the check consumes nothing.
func testRaceAcrossSlots(t *testing.T, client rueidis.Client) {
	ctx := context.Background()
	o, _ := pinnedOptions(redis.Options{Prefix: "race:", DisableDenyCache: true})
	s, other := redis.New(client, o), redis.New(client, o)

	perAccount := rate.Limit{Algorithm: rate.GCRA, Count: 3, Period: time.Hour}
	perIP := rate.Limit{Algorithm: rate.GCRA, Count: 1, Period: time.Hour}
	var account, ip string
	for i := range 1000 {
		account, ip = fmt.Sprintf("account=%d", i), "ip=198.51.100.7"
		if redis.Slot(s.Key(account)) < redis.Slot(s.Key(ip)) {
			break // the account commits first
		}
	}
	login := []rate.Request{{Key: account, Limit: perAccount, Cost: 1}, {Key: ip, Limit: perIP, Cost: 1}}
	remaining := func(r rate.Request) int64 {
		t.Helper()
		r.Cost = 0
		d, err := other.Decide(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}

	// Between the phases, another caller takes the IP's only unit.
	var once sync.Once
	redis.AfterCheck(s, func() {
		once.Do(func() {
			if d, err := other.Decide(ctx, login[1]); err != nil || !d.Allowed {
				t.Errorf("the other caller: %v, %v; want admitted", d, err)
			}
		})
	})
	out := make([]rate.Decision, 2)
	d, err := s.DecideAll(ctx, login, out)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || !out[0].Allowed || out[1].Allowed {
		t.Fatalf("login raced for the IP's last unit: %v %v, want refused by the IP", d, out)
	}
	if r := remaining(login[0]); r != 2 {
		t.Errorf("account has %d remaining after the raced login, want 2 (it committed first)", r)
	}
	if st := s.Stats(); st.CrossSlot != 1 || st.CrossSlotRaces != 1 {
		t.Errorf("stats %+v, want 1 request across slots, 1 race", st)
	}

	// Without a race, the refusal comes from the check and takes nothing.
	if d, err := s.DecideAll(ctx, login, out); err != nil || d.Allowed {
		t.Fatalf("login with the IP spent: %v, %v; want refused", d, err)
	}
	if r := remaining(login[0]); r != 2 {
		t.Errorf("account has %d remaining after a login refused at the check, want still 2", r)
	}
	if st := s.Stats(); st.CrossSlot != 2 || st.CrossSlotRaces != 1 {
		t.Errorf("stats %+v, want 2 requests across slots, still 1 race", st)
	}
}

// Many callers log in to eight accounts from one IP at once, with time
// frozen: no limit ever admits more than it allows, and every unit
// consumed beyond the admitted logins is owed to a counted race.
func testSharedKeyUnderLoad(t *testing.T, client rueidis.Client) {
	ctx := context.Background()
	o, _ := pinnedOptions(redis.Options{Prefix: "load:", DisableDenyCache: true})
	s := redis.New(client, o)

	perAccount := rate.Limit{Algorithm: rate.FixedWindow, Count: 3, Period: time.Hour}
	perIP := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Hour}
	const accounts, callers, attempts = 8, 32, 8
	ip := "ip=203.0.113.9"
	var mu sync.Mutex
	admitted := map[string]int64{}
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			account := fmt.Sprintf("account=%d", c%accounts)
			out := make([]rate.Decision, 2)
			for range attempts {
				d, err := s.DecideAll(ctx, []rate.Request{{Key: account, Limit: perAccount, Cost: 1}, {Key: ip, Limit: perIP, Cost: 1}}, out)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					admitted[account]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	used := func(key string, l rate.Limit) int64 {
		t.Helper()
		d, err := s.Decide(ctx, rate.Request{Key: key, Limit: l})
		if err != nil {
			t.Fatal(err)
		}
		return l.Count - d.Remaining
	}
	var total, over int64
	for a := range accounts {
		account := fmt.Sprintf("account=%d", a)
		n := admitted[account]
		if n > perAccount.Count {
			t.Errorf("%s: %d admitted, limit %d", account, n, perAccount.Count)
		}
		total += n
		over += used(account, perAccount) - n
	}
	if total > perIP.Count {
		t.Errorf("%d logins admitted from one IP, limit %d", total, perIP.Count)
	}
	over += used(ip, perIP) - total
	st := s.Stats()
	t.Logf("%d admitted, %d units taken by refused logins, stats %+v", total, over, st)
	if total == 0 {
		t.Error("no login admitted")
	}
	if over < 0 || uint64(over) > st.CrossSlotRaces {
		t.Errorf("%d units taken by refused logins, %d races: only a race may take units", over, st.CrossSlotRaces)
	}
}
