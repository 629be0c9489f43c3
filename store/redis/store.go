package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
)

//go:embed scripts/decide.lua
var decideSource string

// decideScript runs scripts/decide.lua by EVALSHA, loading it on NOSCRIPT.
var decideScript = rueidis.NewLuaScript(decideSource)

var _ sluice.Store = (*Store)(nil)

// DefaultDenyCacheSize is the number of refused requests the deny cache
// remembers when Options.DenyCacheSize is zero.
const DefaultDenyCacheSize = 1 << 16

// Options configures a Store. The zero value is ready to use: no key
// prefix, the deny cache on with DefaultDenyCacheSize entries, concurrent
// decisions coalesced, and the system clock.
type Options struct {
	// Prefix is prepended to every Redis key, outside its hash tag, e.g.
	// "sluice:". Empty means none. A prefix holding a hash tag of its own
	// ("app{x}:") puts every key in that one slot of a cluster.
	Prefix string
	// DisableDenyCache turns the deny cache off: every request goes to
	// Redis, even one Redis has just refused.
	DisableDenyCache bool
	// DenyCacheSize bounds how many refused requests the deny cache
	// remembers. Zero means DefaultDenyCacheSize. The cache is 32 shards
	// with equal bounds, so the bound is the size rounded down to a
	// multiple of 32, and at least 32.
	DenyCacheSize int
	// Clock is the local clock the deny cache counts down with; nil means
	// rate.SystemClock. Decisions never read it: they take Redis's TIME.
	Clock rate.Clock
	// DisableCoalescing sends every decision in a script call of its own.
	// By default the decisions of concurrent callers share script calls:
	// while a few calls are on the wire, new decisions queue and go
	// together in the next one (per cluster slot), each caller's requests
	// still decided on their own, all or nothing. That multiplies how many
	// decisions Redis makes per second under load, and changes nothing
	// when callers come one at a time.
	DisableCoalescing bool
	// CallTimeout bounds each script call: one that takes longer fails
	// with context.DeadlineExceeded. With coalescing, one call carries the
	// decisions of many callers, and a caller queued behind the calls on
	// the wire waits for them first; a decision still queued after
	// CallTimeout fails with context.DeadlineExceeded without being sent,
	// so a decision waits at most about twice CallTimeout, however many
	// queue. One timer per call rather than per decision is what it saves
	// under load; a caller's own context deadline bounds its wait as well.
	// (On a Redis Cluster, a request over several keys of a slot that is
	// moving between masters waits up to one more CallTimeout for the move
	// to end; see the package documentation.) Zero means
	// DefaultCallTimeout; a negative value means no bound but the caller's
	// context.
	CallTimeout time.Duration
	// Latency, if set, is told how long each decision sent to Redis took:
	// from DecideAll's call to its answer or error, its wait in a
	// coalesced batch and, across cluster slots, every phase included. A
	// refusal the deny cache answers, in memory, is not a decision sent,
	// and is not told: a latency histogram fed from here measures Redis,
	// not the cache in front of it. It is called on the caller's
	// goroutine, and must be quick.
	Latency func(time.Duration)

	// pinned, if set, replaces Redis's TIME in the script (tests only).
	pinned rate.Clock
}

// DefaultCallTimeout bounds each script call when Options.CallTimeout is
// zero: generous for a Redis that answers, so that a hung one, or a
// network that drops packets, holds no caller without a deadline of its
// own for ever. A server deciding in the path of requests wants far less
// (sluice serve takes 50ms).
const DefaultCallTimeout = time.Second

