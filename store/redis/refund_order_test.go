package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// order is a history on one key at one pinned instant, to check by hand:
// others' steps before, then commits and others' steps in turn (a cost
// of a commit, or, negative, another caller's step of its opposite), then
// the commits refunded in the order given. Five an hour: a look must then
// find want remaining, and the key hold what the others' steps alone
// leave.
type order struct {
	name    string
	before  []int64
	steps   []int64
	refunds []int
	want    int64
}

// Refunds of commits on one key at one instant give back every unit, in
// whatever order they come: a bucket's debt there is a sum. Raced
// requests that committed the same key are refunded in the order they
// committed, and used to lose a unit each but the first: the first refund
// moved the TAT back below the second commit's, which then took it for a
// key reset since.
func TestRefundsInAnyOrder(t *testing.T) {
	orders := []order{
		{name: "two, in commit order", steps: []int64{1, 1}, refunds: []int{0, 1}, want: 5},
		{name: "two, newest first", steps: []int64{1, 1}, refunds: []int{1, 0}, want: 5},
		{name: "costs 2 then 1, in commit order", steps: []int64{2, 1}, refunds: []int{0, 1}, want: 5},
		{name: "costs 1 then 2, in commit order", steps: []int64{1, 2}, refunds: []int{0, 1}, want: 5},
		{name: "after a spend, in commit order", before: []int64{2}, steps: []int64{1, 1}, refunds: []int{0, 1}, want: 3},
		{name: "a spend between, in commit order", steps: []int64{1, -1, 1}, refunds: []int{0, 1}, want: 4},
		{name: "a spend between, newest first", steps: []int64{1, -1, 1}, refunds: []int{1, 0}, want: 4},
		{name: "three, in commit order", steps: []int64{1, 1, 1}, refunds: []int{0, 1, 2}, want: 5},
		{name: "three, middle first", steps: []int64{1, 1, 1}, refunds: []int{1, 0, 2}, want: 5},
		{name: "three, newest first", steps: []int64{1, 1, 1}, refunds: []int{2, 1, 0}, want: 5},
		{name: "one of three kept", before: []int64{1}, steps: []int64{1, 2, 1}, refunds: []int{0, 2}, want: 2},
	}
	client := newClient(t, redistest.Start(t).Addr())
	ctx := context.Background()
	for _, alg := range rate.Algorithms() {
		l := rate.Limit{Algorithm: alg, Count: 5, Period: time.Hour}
		for _, o := range orders {
			t.Run(alg.String()+"/"+o.name, func(t *testing.T) {
				opts, clk := pinnedOptions(redis.Options{DisableDenyCache: true, Prefix: t.Name() + ":"})
				s := redis.New(client, opts)
				now := rate.Micros(clk.Now())
				var ref rate.State // the others' steps alone
				decide := func(cost int64) {
					t.Helper()
					if d, err := s.Decide(ctx, rate.Request{Key: "k", Limit: l, Cost: cost}); err != nil || !d.Allowed {
						t.Fatalf("a step of %d: %v, %v", cost, d, err)
					}
					ref, _ = l.Step(ref, now, cost)
				}
				for _, c := range o.before {
					decide(c)
				}
				var commits [][]rate.Request
				var receipts [][][2]int64
				for _, c := range o.steps {
					if c < 0 {
						decide(-c)
						continue
					}
					reqs := []rate.Request{{Key: "k", Limit: l, Cost: c}}
					ds, rc, err := redis.Commit(ctx, s, reqs)
					if err != nil || !ds[0].Allowed {
						t.Fatalf("commit of %d: %v, %v", c, ds, err)
					}
					commits, receipts = append(commits, reqs), append(receipts, rc)
				}
				kept := map[int]bool{}
				for i := range commits {
					kept[i] = true
				}
				for _, i := range o.refunds {
					if _, err := redis.Refund(ctx, s, commits[i], receipts[i]); err != nil {
						t.Fatal(err)
					}
					delete(kept, i)
				}
				for i := range commits {
					if kept[i] {
						ref, _ = l.Step(ref, now, commits[i][0].Cost)
					}
				}
				got, err := s.Decide(ctx, rate.Request{Key: "k", Limit: l})
				if err != nil {
					t.Fatal(err)
				}
				st := scriptStates(t, client, s, alg, []string{"k"})["k"]
				if got.Remaining != o.want || !sameState(st, ref) {
					t.Errorf("receipts %v: after the refunds %d remaining, state %+v; want %d, state %+v", receipts, got.Remaining, st, o.want, ref)
				}
			})
		}
	}
}

