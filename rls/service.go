package rls

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deadline"
	"github.com/sluicehq/sluice/internal/logpace"
	"github.com/sluicehq/sluice/rate"
)

// Options configures a Service. The zero value behaves as Envoy's
// reference rate limit service does, except that it refuses a request of
// more than DefaultMaxDescriptors (1,000) descriptors, where the
// reference sets no bound: see MaxDescriptors.
type Options struct {
	// Clock tells the time when the store's decision does not say how
	// long a window has left (a zero limit, or a look at a window nothing
	// has touched yet). If nil, rate.SystemClock{}. Give it the clock the
	// store uses.
	Clock rate.Clock
	// RefusedConsumeNothing selects sluice's semantics instead of the
	// reference's. By default, as in the reference, every descriptor is
	// decided on its own, and hits refused by a fixed window still count:
	// a request over one descriptor's limit still spends from the others,
	// and a window once exceeded stays exceeded until it ends, even for a
	// check with hits_addend 0. With RefusedConsumeNothing, the
	// descriptors of a request that are not in shadow mode are decided
	// together, all or nothing: a request refused by one limit spends
	// nothing from any, and a refused request never counts (on a Redis
	// Cluster, but for a race across slots: see package store/redis).
	// Either way, a fixed window keeps its count across a reload that
	// changes requests_per_unit and shares it with an override of its
	// unit; SetConfig says what else each mode keeps.
	RefusedConsumeNothing bool
	// Headers adds RateLimit-Policy and RateLimit fields
	// (draft-ietf-httpapi-ratelimit-headers-10) for the enforced limits of
	// each request to response_headers_to_add, and Retry-After (whole
	// seconds, rounded up, never 0) when the request is over a limit.
	// Envoy adds them to the response it sends downstream. If false, no
	// headers are added.
	Headers bool
	// Observe, if not nil, is called once for each descriptor of a request
	// decided against a limit (not for unlimited, unmatched or replaced
	// ones), after the decision, on the request's goroutine. It must be
	// quick and safe for concurrent use: the server counts metrics with
	// it.
	Observe func(Event)
	// Logger receives warnings about store errors, at most one a second
	// (each saying how many it left out). If nil, nothing is logged.
	Logger *slog.Logger
	// MaxDescriptors is the most descriptors a request may carry; one
	// with more is refused with InvalidArgument before any is decided.
	// Envoy sends one descriptor per rate_limits entry of a route, a
	// handful; without a bound, one message of gRPC's 4MB holds some
	// 400,000, each a store call, a key and a status. Zero means
	// DefaultMaxDescriptors; a negative value, no bound (as in the
	// reference).
	MaxDescriptors int
}

// DefaultMaxDescriptors is Options.MaxDescriptors when zero.
const DefaultMaxDescriptors = 1000

// Event describes one descriptor's decision, for metrics.
type Event struct {
	// Domain is the request's domain.
	Domain string
	// Key names the limit the way the reference service names its stats:
	// the domain and the configured descriptor path, such as
	// "messaging.message_type_marketing.to_number". Its cardinality is
	// that of the configuration, except under detailed_metric and
	// value_to_metric, which put the request's values in it, as in the
	// reference. The values are kept as they came: the reference's stats
	// names replace the : and | of a key, and the dots of an IPv4
	// address, with _, which a metric built from Key must do itself to
	// match them.
	Key string
	// Name is the limit's configured name, or "".
	Name string
	// StoreKey is the key the descriptor is counted under in the store:
	// one per distinct descriptor (per client value, say), where Key
	// names the configured limit. It holds values from the request, so a
	// consumer that keeps keys must bound how many.
	StoreKey string
	// Hits is how many hits the descriptor asked for.
	Hits uint64
	// Over reports whether the descriptor was over its limit, whether or
	// not the limit is enforced.
	Over bool
	// Shadow reports that the limit is in shadow mode: when Over, the
	// response said OK anyway.
	Shadow bool
}

