package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// A key that holds anything but its limit's state reads as fresh, and the
// decision's state replaces it: a value of another type (a list, a hash, a
// set), a string of the wrong length, another algorithm's state. None
// fails the decision, alone or in a group, and after it the key holds a
// state that expires.
func TestForeignValueReadsAsFresh(t *testing.T) {
	srv := redistest.Start(t)
	s := redis.New(newClient(t, srv.Addr()), redis.Options{DisableDenyCache: true})
	ctx := context.Background()
	// Each puts something else under the Redis key of request key k.
	foreign := map[string]func(alg rate.Algorithm, k string){
		"list": func(_ rate.Algorithm, k string) { srv.MustDo("RPUSH", s.Key(k), "x") },
		"hash": func(_ rate.Algorithm, k string) { srv.MustDo("HSET", s.Key(k), "f", "v") },
		"set":  func(_ rate.Algorithm, k string) { srv.MustDo("SADD", s.Key(k), "m") },
		"short": func(alg rate.Algorithm, k string) {
			srv.MustDo("SET", s.Key(k), string([]byte{byte(alg), 1, 2, 3}))
		},
		"other-algorithm": func(alg rate.Algorithm, k string) {
			other := rate.Algorithm((int(alg) + 1) % len(rate.Algorithms()))
			if _, err := s.Decide(ctx, rate.Request{Key: k, Limit: rate.Limit{Algorithm: other, Count: 3, Period: time.Hour}, Cost: 3}); err != nil {
				t.Fatal(err)
			}
		},
	}
	check := func(what, key string, d rate.Decision, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return
		}
		if !d.Allowed || d.Remaining != 2 {
			t.Errorf("%s: %v, want admitted with 2 of 3 remaining, as from a fresh state", what, d)
		}
		if typ := srv.MustDo("TYPE", s.Key(key)); typ != "string" {
			t.Errorf("%s: the key is a %s after the decision, want the state, a string", what, typ)
		}
		if pttl := srv.MustDo("PTTL", s.Key(key)); pttl == "-1" || pttl == "-2" {
			t.Errorf("%s: PTTL %s after an admitted decision, want an expiry", what, pttl)
		}
	}
	for _, alg := range rate.Algorithms() {
		l := rate.Limit{Algorithm: alg, Count: 3, Period: time.Hour}
		for name, put := range foreign {
			key := alg.String() + ":" + name
			put(alg, key)
			d, err := s.Decide(ctx, rate.Request{Key: key, Limit: l, Cost: 1})
			check(alg.String()+" over a "+name, key, d, err)

			// In a group, beside a key that holds its own state.
			a, b := "{"+key+"}a", "{"+key+"}b"
			put(alg, a)
			out := make([]rate.Decision, 2)
			_, err = s.DecideAll(ctx, []rate.Request{{Key: b, Limit: l, Cost: 1}, {Key: a, Limit: l, Cost: 1}}, out)
			check(alg.String()+" over a "+name+" in a group", a, out[1], err)
			check(alg.String()+" beside a "+name+" in a group", b, out[0], err)
		}
	}
}