// Two logins (account and IP, in two slots on two masters) race on one
// account at one instant: each passes its check, commits the account,
// and is refused at its IP, which another caller took in between. X
// committed first and is refunded first; the account must be left full.
func TestRefundsInCommitOrderAcrossSlots(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	client := newClient(t, c.Addrs()...)
	ctx := context.Background()
	for _, alg := range rate.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			o, _ := pinnedOptions(redis.Options{Prefix: t.Name() + ":", DisableDenyCache: true})
			mk := func() *redis.Store { return redis.New(client, o) }
			sx, sy, other := mk(), mk(), mk()
			l := rate.Limit{Algorithm: alg, Count: 5, Period: time.Hour}
			perIP := rate.Limit{Algorithm: rate.GCRA, Count: 1, Period: time.Hour}
			keys := keyChain(t, c, sx, "account=%d", "ipx=198.51.100.%d", "ipy=203.0.113.%d")
			acc, ipx, ipy := keys[0], keys[1], keys[2]
			login := func(ip string) []rate.Request {
				return []rate.Request{{Key: acc, Limit: l, Cost: 1}, {Key: ip, Limit: perIP, Cost: 1}}
			}
			take := func(ip string) {
				if d, err := other.Decide(ctx, rate.Request{Key: ip, Limit: perIP, Cost: 1}); err != nil || !d.Allowed {
					t.Errorf("another caller on %s: %v, %v", ip, d, err)
				}
			}
			redis.AfterCheck(sx, func() { take(ipx) })
			redis.AfterCheck(sy, func() { take(ipy) })
			// Y commits the account after X's commit, and is refunded
			// after X's refund.
			yAtRefund, yGo, yDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			redis.BeforeRefund(sy, func() { close(yAtRefund); <-yGo })
			redis.BeforeRefund(sx, func() {
				go func() {
					out := make([]rate.Decision, 2)
					d, err := sy.DecideAll(ctx, login(ipy), out)
					if err == nil && (d.Allowed || !out[0].Allowed) {
						err = fmt.Errorf("Y: %v %v, want refused at its IP alone", d, out)
					}
					yDone <- err
				}()
				<-yAtRefund
			})
			out := make([]rate.Decision, 2)
			d, err := sx.DecideAll(ctx, login(ipx), out)
			if err != nil || d.Allowed || !out[0].Allowed {
				t.Fatalf("X: %v %v %v, want refused at its IP alone", d, out, err)
			}
			close(yGo)
			if err := <-yDone; err != nil {
				t.Fatal(err)
			}
			for _, s := range []*redis.Store{sx, sy} {
				if st := s.Stats(); st.CrossSlotRaces != 1 || st.CrossSlotRefunds != 1 {
					t.Errorf("stats %+v, want a race and its refund", st)
				}
			}
			if after, err := other.Decide(ctx, rate.Request{Key: acc, Limit: l}); err != nil || after.Remaining != 5 {
				t.Errorf("the account after two refused logins: %v, %v; want 5 remaining", after, err)
			}
		})
	}
}