// Service answers Envoy's rate limit requests
// (envoy.service.ratelimit.v3.RateLimitService) from a Config and a
// sluice.Store. It is safe for concurrent use; create it with
// [NewService], mount it with [Service.Register], and change its
// configuration with [Service.SetConfig].
type Service struct {
	// UnimplementedRateLimitServiceServer answers UNIMPLEMENTED to a
	// method a later version of the API may add, which Service does not
	// know.
	rlsv3.UnimplementedRateLimitServiceServer

	store    sluice.Store
	opts     Options
	clock    rate.Clock
	log      *slog.Logger
	storeLog logpace.Pacer // paces the log of store failures
	cfg      atomic.Pointer[Config]
	health   *health.Server
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// NewService returns a Service that decides requests against cfg (nil
// means no domains) with store, which must not be nil.
func NewService(cfg *Config, store sluice.Store, opts Options) *Service {
	s := &Service{store: store, opts: opts, clock: opts.Clock, log: opts.Logger, health: health.NewServer()}
	if s.clock == nil {
		s.clock = rate.SystemClock{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.opts.MaxDescriptors == 0 {
		s.opts.MaxDescriptors = DefaultMaxDescriptors
	}
	s.cfg.Store(cfg)
	for _, name := range healthNames {
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	return s
}

// healthNames are the service names the health service reports on: the
// server as a whole (""), the rate limit service's full name, and
// "ratelimit", the name Envoy's reference service reports under, which a
// gateway's grpc_health_check or a Kubernetes grpc probe written for it
// names.
var healthNames = []string{"", rlsv3.RateLimitService_ServiceDesc.ServiceName, "ratelimit"}

// Register registers the rate limit service and the standard gRPC health
// service (grpc.health.v1, reporting SERVING for "", for
// envoy.service.ratelimit.v3.RateLimitService and for "ratelimit", the
// name Envoy's reference service reports under) on r, usually a
// *grpc.Server. A server that has a health service of its own registers
// the Service alone with rlsv3.RegisterRateLimitServiceServer.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(r, s)
	healthpb.RegisterHealthServer(r, s.health)
}

// Health returns the health service Register mounts, for a server that
// wants to report NOT_SERVING while it drains (health.Server.Shutdown).
func (s *Service) Health() *health.Server { return s.health }

// SetConfig replaces the configuration for the requests that arrive from
// now on. Counters live in the store under keys that name the descriptor
// and what its state means, so a reload keeps the state of a limit whose
// state means the same under the new one, and starts any other afresh.
//
// A fixed window (the reference's, and sluice's default) is keyed by its
// period and not its count, in either mode: a changed requests_per_unit
// keeps the window's count, as in the reference, so a lowered limit is
// over at once where the window holds more than it, and a raised one
// admits the difference; an override of the same unit counts in the same
// window. With RefusedConsumeNothing, sliding_window and sliding_log are
// keyed the same way (see rate.Limit.StateName); by default their keys
// name the whole limit, and a changed count starts them afresh. A
// bucket's state (gcra, token_bucket) is measured in its rate and burst:
// any change starts it afresh. A changed unit or unit_multiplier is
// another window. The two modes never read each other's keys.
func (s *Service) SetConfig(cfg *Config) { s.cfg.Store(cfg) }

// Config returns the current configuration.
func (s *Service) Config() *Config { return s.cfg.Load() }

// item is one descriptor of a request on its way to a status.
type item struct {
	m       match
	limited bool // a limit that is not unlimited applies
	unlim   bool
	hits    int64
	over    bool
	remain  int64
	reset   time.Duration
	decided bool
}

// ShouldRateLimit decides a request the way the reference service does:
// one status per descriptor, in order, and OVER_LIMIT overall when any
// enforced descriptor is over its limit. An unknown domain or a
// descriptor no limit matches is OK with no current_limit; an empty
// domain or descriptor list is InvalidArgument, and so is one of more
// than Options.MaxDescriptors descriptors; a store that cannot decide
// makes the call fail with Unavailable, and Envoy's failure_mode_deny
// decides what happens to the request.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if most := s.opts.MaxDescriptors; most > 0 && len(descs) > most {
		return nil, status.Errorf(codes.InvalidArgument, "%d rate limit descriptors; at most %d", len(descs), most)
	}
	cfg := s.cfg.Load()
	items := make([]item, len(descs))
	var replacing map[string]bool
	for i, d := range descs {
		m, ok, err := cfg.lookup(req.GetDomain(), d, !s.opts.RefusedConsumeNothing)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: %v", i, err)
		}
		if !ok {
			continue
		}
		for _, r := range m.limit.replaces {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			replacing[r] = true
		}
		it := &items[i]
		it.m, it.unlim, it.limited = m, m.limit.unlimited, !m.limit.unlimited
		it.hits = hitsOf(req, i)
	}
	// As in the reference, a limit named in the replaces of any limit the
	// request matched (unlimited ones included) is dropped.
	for i := range items {
		it := &items[i]
		if it.limited && it.m.limit.name != "" && replacing[it.m.limit.name] {
			*it = item{}
		}
	}

	var err error
	if s.opts.RefusedConsumeNothing {
		err = s.decideTogether(ctx, items)
	} else {
		for i := range items {
			if items[i].limited {
				if err = s.decideCounting(ctx, &items[i]); err != nil {
					break
				}
			}
		}
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, status.FromContextError(ctxErr).Err()
		}
		if deadline.Ended(ctx, err) {
			// The caller's deadline, which a store's client may report
			// a moment before the context's timer fires, or before the
			// deadline itself: the caller's time ran out, the store did
			// not fail. The rule is the Fallback's, which leaves such a
			// call to its caller rather than count it against the store.
			return nil, status.FromContextError(context.DeadlineExceeded).Err()
		}
		// One line a second, counting those it left out: while the store
		// is down, every call fails.
		if held, ok := s.storeLog.Take(s.clock.Now()); ok {
			s.log.WarnContext(ctx, "rls: store could not decide", "domain", req.GetDomain(), "error", err, "not_logged", held)
		}
		return nil, status.Errorf(codes.Unavailable, "rate limit store: %v", err)
	}
	return s.respond(req.GetDomain(), items), nil
}

