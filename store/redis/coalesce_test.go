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
	s := redis.New(client, redis.Options{DisableDenyCache: true})
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
