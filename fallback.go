package sluice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/deadline"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/memory"
)

// FailureMode says what a [Fallback] does while its primary store cannot
// decide. The zero value is FailOpen.
type FailureMode uint8

const (
	// FailOpen admits every request: availability first. The decisions
	// report the full capacity less the request's cost as remaining.
	FailOpen FailureMode = iota
	// FailClosed refuses every request, with FallbackOptions.RetryAfter:
	// protection first. A look (cost 0), which spends nothing, passes
	// with nothing remaining.
	FailClosed
	// FailLocal decides in a local store, each instance with its share of
	// every limit among FallbackOptions.Instances (see
	// [rate.Limit.Share]): a bucket refills at exactly that fraction of
	// the rate and holds its burst divided, rounded up; a window gets its
	// count divided, rounded down, or 1 unit per as many windows as it
	// takes where the count is below Instances. However traffic is spread
	// over the instances, the fleet as a whole then admits no more than
	// the limit, but for a bucket's burst, by at most Instances−1 units
	// once, and a window's count below Instances, up to Instances in one
	// window; only traffic spread evenly gets the whole limit.
	FailLocal
	// FailError decides nothing: it reports. A call that finds the primary
	// failing returns the primary's error, and every call after it, until
	// a probe succeeds, returns an error wrapping [ErrStoreDown] at once,
	// without reaching the primary. The caller applies its own policy,
	// which may differ from request to request, while a dead primary costs
	// it one slow call per backoff period rather than one per request.
	FailError
)

// ErrStoreDown is the error a [Fallback] in [FailError] mode returns while
// its primary is known to be down: the call was not sent.
var ErrStoreDown = errors.New("sluice: store down")

var failureModeNames = [...]string{FailOpen: "fail_open", FailClosed: "fail_closed", FailLocal: "local", FailError: "error"}

// String returns fail_open, fail_closed, local or error.
func (m FailureMode) String() string {
	if int(m) < len(failureModeNames) {
		return failureModeNames[m]
	}
	return fmt.Sprintf("FailureMode(%d)", uint8(m))
}

// ParseFailureMode returns the mode with the given name: fail_open,
// fail_closed, local or error, or open and closed, as a policy file's
// on_store_error spells them. An unknown name returns an error, and
// FailClosed rather than a mode that lets requests through.
func ParseFailureMode(name string) (FailureMode, error) {
	switch name {
	case "open":
		return FailOpen, nil
	case "closed":
		return FailClosed, nil
	}
	for m, n := range failureModeNames {
		if n == name {
			return FailureMode(m), nil
		}
	}
	return FailClosed, fmt.Errorf("unknown failure mode %q (want fail_open, fail_closed, local or error)", name)
}

// Source says who made a decision: the primary store or, while it is
// down, the failure mode.
type Source uint8

const (
	// SourcePrimary: the primary store decided.
	SourcePrimary Source = iota
	// SourceFailOpen: the primary could not decide; admitted by FailOpen.
	SourceFailOpen
	// SourceFailClosed: the primary could not decide; refused by FailClosed.
	SourceFailClosed
	// SourceLocal: the primary could not decide; the local store decided.
	SourceLocal
	// SourceError: the primary could not decide, or was known to be down;
	// FailError returned an error and nothing was decided.
	SourceError
)

var sourceNames = [...]string{SourcePrimary: "primary", SourceFailOpen: "fail_open", SourceFailClosed: "fail_closed", SourceLocal: "local", SourceError: "error"}

// String returns primary, fail_open, fail_closed, local or error.
func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

// Defaults of FallbackOptions.
const (
	DefaultFallbackTimeout    = 50 * time.Millisecond
	DefaultFallbackRetryAfter = time.Second
	DefaultProbeMinBackoff    = 100 * time.Millisecond
	DefaultProbeMaxBackoff    = 5 * time.Second
	DefaultFallbackMaxSilence = time.Second
)

