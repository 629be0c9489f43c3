package sluice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/memory"
)

// ErrWouldExceedDeadline is wrapped by the error [Limiter.Wait] returns when
// the request could not pass before the context's deadline: Wait returns it
// at once instead of starting a wait that cannot end in time.
var ErrWouldExceedDeadline = errors.New("rate limit wait would exceed the context deadline")

// LimiterOptions configures a Limiter. Only Limits is required.
type LimiterOptions struct {
	// Limits are what every key must pass, all of them: a request passes
	// only if each limit admits it, and a refused request consumes nothing
	// from any (for example 10/s and 1000/d). At least one is required.
	Limits []rate.Limit
	// Name, if set, prefixes every key as "name:key", so that limiters
	// sharing a Store keep separate states for the same key. Limiters that
	// share a Store need distinct names, and every one of them a name: a
	// key of a limiter without one is stored without a prefix (on the
	// memory store, as it is; see Limiter), and may read as a named
	// limiter's ("api:alice" is limiter api's alice). A ':' or '%' in
	// the name is written "%3A" or "%25", so that no name and key can make
	// up another name's key (name "a" with key "b:c" and name "a:b" with
	// key "c"), and a brace "%7B" or "%7D", so that the name is no Redis
	// Cluster hash tag putting all its keys in one slot.
	//
	// The name must be printable ASCII (space to '~'): the rate limit
	// headers of httplimit and grpclimit name the limits by it, in
	// Structured Field strings that hold nothing else, and a problem body
	// names them the same way. Policy files keep to fewer characters still.
	Name string
	// Store keeps the keys' states. If nil, the limiter creates a memory
	// store (package store/memory) with its default options and Clock.
	Store Store
	// Clock is the clock Wait measures the time left with and sleeps on,
	// and the one the memory store created when Store is nil decides
	// with. If nil, the limiter uses rate.SystemClock{}. When a Store is
	// given, pass the clock that Store decides with.
	Clock rate.Clock
}

// Limiter applies one or more limits to keys: a user, an API key, an IP.
// It is safe for concurrent use; create it with [NewLimiter].
//
// Most callers want [Limiter.Allow], which decides at once, or
// [Limiter.Wait], which blocks until the request may pass (and gives up at
// once if that is after the context's deadline). To decide one request
// against several limiters (per account and per IP), combine their
// [Limiter.Requests] in [AllowAll].
//
// A key's state under each limit is stored under "key|" followed by what
// the state means (see [rate.Limit.StateName]): the whole limit for a
// bucket, "gcra 10/s", and the algorithm and window for a window,
// "fixed_window per month". So a program that changes a limit and starts
// again over a shared store (as a deploy on Redis does) starts a changed
// bucket afresh, rather than misread the state the old limit left (a
// lockout for the old limit's wait, or one algorithm's state read as
// another's), and a window whose count changed keeps what it counted: a
// monthly quota lowered from 10000 to 5000 after 9000 were used refuses
// the rest of the month. With several limits the key is written "{key}",
// a Redis Cluster hash tag, so that a key's limits live together. The
// Name, when there is one, comes first, followed by a colon.
//
// On the memory store, which lives and dies with the program, a single
// limit's key carries nothing after it: with no Name, a key is stored as
// it is, and Allow on a key the store already holds does not allocate. A
// program that builds a new limiter with another limit over the same
// memory store should give it another Name.
//
// On any store but the memory store, braces in a key are written "{(" for
// '{' and "{)" for '}', so that no key can pick its Redis Cluster slot,
// end the limiter's hash tag early, or name the key the Redis store would
// make of another (it puts a key with no hash tag in braces, see package
// store/redis). Keys without braces are stored as described above, and
// the memory store, which reads no hash tags, takes every key as it is.
type Limiter struct {
	name   string
	limits []rate.Limit
	// The store key of limits[i] is prefix + storeKey(key) + suffixes[i]
	// (with a hash tag around storeKey(key) when there are several
	// limits).
	prefix   string
	suffixes []string
	store    Store
	// mem is the memory store when a key is stored as it is under one
	// limit (first): AllowN then asks it with DecideKeyInto (see
	// decideInto).
	mem   *memory.Store
	first rate.Limit
	clock rate.Clock
	// escape is whether keys are stored with their braces written out:
	// on every store but the memory store, which reads no hash tags.
	escape bool
}