// Store keeps the state of every key in Redis and decides each request in
// one atomic script call (on a Redis Cluster, a request whose keys span
// several slots takes a check and a commit per slot, and a refund after a
// race: see the package documentation), so any number of instances share
// one limit. It implements sluice.Store and is safe for concurrent use;
// Stats reports what it has done.
//
// Most callers want [Dial]; [New] wraps a rueidis client the caller
// already has.
type Store struct {
	client  rueidis.Client
	owned   bool // Close closes client
	cluster bool
	prefix  string
	clock   rate.Clock
	pinned  rate.Clock
	deny    *denyCache
	co      *coalescers // nil if Options.DisableCoalescing
	timeout time.Duration
	stats   counters
	parts   partitions // on a Redis Cluster: see partition.go

	latency func(time.Duration) // Options.Latency

	// afterCheck, if set, runs between the check and the commit of a
	// request across slots (tests only).
	afterCheck func()
	// beforeRefund, if set, runs before the refund that follows a
	// request across slots refused at a commit (tests only).
	beforeRefund func()
}

// New returns a Store that decides through client. The caller keeps
// ownership of client: Close does not close it, but ends the Store's own
// use of it in the background, so Close the Store before the client. On a
// Redis Cluster, New reads which master holds which slots (see
// [Store.Partition]), waiting up to a second for the answer.
func New(client rueidis.Client, opts Options) *Store {
	s := &Store{
		client:  client,
		cluster: client.Mode() == rueidis.ClientModeCluster,
		prefix:  opts.Prefix,
		clock:   opts.Clock,
		pinned:  opts.pinned,
		timeout: opts.CallTimeout,
		latency: opts.Latency,
	}
	switch {
	case s.timeout == 0:
		s.timeout = DefaultCallTimeout
	case s.timeout < 0:
		s.timeout = 0 // no bound
	}
	if s.clock == nil {
		s.clock = rate.SystemClock{}
	}
	if !opts.DisableCoalescing {
		s.co = &coalescers{s: s}
	}
	if !opts.DisableDenyCache {
		size := opts.DenyCacheSize
		if size <= 0 {
			size = DefaultDenyCacheSize
		}
		s.deny = newDenyCache(size)
	}
	s.initPartitions()
	return s
}

// Dial connects to the Redis at url and returns a Store over it. The url
// is read by rueidis.ParseURL: redis://[user:pass@]host:port/db for one
// server, several addr= parameters or a cluster's nodes for Redis Cluster
// (which rueidis detects), rediss:// for TLS. Close the Store to close the
// connections.
//
// Dial connects at once, and fails if no server answers: a sluice.Fallback
// keeps a program serving through an outage of a Redis it has reached,
// not one it never has. A program that must start while Redis may be
// down retries Dial in the background, deciding in the meantime as its
// failure mode says (a memory store for FailLocal, every request let
// through for FailOpen).
func Dial(url string, opts Options) (*Store, error) {
	co, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	// The store reads nothing through rueidis's client-side cache: off,
	// the client sends no CLIENT TRACKING, which an ACL need not allow,
	// and speaks RESP2 to a Redis without HELLO.
	co.DisableCache = true
	return DialOption(co, opts)
}

// DialOption is Dial with rueidis's own client options, for settings a URL
// cannot express (Sentinel, client-side TLS config, pool sizes).
func DialOption(co rueidis.ClientOption, opts Options) (*Store, error) {
	c, err := rueidis.NewClient(co)
	if err != nil {
		return nil, fmt.Errorf("redis store: connect: %w", err)
	}
	s := New(c, opts)
	s.owned = true
	return s, nil
}

// Close stops the Store's background work (on a Redis Cluster, reading
// the cluster's slots again after a failure), waiting for it to end, and
// closes the client if the Store made it (Dial, DialOption).
func (s *Store) Close() {
	s.closePartitions()
	if s.owned {
		s.client.Close()
	}
}

// Key returns the Redis key that holds the state of request key k.
func (s *Store) Key(k string) string { return redisKey(s.prefix, k) }

// Decide decides one request in one script call. See sluice.Store.
func (s *Store) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	var out [1]rate.Decision
	return s.DecideAll(ctx, []rate.Request{r}, out[:])
}