// FallbackOptions configures a Fallback. The zero value fails open after a
// 50ms timeout.
type FallbackOptions struct {
	// Mode is what to do while the primary is down; the zero value is
	// FailOpen.
	Mode FailureMode
	// Timeout bounds each call to the primary (a context deadline on the
	// call); a call that takes longer counts as a failure. Zero means
	// DefaultFallbackTimeout (50ms); negative means no bound but the
	// caller's context, for a primary that bounds its own calls (the
	// Redis store with CallTimeout), which spares a timer per decision.
	Timeout time.Duration
	// MaxSilence is how long the primary may complete no call before a
	// call that ends by its caller's deadline (or by another call's, as
	// the primary reports: see [Fallback]) counts as its failure. A
	// caller whose deadline comes before Timeout (Envoy sends one of about
	// 20ms with every call) ends the call itself, so a hung primary
	// (connections open, nothing answered) would never fail one; a primary
	// that still completes calls, however slowly some go under load, is
	// not hung, and its callers' deadlines stay theirs. One slower than
	// every caller's deadline completes none, and is down as a hung one
	// is, until a probe is answered within its caller's deadline. The
	// silence counts from the end of the first call left unanswered after
	// a success, idle time included: two such calls further apart than
	// MaxSilence take an idle primary down, until the next probe. While
	// the primary is down, a probe ended by its caller's deadline is a
	// failed probe, however short the silence. Set it to the primary's
	// own bound when Timeout is negative. Zero means Timeout if positive,
	// else DefaultFallbackMaxSilence (1s); negative means a call ended by
	// its caller's deadline never counts, a probe's neither. A call its
	// caller cancelled never counts, unless within 2ms of its deadline:
	// that is how a gRPC server sees its client's deadline pass.
	MaxSilence time.Duration
	// RetryAfter is the RetryAfter of FailClosed's refusals, and of
	// FailLocal's refusals of a cost above an instance's share. Zero or
	// negative means DefaultFallbackRetryAfter (1s).
	RetryAfter time.Duration
	// Local is FailLocal's store. If nil, a memory store (store/memory) is
	// made with Clock. A memory store reclaims the keys that turn fresh as
	// it decides, which this one does only while the primary is down: it
	// holds what the last outage left, up to its MaxKeys. To free that
	// memory, give a memory store of your own and call its Sweep now and
	// then, as sluice serve does every minute.
	Local Store
	// Instances is how many instances share the primary's limits; FailLocal
	// gives each the limits divided by it (see [rate.Limit.Share]). Zero or
	// negative means 1.
	Instances int
	// MinBackoff is how long after the primary fails the first probe is
	// sent; each failed probe doubles the wait, up to MaxBackoff. Zero or
	// negative means DefaultProbeMinBackoff (100ms) and
	// DefaultProbeMaxBackoff (5s); a MaxBackoff below MinBackoff means
	// MinBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives one line when the primary goes down, one when a
	// probe finds it failing for another reason than the last, and one
	// when it recovers. Nil means no logging.
	Logger *slog.Logger
	// Clock times the probes' backoff and the silences MaxSilence bounds,
	// drives the local store made for FailLocal, and dates the outages
	// (the "down for" of ErrStoreDown's errors and of the recovery's log
	// line). Timeout and the callers' deadlines run on the wall clock:
	// with a fake Clock that does not advance, a primary that hangs while
	// every caller's deadline comes before Timeout is never declared down,
	// its silence never growing. Nil means rate.SystemClock.
	Clock rate.Clock
}

// FallbackStats counts what a Fallback has done since it was created.
type FallbackStats struct {
	// Down reports whether the primary is considered down now, or, for a
	// primary in partitions (a Redis Cluster), one of its partitions that
	// still holds keys.
	Down bool
	// Primary counts decisions the primary made, the refusals from its
	// deny cache included; Fallback counts those the failure mode made
	// (with FailError, the calls it answered with an error). A call the
	// local store of FailLocal answered with an error, as when its caller's
	// context ended, made none.
	Primary, Fallback uint64
	// Failures counts calls to the primary that failed or timed out,
	// those ended by their caller's deadline, or another call's, after
	// MaxSilence included. A call sent before the primary's latest
	// recovery counts if it failed or timed out, though it does not take
	// the primary down; if its caller's deadline, or another call's, ended
	// it, it does not count.
	Failures uint64
	// Probes counts calls sent to the primary while it, or a partition
	// they were for, was down.
	Probes uint64
	// Outages counts transitions to down; Recoveries transitions back up.
	// Each partition's count: two masters of a cluster down are two
	// outages.
	Outages, Recoveries uint64
}

// Fallback is a Store that decides through a primary store (typically
// store/redis) and, when the primary fails or is slower than Timeout,
// through its FailureMode instead. It is safe for concurrent use; create it
// with [NewFallback].
//
// After a failure the primary is considered down: calls go straight to the
// failure mode, and one call at a time is sent to the primary as a probe,
// after MinBackoff, then after twice as long each time a probe fails, up to
// MaxBackoff. The first probe that succeeds brings the primary back. So a
// dead server costs one slow call per backoff period, not one per request.
// A primary that fails again less than MaxBackoff after it came back
// starts its next outage from twice the backoff it had, not from
// MinBackoff: one that answers probes but fails the calls after them (a
// full Redis answers a refusal, which writes nothing) flaps ever more
// slowly, up to once a MaxBackoff.
// Only calls sent since the primary's latest transition move it: a call
// sent before an outage and answered after it does not bring the primary
// back (the answer may predate the outage), and one sent before a recovery
// that fails after it, hung in the outage that is over, does not take the
// primary down again. Each transition is logged once and counted in
// [Fallback.Stats]. With [FailError] the failure mode is the caller's: the
// calls it would have decided return an error instead.
//
// Requests that could never be decided (an invalid limit, a cost above the
// capacity, a negative cost) return their error without a fallback, and so
// does a call whose own context ends first: those are the caller's. Such a
// call is no failure of the primary, unless its caller's deadline passed
// while the primary had completed no call for longer than MaxSilence: a
// hung primary is declared down even when every caller's deadline comes
// before Timeout. A call that the primary reports another call's deadline
// ended (the Redis store's client closes a connection at the deadline of
// the call on it, and fails the calls queued behind it) is decided by the
// failure mode, its caller's time not being up, and counts against the
// primary as that other call would: only after MaxSilence, since a
// primary slow under load still answers. [Fallback.DecideAllSource] also
// says who decided.
//
// A primary whose keys are held by servers that fail apart, as the Redis
// store's are on a Redis Cluster, is taken server by server: each of its
// partitions is down, probed and back on its own, with its own silences,
// so a dead master sends its own keys to the failure mode and the others
// are still decided by their masters. A call over keys of several
// partitions falls back while any of them is down, and when it fails it
// is news of the partition its error names, or of each of them if it
// names none.
type Fallback struct {
	primary    Store
	part       partitioned // primary, if it has partitions; else nil
	local      Store
	mode       FailureMode
	timeout    time.Duration
	silence    time.Duration // MaxSilence, resolved; negative: never
	retryAfter time.Duration
	instances  int64
	minBackoff time.Duration
	maxBackoff time.Duration
	log        *slog.Logger
	clock      rate.Clock

	// whole is the breaker of the primary as a whole, or of the keys
	// whose partition the primary does not know. parts holds the
	// breakers of partitions 1 and up (index 0 is whole), made as calls
	// first meet them; partsMu serializes their making.
	whole   *breaker
	parts   atomic.Pointer[[]*breaker]
	partsMu sync.Mutex

	fallbackN, failures, probes, outages, recoveries atomic.Uint64
	// The primary's decisions are the sum of its breakers' done, less
	// sharedN, which counts the breakers past the first of each call over
	// several partitions, and with cachedN, its decisions from its deny
	// cache, which done leaves out: they are no sign of life.
	sharedN, cachedN atomic.Uint64
}