// decideKeyed decides AllowN's requests on any store, under the keys the
// limiter stores them under.
func (l *Limiter) decideKeyed(ctx context.Context, key string, cost int64) (rate.Decision, error) {
	if len(l.limits) == 1 {
		return l.store.Decide(ctx, rate.Request{Key: l.keyOf(l.storeKey(key), 0), Limit: l.limits[0], Cost: cost})
	}
	reqs := l.requests(key, cost)
	return l.store.DecideAll(ctx, reqs, make([]rate.Decision, len(reqs)))
}

// keyBraces writes the braces of a key (see Limiter).
var keyBraces = strings.NewReplacer("{", "{(", "}", "{)")

// escapeKey returns key with its braces written out, so that it holds no
// '}' and no Redis Cluster hash tag. A key without braces is returned as
// it is, without allocating.
func escapeKey(key string) string {
	if strings.IndexByte(key, '{') < 0 && strings.IndexByte(key, '}') < 0 {
		return key
	}
	return keyBraces.Replace(key)
}

// nameEscapes writes the colons and braces of a Name, and the '%' that
// writes them (see LimiterOptions.Name).
var nameEscapes = strings.NewReplacer("%", "%25", ":", "%3A", "{", "%7B", "}", "%7D")

// NewLimiter returns a limiter configured by opts. It fails if there is no
// limit, a limit is invalid, two limits are the same or count in the same
// windows (100/d and 1000/d: one count, see rate.Limit.StateName), or the
// name is not printable ASCII.
func NewLimiter(opts LimiterOptions) (*Limiter, error) {
	if len(opts.Limits) == 0 {
		return nil, errors.New("sluice: a limiter needs at least one limit")
	}
	for i := 0; i < len(opts.Name); i++ {
		if c := opts.Name[i]; c < 0x20 || c > 0x7e {
			return nil, fmt.Errorf("sluice: limiter name %q: byte %d is %#02x; a name must be printable ASCII (space to '~'), as the rate limit headers carry it", opts.Name, i, c)
		}
	}
	l := &Limiter{
		name:     opts.Name,
		limits:   append([]rate.Limit(nil), opts.Limits...),
		suffixes: make([]string, len(opts.Limits)),
		store:    opts.Store,
		clock:    opts.Clock,
	}
	if opts.Name != "" {
		// The prefix ends at its only ':', so two names never share keys.
		l.prefix = nameEscapes.Replace(opts.Name) + ":"
	}
	if l.clock == nil {
		l.clock = rate.SystemClock{}
	}
	if l.store == nil {
		l.store = memory.New(memory.Options{Clock: l.clock})
	}
	_, mem := l.store.(*memory.Store)
	l.escape = !mem
	for i, lim := range l.limits {
		if err := lim.Validate(); err != nil {
			return nil, fmt.Errorf("sluice: limit %d (%v): %w", i+1, lim, err)
		}
		state := lim.StateName()
		if len(l.limits) > 1 || !mem {
			l.suffixes[i] = "|" + state
		}
		for j := range i {
			switch {
			case l.limits[j].Same(&lim):
				return nil, fmt.Errorf("sluice: limits %d and %d are both %v", j+1, i+1, lim)
			case l.limits[j].StateName() == state:
				return nil, fmt.Errorf("sluice: limits %d (%v) and %d (%v) count in the same windows (%s), so each request would be counted twice on one counter; keep the lower", j+1, l.limits[j], i+1, lim, state)
			}
		}
	}
	l.first = l.limits[0]
	// The concrete type, not any store with a DecideKeyInto method: a
	// store that wraps a *memory.Store by embedding it would have its own
	// Decide bypassed.
	if mem, ok := l.store.(*memory.Store); ok && l.prefix == "" && len(l.limits) == 1 {
		l.mem = mem
	}
	return l, nil
}

// Name returns the limiter's name, as LimiterOptions.Name gave it.
func (l *Limiter) Name() string { return l.name }

// Clock returns the clock the limiter measures waits with and sleeps on
// (see LimiterOptions.Clock).
func (l *Limiter) Clock() rate.Clock { return l.clock }

// Limits returns the limiter's limits.
func (l *Limiter) Limits() []rate.Limit { return append([]rate.Limit(nil), l.limits...) }

// Store returns the store the limiter decides with, to share it with other
// limiters or pass it to [AllowAll].
func (l *Limiter) Store() Store { return l.store }

// Allow decides one request of cost 1 for key. See [Limiter.AllowN].
func (l *Limiter) Allow(ctx context.Context, key string) (d rate.Decision, err error) {
	err = l.decideInto(ctx, key, 1, &d)
	return d, err
}

