package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

var resetLimit = rate.Limit{Algorithm: rate.GCRA, Count: 3, Period: time.Hour}

// admitted decides reqs, all or nothing, until a decision is refused,
// and returns how many were admitted (at most 10).
func admitted(t *testing.T, s *redis.Store, reqs ...rate.Request) int {
	t.Helper()
	out := make([]rate.Decision, len(reqs))
	for n := range 10 {
		d, err := s.DecideAll(context.Background(), reqs, out)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			return n
		}
	}
	return 10
}

func resetReq(key string) rate.Request {
	return rate.Request{Key: key, Limit: resetLimit, Cost: 1}
}

// Reset deletes the Redis keys that hold the keys' states, named as the
// store names them (with its prefix, and a key's own hash tag kept), and
// leaves the other keys; a key Redis does not hold is no error.
//
// And it forgets the deny cache's refusals of requests over those keys,
// alone or with others: a key spent and then reset would otherwise stay
// refused, without asking Redis, until the cached refusal ran out, with
// the deny cache on. A refusal over other keys only is kept.
func TestReset(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	ctx := context.Background()
	for _, o := range []redis.Options{{Prefix: "reset:"}, {Prefix: "reset-nocache:", DisableDenyCache: true}} {
		s := redis.New(client, o)
		keys := []string{"alice", "user:{42}", "carol"}
		for _, k := range keys {
			if got := admitted(t, s, resetReq(k)); got != 3 {
				t.Fatalf("%s: admitted %d, want 3", k, got)
			}
			if srv.MustDo("EXISTS", s.Key(k)) != "1" {
				t.Fatalf("%s: no Redis key %s", k, s.Key(k))
			}
		}
		// Refusals of groups, cached (with the cache on) with the keys
		// they hold.
		if got := admitted(t, s, resetReq("bob"), resetReq("alice")); got != 0 {
			t.Fatalf("bob with alice: admitted %d, want 0", got)
		}
		if got := admitted(t, s, resetReq("bob"), resetReq("carol")); got != 0 {
			t.Fatalf("bob with carol: admitted %d, want 0", got)
		}
		cached := redis.DenyCacheLen(s)
		if err := s.Reset(ctx, "alice", "user:{42}", "never seen"); err != nil {
			t.Fatalf("%s: %v", o.Prefix, err)
		}
		for _, k := range []string{"alice", "user:{42}"} {
			if v := srv.MustDo("EXISTS", s.Key(k)); v != "0" {
				t.Errorf("%s: Redis key %s still there after the reset", o.Prefix, s.Key(k))
			}
		}
		if srv.MustDo("EXISTS", s.Key("carol")) != "1" {
			t.Errorf("%s: Redis key %s, not reset, is gone", o.Prefix, s.Key("carol"))
		}
		if !o.DisableDenyCache && (cached != 5 || redis.DenyCacheLen(s) != 2) {
			t.Errorf("%s: %d refusals cached before the reset, %d after, want 5 and 2 (carol's, and bob with carol)", o.Prefix, cached, redis.DenyCacheLen(s))
		}
		if got := admitted(t, s, resetReq("bob"), resetReq("alice")); got != 3 {
			t.Errorf("%s: bob with alice after alice's reset: admitted %d, want 3", o.Prefix, got)
		}
		if got := admitted(t, s, resetReq("user:{42}")); got != 3 {
			t.Errorf("%s: user:{42} after its reset: admitted %d, want 3", o.Prefix, got)
		}
		if got := admitted(t, s, resetReq("carol")); got != 0 {
			t.Errorf("%s: carol, not reset: admitted %d, want 0", o.Prefix, got)
		}
		if err := s.Reset(ctx); err != nil {
			t.Errorf("Reset of no key: %v", err)
		}
	}
}

// A key spent, then refused from the deny cache, passes at once after its
// reset: the case that the cache alone would get wrong, through a
// limiter with several limits (whose keys share a hash tag).
func TestResetThroughLimiter(t *testing.T) {
	srv := redistest.Start(t)
	s := redis.New(newClient(t, srv.Addr()), redis.Options{Prefix: "login:"})
	l, err := sluice.NewLimiter(sluice.LimiterOptions{Name: "login", Store: s, Limits: []rate.Limit{
		{Algorithm: rate.GCRA, Count: 3, Period: time.Hour},
		{Algorithm: rate.FixedWindow, Count: 10, Period: 24 * time.Hour},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allows := func() int {
		t.Helper()
		for n := range 10 {
			d, err := l.Allow(ctx, "alice")
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				return n
			}
		}
		return 10
	}
	if got := allows(); got != 3 {
		t.Fatalf("admitted %d, want 3", got)
	}
	if got := allows(); got != 0 {
		t.Fatalf("admitted %d once spent, want 0", got)
	}
	if st := s.Stats(); st.DenyCacheHits == 0 {
		t.Fatalf("stats %+v: no refusal from the deny cache", st)
	}
	if err := l.Reset(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if got := allows(); got != 3 {
		t.Errorf("admitted %d after the reset, want 3", got)
	}
}

// On a Redis Cluster, keys in different slots are reset by one call: a
// DEL of keys that span slots would be refused (CROSSSLOT). (The deny
// cache is off: TestReset has it.)
func TestResetCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := redis.New(newClient(t, c.Addrs()...), redis.Options{Prefix: "reset:", DisableDenyCache: true})
	keys := []string{"alice", "bob", "carol"}
	if redis.Slot(s.Key(keys[0])) == redis.Slot(s.Key(keys[1])) {
		t.Fatal("test keys share a slot; pick others")
	}
	for _, k := range keys {
		if got := admitted(t, s, resetReq(k)); got != 3 {
			t.Fatalf("%s: admitted %d, want 3", k, got)
		}
	}
	if err := s.Reset(context.Background(), keys[:2]...); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys[:2] {
		if got := admitted(t, s, resetReq(k)); got != 3 {
			t.Errorf("%s after its reset: admitted %d, want 3", k, got)
		}
	}
	if got := admitted(t, s, resetReq("carol")); got != 0 {
		t.Errorf("carol, not reset: admitted %d, want 0", got)
	}
}

// After Redis restarts, the client's connections to the old process are
// dead, and each fails on its first use: a reset, which may be repeated
// without harm, is sent again on a fresh one rather than fail for it.
func TestResetAfterRestart(t *testing.T) {
	srv := redistest.Start(t)
	s, err := redis.Dial("redis://"+srv.Addr(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Reset(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	srv.Restart()
	if err := s.Reset(context.Background(), "alice"); err != nil {
		t.Errorf("reset after Redis restarted: %v", err)
	}
}