// breaker is what a Fallback knows of the primary, or of one of its
// partitions: whether it is down, its probes, and its silences.
type breaker struct {
	name string // the partition's name for logs; "" for the whole primary
	part int    // the partition's number; 0 for the whole primary

	// gen counts the transitions, down and back up: it is odd while down.
	// A call takes it when it is sent, and what becomes of the call counts
	// only as news of that gen (see fail and up). Written under mu, read
	// without.
	gen     atomic.Uint64
	mu      sync.Mutex // guards the fields below
	probing bool       // a probe is on the wire
	backoff time.Duration
	next    time.Time // when the next probe may go
	since   time.Time // when it went down
	upAt    time.Time // when it last came back; zero before its first outage
	lastErr error     // its last failure while down

	// done counts the calls it completed: its signs of life. The last
	// silence (see silentFor) began at silentSince, when done was
	// silentAt-1, and runs while they still match. silentSince is guarded
	// by mu; silentAt is written under mu and read without.
	done        atomic.Uint64
	silentSince time.Time
	silentAt    atomic.Uint64
}

// partitioned is a primary whose keys are held by servers that fail apart,
// as a Redis Cluster's masters do (store/redis implements it). A Fallback
// keeps a breaker for each partition, so one dead server sends its own
// keys to the failure mode and no others.
type partitioned interface {
	// Partition returns the partition that holds key, as far as the store
	// knows: a number from 1 that names one server for the store's life,
	// or 0 if the store does not know.
	Partition(key string) int
	// FailedPartition returns the partition whose failure err, returned by
	// the store, reports, or 0 if it names none.
	FailedPartition(err error) int
	// PartitionName returns partition p's name for logs.
	PartitionName(p int) string
	// PartitionHolds reports whether partition p may still hold keys: one
	// that has handed all its keys on (a dead master replaced by its
	// replica) no longer counts as the primary being down. Partition 0
	// holds keys while the store knows no partitions.
	PartitionHolds(p int) bool
}

var _ Store = (*Fallback)(nil)

// NewFallback returns a Fallback over primary. It panics if primary is
// nil: a fallback has nothing to stand in for.
func NewFallback(primary Store, opts FallbackOptions) *Fallback {
	if primary == nil {
		panic("sluice: NewFallback: nil primary store")
	}
	f := &Fallback{
		primary:    primary,
		local:      opts.Local,
		mode:       opts.Mode,
		timeout:    opts.Timeout,
		silence:    opts.MaxSilence,
		retryAfter: opts.RetryAfter,
		instances:  int64(max(1, opts.Instances)),
		minBackoff: opts.MinBackoff,
		maxBackoff: opts.MaxBackoff,
		log:        opts.Logger,
		clock:      opts.Clock,
	}
	if f.timeout == 0 {
		f.timeout = DefaultFallbackTimeout
	}
	if f.silence == 0 {
		f.silence = DefaultFallbackMaxSilence
		if f.timeout > 0 {
			f.silence = f.timeout
		}
	}
	if f.retryAfter <= 0 {
		f.retryAfter = DefaultFallbackRetryAfter
	}
	if f.minBackoff <= 0 {
		f.minBackoff = DefaultProbeMinBackoff
	}
	if f.maxBackoff <= 0 {
		f.maxBackoff = DefaultProbeMaxBackoff
	}
	f.maxBackoff = max(f.maxBackoff, f.minBackoff)
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.clock == nil {
		f.clock = rate.SystemClock{}
	}
	if f.mode == FailLocal && f.local == nil {
		f.local = memory.New(memory.Options{Clock: f.clock})
	}
	f.part, _ = primary.(partitioned)
	f.whole = &breaker{}
	f.parts.Store(&[]*breaker{f.whole})
	return f
}

