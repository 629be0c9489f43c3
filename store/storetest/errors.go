package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
)

// ErrorTexts checks that s, a fresh store whose errors begin with prefix
// ("memory store: ", "redis store: "), says each bad call in the words
// every store uses, under its own prefix, and keeps the sentinel errors.Is
// must find: a caller that moves from one store to the other, or reads the
// logs of both, sees one message for one mistake. A row gives the whole
// text where it is short, or the start of it.
func ErrorTexts(t *testing.T, s sluice.Store, prefix string) {
	t.Helper()
	ctx := context.Background()
	l := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Second}
	ok := rate.Request{Key: "k", Limit: l, Cost: 1}
	negative := rate.Request{Key: "k", Limit: l, Cost: -1}
	for _, tt := range []struct {
		name  string
		call  func() error
		text  string // after prefix: the whole error text, or its start if start
		start bool
		is    error // what errors.Is must find, if not nil
	}{
		{"Decide, negative cost", func() error {
			_, err := s.Decide(ctx, negative)
			return err
		}, `key "k": negative cost -1`, false, rate.ErrNegativeCost},
		{"DecideAll, negative cost", func() error {
			_, err := s.DecideAll(ctx, []rate.Request{ok, negative}, make([]rate.Decision, 2))
			return err
		}, `key "k": negative cost -1`, false, rate.ErrNegativeCost},
		{"Decide, cost over capacity", func() error {
			_, err := s.Decide(ctx, rate.Request{Key: "k", Limit: l, Cost: 11})
			return err
		}, `key "k": cost exceeds the limit's capacity: cost 11, capacity 10 `, true, rate.ErrCostExceedsCapacity},
		{"Decide, invalid limit", func() error {
			_, err := s.Decide(ctx, rate.Request{Key: "k", Limit: rate.Limit{Count: 1}, Cost: 1})
			return err
		}, `key "k": invalid limit `, true, nil},
		{"DecideAll, out too short", func() error {
			_, err := s.DecideAll(ctx, []rate.Request{ok, ok}, make([]rate.Decision, 1))
			return err
		}, `out is shorter than reqs (1 < 2)`, false, nil},
	} {
		want := prefix + tt.text
		err := tt.call()
		switch got := fmt.Sprint(err); {
		case err == nil:
			t.Errorf("%s: no error, want %q", tt.name, want)
		case tt.start && !strings.HasPrefix(got, want), !tt.start && got != want:
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, want)
		case tt.is != nil && !errors.Is(err, tt.is):
			t.Errorf("%s: %v is not %v", tt.name, err, tt.is)
		}
	}
}