// DecideAll decides reqs all or nothing. Their keys are decided in one
// script call, unless they span several Redis Cluster slots: then each
// slot's keys are first checked and then decided, slot by slot, as the
// package documentation describes. See sluice.Store.
func (s *Store) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	if len(reqs) == 0 {
		return rate.Combine(nil), nil
	}
	if err := rate.CheckOut(reqs, out); err != nil {
		return rate.Decision{}, fmt.Errorf("redis store: %w", err)
	}
	out = out[:len(reqs)]
	for _, r := range reqs {
		if err := r.Check(); err != nil {
			return rate.Decision{}, fmt.Errorf("redis store: %w", err)
		}
	}

	var ck []byte
	if s.deny != nil {
		ck = appendKey(make([]byte, 0, 64), reqs)
		if d, ok := s.denied(ck, maxDenyAge, out); ok {
			return d, nil
		}
	}

	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = redisKey(s.prefix, r.Key)
	}
	sent := s.clock.Now()
	var start time.Time
	if s.latency != nil {
		start = time.Now()
	}
	if s.cluster {
		// Once per decision, however many slots it spans (see slotsAged).
		s.slotsAged(time.Now().UnixNano())
	}
	var err error
	if sl, ok := s.sameSlot(keys); ok {
		err = s.decideGroup(ctx, sl, reqs, keys, groupArgs(reqs, markDecide), out)
	} else {
		err = s.decideAcrossSlots(ctx, reqs, keys, out)
	}
	if s.latency != nil {
		s.latency(time.Since(start))
	}
	if err != nil {
		s.stats.errors.Add(1)
		return rate.Decision{}, err
	}
	d := rate.Combine(out)
	s.stats.decisions.Add(1)
	if !d.Allowed {
		s.stats.refused.Add(1)
		if s.deny != nil {
			s.deny.put(ck, sent, out)
		}
	}
	return d, nil
}

// DecideCached decides reqs without asking Redis if it can: when Redis
// refused the same requests and the refusal is still in force (the deny
// cache; see the package documentation). It reports false otherwise, or
// when the deny cache is off. sluice.Fallback calls it while Redis is down,
// so that a refusal Redis gave still holds: for its whole wait, where a
// decision Redis can make again repeats it for a second at most. Requests must pass
// rate.Request.Check, as DecideAll checks.
func (s *Store) DecideCached(reqs []rate.Request, out []rate.Decision) (rate.Decision, bool) {
	if s.deny == nil || len(reqs) == 0 || len(out) < len(reqs) {
		return rate.Decision{}, false
	}
	return s.denied(appendKey(make([]byte, 0, 64), reqs), math.MaxInt64, out[:len(reqs)])
}

// denied answers from the deny cache, under its key ck, if it holds a
// refusal in force made within the last within.
func (s *Store) denied(ck []byte, within time.Duration, out []rate.Decision) (rate.Decision, bool) {
	if !s.deny.get(ck, s.clock.Now(), within, out) {
		return rate.Decision{}, false
	}
	s.stats.denyHits.Add(1)
	s.stats.decisions.Add(1)
	s.stats.refused.Add(1)
	return rate.Combine(out), true
}

// sameSlot returns the cluster slot of keys and true if they all share
// one. On a single server every key is in slot 0.
func (s *Store) sameSlot(keys []string) (uint16, bool) {
	if !s.cluster {
		return 0, true
	}
	first := slot(keys[0])
	for _, k := range keys[1:] {
		if slot(k) != first {
			return 0, false
		}
	}
	return first, true
}

// groupArgs returns the script arguments of reqs as one group that ends
// with mark (markDecide, markCheck, markCommit or markRefund), after a
// place for the now argument (see call).
func groupArgs(reqs []rate.Request, mark string) []string {
	args := make([]string, 1, 1+argsPerRequest*len(reqs))
	for i, r := range reqs {
		m := markContinue
		if i == len(reqs)-1 {
			m = mark
		}
		args = appendArgs(args, r, m)
	}
	return args
}

// decideGroup decides (or checks, as args end) reqs, whose keys share slot
// sl, as one group in one script call, through the coalescer if there is
// one, and writes their decisions to out. A call answered TRYAGAIN is sent
// again after a pause (see waitMigration). Its error carries the slot's
// partition (see Store.FailedPartition).
func (s *Store) decideGroup(ctx context.Context, sl uint16, reqs []rate.Request, keys, args []string, out []rate.Decision) error {
	res, err := s.groupCall(ctx, sl, keys, args, s.co != nil)
	if err != nil {
		return err
	}
	return inPartition(s.partitionOf(sl), decodeReply(res, reqs, out))
}