// decideInto is AllowN writing its decision to *d.
//
// Allow and AllowN are one call to it, which lets the compiler inline them
// into their callers, and d is then the caller's own variable, which the
// memory store's step writes field by field. A Decision returned by value
// instead comes back in registers, and the caller (the Go compiler keeps no
// struct of more than four fields in registers) stores them to its stack
// and at once copies them 16 bytes at a time: loads that span two of those
// stores wait for them to reach the cache, as the CPU forwards only one
// store to a load. That wait was a tenth of a decision on one hot key
// (BENCHMARKS.md). d does not escape: the concrete store keeps no pointer.
func (l *Limiter) decideInto(ctx context.Context, key string, n int64, d *rate.Decision) (err error) {
	if n != 1 {
		// Said here, of the caller's key: the store would name its own.
		if err := l.checkCost(key, n); err != nil {
			return err
		}
	}
	if m := l.mem; m != nil {
		return m.DecideKeyInto(ctx, key, &l.first, n, d)
	}
	*d, err = l.decideKeyed(ctx, key, n)
	return err
}

// checkCost returns the error of a cost n that no limit could ever pass.
func (l *Limiter) checkCost(key string, n int64) error {
	if n < 0 {
		return fmt.Errorf("sluice: %q: %w %d", key, rate.ErrNegativeCost, n)
	}
	for _, lim := range l.limits {
		if n > lim.Capacity() {
			return fmt.Errorf("sluice: %q: %w: cost %d, capacity %d (%v)", key, rate.ErrCostExceedsCapacity, n, lim.Capacity(), lim)
		}
	}
	return nil
}

// AllowN decides a request of cost n for key, now: it consumes n from every
// limit, or refuses and consumes nothing. A refusal is not an error: the
// Decision says Allowed false and when to retry. The Decision combines the
// limits' (see [rate.Combine]). An error means the store could not decide,
// or n can never pass (it wraps [rate.ErrCostExceedsCapacity] or
// [rate.ErrNegativeCost]).
//
// With a leaky_bucket limit an allowed request may carry a Delay: the
// caller should wait that long before going ahead (Wait does). That is
// how a place is reserved ahead of time; there is no Reserve and Cancel
// as in golang.org/x/time/rate, whose token bucket lends from the future.
//
// ctx bounds what the store waits for: the memory store waits for nothing
// and decides even under a ctx already done, where a remote store fails
// with ctx's error.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (d rate.Decision, err error) {
	err = l.decideInto(ctx, key, n, &d)
	return d, err
}

// storeKey returns key as the limiter's store keeps it (see Limiter),
// before its prefix and suffix.
func (l *Limiter) storeKey(key string) string {
	if l.escape {
		return escapeKey(key)
	}
	return key
}

// Requests returns the requests AllowN(key, n) decides, one per limit, with
// the keys the limiter stores them under. Pass the requests of several
// limiters to [AllowAll] to decide them as one.
func (l *Limiter) Requests(key string, n int64) []rate.Request {
	return l.requests(key, n)
}

func (l *Limiter) requests(key string, n int64) []rate.Request {
	key = l.storeKey(key)
	reqs := make([]rate.Request, len(l.limits))
	for i, lim := range l.limits {
		reqs[i] = rate.Request{Key: l.keyOf(key, i), Limit: lim, Cost: n}
	}
	return reqs
}

// keyOf returns the store key of the i-th limit for key, escaped by
// storeKey: the prefix and key alone for a single limit, else the key as
// a hash tag, so that a Redis Cluster keeps a key's limits in one slot,
// and the limit's suffix.
func (l *Limiter) keyOf(key string, i int) string {
	if len(l.limits) == 1 {
		return l.prefix + key + l.suffixes[0]
	}
	return l.prefix + "{" + key + "}" + l.suffixes[i]
}