// Decide decides one request. See Store.
func (f *Fallback) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	var out [1]rate.Decision
	d, _, err := f.DecideAllSource(ctx, []rate.Request{r}, out[:])
	return d, err
}

// DecideAll decides reqs as one, all or nothing. See Store.
func (f *Fallback) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	d, _, err := f.DecideAllSource(ctx, reqs, out)
	return d, err
}

// DecideAllSource is DecideAll that also says who decided: the primary, or
// the failure mode. Middleware can use it to mark degraded decisions (in a
// header, a log line or a metric).
func (f *Fallback) DecideAllSource(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, Source, error) {
	if err := rate.CheckOut(reqs, out); err != nil {
		return rate.Decision{}, SourcePrimary, fmt.Errorf("fallback: %w", err)
	}
	for _, r := range reqs {
		if err := r.Check(); err != nil {
			return rate.Decision{}, SourcePrimary, err
		}
	}
	if err := rate.CheckGroup(reqs); err != nil {
		return rate.Decision{}, SourcePrimary, err
	}
	if err := ctx.Err(); err != nil {
		return rate.Decision{}, SourcePrimary, err
	}
	if len(reqs) == 0 {
		// Nothing to decide, and nothing to learn of the primary: a store
		// may answer an empty call without I/O, which as a probe would
		// bring a dead primary back.
		return rate.Combine(nil), SourcePrimary, nil
	}
	// The call is news of the breakers of its keys' partitions: most often
	// one, and always one for a primary without partitions.
	var c call
	f.breakers(&c, reqs)
	down, silent := false, false
	for i, b := range c.breakers() {
		c.gens[i] = b.gen.Load()
		down = down || c.gens[i]&1 == 1
		silent = silent || b.silentAt.Load() == b.done.Load()+1
	}
	if down || silent {
		if cd, ok := f.primary.(cachedDecider); ok {
			if d, ok := cd.DecideCached(reqs, out); ok {
				// A refusal the primary gave, still in force: exact,
				// whatever the mode would have guessed. While it is silent,
				// the primary would answer the same without I/O, and that
				// success would end the silence (see silentFor): asked
				// here, it does not.
				f.cachedN.Add(1)
				return d, SourcePrimary, nil
			}
		}
	}
	if down {
		// Each partition down must take the call as its probe.
		for i, b := range c.breakers() {
			if c.gens[i]&1 == 0 {
				continue
			}
			gen, send := f.startProbe(b)
			if !send {
				f.endProbes(&c, 0)
				return f.fallback(ctx, reqs, out, nil, b)
			}
			c.gens[i] = gen
			if gen&1 == 1 {
				c.probes |= 1 << i
			}
		}
		if c.probes != 0 {
			f.probes.Add(1)
		}
	}
	cctx, cancel, timer := f.bound(ctx)
	d, err := f.primary.DecideAll(cctx, reqs, out)
	// Our Timeout, which comes before the caller's deadline, ended the
	// call: it took too long, however near the caller's deadline is now.
	timedOut := err != nil && timer && errors.Is(cctx.Err(), context.DeadlineExceeded)
	cancel()
	if err == nil {
		f.answered(&c)
		return d, SourcePrimary, nil
	}
	return f.failed(ctx, &c, err, timedOut, reqs, out)
}

// answered tells each of c's breakers that the primary answered the call.
// It is the hot path, every decision the primary makes, so it writes no
// more than the counter each breaker moves anyway (a success ends a
// silence by moving done on; see silentFor) and reads no clock; only a
// probe among them, whose success brings its partition back up, takes a
// lock.
func (f *Fallback) answered(c *call) {
	for i, b := range c.breakers() {
		b.done.Add(1)
		if c.probes&(1<<i) != 0 {
			f.up(b, c.gens[i])
		}
	}
	if c.n > 1 {
		// After the dones, which primaries reads after it: so it never
		// subtracts a call's breakers it has not counted.
		f.sharedN.Add(uint64(c.n - 1))
	}
}