// hitsOf returns how many hits descriptor i asks for, as the reference
// reads them: the descriptor's own hits_addend when set (0 is a check that
// spends nothing), else the request's, else 1. Negative hits (a refund)
// cannot be given back to an all-or-nothing store: such a descriptor is
// checked and spends nothing.
func hitsOf(req *rlsv3.RateLimitRequest, i int) int64 {
	d := req.GetDescriptors()[i]
	if d.GetIsNegativeHits() {
		return 0
	}
	if h := d.GetHitsAddend(); h != nil {
		return int64(min(h.GetValue(), math.MaxInt64))
	}
	return int64(max(1, req.GetHitsAddend()))
}

// decideCounting decides one descriptor the reference's way. For a fixed
// window, the reference adds every request's hits to the window's count,
// refused or not, and a descriptor is over whenever the count is above the
// limit, even for a check with 0 hits. A store here consumes nothing on a
// refusal, so the window is asked for with room past the limit
// (ls.counted holds 2×limit+1) and a request adds at most limit+1 hits:
//
//   - While the count is at most the limit, any request fits: its hits
//     are counted by the call that decides it, and it is over if the
//     count is now above the limit, as in the reference. A check adds
//     nothing and reads the count.
//   - Once the count is above the limit, every request is over until the
//     window ends, whatever it adds: the store may refuse one and count
//     nothing, and the answers stay the reference's.
//   - More hits than limit+1 are counted as limit+1: either leaves the
//     count above the limit for the rest of the window.
//
// So a request is one store call, and the window it counts in is the one
// the store decides it in, on the store's clock: no second write follows
// a refusal, which could land in a window other than the refusal's. (The
// reference names the window in its key, from its own clock, so a request
// that reaches Redis after the window ended still counts in the old one;
// here it counts in the new one. Either way it counts once.)
//
// The key names the period and not the limit (see limitSpec.countedID):
// as in the reference, a reload that changes requests_per_unit keeps the
// window's count, and an override of the same unit counts in it too. But
// each limit asks for the window with its own room, 2×its limit+1: a hit
// it refuses is counted only while the count stays within that room,
// where the reference counts every hit. A window written by one limit
// alone answers as the reference's does, as its count passes the limit
// whenever the reference's does. Where limits of different counts write
// one window (a limit reloaded with a larger count, or a configured limit
// and a smaller override of its unit), the smallest one's answers are
// still the reference's, but the count lacks the hits it refused past
// its room, and a larger one can admit where the reference, having
// counted them, refuses: configured at 20 an hour, 18 hits, then 3
// refused by an override of 3 an hour (18 is past its room of 7), and the
// configured limit admits a 19th hit, where the reference, counting 22,
// refuses it. What a limit admits still keeps the count within it.
//
// Algorithms other than fixed_window (a sluice extension) keep sluice's
// meaning even here: a refused request consumes nothing.
func (s *Service) decideCounting(ctx context.Context, it *item) error {
	ls := it.m.limit
	if ls.limit.Algorithm != rate.FixedWindow {
		return s.decideAlone(ctx, it, true)
	}
	it.decided = true
	r := rate.Request{Key: it.m.key, Limit: ls.counted, Cost: min(it.hits, int64(ls.perUnit)+1)}
	d, err := s.store.Decide(ctx, r)
	if err != nil {
		return err
	}
	it.reset = s.resetOf(ls, d)
	// The limit is read back from the capacity the store decided with,
	// 2×limit+1, rather than taken from ls: a Fallback deciding locally on
	// n instances applies its share of it, ⌊(2×limit+1)/n⌋ (see
	// rate.Limit.Share), and half of that, rounded down, is exactly the
	// share of the limit, ⌊limit/n⌋, against which its count is weighed.
	// (Unshared, half of 2×limit+1 is the limit.) A limit below n leaves
	// each instance less than one a window: the share of 2×limit+1 is 1,
	// and the instance refuses every request, as it cannot know n to
	// admit one every few windows.
	limit, count := d.Limit/2, d.Limit-d.Remaining
	it.over = !d.Allowed || count > limit
	if !it.over {
		it.remain = limit - count
	}
	return nil
}