// groupCall runs the script for one group whose keys share slot sl, as
// decideGroup does, and returns its integers; coalesce sends it through
// the coalescer, which a group with arguments after its requests' (a
// refund) must not go through.
func (s *Store) groupCall(ctx context.Context, sl uint16, keys, args []string, coalesce bool) ([]int64, error) {
	var res []int64
	var err error
	if coalesce {
		res, err = s.co.get(sl).exec(ctx, keys, args)
	} else {
		res, err = s.call(ctx, keys, args)
	}
	if isTryAgain(err) {
		res, err = s.waitMigration(ctx, keys, args, err)
	}
	if err != nil {
		s.callFailed(ctx, err)
		return nil, inPartition(s.partitionOf(sl), fmt.Errorf("redis store: %w%s", err, aclHint(err)))
	}
	return res, nil
}

// scriptCommands names the commands scripts/decide.lua runs, each of
// which an ACL must grant besides EVALSHA and EVAL.
// TestACLHintNamesTheScriptsCommands keeps it in step with the script.
const scriptCommands = "TIME, GET, SET and DEL"

// aclHint returns what to add to err, a script call's failure, when an
// ACL refused a command the script runs: Redis's reply names a line of
// the script, not the command, and an operator cannot tell from it what
// to grant. It returns "" for any other error.
func aclHint(err error) string {
	var re *rueidis.RedisError
	if errors.As(err, &re) && strings.Contains(re.Error(), "can't run this command") {
		return " (the script runs " + scriptCommands + ": the ACL user must be granted each, as the ACL SETUSER line under Commands in sluice's docs/serve.md shows)"
	}
	return ""
}