// The promise of refunds taken together, over random histories on one
// key in the model: commits, others' steps and refunds of commits made
// any time before, interleaved. The reference is the same history with a
// step of cost 0 in the place of every commit refunded, taking the same
// other steps. Probed by steps of every cost at the end and later, the
// refunded state never admits what the reference refuses, never reports
// more remaining, and never sends a caller back sooner. When the whole
// history is at one instant, refunds in any order, it decides every probe
// exactly as the reference does.
//
// Not checked, only counted: histories with a key written anew after a
// step back, which no refund can tell (see TestRefundNeverMints); and
// histories over several instants whose refunds do not come in the
// reverse order of their commits, where a refund after a step at a later
// instant trusts a receipt that an earlier commit's refund has made stale
// (scripts/decide.lua, What a refund cannot tell): there a bucket may be
// given back, or denied, what the refunded requests' absence would not.
func TestRefundsNeverMintTogether(t *testing.T) {
	noon := rate.Micros(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	for li, l := range refundLimits() {
		t.Run(fmt.Sprintf("%d-%s", li, l), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(li), 13))
			p := span(l)
			var frozen, moving, unordered, reset int
		trials:
			for trial := range 3000 {
				still := trial%2 == 0 // every step at one instant
				now := noon
				jump := func() {
					if still {
						return
					}
					switch rng.IntN(6) {
					case 0, 1:
					case 2:
						now += 1 + rng.Int64N(10)
					case 3:
						now -= rng.Int64N(p)
					default:
						now += rng.Int64N(2 * p)
					}
				}
				var with, ref rate.State
				type commit struct {
					cost int64
					rc   [2]int64
				}
				var open []commit
				history := ""
				fresh, latest, lifo := false, now, true
				// The refunds of the commits left open come last.
				for ops := 2 + rng.IntN(10); ops > 0 || len(open) > 0; ops-- {
					jump()
					if fresh && now < latest {
						reset++
						continue trials
					}
					latest = max(latest, now)
					switch op := rng.IntN(3); {
					case len(open) > 0 && (op == 0 || ops <= 0): // a refund
						i := rng.IntN(len(open))
						c := open[i]
						lifo = lifo && i == len(open)-1
						open = append(open[:i], open[i+1:]...)
						with = refundOf(l, with, now, c.cost, c.rc)
						fresh = fresh || sameState(with, rate.State{})
						history += fmt.Sprintf(", refund %v at %d: %+v", c, now, with)
					default: // a commit, or another's step
						cost := rng.Int64N(l.Capacity()/2 + 1)
						next, d := l.Step(clone(with), now, cost)
						if !d.Allowed {
							continue
						}
						fresh = fresh || sameState(next, rate.State{})
						with = next
						if op == 1 && cost > 0 {
							open = append(open, commit{cost, receiptOf(l, next)})
							ref, _ = l.Step(clone(ref), now, 0)
							history += fmt.Sprintf(", commit %d at %d", cost, now)
							continue
						}
						rnext, rd := l.Step(clone(ref), now, cost)
						if !rd.Allowed {
							t.Fatalf("trial %d%s: a step the refunded requests' absence refuses was admitted: %d at %d", trial, history, cost, now)
						}
						ref = rnext
						history += fmt.Sprintf(", %d at %d", cost, now)
					}
				}
				switch {
				case still:
					frozen++
				case !lifo:
					unordered++
					continue
				default:
					moving++
				}
				history += fmt.Sprintf(": refunded %+v, reference %+v", with, ref)
				for _, at := range []int64{now, now + 1, now + p/3, now + p, now + 2*p} {
					for c := range l.Capacity() + 1 {
						_, g := l.Step(clone(with), at, c)
						_, w := l.Step(clone(ref), at, c)
						switch {
						case still && g != w:
							t.Fatalf("trial %d%s: probe %d at %d: %v, the refunded requests' absence %v", trial, history, c, at, g, w)
						case g.Allowed && !w.Allowed,
							c == 0 && g.Remaining > w.Remaining,
							!g.Allowed && !w.Allowed && g.RetryAfter < w.RetryAfter:
							t.Fatalf("trial %d%s: probe %d at %d: %v, fresher than the refunded requests' absence %v", trial, history, c, at, g, w)
						}
					}
				}
			}
			t.Logf("%d histories at one instant, %d moving, %d moving with refunds out of order, %d with a key written anew after a step back", frozen, moving, unordered, reset)
			if frozen == 0 || moving == 0 {
				t.Error("a kind of history was never checked")
			}
		})
	}
}