// decideAlone decides one descriptor with sluice's meaning: a refused
// request consumes nothing. If spend is false it only looks, and reports
// whether the descriptor's hits would have passed.
func (s *Service) decideAlone(ctx context.Context, it *item, spend bool) error {
	ls := it.m.limit
	it.decided = true
	if ls.perUnit == 0 {
		it.over, it.remain, it.reset = it.hits > 0, 0, s.windowLeft(ls)
		return nil
	}
	cost := it.hits
	if !spend || cost > ls.limit.Capacity() {
		cost = 0
	}
	d, err := s.store.Decide(ctx, rate.Request{Key: it.m.key, Limit: ls.limit, Cost: cost})
	if err != nil {
		return err
	}
	it.over = !d.Allowed || cost != it.hits && d.Remaining < it.hits
	it.remain, it.reset = d.Remaining, s.resetOf(ls, d)
	return nil
}

// slot is one store key under one limit: the descriptors of a request
// with the same slot are asked for once. A window's key names its
// algorithm and period, not its count (see limitSpec.id), so a configured
// limit and an override of the same unit are one key under two limits.
type slot struct {
	key   string
	count int64
}

// decideTogether decides the enforced descriptors of a request all or
// nothing with one DecideAll, then the shadow-mode ones each on its own,
// spending only if the request as a whole was admitted.
//
// A key under limits of different counts (a window's, shared by the
// configured limit and an override) is asked for once per limit, the
// larger counts first: the store decides each on the state the ones
// before it left, so the smallest limit is decided on every hit the
// request puts on the window, and the request passes only if the window
// holds them all within each of its limits.
func (s *Service) decideTogether(ctx context.Context, items []item) error {
	var (
		reqs  []rate.Request
		owner = make([]int, len(items)) // index in reqs, or -1
		// at holds the index in reqs of each slot, and under the slot of
		// count 0, which no request has (a limit of 0 is decided here),
		// that of its key's first.
		at       map[slot]int
		mixed    bool // a key under limits of different counts
		possible = true
	)
	for i := range items {
		owner[i] = -1
		it := &items[i]
		if !it.limited || it.m.shadow {
			continue
		}
		ls := it.m.limit
		if ls.perUnit == 0 {
			it.decided, it.over, it.reset = true, it.hits > 0, s.windowLeft(ls)
			possible = possible && !it.over
			continue
		}
		// A key that appears twice under one limit is asked for once, for
		// the sum of the hits, so that the check of possible below sees
		// the sum: one past the capacity can never pass, and becomes a
		// look answered OVER_LIMIT. Asked for apart, the hits would reach
		// a Fallback's rate.CheckGroup, which fails the whole call with
		// ErrCostExceedsCapacity: UNAVAILABLE, as if the store had failed.
		sl := slot{it.m.key, ls.limit.Count}
		if j, ok := at[sl]; ok {
			owner[i] = j
			reqs[j].Cost = addHits(reqs[j].Cost, it.hits)
			continue
		}
		if at == nil {
			at = map[slot]int{}
		}
		if _, ok := at[slot{key: it.m.key}]; ok {
			mixed = true
		} else {
			at[slot{key: it.m.key}] = len(reqs)
		}
		at[sl] = len(reqs)
		owner[i] = len(reqs)
		reqs = append(reqs, rate.Request{Key: it.m.key, Limit: ls.limit, Cost: it.hits})
	}
	if mixed {
		reqs = largerFirst(reqs, owner)
	}
	// costs[j] is what reqs[j] is decided on: the hits of the request on
	// its key up to its own, the requests of a key being next to each
	// other (each key is one request, unless mixed).
	costs := make([]int64, len(reqs))
	for j := range reqs {
		costs[j] = reqs[j].Cost
		if j > 0 && reqs[j-1].Key == reqs[j].Key {
			costs[j] = addHits(costs[j-1], costs[j])
		}
		if costs[j] > reqs[j].Limit.Capacity() {
			possible = false
		}
	}
	if !possible {
		// Some limit can never admit this request: look without spending.
		for j := range reqs {
			reqs[j].Cost = 0
		}
	}
	admitted := possible
	if len(reqs) > 0 {
		out := make([]rate.Decision, len(reqs))
		all, err := s.store.DecideAll(ctx, reqs, out)
		if err != nil {
			return err
		}
		admitted = admitted && all.Allowed
		if admitted && mixed {
			// A key's requests decided after reqs[j] put more hits on
			// its window: what is left of reqs[j]'s limit is less by
			// those, costs[last of the key] − costs[j].
			last := len(reqs) - 1
			for j := last - 1; j >= 0; j-- {
				if reqs[j].Key != reqs[last].Key {
					last = j
					continue
				}
				out[j].Remaining = max(0, out[j].Remaining-(costs[last]-costs[j]))
			}
		}
		for i := range items {
			j := owner[i]
			if j < 0 {
				continue
			}
			it, d := &items[i], out[j]
			it.decided = true
			it.over = !d.Allowed || !possible && d.Remaining < costs[j]
			it.remain, it.reset = d.Remaining, s.resetOf(items[i].m.limit, d)
		}
	}
	for i := range items {
		it := &items[i]
		if !it.limited || !it.m.shadow {
			continue
		}
		// A refused request spends nothing here either.
		if err := s.decideAlone(ctx, it, admitted); err != nil {
			return err
		}
	}
	return nil
}

