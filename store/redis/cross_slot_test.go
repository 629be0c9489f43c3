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
// request is refused at the commit, and the slots committed before the
// refusal are given back what it took there: the race and the refund are
// counted in Stats. A request refused at the check consumes nothing.
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
	if r := remaining(login[0]); r != 3 {
		t.Errorf("account has %d remaining after the raced login, want 3 (it committed first, and was given back)", r)
	}
	if st := s.Stats(); st.CrossSlot != 1 || st.CrossSlotRaces != 1 || st.CrossSlotRefunds != 1 {
		t.Errorf("stats %+v, want 1 request across slots, 1 race, refunded", st)
	}

	// Without a race, the refusal comes from the check and takes nothing.
	if d, err := s.DecideAll(ctx, login, out); err != nil || d.Allowed {
		t.Fatalf("login with the IP spent: %v, %v; want refused", d, err)
	}
	if r := remaining(login[0]); r != 3 {
		t.Errorf("account has %d remaining after a login refused at the check, want still 3", r)
	}
	if st := s.Stats(); st.CrossSlot != 2 || st.CrossSlotRaces != 1 || st.CrossSlotRefunds != 1 {
		t.Errorf("stats %+v, want 2 requests across slots, still 1 race, 1 refund", st)
	}
}

// Many callers log in to eight accounts from one IP at once, with time
// frozen: no limit ever admits more than it allows, and no unit is
// consumed beyond the admitted logins: every race is refunded, and with
// time frozen every refund gives back all the refused login took.
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
	if over != 0 || st.CrossSlotRefundErrors != 0 || st.CrossSlotRefunds > st.CrossSlotRaces {
		t.Errorf("%d units taken by refused logins, stats %+v: want none, every race refunded", over, st)
	}
}

// keyChain returns request keys, each made from its format with the
// number, below 1000, that puts it under s on another node than all
// before it, in the lowest slot above theirs: the keys of a request across
// slots, committed in the order returned.
func keyChain(t *testing.T, c *redistest.Cluster, s *redis.Store, formats ...string) []string {
	t.Helper()
	var keys, owners []string
	for _, f := range formats {
		prev := -1
		if len(keys) > 0 {
			prev = int(redis.Slot(s.Key(keys[len(keys)-1])))
		}
		var best, bestOwner string
		for i := range 1000 {
			k := fmt.Sprintf(f, i)
			sl := redis.Slot(s.Key(k))
			if int(sl) <= prev || best != "" && sl >= redis.Slot(s.Key(best)) {
				continue
			}
			o, err := c.Owner(s.Key(k))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(owners, o.Addr()) {
				best, bestOwner = k, o.Addr()
			}
		}
		if best == "" {
			t.Fatalf("no key like %q on a node of its own in a slot above %d", f, prev)
		}
		keys, owners = append(keys, best), append(owners, bestOwner)
	}
	return keys
}

// A login limited per account, per device and per IP, the three on three
// nodes, committed in that order. Between its check and its commit another
// caller takes the IP's only unit: the login is refused at the IP's
// commit, after the account's and the device's have committed. Those two
// are given back what the login took, for every algorithm: each key holds
// afterwards, byte for byte, what it held before the login, the next
// decision reports what it reported before, and so does the refused
// login's own report for them. Stats count the race and its refund.
func testRefundAcrossSlots(t *testing.T, c *redistest.Cluster, client rueidis.Client) {
	ctx := context.Background()
	for _, alg := range rate.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			o, clk := pinnedOptions(redis.Options{Prefix: "refund-" + alg.String() + ":", DisableDenyCache: true})
			s, other := redis.New(client, o), redis.New(client, o)
			// 3 per 7s: a bucket's emission interval is no whole number
			// of microseconds.
			l := rate.Limit{Algorithm: alg, Count: 3, Period: 7 * time.Second}
			perIP := rate.Limit{Algorithm: rate.GCRA, Count: 1, Period: time.Hour}
			keys := keyChain(t, c, s, "account=%d", "device=%d", "ip=198.51.100.%d")
			login := []rate.Request{{Key: keys[0], Limit: l, Cost: 1}, {Key: keys[1], Limit: l, Cost: 2}, {Key: keys[2], Limit: perIP, Cost: 1}}

			// The account and the device have been used a second ago, so
			// that the login meets states that are not fresh.
			for _, r := range login[:2] {
				r.Cost = 1
				if d, err := s.Decide(ctx, r); err != nil || !d.Allowed {
					t.Fatalf("%s: %v, %v", r.Key, d, err)
				}
			}
			clk.Advance(time.Second)
			look := func(r rate.Request) (rate.Decision, string) {
				t.Helper()
				r.Cost = 0
				d, err := other.Decide(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				owner, err := c.Owner(s.Key(r.Key))
				if err != nil {
					t.Fatal(err)
				}
				return d, owner.MustDo("GET", s.Key(r.Key))
			}
			var before [2]rate.Decision
			var raw [2]string
			for i, r := range login[:2] {
				before[i], raw[i] = look(r)
			}

			var once sync.Once
			redis.AfterCheck(s, func() {
				once.Do(func() {
					if d, err := other.Decide(ctx, login[2]); err != nil || !d.Allowed {
						t.Errorf("the other caller: %v, %v; want admitted", d, err)
					}
				})
			})
			out := make([]rate.Decision, 3)
			d, err := s.DecideAll(ctx, login, out)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || out[2].Allowed {
				t.Fatalf("login raced for the IP's last unit: %v %v, want refused by the IP", d, out)
			}
			for i, r := range login[:2] {
				after, rawAfter := look(r)
				if after != before[i] {
					t.Errorf("%s after the refused login: %v, want %v as before it", r.Key, after, before[i])
				}
				if rawAfter != raw[i] {
					t.Errorf("%s holds %x after the refused login, want %x as before it", r.Key, rawAfter, raw[i])
				}
				if !out[i].Allowed || out[i].Remaining != before[i].Remaining {
					t.Errorf("the refused login reports %v for %s, want what is left without it: %d", out[i], r.Key, before[i].Remaining)
				}
			}
			if st := s.Stats(); st.CrossSlot != 1 || st.CrossSlotRaces != 1 || st.CrossSlotRefunds != 1 || st.CrossSlotRefundErrors != 0 {
				t.Errorf("stats %+v, want 1 request across slots, 1 race, refunded", st)
			}
		})
	}
}