// failed takes the primary's failure, err, of call c, and returns what
// the caller gets: its own error if its context ended the call, else the
// failure mode's decision. Not every failure says the primary is down:
// the caller's deadline or another call's (see otherDeadline) ends calls
// under load while the primary answers the others, and taking it down for
// them would switch limiting to the failure mode exactly when it is
// needed. So such a failure counts against the breakers the error blames
// (see blame) only if the primary hangs (see hung), and a cancellation
// never does; any other failure, one the Fallback's own Timeout ended
// (timedOut) among them, counts (see fail). Probes the call was no news
// of are freed for the next call (see endProbes).
func (f *Fallback) failed(ctx context.Context, c *call, err error, timedOut bool, reqs []rate.Request, out []rate.Decision) (rate.Decision, Source, error) {
	blame := f.blame(c, err)
	byCaller := !timedOut && (ctx.Err() != nil || deadline.Ended(ctx, err))
	if byCaller || !timedOut && otherDeadline(err) {
		// The caller's context ended the call, or was about to: a store
		// may see the deadline pass a moment before the context says so
		// (see deadline.Slack). The error is the caller's, with no
		// decision after its deadline. The primary failed too if it is
		// hung, or if this was a probe; a failed probe then doubles the
		// backoff rather than leave the next call to probe again. A
		// cancellation is no news of the primary (see hung).
		//
		// Or the primary reports that another call's deadline ended this
		// one (see otherDeadline): this caller's time is not up, and the
		// failure mode decides for it, but of the primary the call tells
		// what that other call's deadline does: it failed if it is hung,
		// or if this was a probe.
		if byCaller && !deadline.Near(ctx) {
			blame = 0
		}
		counted := false
		for i, b := range c.breakers() {
			if blame&(1<<i) != 0 && f.fail(b, err, c.gens[i], c.probes&(1<<i) != 0, true) {
				counted = true
			}
		}
		if counted {
			f.failures.Add(1)
		}
		f.endProbes(c, blame)
		if byCaller {
			return rate.Decision{}, SourcePrimary, err
		}
		return f.fallback(ctx, reqs, out, err, nil)
	}
	f.failures.Add(1)
	ferr := err
	if timedOut {
		// The Timeout's own deadline: "context deadline exceeded"
		// alone says neither whose nor how long.
		ferr = fmt.Errorf("no answer within the timeout, %v: %w", f.timeout, err)
	}
	for i, b := range c.breakers() {
		if blame&(1<<i) != 0 {
			f.fail(b, ferr, c.gens[i], c.probes&(1<<i) != 0, false)
		}
	}
	f.endProbes(c, blame)
	return f.fallback(ctx, reqs, out, err, nil)
}

// maxBreakers bounds how many partitions one call is news of: the keys of
// a call that spans more are sent whatever their partitions past the
// first maxBreakers, and its outcome says nothing of those.
const maxBreakers = 8

// call is what a call to the primary is news of: the breakers of its keys'
// partitions, each with the gen it was sent in, and which of them it
// probes (bit i for the i-th breaker).
type call struct {
	buf    [maxBreakers]*breaker
	n      int
	cut    bool // the keys span more partitions than buf holds
	gens   [maxBreakers]uint64
	probes uint8
}

// breakers returns c's breakers. (c keeps their number, not a slice of
// its own array, which would move every call's c to the heap.)
func (c *call) breakers() []*breaker { return c.buf[:c.n] }

// breakers sets c's breakers to those of the partitions that hold reqs'
// keys, each once, in order of first appearance.
func (f *Fallback) breakers(c *call, reqs []rate.Request) {
	if f.part == nil {
		c.buf[0], c.n = f.whole, 1
		return
	}
	for _, r := range reqs {
		b := f.breaker(f.part.Partition(r.Key))
		if !slices.Contains(c.breakers(), b) {
			if c.n == maxBreakers {
				c.cut = true
				return
			}
			c.buf[c.n] = b
			c.n++
		}
	}
}

// breaker returns partition p's breaker, making it the first time.
func (f *Fallback) breaker(p int) *breaker {
	if bs := *f.parts.Load(); p >= 0 && p < len(bs) && bs[p] != nil {
		return bs[p]
	}
	if p <= 0 {
		return f.whole
	}
	f.partsMu.Lock()
	defer f.partsMu.Unlock()
	bs := *f.parts.Load()
	if p < len(bs) && bs[p] != nil {
		return bs[p]
	}
	grown := make([]*breaker, max(len(bs), p+1))
	copy(grown, bs)
	grown[p] = &breaker{part: p, name: f.part.PartitionName(p)}
	f.parts.Store(&grown)
	return grown[p]
}

// blame returns which of c's breakers a failed call is news of (bit i for
// c.breakers()[i]): the partition the error names, if one of them; none
// if it names one of the partitions past them, of which the call says
// nothing; else all.
func (f *Fallback) blame(c *call, err error) uint8 {
	all := uint8(1)<<c.n - 1
	if c.n == 1 || f.part == nil {
		return all
	}
	if p := f.part.FailedPartition(err); p > 0 {
		if i := slices.Index(c.breakers(), f.breaker(p)); i >= 0 {
			return 1 << i
		}
		if c.cut {
			return 0
		}
	}
	return all
}

// endProbes frees the places of c's probes that the call was no news of:
// those not in blame. Their backoff is left as it was, so the next call
// probes at once.
func (f *Fallback) endProbes(c *call, blame uint8) {
	for i, b := range c.breakers() {
		if c.probes&^blame&(1<<i) != 0 {
			b.mu.Lock()
			b.probing = false
			b.mu.Unlock()
		}
	}
}