// addHits returns a + b, saturating: a sum past a capacity is refused all
// the same, and one that wrapped around would fail the call.
func addHits(a, b int64) int64 { return a + min(b, math.MaxInt64-a) }

// largerFirst returns reqs with the requests of each key together, the
// larger counts first, and points owner at their new places.
func largerFirst(reqs []rate.Request, owner []int) []rate.Request {
	order := make([]int, len(reqs))
	for j := range order {
		order[j] = j
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if c := strings.Compare(reqs[a].Key, reqs[b].Key); c != 0 {
			return c
		}
		return cmp.Compare(reqs[b].Limit.Count, reqs[a].Limit.Count)
	})
	sorted, place := make([]rate.Request, len(reqs)), make([]int, len(reqs))
	for n, j := range order {
		sorted[n], place[j] = reqs[j], n
	}
	for i, j := range owner {
		if j >= 0 {
			owner[i] = place[j]
		}
	}
	return sorted
}

// resetOf returns how long until the descriptor's limit resets, from the
// store's decision: the wait after which a refused request passes, or
// until an admitted one's state is fresh. A fixed window the decision says
// nothing about (a look at an untouched window) is measured on the clock.
func (s *Service) resetOf(ls *limitSpec, d rate.Decision) time.Duration {
	switch {
	case !d.Allowed && d.RetryAfter > 0:
		return d.RetryAfter
	case d.ResetAfter > 0:
		return d.ResetAfter
	case ls.limit.Algorithm == rate.FixedWindow:
		return s.windowLeft(ls)
	}
	return 0
}

