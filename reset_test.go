package sluice_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// recordsResets is a store the limiter cannot tell from a Redis store (a
// memory store behind another type) that records the keys it resets.
type recordsResets struct {
	*memory.Store
	resets [][]string
}

func (r *recordsResets) Reset(ctx context.Context, keys ...string) error {
	r.resets = append(r.resets, keys)
	return r.Store.Reset(ctx, keys...)
}

// admits decides requests of cost 1 for key until one is refused, and
// returns how many were admitted (at most 100).
func admits(t *testing.T, l *sluice.Limiter, key string) int {
	t.Helper()
	for n := 0; n < 100; n++ {
		d, err := l.Allow(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			return n
		}
	}
	return 100
}

// A reset key passes as a key never seen, under every limit of the
// limiter (here the daily limit would refuse the third request after the
// reset had it been kept), whatever its name and braces, on the memory
// store and on a store whose keys are written as in Redis; other keys
// stay spent. The store is asked to reset exactly the keys the key's
// requests are stored under, all in one call.
func TestLimiterReset(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name   string
		limits []string
	}{
		{"", []string{"3/h"}},
		{"login", []string{"3/h"}},
		{"", []string{"3/h", "fixed_window 5/d"}},
		{"a{pi}", []string{"3/h", "fixed_window 5/d"}},
	} {
		for _, wrapped := range []bool{false, true} {
			clock := ratetest.NewClock(start.Add(time.Hour))
			mem := memory.New(memory.Options{Clock: clock})
			var store sluice.Store = mem
			rec := &recordsResets{Store: mem}
			if wrapped {
				store = rec
			}
			l, err := sluice.NewLimiter(sluice.LimiterOptions{Name: tt.name, Limits: limits(t, tt.limits...), Store: store, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"alice", "{bob}", "a}|gcra 10/s"} {
				if got := admits(t, l, key); got != 3 {
					t.Fatalf("%q %v: %q admitted %d, want 3", tt.name, tt.limits, key, got)
				}
				if got := admits(t, l, "carol"+key); got != 3 {
					t.Fatalf("%q %v: %q admitted %d, want 3", tt.name, tt.limits, "carol"+key, got)
				}
				if err := l.Reset(ctx, key); err != nil {
					t.Fatalf("%q %v: Reset(%q): %v", tt.name, tt.limits, key, err)
				}
				if got := admits(t, l, key); got != 3 {
					t.Errorf("%q %v (wrapped: %t): %q admitted %d after its reset, want 3 again", tt.name, tt.limits, wrapped, key, got)
				}
				if got := admits(t, l, "carol"+key); got != 0 {
					t.Errorf("%q %v (wrapped: %t): %q, not reset, admitted %d, want 0", tt.name, tt.limits, wrapped, "carol"+key, got)
				}
				if !wrapped {
					continue
				}
				var want []string
				for _, r := range l.Requests(key, 0) {
					want = append(want, r.Key)
				}
				if len(rec.resets) != 1 || !slices.Equal(rec.resets[0], want) {
					t.Errorf("%q %v: Reset(%q) reset store keys %q, want %q in one call", tt.name, tt.limits, key, rec.resets, want)
				}
				rec.resets = nil
			}
			if err := l.Reset(ctx, "never seen"); err != nil {
				t.Errorf("Reset of a key never seen: %v", err)
			}
		}
	}
}

