package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// Concurrent callers through the coalescer share script calls, and each
// caller's group is still decided on its own, all or nothing: with time
// frozen, every key admits exactly its limit, whatever the batches were.
func TestCoalescer(t *testing.T) {
	srv := redistest.Start(t)
	o, _ := pinnedOptions(redis.Options{DisableDenyCache: true})
	s := redis.New(newClient(t, srv.Addr()), o)
	ctx := context.Background()

	single := rate.Limit{Algorithm: rate.FixedWindow, Count: 5, Period: time.Hour}
	x := rate.Limit{Algorithm: rate.GCRA, Count: 3, Period: time.Hour}
	y := rate.Limit{Algorithm: rate.SlidingLog, Count: 4, Period: time.Hour}
	const keys, callers, perCaller = 50, 64, 40
	var mu sync.Mutex
	attempts, admitted := map[string]int{}, map[string]int{}
	before := scriptCalls(srv)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 2))
			out := make([]rate.Decision, 2)
			for range perCaller {
				i := rng.IntN(keys)
				var d rate.Decision
				var err error
				var name string
				if rng.IntN(2) == 0 {
					name = fmt.Sprintf("single%d", i)
					d, err = s.Decide(ctx, rate.Request{Key: name, Limit: single, Cost: 1})
				} else {
					name = fmt.Sprintf("pair%d", i)
					tag := fmt.Sprintf("{pair%d}", i)
					d, err = s.DecideAll(ctx, []rate.Request{
						{Key: tag + "x", Limit: x, Cost: 1},
						{Key: tag + "y", Limit: y, Cost: 1},
					}, out)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				attempts[name]++
				if d.Allowed {
					admitted[name]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	calls := scriptCalls(srv) - before
	t.Logf("%d decisions in %d script calls", callers*perCaller, calls)
	if calls >= callers*perCaller {
		t.Errorf("%d script calls for %d concurrent decisions: nothing was coalesced", calls, callers*perCaller)
	}
	for name, n := range attempts {
		want := min(n, 5)
		if name[0] == 'p' {
			want = min(n, 3) // the pair passes while x (3/h) does
		}
		if admitted[name] != want {
			t.Errorf("%s: %d of %d admitted, want %d", name, admitted[name], n, want)
		}
		if name[0] == 'p' {
			// y counted only the admitted pairs: refused pairs took nothing.
			d, err := s.Decide(ctx, rate.Request{Key: "{" + name + "}y", Limit: y})
			if err != nil {
				t.Fatal(err)
			}
			if d.Remaining != int64(4-admitted[name]) {
				t.Errorf("%s: y has %d remaining after %d admitted pairs, want %d", name, d.Remaining, admitted[name], 4-admitted[name])
			}
		}
	}

	// One caller at a time: one script call per decision, as without the
	// coalescer.
	before = scriptCalls(srv)
	for i := range 20 {
		if _, err := s.Decide(ctx, rate.Request{Key: fmt.Sprintf("alone%d", i), Limit: single, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if calls := scriptCalls(srv) - before; calls != 20 {
		t.Errorf("20 sequential decisions in %d script calls, want 20", calls)
	}
}

// A caller that gives up stops waiting, whether its decision is on the
// wire (a caller alone sends its own call) or queued behind the calls on
// the wire: with Redis paused, cancelling a context that has no deadline
// ends every Decide at once.
func TestCoalescerCancel(t *testing.T) {
	srv := redistest.Start(t)
	// One connection, dialed before the pause: rueidis dials its
	// connections lazily, and a dial does not heed cancellation.
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, PipelineMultiplex: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s := redis.New(client, redis.Options{DisableDenyCache: true, CallTimeout: -1}) // the context alone bounds a call
	r := rate.Request{Key: "cancel", Limit: rate.Limit{Algorithm: rate.GCRA, Count: 100, Period: time.Second}, Cost: 1}
	if _, err := s.Decide(context.Background(), r); err != nil { // loads the script
		t.Fatal(err)
	}
	calls := s.Stats().ScriptCalls

	srv.Pause()
	defer srv.Resume()
	ctx, cancel := context.WithCancel(context.Background())
	const callers = 4 // two on the wire, two queued
	errs := make(chan error, callers)
	for range callers {
		go func() {
			_, err := s.Decide(ctx, r)
			errs <- err
		}()
	}
	// Wait until two calls are on the wire, then give up.
	for deadline := time.Now().Add(5 * time.Second); s.Stats().ScriptCalls < calls+2; {
		if time.Now().After(deadline) {
			t.Fatalf("calls did not start: %+v", s.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	timeout := time.After(5 * time.Second)
	for range callers {
		select {
		case err := <-errs:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Decide after cancel: %v, want context.Canceled", err)
			}
		case <-timeout:
			t.Fatal("a Decide still waits 5s after its context was cancelled, Redis paused")
		}
	}
}

// stalled returns a store over one connection to srv with Redis paused and
// two calls on the wire, so that the decisions made next queue in the
// coalescer; resume lets Redis go on and waits for the two calls. prepare,
// if not nil, runs before the pause.
func stalled(t *testing.T, srv *redistest.Server, o redis.Options, prepare func(*redis.Store)) (s *redis.Store, resume func()) {
	t.Helper()
	// One connection, dialed before the pause (see TestCoalescerCancel).
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, PipelineMultiplex: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	s = redis.New(client, o)
	l := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Hour}
	if _, err := s.Decide(context.Background(), rate.Request{Key: "warm", Limit: l}); err != nil { // loads the script
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(s)
	}
	calls := s.Stats().ScriptCalls
	srv.Pause()
	var wg sync.WaitGroup
	resume = func() { srv.Resume(); wg.Wait() }
	// Even when the test stops early, the calls end before it does: a
	// call that fails then reports to a test still running.
	t.Cleanup(resume)
	for i := range 2 {
		wg.Go(func() {
			if _, err := s.Decide(context.Background(), rate.Request{Key: fmt.Sprintf("wire%d", i), Limit: l, Cost: 1}); err != nil {
				t.Errorf("a call on the wire: %v", err)
			}
		})
	}
	for deadline := time.Now().Add(5 * time.Second); s.Stats().ScriptCalls < calls+2; {
		if time.Now().After(deadline) {
			t.Fatalf("calls did not start: %+v", s.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	return s, resume
}

// waitQueued waits until n callers queue in the coalescer of key.
func waitQueued(t *testing.T, s *redis.Store, key string, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); redis.Queued(s, key) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued, want %d", redis.Queued(s, key), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A caller that gives up while its decision is queued takes nothing: the
// batch that goes next leaves its group out. It has returned an error and
// may have been decided otherwise meanwhile (a sluice.Fallback decides by
// its failure mode when its timeout ends the wait): deciding it in Redis
// too would count it twice.
func TestCoalescerDropsAbandoned(t *testing.T) {
	srv := redistest.Start(t)
	s, resume := stalled(t, srv, redis.Options{DisableDenyCache: true}, nil)
	l := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := s.Decide(ctx, rate.Request{Key: "gone", Limit: l, Cost: 1})
		gone <- err
	}()
	waitQueued(t, s, "gone", 1)
	var wg sync.WaitGroup
	// If the test stops early, its callers end before it does.
	t.Cleanup(func() { resume(); wg.Wait() })
	wg.Go(func() { // queued behind it, and waits
		if d, err := s.Decide(context.Background(), rate.Request{Key: "stays", Limit: l, Cost: 1}); err != nil || !d.Allowed {
			t.Errorf("the caller that waited: %v, %v; want admitted", d, err)
		}
	})
	waitQueued(t, s, "gone", 2)
	cancel()
	select {
	case err := <-gone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the caller that gave up: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a queued caller still waits 5s after its context was cancelled")
	}
	resume()
	wg.Wait()
	for key, want := range map[string]int64{"gone": 10, "stays": 9} {
		d, err := s.Decide(context.Background(), rate.Request{Key: key, Limit: l})
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != want {
			t.Errorf("%s: %d of 10 remaining, want %d", key, d.Remaining, want)
		}
	}
}

// A key that holds a value of another type (a list) in one caller's group
// fails neither that caller nor the others that share its script call:
// before it read as fresh, one such key failed the whole call, whose
// earlier groups had already been written, so their callers got an error
// for decisions Redis had made.
func TestCoalescerForeignKeyFailsNoOne(t *testing.T) {
	srv := redistest.Start(t)
	s, resume := stalled(t, srv, redis.Options{DisableDenyCache: true}, func(s *redis.Store) {
		srv.MustDo("RPUSH", s.Key("foreign"), "x")
	})
	l := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Hour}
	var wg sync.WaitGroup
	// If the test stops early, its callers end before it does.
	t.Cleanup(func() { resume(); wg.Wait() })
	for i, key := range []string{"good", "foreign"} {
		wg.Go(func() {
			if d, err := s.Decide(context.Background(), rate.Request{Key: key, Limit: l, Cost: 1}); err != nil || !d.Allowed || d.Remaining != 9 {
				t.Errorf("%s, in one batch with the other: %v, %v; want admitted, 9 remaining", key, d, err)
			}
		})
		waitQueued(t, s, key, i+1)
	}
	resume()
	wg.Wait()
	if st := s.Stats(); st.CoalescedBatches != 1 || st.Errors != 0 {
		t.Errorf("stats %+v, want one coalesced batch and no error", st)
	}
}

// A coalesced call that carries commits (of requests across slots) among
// other callers' groups: a commit's receipts follow its decisions, and
// shift the groups after it, and each caller still gets its own decisions
// and receipts.
func TestCoalescerCommits(t *testing.T) {
	srv := redistest.Start(t)
	o, clk := pinnedOptions(redis.Options{DisableDenyCache: true})
	s, resume := stalled(t, srv, o, nil)
	ctx := context.Background()
	now := rate.Micros(clk.Now())
	gcra := rate.Limit{Algorithm: rate.GCRA, Count: 3, Period: 7 * time.Second}
	log := rate.Limit{Algorithm: rate.SlidingLog, Count: 3, Period: time.Hour}
	groups := []struct {
		commit bool
		reqs   []rate.Request
	}{
		{false, []rate.Request{{Key: "d1", Limit: gcra, Cost: 1}}},
		{true, []rate.Request{{Key: "{c1}a", Limit: gcra, Cost: 2}, {Key: "{c1}b", Limit: log, Cost: 1}}},
		{false, []rate.Request{{Key: "d2", Limit: log, Cost: 2}}},
		{true, []rate.Request{{Key: "c2", Limit: log, Cost: 3}}},
		{false, []rate.Request{{Key: "{d3}a", Limit: log, Cost: 1}, {Key: "{d3}b", Limit: gcra, Cost: 3}}},
	}
	got := make([][]rate.Decision, len(groups))
	receipts := make([][][2]int64, len(groups))
	batches := s.Stats().CoalescedBatches
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Go(func() {
			var err error
			if g.commit {
				got[i], receipts[i], err = redis.Commit(ctx, s, g.reqs)
			} else {
				got[i] = make([]rate.Decision, len(g.reqs))
				_, err = s.DecideAll(ctx, g.reqs, got[i])
			}
			if err != nil {
				t.Error(err)
			}
		})
		waitQueued(t, s, "d1", i+1) // in this order
	}
	resume()
	wg.Wait()
	if n := s.Stats().CoalescedBatches - batches; n != 1 {
		t.Errorf("%d coalesced calls, want the 5 groups in 1", n)
	}
	for i, g := range groups {
		for j, r := range g.reqs {
			next, want := r.Limit.Step(rate.State{}, now, r.Cost)
			if got[i][j] != want {
				t.Errorf("group %d, %s: %v, want %v", i, r.Key, got[i][j], want)
			}
			if g.commit && receipts[i][j] != receiptOf(r.Limit, next) {
				t.Errorf("group %d, %s: receipt %v, want %v", i, r.Key, receipts[i][j], receiptOf(r.Limit, next))
			}
		}
	}
}