// Logins by account and IP, in other slots on other masters, race from
// three stores at one pinned instant, each refused login refunded where it
// committed, in whatever order the races leave. Every unit a refused login
// took is given back: each key is left with its capacity less what the
// admitted logins took.
func TestRefundsUnderRacesAcrossSlots(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	var clients []rueidis.Client
	for range 3 {
		clients = append(clients, newClient(t, c.Addrs()...))
	}
	ctx := context.Background()
	for _, alg := range rate.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			o, _ := pinnedOptions(redis.Options{Prefix: t.Name() + ":", DisableDenyCache: true})
			var stores []*redis.Store
			var refunds atomic.Int64
			for _, cl := range clients {
				s := redis.New(cl, o)
				redis.BeforeRefund(s, func() { refunds.Add(1) })
				stores = append(stores, s)
			}
			accLimit := rate.Limit{Algorithm: alg, Count: 5, Period: time.Hour}
			ipLimit := rate.Limit{Algorithm: alg, Count: 20, Period: time.Hour}
			// Four accounts in slots below the IP's, committed first and
			// refunded when the IP is refused; two above, which the IP's
			// refunds serve.
			slot := func(k string) uint16 { return redis.Slot(stores[0].Key(k)) }
			var ip string
			for i := 0; ip == ""; i++ {
				if k := fmt.Sprintf("ip=198.51.100.%d", i); slot(k) > 12000 && slot(k) < 15000 {
					ip = k
				}
			}
			var accounts []string
			for i, below, above := 0, 0, 0; below+above < 6; i++ {
				a := fmt.Sprintf("account=%d", i)
				switch sl := slot(a); {
				case sl < slot(ip) && below < 4:
					below++
				case sl > slot(ip) && above < 2:
					above++
				default:
					continue
				}
				accounts = append(accounts, a)
			}
			const callers, attempts = 15, 4 // per store
			var mu sync.Mutex
			admitted := map[string]int64{}
			var wg sync.WaitGroup
			for si, s := range stores {
				for g := range callers {
					acc := accounts[(si*callers+g)%len(accounts)]
					wg.Go(func() {
						out := make([]rate.Decision, 2)
						for range attempts {
							login := []rate.Request{{Key: acc, Limit: accLimit, Cost: 1}, {Key: ip, Limit: ipLimit, Cost: 1}}
							d, err := s.DecideAll(ctx, login, out)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								mu.Lock()
								admitted[acc]++
								admitted[ip]++
								mu.Unlock()
							}
						}
					})
				}
			}
			wg.Wait()
			var st redis.Stats
			for _, s := range stores {
				x := s.Stats()
				st.CrossSlotRaces += x.CrossSlotRaces
				st.CrossSlotRefunds += x.CrossSlotRefunds
				st.CrossSlotRefundErrors += x.CrossSlotRefundErrors
			}
			t.Logf("%d logins admitted, stats %+v", admitted[ip], st)
			if st.CrossSlotRefundErrors != 0 || int64(st.CrossSlotRefunds) != refunds.Load() {
				t.Errorf("stats %+v, %d refunds sent: want every refund made", st, refunds.Load())
			}
			for _, k := range append(accounts, ip) {
				l := accLimit
				if k == ip {
					l = ipLimit
				}
				d, err := stores[0].Decide(ctx, rate.Request{Key: k, Limit: l})
				if err != nil {
					t.Fatal(err)
				}
				if d.Remaining != l.Count-admitted[k] {
					t.Errorf("%s: %d admitted, %d remaining, want %d", k, admitted[k], d.Remaining, l.Count-admitted[k])
				}
			}
		})
	}
}
