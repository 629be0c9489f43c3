package redis_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// Stats counts decisions, refusals, script calls and deny-cache hits one
// by one, agrees with the script calls Redis itself counted, and counts
// coalesced batches and errors.
func TestStats(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	ctx := context.Background()
	o, clk := pinnedOptions(redis.Options{DisableCoalescing: true})
	s := redis.New(client, o)
	r := rate.Request{Key: "stats", Limit: rate.Limit{Algorithm: rate.GCRA, Count: 2, Period: time.Hour}, Cost: 1}

	// Load the script first, so that Redis's EVALSHA count is one per call.
	if _, err := s.Decide(ctx, rate.Request{Key: "warm", Limit: r.Limit}); err != nil {
		t.Fatal(err)
	}
	before, redisBefore := s.Stats(), scriptCalls(srv)
	for range 3 { // allowed, allowed, refused by Redis
		if _, err := s.Decide(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 { // refused by the deny cache
		if d, err := s.Decide(ctx, r); err != nil || d.Allowed {
			t.Fatalf("after the limit: %v, %v; want refused", d, err)
		}
	}
	st := s.Stats()
	if got, want := st.ScriptCalls-before.ScriptCalls, uint64(scriptCalls(srv)-redisBefore); got != want || got != 3 {
		t.Errorf("Stats counted %d script calls, Redis %d; want 3", got, want)
	}
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"Decisions", st.Decisions - before.Decisions, 7},
		{"Refused", st.Refused - before.Refused, 5},
		{"DenyCacheHits", st.DenyCacheHits - before.DenyCacheHits, 4},
		{"DenyCacheEntries", uint64(st.DenyCacheEntries), 1},
		{"CoalescedBatches", st.CoalescedBatches, 0},
		{"Errors", st.Errors, 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d (stats %+v)", c.name, c.got, c.want, st)
		}
	}
	// The entry ends once its RetryAfter has passed.
	clk.Advance(time.Hour)
	if d, err := s.Decide(ctx, r); err != nil || !d.Allowed {
		t.Fatalf("an hour later: %v, %v; want allowed", d, err)
	}
	if n := s.Stats().DenyCacheEntries; n != 0 {
		t.Errorf("DenyCacheEntries = %d after the refusal expired, want 0", n)
	}

	// Concurrent callers through the coalescer share script calls.
	co := redis.New(client, redis.Options{DisableDenyCache: true})
	var wg sync.WaitGroup
	for c := range 32 {
		wg.Go(func() {
			for i := range 50 {
				if _, err := co.Decide(ctx, rate.Request{Key: fmt.Sprintf("co%d:%d", c, i%20), Limit: r.Limit, Cost: 1}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	cst := co.Stats()
	if cst.Decisions != 32*50 || cst.CoalescedBatches == 0 || cst.ScriptCalls >= cst.Decisions || cst.CoalescedBatches > cst.ScriptCalls {
		t.Errorf("coalesced: %+v, want 1600 decisions in fewer script calls, some batches shared", cst)
	}

	// A call that cannot reach Redis is an error, not a decision.
	srv.Kill()
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := s.Decide(tctx, rate.Request{Key: "down", Limit: r.Limit, Cost: 1}); err == nil {
		t.Fatal("decided with Redis killed")
	}
	if got := s.Stats(); got.Errors != 1 || got.Decisions != st.Decisions+1 {
		t.Errorf("after a failed call: %+v, want 1 error and no new decision", got)
	}
}

// DecideCached answers only a refusal Redis gave that is still in force,
// and touches Redis for nothing: it works with the server gone.
func TestDecideCached(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	ctx := context.Background()
	o, clk := pinnedOptions(redis.Options{DisableCoalescing: true})
	s := redis.New(client, o)
	r := rate.Request{Key: "cached", Limit: rate.Limit{Algorithm: rate.GCRA, Count: 1, Period: time.Minute}, Cost: 1}
	out := make([]rate.Decision, 1)
	if _, ok := s.DecideCached([]rate.Request{r}, out); ok {
		t.Fatal("answered before Redis refused anything")
	}
	for range 2 { // allowed, then refused by Redis
		if _, err := s.Decide(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	srv.Kill()
	d, ok := s.DecideCached([]rate.Request{r}, out)
	if !ok || d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("after Redis refused: %v, %t; want its refusal, retry in 1m", d, ok)
	}
	clk.Advance(time.Minute)
	if _, ok := s.DecideCached([]rate.Request{r}, out); ok {
		t.Fatal("answered after the refusal ran out")
	}
	off := redis.New(client, redis.Options{Clock: clk, DisableDenyCache: true})
	if _, ok := off.DecideCached([]rate.Request{r}, out); ok {
		t.Fatal("answered with the deny cache off")
	}
}