// windowLeft returns the time left in the current fixed window of ls on
// the service's clock: windows are aligned to the Unix epoch.
func (s *Service) windowLeft(ls *limitSpec) time.Duration {
	p := ls.limit.Period.Microseconds()
	now := rate.Micros(s.clock.Now())
	left := p - now%p
	if now < 0 {
		left = -(now % p)
		if left == 0 {
			left = p
		}
	}
	return time.Duration(left) * time.Microsecond
}

// statusParts is a status and the messages it points to, allocated as
// one.
type statusParts struct {
	status   rlsv3.RateLimitResponse_DescriptorStatus
	limit    rlsv3.RateLimitResponse_RateLimit
	duration durationpb.Duration
}

// oneStatus is a response of one status, as most requests get (Envoy
// sends one descriptor per rate limit action), allocated as one.
type oneStatus struct {
	resp  rlsv3.RateLimitResponse
	ptr   [1]*rlsv3.RateLimitResponse_DescriptorStatus
	parts [1]statusParts
}

// respond builds the response and reports the events.
func (s *Service) respond(domain string, items []item) *rlsv3.RateLimitResponse {
	var (
		resp  *rlsv3.RateLimitResponse
		parts []statusParts
	)
	if len(items) == 1 {
		one := &oneStatus{}
		resp, parts = &one.resp, one.parts[:]
		resp.Statuses = one.ptr[:]
	} else {
		resp = &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(items))}
		parts = make([]statusParts, len(items))
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	for i := range items {
		it, p := &items[i], &parts[i]
		st := &p.status
		st.Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = st
		switch {
		case it.unlim:
			st.LimitRemaining = math.MaxUint32
		case it.limited && it.decided:
			if it.over && !it.m.shadow {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			it.m.limit.setCurrent(&p.limit)
			st.CurrentLimit = &p.limit
			st.LimitRemaining = uint32(min(max(it.remain, 0), math.MaxUint32))
			// Whole seconds, rounded up, as the reference reports them: a
			// client told to come back in 30s never comes back early.
			p.duration.Seconds = rate.CeilSeconds(it.reset)
			st.DurationUntilReset = &p.duration
			if s.opts.Observe != nil {
				s.opts.Observe(Event{
					Domain:   domain,
					Key:      it.m.stat,
					StoreKey: it.m.key,
					Name:     it.m.limit.name,
					Hits:     uint64(it.hits),
					Over:     it.over,
					Shadow:   it.m.shadow,
				})
			}
		}
	}
	if s.opts.Headers {
		resp.ResponseHeadersToAdd = headers(items)
	}
	return resp
}