// A store that cannot forget a key makes Reset fail with
// errors.ErrUnsupported, and the key stays spent.
func TestLimiterResetUnsupported(t *testing.T) {
	clock := ratetest.NewClock(start)
	l, err := sluice.NewLimiter(sluice.LimiterOptions{Limits: limits(t, "2/h"), Store: shared{memory.New(memory.Options{Clock: clock})}, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	admits(t, l, "alice")
	if err := l.Reset(context.Background(), "alice"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reset on a store without Reset: %v, want errors.ErrUnsupported", err)
	}
	if got := admits(t, l, "alice"); got != 0 {
		t.Errorf("admitted %d after a reset that failed, want 0", got)
	}
}

// resettable is a breakable primary that can reset its keys, and fails
// to while it is broken. In state 2 its Reset hangs until its context
// ends.
type resettable struct {
	*breakable
	mem *memory.Store
}

func (r *resettable) Reset(ctx context.Context, keys ...string) error {
	switch r.state.Load() {
	case 0:
		return r.mem.Reset(ctx, keys...)
	case 2:
		<-ctx.Done()
		return ctx.Err()
	}
	return errDown
}

// remaining returns what a look at key under lim in s says is left.
func remaining(t *testing.T, s sluice.Store, key string, lim rate.Limit) int64 {
	t.Helper()
	d, err := s.Decide(context.Background(), rate.Request{Key: key, Limit: lim, Cost: 0})
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// A Fallback resets a key in its primary and in its local store. When the
// primary cannot, Reset says so (its error, or errors.ErrUnsupported for
// a primary without Reset), and the local store forgets the key anyway;
// a primary that hangs is given Timeout. Other keys are kept.
func TestFallbackReset(t *testing.T) {
	ctx := context.Background()
	lim := rate.Limit{Algorithm: rate.GCRA, Count: 2, Period: time.Hour}
	clock := ratetest.NewClock(start)
	primary, local := memory.New(memory.Options{Clock: clock}), memory.New(memory.Options{Clock: clock})
	spendAll := func() {
		for _, s := range []*memory.Store{primary, local} {
			for _, k := range []string{"k", "other"} {
				if _, err := s.Decide(ctx, rate.Request{Key: k, Limit: lim, Cost: 2}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	check := func(what string, primaryLeft, localLeft int64) {
		t.Helper()
		if got := remaining(t, primary, "k", lim); got != primaryLeft {
			t.Errorf("%s: the primary has %d left for k, want %d", what, got, primaryLeft)
		}
		if got := remaining(t, local, "k", lim); got != localLeft {
			t.Errorf("%s: the local store has %d left for k, want %d", what, got, localLeft)
		}
		if remaining(t, primary, "other", lim) != 0 || remaining(t, local, "other", lim) != 0 {
			t.Errorf("%s: a key not reset was forgotten", what)
		}
	}

	r := &resettable{breakable: &breakable{Store: primary}, mem: primary}
	f := sluice.NewFallback(r, sluice.FallbackOptions{Mode: sluice.FailLocal, Local: local, Clock: clock, Timeout: time.Millisecond})
	spendAll()
	if err := f.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	check("primary up", 2, 2)

	spendAll()
	r.state.Store(1)
	if err := f.Reset(ctx, "k"); !errors.Is(err, errDown) {
		t.Errorf("primary down: Reset returned %v, want its error", err)
	}
	check("primary down", 0, 2)

	spendAll()
	r.state.Store(2)
	if err := f.Reset(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("primary hung: Reset returned %v, want context.DeadlineExceeded after Timeout", err)
	}
	check("primary hung", 0, 2)

	spendAll()
	f = sluice.NewFallback(shared{primary}, sluice.FallbackOptions{Mode: sluice.FailLocal, Local: local, Clock: clock})
	if err := f.Reset(ctx, "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("primary without Reset: Reset returned %v, want errors.ErrUnsupported", err)
	}
	check("primary without Reset", 0, 2)

	// Without FailLocal there is no local store: the primary alone.
	r.state.Store(0)
	f = sluice.NewFallback(r, sluice.FallbackOptions{Mode: sluice.FailOpen, Clock: clock})
	if err := f.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	check("fail_open", 2, 2)
}

// A limiter over a Fallback resets through it: the key is forgotten in
// the primary and in the local store.
func TestLimiterResetFallback(t *testing.T) {
	clock := ratetest.NewClock(start)
	primary, local := memory.New(memory.Options{Clock: clock}), memory.New(memory.Options{Clock: clock})
	r := &resettable{breakable: &breakable{Store: primary}, mem: primary}
	f := sluice.NewFallback(r, sluice.FallbackOptions{Mode: sluice.FailLocal, Local: local, Clock: clock})
	l, err := sluice.NewLimiter(sluice.LimiterOptions{Limits: limits(t, "2/h", "5/d"), Store: f, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	admits(t, l, "alice")
	for _, req := range l.Requests("alice", 0) {
		if _, err := local.Decide(context.Background(), rate.Request{Key: req.Key, Limit: req.Limit, Cost: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Reset(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	for _, req := range l.Requests("alice", 0) {
		if p, lo := remaining(t, primary, req.Key, req.Limit), remaining(t, local, req.Key, req.Limit); p != req.Limit.Capacity() || lo != req.Limit.Capacity() {
			t.Errorf("%s after the reset: %d left in the primary, %d in the local store, want %d", req.Key, p, lo, req.Limit.Capacity())
		}
	}
}
