package server

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// The local store of a server on Redis sees decisions only while Redis is
// down: its watch reclaims what an outage left once it is fresh, where
// the store kept it until the next outage.
func TestSweepEveryReclaimsTheLocalStore(t *testing.T) {
	clock := ratetest.NewClock(time.Unix(1_800_000_000, 0))
	local := memory.New(memory.Options{Clock: clock})
	for i := range 100 {
		local.Decide(context.Background(), rate.Request{Key: fmt.Sprint("k", i), Limit: rate.Limit{Count: 20, Period: time.Second}, Cost: 1})
	}
	clock.Advance(time.Minute)
	s := &Server{log: slog.New(slog.DiscardHandler)}
	defer s.watchMemory(&memoryWatch{st: local, name: "local", sweep: true, every: time.Millisecond})()
	deadline := time.Now().Add(5 * time.Second)
	for local.Len() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := local.Len(); n != 0 {
		t.Errorf("%d keys left, fresh a minute ago, want none", n)
	}
}