// hung reports whether a call that a deadline ended, its caller's (see
// deadline.Ended) or another call's that the primary reports (see
// otherDeadline), counts as a failure of the primary: whether the primary
// has completed no call for longer than the silence bound, or, for a
// probe, since before the primary went down.
//
// The caller's deadline alone proves nothing, nor another call's: under
// load, calls queue and some callers' deadlines pass while the primary
// answers the others, and taking it down then would switch limiting to
// the failure mode (no limiting at all, with FailOpen) exactly when it is
// needed. Silence is what a hung primary shows, and what the primary's own
// bound would have caught had the callers given it time. A cancellation
// never counts (it never gets here): the client went away, whatever the
// primary does.
//
// A probe needs no bound: the primary is down already and has completed
// no call since but those sent before it went down (a probe's success
// would have brought it back), so a probe left unanswered is a failed
// probe however the primary went down. Held to the
// bound, a probe soon after an outage that an error began would leave the
// next call to probe again, and a primary that fails and then hangs would
// take every call as a probe, each waiting out its caller's deadline. A
// silence that this probe's call starts (the primary answered a call sent
// before the outage meanwhile) is none. Each partition has its own
// silences: a dead master's say nothing of the others. Requires that b.mu
// is held.
func (f *Fallback) hung(b *breaker, probe bool, now time.Time) bool {
	if f.silence < 0 {
		return false
	}
	bound := f.silence
	if probe {
		bound = 0
	}
	return b.silentFor(now) > bound
}

// otherDeadline reports whether err, the failure of a call to the primary,
// says that a deadline not the call's ended it: most often another
// call's. The Redis store's client closes a connection when the deadline
// of the call on it passes, and fails the calls queued behind it with that
// deadline; the store reports such a failure, while the call's own time is
// not up, with an error whose method OtherDeadline returns true. It tells
// that the primary is slow, as that other call's deadline does, not that
// it failed.
func otherDeadline(err error) bool {
	var o interface{ OtherDeadline() bool }
	return errors.As(err, &o) && o.OtherDeadline()
}

// silentFor returns for how long b's primary, or partition, has completed
// no call, as the calls that failed or went unanswered tell: the first of
// them after a success starts a silence, and the next success ends it.
//
// A success is seen as b.done moving on, a counter it increments anyway:
// the successful path, the hot one (about 100µs per decision through
// Redis), writes nothing more and reads no clock; only failing calls lock
// and write. So the silence starts when the first call ends, not when it
// was sent, which costs a hang about one caller's deadline before it is
// declared. A success must be the primary's answer: a refusal from its
// deny cache, without I/O, is asked for before the call while a silence
// runs, so that it does not count.
//
// What the rule cannot tell is a primary that was idle: two calls ended by
// their callers' deadlines further apart than the bound, and no success
// between them, declare it down; the first probe that succeeds, after
// MinBackoff, brings it back. Requires that b.mu is held.
func (b *breaker) silentFor(now time.Time) time.Duration {
	if n := b.done.Load() + 1; b.silentAt.Load() != n {
		b.silentSince = now
		b.silentAt.Store(n)
	}
	return now.Sub(b.silentSince)
}

// cachedDecider is a store that can sometimes decide without I/O, like the
// Redis store from its deny cache. While the primary is down or silent,
// Fallback asks it first.
type cachedDecider interface {
	// DecideCached decides reqs as DecideAll would, if it can without I/O,
	// and reports whether it did.
	DecideCached(reqs []rate.Request, out []rate.Decision) (rate.Decision, bool)
}

// Stats returns the counters.
func (f *Fallback) Stats() FallbackStats {
	return FallbackStats{
		Down:       f.down(),
		Primary:    f.primaries(),
		Fallback:   f.fallbackN.Load(),
		Failures:   f.failures.Load(),
		Probes:     f.probes.Load(),
		Outages:    f.outages.Load(),
		Recoveries: f.recoveries.Load(),
	}
}

// Instances returns how many instances FailLocal divides each limit
// among (FallbackOptions.Instances, at least 1), so that a caller that
// reports a local decision can describe the share it was made with
// (rate.Limit.Share) rather than the whole limit.
func (f *Fallback) Instances() int { return int(f.instances) }

// primaries returns how many decisions the primary made.
func (f *Fallback) primaries() uint64 {
	n := f.cachedN.Load() - f.sharedN.Load() // may wrap until the dones are added
	for _, b := range *f.parts.Load() {
		if b != nil {
			n += b.done.Load()
		}
	}
	return n
}

// down reports whether the primary, or a partition of it that may still
// hold keys, is down.
func (f *Fallback) down() bool {
	for _, b := range *f.parts.Load() {
		if b != nil && b.gen.Load()&1 == 1 && (f.part == nil || f.part.PartitionHolds(b.part)) {
			return true
		}
	}
	return false
}

// startProbe reports whether a call that found b down is sent, and the gen
// it is sent in: as a probe if b is still down, the backoff has passed and
// no other probe is in flight; as an ordinary call if a probe has brought
// it back since the call found it down.
func (f *Fallback) startProbe(b *breaker) (gen uint64, send bool) {
	// All under mu: a probe that fails moves next as it frees its place
	// (see fail), so no call sees the old next with the place free and
	// probes again at once, whatever the backoff; one that succeeds
	// brings the primary back as it frees its place (see up), so no call
	// probes a primary that is up.
	b.mu.Lock()
	defer b.mu.Unlock()
	gen = b.gen.Load()
	if gen&1 == 0 {
		return gen, true
	}
	if b.probing || f.clock.Now().Before(b.next) {
		return gen, false
	}
	b.probing = true
	return gen, true
}