// AllowAll decides several requests as one, all or nothing: if any is
// refused, none consumes anything. Use it to apply limits on different keys
// to one request, such as a login limited per account and per IP; build the
// requests with [Limiter.Requests] (the limiters must share store and have
// distinct names). It returns the combined decision (see [rate.Combine]).
// On a Redis Cluster, keys in different slots are decided by a check and a
// commit per slot; a race between them refuses the request after the slots
// committed first have taken from it, and gives those back what it took.
// Until then others see the units taken, and a refund that fails leaves
// them taken (see package store/redis).
// With no request there is nothing to refuse: it allows at once, without
// asking the store. Requests of one key under one limit whose costs add up
// past its capacity can never pass together: an error wrapping
// rate.ErrCostExceedsCapacity (see [rate.CheckGroup]). One key under two
// different limits is an error too: a key holds one limit's state, and
// two limiters without names, or of one name, on one store give their
// requests the same keys.
func AllowAll(ctx context.Context, store Store, reqs ...rate.Request) (rate.Decision, error) {
	if len(reqs) == 0 {
		return rate.Combine(nil), nil
	}
	if err := rate.CheckGroup(reqs); err != nil {
		return rate.Decision{}, err
	}
	for j := range reqs {
		for k := range j {
			if reqs[k].Key == reqs[j].Key && !reqs[k].Limit.Same(&reqs[j].Limit) {
				return rate.Decision{}, fmt.Errorf("sluice: AllowAll: key %q under two limits, %v and %v: a key holds one limit's state (limiters that share a store need names of their own)", reqs[j].Key, reqs[k].Limit, reqs[j].Limit)
			}
		}
	}
	return store.DecideAll(ctx, reqs, make([]rate.Decision, len(reqs)))
}

// Wait blocks until a request of cost 1 for key may pass. See
// [Limiter.WaitN].
func (l *Limiter) Wait(ctx context.Context, key string) error {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until a request of cost n for key passes, then returns nil:
// for callers who would rather wait than be refused (a client pacing
// itself, a worker draining a queue). It sleeps on the limiter's Clock.
//
// If ctx has a deadline, WaitN never starts a wait that cannot end before
// it: when the request could pass only then or later (or less than 2µs
// before), or the deadline is less than 2µs away, it returns at once an
// error wrapping [ErrWouldExceedDeadline] that says how long it would
// have had to wait. A deadline already past gives an error wrapping
// context.DeadlineExceeded. If ctx ends while it sleeps, it returns ctx's
// error. A cost that can never pass returns its
// error at once, as in AllowN.
//
// The deadline is read on the limiter's Clock: with a fake clock (package
// rate/ratetest), give ctx a deadline on that clock's timeline, or none.
// Over a [Fallback] whose primary cannot decide, a FailClosed refusal is
// no limit's: WaitN returns at once an error wrapping [ErrStoreDown]
// rather than wait for the store to come back.
//
// WaitN holds nothing while it sleeps: when the wait is over it asks again,
// and if other callers have spent what it waited for, it waits again. So
// under steady contention for the same key it may wait indefinitely,
// unless ctx has a deadline, and callers are served in no order: unlike
// x/time/rate's reservations, one may wait several turns while others
// pass. For waiters served in turn, at a steady pace, use a leaky_bucket
// limit, whose queue gives each caller its place as it asks.
//
// With a leaky_bucket limit, WaitN takes a place in the queue only if its
// turn comes before the deadline, then sleeps until its turn. Should ctx end
// during that last sleep, the place is not given back, nor is it when the
// store's answer comes so late that the turn no longer falls before the
// deadline (WaitN then returns ErrWouldExceedDeadline at once).
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) error {
	if err := l.checkCost(key, n); err != nil {
		return err
	}
	reqs := l.requests(key, n)
	out := make([]rate.Decision, len(reqs))
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		deadline, bounded := ctx.Deadline()
		var left time.Duration
		if bounded {
			// Whatever is admitted must go ahead strictly before the
			// deadline, when ctx is done; the steps count in µs.
			switch left = deadline.Sub(l.clock.Now()); {
			case left <= 0:
				return fmt.Errorf("sluice: wait for %q: %w", key, context.DeadlineExceeded)
			case left < minWaitLeft:
				return fmt.Errorf("sluice: %q: %v left, too little to ask: %w", key, left, ErrWouldExceedDeadline)
			}
			for i := range reqs {
				// A leaky_bucket refuses a turn further away than this.
				// A gcra or token_bucket would reserve units within it
				// (see rate.Request.MaxDelay), which WaitN does not: it
				// holds nothing while it sleeps (see above).
				if l.limits[i].Algorithm == rate.LeakyBucket {
					reqs[i].MaxDelay = left - time.Microsecond
				}
			}
		}
		d, closed, err := l.decideForWait(ctx, reqs, out)
		if err != nil {
			return err
		}
		if closed && !d.Allowed {
			// A Fallback's FailClosed refusal names a wait of its own
			// making: waiting it out would wait for the store, as long
			// as it stays gone, in the name of a limit.
			return fmt.Errorf("sluice: wait for %q: the store could not decide, and its Fallback refuses: %w", key, ErrStoreDown)
		}
		// A wait the answer names is slept from when it came: the time
		// left for it is measured again then (the answer took time), and
		// only where there is a wait, as reading the clock is much of an
		// admission's cost.
		if d.Allowed {
			// A look (n = 0) is told how long the queue is, but took no
			// place in it: it has no turn to wait for.
			if d.Delay > 0 && n > 0 {
				if bounded {
					if left = deadline.Sub(l.clock.Now()); d.Delay >= left {
						return fmt.Errorf("sluice: %q would have to wait %v, %v left: %w", key, d.Delay, left, ErrWouldExceedDeadline)
					}
				}
				return l.clock.Sleep(ctx, d.Delay)
			}
			return nil
		}
		if bounded {
			left = deadline.Sub(l.clock.Now())
		}
		// A refusal always names a positive wait; never spin on a zero.
		sleep := max(d.RetryAfter, time.Microsecond)
		// Refuse at once a turn at or after the deadline, and a sleep
		// after which too little would be left to ask again.
		if need := l.wait(out); bounded && (need >= left || sleep > left-minWaitLeft) {
			return fmt.Errorf("sluice: %q would have to wait %v, %v left: %w", key, max(need, sleep), left, ErrWouldExceedDeadline)
		}
		if err := l.clock.Sleep(ctx, sleep); err != nil {
			return err
		}
	}
}