// A refund that fails (here the account's master is out of memory, and
// refuses the refund's write) leaves the units taken: the refused request
// has consumed there, as it would have without refunds. The failure is
// counted, and the request is refused all the same, without an error. A
// commit that fails returns its error, and the slots committed before it
// are not given back: the caller's failure mode decides the request.
func testRefundFails(t *testing.T, c *redistest.Cluster, client rueidis.Client) {
	ctx := context.Background()
	o, _ := pinnedOptions(redis.Options{Prefix: "refund-fails:", DisableDenyCache: true})
	s, other := redis.New(client, o), redis.New(client, o)
	perAccount := rate.Limit{Algorithm: rate.GCRA, Count: 3, Period: time.Hour}
	perIP := rate.Limit{Algorithm: rate.GCRA, Count: 1, Period: time.Hour}
	keys := keyChain(t, c, s, "account=%d", "ip=198.51.100.%d")
	login := []rate.Request{{Key: keys[0], Limit: perAccount, Cost: 1}, {Key: keys[1], Limit: perIP, Cost: 1}}
	owner := func(k string) *redistest.Server {
		t.Helper()
		srv, err := c.Owner(s.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}
	oom := func(srv *redistest.Server, on bool) {
		bytes := "0" // no bound
		if on {
			bytes = "1"
		}
		srv.MustDo("CONFIG", "SET", "maxmemory", bytes)
	}
	accountOwner := owner(keys[0])
	t.Cleanup(func() { oom(accountOwner, false) })
	remaining := func(r rate.Request) int64 {
		t.Helper()
		r.Cost = 0
		d, err := other.Decide(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	// The account has been used once: its refund writes a state, which a
	// master out of memory refuses.
	if d, err := s.Decide(ctx, login[0]); err != nil || !d.Allowed {
		t.Fatalf("%v, %v", d, err)
	}

	redis.AfterCheck(s, func() {
		if d, err := other.Decide(ctx, login[1]); err != nil || !d.Allowed {
			t.Errorf("the other caller: %v, %v; want admitted", d, err)
		}
	})
	redis.BeforeRefund(s, func() { oom(accountOwner, true) })
	out := make([]rate.Decision, 2)
	d, err := s.DecideAll(ctx, login, out)
	oom(accountOwner, false)
	if err != nil || d.Allowed || out[1].Allowed {
		t.Fatalf("login raced for the IP's last unit: %v %v, %v; want refused by the IP, no error", d, out, err)
	}
	if !out[0].Allowed || out[0].Remaining != 1 {
		t.Errorf("the refused login reports %v for the account, want its commit's: 1 remaining", out[0])
	}
	if r := remaining(login[0]); r != 1 {
		t.Errorf("account has %d remaining after a login whose refund failed, want 1: the login's unit stays taken", r)
	}
	if st := s.Stats(); st.CrossSlotRaces != 1 || st.CrossSlotRefunds != 0 || st.CrossSlotRefundErrors != 1 || st.Errors != 0 {
		t.Errorf("stats %+v, want 1 race, its refund failed, no error", st)
	}

	// A commit that fails: the IP's master is out of memory at the commit.
	keys = keyChain(t, c, s, "account=%d", "ip=203.0.113.%d")
	login[1].Key = keys[1]
	ipOwner := owner(keys[1])
	t.Cleanup(func() { oom(ipOwner, false) })
	redis.AfterCheck(s, func() { oom(ipOwner, true) })
	redis.BeforeRefund(s, func() { t.Error("a refund after a commit failed") })
	_, err = s.DecideAll(ctx, login, out)
	oom(ipOwner, false)
	if err == nil {
		t.Fatal("login with the IP's master out of memory at the commit: no error")
	}
	if r := remaining(login[0]); r != 0 {
		t.Errorf("account has %d remaining after a login whose later commit failed, want 0: what the login took stays taken", r)
	}
	if st := s.Stats(); st.CrossSlotRaces != 1 || st.CrossSlotRefunds != 0 || st.CrossSlotRefundErrors != 1 || st.Errors != 1 {
		t.Errorf("stats %+v, want still 1 race, 1 refund failed, and 1 error", st)
	}
}