// up records the success of a probe of b sent in gen, which brings it
// back. Only a probe does: an ordinary call sent before the outage and
// answered after it may have been answered before it.
func (f *Fallback) up(b *breaker, gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	if b.gen.Load() != gen {
		return
	}
	b.gen.Store(gen + 1)
	b.lastErr = nil
	b.upAt = f.clock.Now()
	f.recoveries.Add(1)
	f.log.Info("sluice: store recovered", b.attrs("down_for", f.clock.Now().Sub(b.since).Round(time.Millisecond).String())...)
}

// attrs returns the attributes of a log line about b: the partition, if
// it is one, and then args.
func (b *breaker) attrs(args ...any) []any {
	if b.part == 0 {
		return args
	}
	return append([]any{"partition", b.name}, args...)
}

// fail records a failure of the primary in a call sent in gen, and reports
// whether it counted: the first failure takes the primary down, a failed
// probe doubles the backoff. A call that a deadline ended, its caller's or
// another call's (byDeadline), counts only if the primary is hung (see
// hung).
//
// A call sent before the primary's latest recovery never counts: the probe
// that brought it back was answered since, so the failure is news of the
// old outage, not of the primary now. Such a call, hung in an outage that
// is over, would otherwise take a healthy primary down again for a
// backoff period.
func (f *Fallback) fail(b *breaker, err error, gen uint64, probe, byDeadline bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	// gen/2 counts the recoveries before the call was sent.
	cur := b.gen.Load()
	if cur/2 != gen/2 {
		return false
	}
	now := f.clock.Now()
	if byDeadline && !f.hung(b, probe, now) {
		return false
	}
	// A failure is silence too: a probe that the caller's deadline ends
	// while the primary stays down counts from the outage on.
	b.silentFor(now)
	switch {
	// What ended the call was a deadline, often the caller's own (or
	// its cancel, at its deadline): said alone, it reads as no fault of
	// the primary's.
	case byDeadline && probe:
		err = fmt.Errorf("a probe got no answer before its caller's deadline: %w", err)
	case byDeadline:
		err = fmt.Errorf("the store completed no call for %v: it hangs, or is too slow (the last call ended: %w)", f.silence, err)
	}
	switch {
	case cur&1 == 0: // up, as when the call was sent
		b.gen.Store(cur + 1)
		f.outages.Add(1)
		b.since = now
		// A primary that fails again soon after it came back (a full
		// Redis answers the probe, a refusal that writes nothing, and
		// fails the next write) goes on from the backoff it had: it
		// flaps ever more slowly, up to once a MaxBackoff, rather than
		// every MinBackoff. One that stayed up MaxBackoff starts afresh.
		if !b.upAt.IsZero() && now.Sub(b.upAt) < f.maxBackoff {
			b.backoff = min(2*b.backoff, f.maxBackoff)
		} else {
			b.backoff = f.minBackoff
		}
		b.next = now.Add(b.backoff)
		msg := "sluice: store unavailable; deciding by failure mode until it recovers"
		if f.mode == FailError {
			msg = "sluice: store unavailable; calls return an error at once, for each caller's failure policy, until it recovers"
		}
		f.log.Warn(msg, b.attrs("mode", f.mode.String(), "error", err)...)
		b.lastErr = err
	case probe:
		b.backoff = min(2*b.backoff, f.maxBackoff)
		b.next = now.Add(b.backoff)
		if b.lastErr == nil || err.Error() != b.lastErr.Error() {
			// The outage goes on for another reason (Redis back, but
			// with another password): the line that began it no longer
			// says why. A probe failing as the last one did says
			// nothing new.
			f.log.Warn("sluice: store still unavailable, for another reason", b.attrs("error", err)...)
		}
		b.lastErr = err
	}
	return true
}

// bound returns ctx bounded by Timeout for a call to the primary, and
// whether it set a timer of its own. A caller whose own deadline comes
// first (Envoy sends one with every call) needs no timer of ours: its
// deadline ends the call, and hung tells whether that is the primary's
// failure.
func (f *Fallback) bound(ctx context.Context) (context.Context, context.CancelFunc, bool) {
	if f.timeout > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > f.timeout {
			ctx, cancel := context.WithTimeout(ctx, f.timeout)
			return ctx, cancel, true
		}
	}
	return ctx, func() {}, false
}