// sourcer is a store that says who decided, as Fallback does.
type sourcer interface {
	DecideAllSource(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, Source, error)
}

// decideForWait decides reqs for WaitN, and reports whether a Fallback
// refused them because its primary could not decide (FailClosed).
func (l *Limiter) decideForWait(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, bool, error) {
	if f, ok := l.store.(sourcer); ok {
		d, src, err := f.DecideAllSource(ctx, reqs, out)
		return d, src == SourceFailClosed, err
	}
	d, err := l.store.DecideAll(ctx, reqs, out)
	return d, false, err
}

// minWaitLeft is the least time before its context's deadline that WaitN
// asks the store with: it must admit only what goes ahead strictly before
// the deadline, and a MaxDelay of 1µs is the shortest it can ask for (0
// means no bound).
const minWaitLeft = 2 * time.Microsecond

// wait returns how long until the refused request whose per-limit
// decisions are ds could go ahead. That is RetryAfter for most limits. A
// leaky_bucket admits a request only to make it wait for its turn, which
// comes when the queue ahead has drained: ResetAfter away when it refused,
// its Delay when it admitted. Waiting RetryAfter and retrying could not
// bring that turn any closer.
func (l *Limiter) wait(ds []rate.Decision) time.Duration {
	var need time.Duration
	for i, d := range ds {
		leaky := l.limits[i].Algorithm == rate.LeakyBucket
		switch {
		case !d.Allowed && leaky:
			need = max(need, d.RetryAfter, d.ResetAfter)
		case !d.Allowed:
			need = max(need, d.RetryAfter)
		default:
			need = max(need, d.Delay)
		}
	}
	return need
}

// Reset forgets key's state under every one of the limiter's limits, so
// that its next request is decided as its first: after a successful
// login, to clear the failures counted against an account, or to unblock
// a customer. A request for key decided concurrently may land just before
// the reset (and be forgotten) or just after (and count). Over a
// [Fallback], the key is forgotten in the primary store and in the local
// store of FailLocal; an error then means the primary may still hold it.
// On a Redis store, other instances may still refuse key from their deny
// caches for up to a second (see package store/redis). The store must implement [Resetter]; if it does not,
// Reset returns an error wrapping errors.ErrUnsupported.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	r, ok := l.store.(Resetter)
	if !ok {
		return fmt.Errorf("sluice: reset %q: store %T cannot forget keys: %w", key, l.store, errors.ErrUnsupported)
	}
	// The keys of key's requests, built as AllowN builds them, so that
	// the reset forgets exactly what they counted.
	reqs := l.requests(key, 0)
	keys := make([]string, len(reqs))
	for i, req := range reqs {
		keys[i] = req.Key
	}
	if err := r.Reset(ctx, keys...); err != nil {
		return fmt.Errorf("sluice: reset %q: %w", key, err)
	}
	return nil
}
