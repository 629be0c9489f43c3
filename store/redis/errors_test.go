package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// The Redis store says a bad call in the memory store's words, under its
// own prefix (TestErrorTexts in store/memory has the same rows, but for
// DecideKey, which only the memory store has): a caller that moves from
// one store to the other, or reads the logs of both, sees one message for
// one mistake. Each row gives the whole text where it is short, or the
// start of it, and the sentinel errors.Is must still find. The store
// refuses each call before it sends anything.
func TestErrorTexts(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s := redis.New(newClient(t, srv.Addr()), redis.Options{})
	l := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Second}
	ok := rate.Request{Key: "k", Limit: l, Cost: 1}
	negative := rate.Request{Key: "k", Limit: l, Cost: -1}
	tests := []struct {
		name   string
		call   func() error
		text   string // the whole error text, or its start if prefix
		prefix bool
		is     error // what errors.Is must find, if not nil
	}{
		{"Decide, negative cost", func() error {
			_, err := s.Decide(ctx, negative)
			return err
		}, `redis store: key "k": negative cost -1`, false, rate.ErrNegativeCost},
		{"DecideAll, negative cost", func() error {
			_, err := s.DecideAll(ctx, []rate.Request{ok, negative}, make([]rate.Decision, 2))
			return err
		}, `redis store: key "k": negative cost -1`, false, rate.ErrNegativeCost},
		{"Decide, cost over capacity", func() error {
			_, err := s.Decide(ctx, rate.Request{Key: "k", Limit: l, Cost: 11})
			return err
		}, `redis store: key "k": cost exceeds the limit's capacity: cost 11, capacity 10 `, true, rate.ErrCostExceedsCapacity},
		{"Decide, invalid limit", func() error {
			_, err := s.Decide(ctx, rate.Request{Key: "k", Limit: rate.Limit{Count: 1}, Cost: 1})
			return err
		}, `redis store: key "k": invalid limit `, true, nil},
		{"DecideAll, out too short", func() error {
			_, err := s.DecideAll(ctx, []rate.Request{ok, ok}, make([]rate.Decision, 1))
			return err
		}, `redis store: out is shorter than reqs (1 < 2)`, false, nil},
	}
	for _, tt := range tests {
		err := tt.call()
		if err == nil {
			t.Errorf("%s: no error, want %q", tt.name, tt.text)
			continue
		}
		if got := err.Error(); tt.prefix && !strings.HasPrefix(got, tt.text) || !tt.prefix && got != tt.text {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.text)
		}
		if tt.is != nil && !errors.Is(err, tt.is) {
			t.Errorf("%s: %v is not %v", tt.name, err, tt.is)
		}
	}
	if got := srv.MustDo("DBSIZE"); got != "0" {
		t.Errorf("bad calls stored %s keys, want 0", got)
	}
}