// fallback decides by the failure mode. err is the primary's failure, or
// nil if the call was not sent because down, the breaker of the primary
// or of one of its keys' partitions, is down. It counts what the mode
// decided, and with FailError what it answered: a local store's error, its
// caller's context ended or its own failure, decided nothing.
func (f *Fallback) fallback(ctx context.Context, reqs []rate.Request, out []rate.Decision, err error, down *breaker) (rate.Decision, Source, error) {
	switch f.mode {
	case FailError:
		f.fallbackN.Add(1)
		if err == nil {
			err = down.downError(f.clock)
		}
		return rate.Decision{}, SourceError, err
	case FailClosed:
		for i, r := range reqs {
			c := r.Limit.Capacity()
			out[i] = rate.Decision{Limit: c, RetryAfter: f.retryAfter, ResetAfter: f.retryAfter}
			if r.Cost == 0 {
				// A look spends nothing, so it is never refused (see
				// rate.Request): it passes, with nothing known left.
				out[i].Allowed, out[i].RetryAfter = true, 0
			}
		}
		f.fallbackN.Add(1)
		return rate.Combine(out[:len(reqs)]), SourceFailClosed, nil
	case FailLocal:
		d, err := f.decideLocal(ctx, reqs, out)
		if err != nil {
			return rate.Decision{}, SourceLocal, err
		}
		f.fallbackN.Add(1)
		return d, SourceLocal, nil
	}
	f.fallbackN.Add(1)
	for i, r := range reqs {
		c := r.Limit.Capacity()
		out[i] = rate.Decision{Allowed: true, Limit: c, Remaining: c - r.Cost}
	}
	return rate.Combine(out[:len(reqs)]), SourceFailOpen, nil
}

// downError is the error of a call not sent because b is down:
// ErrStoreDown, with the partition, b's last failure and how long it has
// been down for context.
func (b *breaker) downError(clock rate.Clock) error {
	b.mu.Lock()
	last, since := b.lastErr, b.since
	b.mu.Unlock()
	if last == nil { // recovered in the meantime
		return ErrStoreDown
	}
	where := ""
	if b.part != 0 {
		where = " (partition " + b.name + ")"
	}
	return fmt.Errorf("%w%s for %v (last error: %v)", ErrStoreDown, where, clock.Now().Sub(since).Round(time.Millisecond), last)
}

// decideLocal decides reqs in the local store with each limit divided by
// the number of instances. A request whose cost exceeds its share is
// refused, with f.retryAfter, and refuses the group.
//
// The other requests are still decided with their own costs, as DecideAll
// promises, in a group that the local store is made to refuse: the too
// costly requests become looks, and two more close the group on the key
// of the first of them, one unit and then its whole share, which no state
// admits both of. So nothing is consumed, and each other request says
// whether it alone would pass, with its exact wait, on the state the
// requests before it would leave; a too costly one, which can never pass
// here, leaves that state as it found it. The unit goes first so that the
// share is never admitted on the way, which for a sliding_log would log a
// timestamp for each of its units on every such refusal.
func (f *Fallback) decideLocal(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	local := make([]rate.Request, len(reqs))
	tooBig := -1
	for i, r := range reqs {
		r.Limit = r.Limit.Share(f.instances)
		if r.Cost > r.Limit.Capacity() {
			if tooBig < 0 {
				tooBig = i
			}
			r.Cost = 0
		}
		local[i] = r
	}
	if tooBig < 0 {
		return f.local.DecideAll(ctx, local, out)
	}
	unit := rate.Request{Key: local[tooBig].Key, Limit: local[tooBig].Limit, Cost: 1}
	full := unit
	full.Cost = full.Limit.Capacity()
	local = append(local, unit, full)
	dec := make([]rate.Decision, len(local))
	d, err := f.local.DecideAll(ctx, local, dec)
	if err != nil {
		return rate.Decision{}, err
	}
	if d.Allowed {
		// A store that admits a key past its capacity keeps no limit.
		return rate.Decision{}, fmt.Errorf("fallback: the local store admitted %v past its capacity", full.Limit)
	}
	for i, r := range reqs {
		out[i] = dec[i]
		if c := local[i].Limit.Capacity(); r.Cost > c {
			out[i] = rate.Decision{Limit: c, Remaining: dec[i].Remaining, RetryAfter: f.retryAfter, ResetAfter: dec[i].ResetAfter}
		}
	}
	return rate.Combine(out[:len(reqs)]), nil
}

var _ Resetter = (*Fallback)(nil)

// Reset forgets keys in the primary store and in the local store, if
// there is one (FailLocal's, or FallbackOptions.Local), so that neither
// decides on a state the caller meant to clear. The local store forgets
// them whatever becomes of the primary's reset. It returns the primary's
// error, as it is the primary's state that every instance shares: a reset
// that failed there has not happened. A primary that does not implement
// [Resetter] gives an error wrapping errors.ErrUnsupported. The call to
// the primary is sent whether or not it is down, bounded by Timeout, and
// its outcome does not move the breakers: a reset is no decision.
func (f *Fallback) Reset(ctx context.Context, keys ...string) error {
	var localErr error
	if r, ok := f.local.(Resetter); ok {
		if err := r.Reset(ctx, keys...); err != nil {
			localErr = fmt.Errorf("fallback: local store: %w", err)
		}
	}
	r, ok := f.primary.(Resetter)
	if !ok {
		return fmt.Errorf("fallback: primary store %T cannot forget keys: %w", f.primary, errors.ErrUnsupported)
	}
	ctx, cancel, _ := f.bound(ctx)
	defer cancel()
	if err := r.Reset(ctx, keys...); err != nil {
		return fmt.Errorf("fallback: primary store: %w", err)
	}
	return localErr
}