// waitMigration sends a group that Redis answered TRYAGAIN (err) again,
// after a pause, until it is answered otherwise or its time is up.
//
// A script on several keys of a slot that is moving between cluster
// masters, some of which have moved and some not (or that do not exist
// yet), is answered TRYAGAIN: neither master can run it until the move
// ends. (The client follows MOVED and ASK by itself, but leaves TRYAGAIN
// to its caller.) The script has not run, so sending it again counts
// nothing twice. A slot moves in milliseconds, unless the resharding
// stopped midway, which only an operator ends: so the pauses, doubling
// from minMigrationPause up to maxMigrationPause, and the calls after
// them, end within the caller's deadline and CallTimeout or
// maxMigrationWait, whichever is shorter; the decision then fails with the
// TRYAGAIN. No call is sent that would not have twice the time the last
// one took before the end.
//
// The group waits and is sent again outside the coalescer, so that the
// slot's other decisions (most often one key each, which the move does
// not hold up) neither queue behind it nor share a batch with it, which
// Redis would answer TRYAGAIN as a whole.
func (s *Store) waitMigration(ctx context.Context, keys, args []string, err error) ([]int64, error) {
	wait := maxMigrationWait
	if s.timeout > 0 {
		wait = min(wait, s.timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	end, _ := ctx.Deadline()
	var res []int64
	// trip is how long the last call took: a call sent with less time
	// left would only end at the deadline, and lose the TRYAGAIN that
	// says why the decision failed.
	trip := minMigrationPause
	for pause := minMigrationPause; isTryAgain(err); pause = min(2*pause, maxMigrationPause) {
		if !time.Now().Add(pause+2*trip).Before(end) || (rate.SystemClock{}).Sleep(ctx, pause) != nil {
			break
		}
		sent := time.Now()
		res, err = s.call(ctx, keys, args)
		trip = time.Since(sent)
	}
	return res, err
}

// The pauses of waitMigration.
const (
	minMigrationPause = time.Millisecond
	maxMigrationPause = 50 * time.Millisecond
	maxMigrationWait  = time.Second
)

// isTryAgain reports whether err is Redis Cluster's TRYAGAIN.
func isTryAgain(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && re.IsTryAgain()
}

// call runs the script, the only place that does, sending it again on a
// dead connection (see below): it puts the now argument in args[0] and
// counts the call.
func (s *Store) call(ctx context.Context, keys, args []string) ([]int64, error) {
	args[0] = s.nowArg()
	s.stats.scriptCalls.Add(1)
	// A caller whose own deadline comes first (Envoy sends one with every
	// call, and a coalesced batch carries its callers' latest) needs no
	// timer of ours.
	if dl, ok := ctx.Deadline(); s.timeout > 0 && (!ok || time.Until(dl) > s.timeout) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	res, err := decideScript.Exec(ctx, s.client, keys, args).AsIntSlice()
	// A connection that died under the client (Redis restarted, a proxy
	// closed it) fails on its first use, and the client dials anew; it
	// keeps several connections to a server, each of which may be dead:
	// try again, a few times, within the same deadline. Had the script run
	// before a connection broke, the decision counts twice, which errs on
	// the side of refusing.
	for try := 0; err != nil && try < maxRetries && retryable(ctx, err); try++ {
		s.stats.retries.Add(1)
		res, err = decideScript.Exec(ctx, s.client, keys, args).AsIntSlice()
	}
	if isTryAgain(err) {
		s.stats.tryAgain.Add(1)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && isTimeout(err) && timeUp(ctx) {
		err = &deadlineError{err}
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && !timeUp(ctx) {
		err = &otherDeadlineError{err}
	}
	return res, err
}

// isTimeout reports whether err is a network operation that timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// deadlineError is the failure of a script call at its deadline that the
// client reports as a connection's timeout, not as the context's: the
// client sets its connections' deadlines from the context's, and a dial or
// a read whose deadline fires before the context's own timer does says
// "i/o timeout" (os.ErrDeadlineExceeded), which is not
// context.DeadlineExceeded. It is the call's deadline all the same, and
// callers, sluice.Fallback among them, tell a deadline from a failure by
// errors.Is(err, context.DeadlineExceeded): so it matches that too, and
// keeps the client's words.
type deadlineError struct{ err error }

func (e *deadlineError) Error() string { return e.err.Error() }

// Unwrap returns the client's error.
func (e *deadlineError) Unwrap() error { return e.err }

// Is reports that the error is context.DeadlineExceeded.
func (*deadlineError) Is(target error) bool { return target == context.DeadlineExceeded }

// maxRetries bounds the retries of a script call that failed on its
// connection: one per connection the client keeps to a server (rueidis
// opens up to four by default), so that a call finds a live one after a
// restart.
const maxRetries = 4

// retryable reports whether a failed script call is worth one more try:
// the connection failed, not Redis (an error reply) nor the caller (its
// context), nor the client (closed), nor the call's time (its deadline,
// ours or the caller's, has passed). The client sets its connections'
// deadlines from the context's and reports a deadline as it passes, a
// moment before the context's own timer says so: a hung server, whose
// connections are alive, would otherwise be sent the script again (and
// run it twice once it wakes).
//
// Nor is a deadline reported while the call's time is not up, though it
// is not the call's. Most often it is another call's: the client closes a
// connection when the deadline of the call on it passes, and fails with
// that deadline the calls queued behind it, which it has not sent, and
// those that take the connection up before it is replaced. Sent again,
// such a call would wait for a fresh connection's handshake, which
// callers share and which waits for the caller that began it, not for
// each caller's own time: on a hung server, callers would chain those
// waits far past their deadlines. The call fails instead, as one whose
// deadline is not its own (see otherDeadlineError).
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rueidis.ErrClosing) || timeUp(ctx) {
		return false
	}
	_, isReply := rueidis.IsRedisErr(err)
	return !isReply
}

// timeUp reports whether ctx's deadline has passed, even if its timer has
// yet to say so: whether a deadline that a call reports is its own.
func timeUp(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// otherDeadlineError is the failure of a script call that a deadline not
// its own, most often another call's (see retryable), ended while its own
// time was not up. It wraps the client's error, context.DeadlineExceeded,
// and says, by its OtherDeadline method, that the deadline was not the
// call's.
type otherDeadlineError struct{ err error }

func (e *otherDeadlineError) Error() string {
	return "redis store: the shared connection was closed by another call's timeout (" + e.err.Error() + ")"
}

// Unwrap returns the client's error.
func (e *otherDeadlineError) Unwrap() error { return e.err }

// OtherDeadline reports that a deadline not the call's ended it.
// sluice.Fallback asks: another call's deadline passing says that Redis
// is slow, not that it is down, and the failure counts against Redis only
// as a call its caller's deadline ended would: if Redis has completed no
// call for longer than the Fallback's MaxSilence.
func (*otherDeadlineError) OtherDeadline() bool { return true }

// nowArg returns the script's first argument: empty in production, so the
// script reads Redis's TIME.
func (s *Store) nowArg() string {
	if s.pinned == nil {
		return ""
	}
	return strconv.FormatInt(rate.Micros(s.pinned.Now()), 10)
}

// argsPerRequest is the number of script arguments that describe one
// request; see scripts/decide.lua.
const argsPerRequest = 8

var algorithmArgs = [...]string{"0", "1", "2", "3", "4", "5"}

// The marks that follow each request's arguments: whether the next
// request belongs to the same group, or else whether the group is to be
// decided, only checked, given back what its commit took, or committed
// (decided, returning receipts): see crossslot.go.
const (
	markContinue = "0"
	markDecide   = "1"
	markCheck    = "2"
	markRefund   = "3"
	markCommit   = "4"
)

// appendArgs appends r's script arguments, followed by mark.
func appendArgs(args []string, r rate.Request, mark string) []string {
	l := r.Limit
	return append(args,
		algorithmArgs[l.Algorithm],
		strconv.FormatInt(l.Count, 10),
		strconv.FormatInt(int64(l.Period/time.Microsecond), 10),
		strconv.FormatInt(l.Burst, 10),
		strconv.Itoa(int(l.Calendar)),
		strconv.FormatInt(r.Cost, 10),
		maxDelayArg(r.MaxDelay),
		mark,
	)
}

// maxDelayArg encodes a request's MaxDelay for the script as rate's steps
// take it (see rate.MaxDelayMicros): -1 for no bound.
func maxDelayArg(d time.Duration) string {
	return strconv.FormatInt(rate.MaxDelayMicros(d), 10)
}

// replyPerRequest is the number of integers the script returns per request.
const replyPerRequest = 5

// receiptPerRequest is the number of integers of a request's receipt,
// which a group to commit (markCommit) returns after its decisions: see
// scripts/decide.lua.
const receiptPerRequest = 2

// replyLen returns how many integers the script returns for a group of
// nkeys requests whose arguments are args.
func replyLen(nkeys int, args []string) int {
	if args[len(args)-1] == markCommit {
		return (replyPerRequest + receiptPerRequest) * nkeys
	}
	return replyPerRequest * nkeys
}

func errReplyLength(got, reqs, want int) error {
	return fmt.Errorf("script returned %d integers for %d requests, want %d", got, reqs, want)
}

// decodeReply converts the script's integers into decisions.
func decodeReply(res []int64, reqs []rate.Request, out []rate.Decision) error {
	if len(res) != replyPerRequest*len(reqs) {
		return fmt.Errorf("redis store: %w", errReplyLength(len(res), len(reqs), replyPerRequest*len(reqs)))
	}
	for i, r := range reqs {
		v := res[replyPerRequest*i:]
		out[i] = rate.Decision{
			Allowed:    v[0] == 1,
			Limit:      r.Limit.Capacity(),
			Remaining:  v[1],
			ResetAfter: time.Duration(v[2]) * time.Microsecond,
			RetryAfter: time.Duration(v[3]) * time.Microsecond,
			Delay:      time.Duration(v[4]) * time.Microsecond,
		}
	}
	return nil
}
