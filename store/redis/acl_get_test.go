package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// A Redis that refuses the script's GET (an ACL without it) fails the
// decision: the script reads a key whose value has the wrong type as
// fresh, but a refusal of its read is no such key, and reading it as
// fresh would admit every request while every decision succeeded.
func TestScriptReadRefusedFails(t *testing.T) {
	srv := redistest.Start(t)
	srv.MustDo("ACL", "SETUSER", "sluice", "on", ">pw", "~lim:*", "~{lim:*", "+@all", "-get")
	s, err := redis.Dial("redis://sluice:pw@"+srv.Addr()+"/0", redis.Options{Prefix: "lim:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	limit := rate.Limit{Algorithm: rate.GCRA, Count: 1, Period: time.Minute}
	for i := range 3 {
		d, err := s.Decide(ctx, rate.Request{Key: "k", Limit: limit, Cost: 1})
		if err == nil {
			t.Fatalf("decision %d with GET refused: %v and no error; want the refusal reported", i, d)
		}
		if !strings.Contains(err.Error(), "GET") {
			t.Errorf("decision %d: error %q does not name GET, the command to grant", i, err)
		}
	}
}
