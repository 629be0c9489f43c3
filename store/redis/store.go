package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
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

// ErrCrossSlot is returned by DecideAll on a Redis Cluster when the keys of
// one request live in different slots, so that no single script can decide
// them atomically. Give such keys a common hash tag: see the package
// documentation.
var ErrCrossSlot = errors.New("keys of one request are in different Redis Cluster slots")

// DefaultDenyCacheSize is the number of refused requests the deny cache
// remembers when Options.DenyCacheSize is zero.
const DefaultDenyCacheSize = 1 << 16

// Options configures a Store. The zero value is ready to use: no key
// prefix, the deny cache on with DefaultDenyCacheSize entries, concurrent
// decisions coalesced, and the system clock.
type Options struct {
	// Prefix is prepended to every Redis key, outside its hash tag, e.g.
	// "sluice:". Empty means none.
	Prefix string
	// DisableDenyCache turns the deny cache off: every request goes to
	// Redis, even one Redis has just refused.
	DisableDenyCache bool
	// DenyCacheSize bounds how many refused requests the deny cache
	// remembers. Zero means DefaultDenyCacheSize.
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

	// pinned, if set, replaces Redis's TIME in the script (tests only).
	pinned rate.Clock
}

// Store keeps the state of every key in Redis and decides each request in
// one atomic script call, so any number of instances share one limit. It
// implements sluice.Store and is safe for concurrent use.
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
}

// maxInFlight is how many coalesced calls per slot may be on the wire at
// once: enough to keep Redis busy while the next batch gathers.
const maxInFlight = 2

// New returns a Store that decides through client. The caller keeps
// ownership of client: Close does not close it.
func New(client rueidis.Client, opts Options) *Store {
	s := &Store{
		client:  client,
		cluster: client.Mode() == rueidis.ClientModeCluster,
		prefix:  opts.Prefix,
		clock:   opts.Clock,
		pinned:  opts.pinned,
	}
	if s.clock == nil {
		s.clock = rate.SystemClock{}
	}
	if !opts.DisableCoalescing {
		s.co = &coalescers{s: s, maxInFlight: maxInFlight, bySlot: map[uint16]*coalescer{}}
	}
	if !opts.DisableDenyCache {
		size := opts.DenyCacheSize
		if size <= 0 {
			size = DefaultDenyCacheSize
		}
		s.deny = newDenyCache(size)
	}
	return s
}

// Dial connects to the Redis at url and returns a Store over it. The url
// is read by rueidis.ParseURL: redis://[user:pass@]host:port/db for one
// server, several addr= parameters or a cluster's nodes for Redis Cluster
// (which rueidis detects), rediss:// for TLS. Close the Store to close the
// connections.
func Dial(url string, opts Options) (*Store, error) {
	co, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
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

// Close closes the client if the Store made it (Dial, DialOption).
func (s *Store) Close() {
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

// DecideAll decides reqs all or nothing in one script call. On a Redis
// Cluster their keys must share a slot, or it returns an error wrapping
// ErrCrossSlot. See sluice.Store.
func (s *Store) DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	if len(reqs) == 0 {
		return rate.Combine(nil), nil
	}
	if len(out) < len(reqs) {
		return rate.Decision{}, fmt.Errorf("redis store: out has %d places for %d requests", len(out), len(reqs))
	}
	out = out[:len(reqs)]
	for _, r := range reqs {
		if err := r.Limit.Validate(); err != nil {
			return rate.Decision{}, fmt.Errorf("redis store: key %q: %w", r.Key, err)
		}
		if err := r.Check(); err != nil {
			return rate.Decision{}, fmt.Errorf("redis store: %w", err)
		}
	}

	var ck []byte
	if s.deny != nil {
		ck = appendKey(make([]byte, 0, 64), reqs)
		if s.deny.get(ck, s.clock.Now(), out) {
			return rate.Combine(out), nil
		}
	}

	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = redisKey(s.prefix, r.Key)
	}
	if s.cluster {
		first := slot(keys[0])
		for _, k := range keys[1:] {
			if slot(k) != first {
				return rate.Decision{}, fmt.Errorf("redis store: %w: %q and %q; give the keys of one request a common hash tag, e.g. {account=42}", ErrCrossSlot, keys[0], k)
			}
		}
	}
	args := make([]string, 1, 1+argsPerRequest*len(reqs))
	for i, r := range reqs {
		args = appendArgs(args, r, i == len(reqs)-1)
	}

	sent := s.clock.Now()
	var res []int64
	var err error
	if s.co != nil {
		var sl uint16
		if s.cluster {
			sl = slot(keys[0])
		}
		res, err = s.co.get(sl).exec(ctx, keys, args[1:])
	} else {
		args[0] = s.nowArg()
		res, err = decideScript.Exec(ctx, s.client, keys, args).AsIntSlice()
	}
	if err != nil {
		return rate.Decision{}, fmt.Errorf("redis store: %w", err)
	}
	if err := decodeReply(res, reqs, out); err != nil {
		return rate.Decision{}, err
	}
	d := rate.Combine(out)
	if s.deny != nil && !d.Allowed {
		s.deny.put(ck, sent, out)
	}
	return d, nil
}

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

// appendArgs appends r's script arguments; last ends its group.
func appendArgs(args []string, r rate.Request, last bool) []string {
	l := r.Limit
	end := "0"
	if last {
		end = "1"
	}
	return append(args,
		algorithmArgs[l.Algorithm],
		strconv.FormatInt(l.Count, 10),
		strconv.FormatInt(int64(l.Period/time.Microsecond), 10),
		strconv.FormatInt(l.Burst, 10),
		strconv.Itoa(int(l.Calendar)),
		strconv.FormatInt(r.Cost, 10),
		strconv.FormatInt(int64(r.MaxDelay/time.Microsecond), 10),
		end,
	)
}

// replyPerRequest is the number of integers the script returns per request.
const replyPerRequest = 5

func errReplyLength(got, reqs int) error {
	return fmt.Errorf("script returned %d integers for %d requests, want %d", got, reqs, replyPerRequest*reqs)
}

// decodeReply converts the script's integers into decisions.
func decodeReply(res []int64, reqs []rate.Request, out []rate.Decision) error {
	if len(res) != replyPerRequest*len(reqs) {
		return fmt.Errorf("redis store: %w", errReplyLength(len(res), len(reqs)))
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
