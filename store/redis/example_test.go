package redis_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// exampleRedis is the address of a redis-server started for the examples.
var exampleRedis string

func TestMain(m *testing.M) {
	srv, stop, err := redistest.Main()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exampleRedis = "redis://" + srv.Addr()
	code := m.Run()
	stop()
	os.Exit(code)
}

// Every instance that dials the same Redis shares the same limits.
func Example() {
	s, err := redis.Dial(exampleRedis, redis.Options{Prefix: "example:"})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	limit, _ := rate.ParseLimit("3/m")
	for range 4 {
		d, err := s.Decide(context.Background(), rate.Request{Key: "user=42", Limit: limit, Cost: 1})
		if err != nil {
			panic(err) // Redis could not decide: see sluice.Fallback
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter > 19*time.Second)
	}
	// Output:
	// true 2 false
	// true 1 false
	// true 0 false
	// false 0 true
}

// Several limits on one request are decided all or nothing, in one script
// call. (On a Redis Cluster that takes keys with a common hash tag; keys
// in several slots are checked, then committed: see the package
// documentation.)
func ExampleStore_DecideAll() {
	s, err := redis.Dial(exampleRedis, redis.Options{Prefix: "example:"})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	perSecond, _ := rate.ParseLimit("2/s")
	perDay, _ := rate.ParseLimit("fixed_window 1000/d")
	reqs := []rate.Request{
		{Key: "{account=7}:s", Limit: perSecond, Cost: 1},
		{Key: "{account=7}:d", Limit: perDay, Cost: 1},
	}
	out := make([]rate.Decision, len(reqs))
	for range 3 {
		d, err := s.DecideAll(context.Background(), reqs, out)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, "day remaining:", out[1].Remaining)
	}
	// Output:
	// true day remaining: 999
	// true day remaining: 998
	// false day remaining: 998
}

// Stats counts what the store did: here two admissions, a refusal from
// Redis, and a refusal from the deny cache, which spared Redis a call.
func ExampleStore_Stats() {
	s, err := redis.Dial(exampleRedis, redis.Options{Prefix: "example-stats:"})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	limit, _ := rate.ParseLimit("2/m")
	for range 4 {
		if _, err := s.Decide(context.Background(), rate.Request{Key: "user=42", Limit: limit, Cost: 1}); err != nil {
			panic(err)
		}
	}
	st := s.Stats()
	fmt.Println("decisions:", st.Decisions, "refused:", st.Refused)
	fmt.Println("script calls:", st.ScriptCalls, "deny cache hits:", st.DenyCacheHits)
	// Output:
	// decisions: 4 refused: 2
	// script calls: 3 deny cache hits: 1
}

// In production, wrap the store in a sluice.Fallback, which decides by a
// failure mode when Redis is down or slow.
func ExampleDial() {
	// Each script call is bounded by the store, one timer a call; the
	// Fallback adds no bound of its own (Timeout -1).
	s, err := redis.Dial(exampleRedis, redis.Options{CallTimeout: 50 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	store := sluice.NewFallback(s, sluice.FallbackOptions{
		Mode:      sluice.FailLocal, // each instance falls back to its share
		Instances: 4,
		Timeout:   -1,
	})
	limit, _ := rate.ParseLimit("100/s")
	var out [1]rate.Decision
	d, source, err := store.DecideAllSource(context.Background(), []rate.Request{{Key: "ip=192.0.2.1", Limit: limit, Cost: 1}}, out[:])
	fmt.Println(d.Allowed, source, err)
	// Output: true primary <nil>
}
