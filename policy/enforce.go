package policy

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deadline"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/memory"
)

// Verdict is what a transport does with a request.
type Verdict uint8

const (
	// Allow: serve the request.
	Allow Verdict = iota
	// Refuse: a limit refused it; answer 429 Too Many Requests (gRPC:
	// RESOURCE_EXHAUSTED) with Outcome.RetryAfter.
	Refuse
	// Shed: too many requests of its priority are in flight; answer 503
	// Service Unavailable (gRPC: UNAVAILABLE) with Outcome.RetryAfter.
	Shed
	// Unavailable: the store failed under a fail-closed policy, or a
	// sluice.Fallback refused the request in its FailClosed mode, or the
	// request's context ended before it was decided or while it was held
	// back, or a Drain ended its wait; answer 503 (gRPC: UNAVAILABLE)
	// with Outcome.RetryAfter. Outcome.Err says which.
	Unavailable
)

// String returns allow, refuse, shed or unavailable.
func (v Verdict) String() string {
	switch v {
	case Allow:
		return "allow"
	case Refuse:
		return "refuse"
	case Shed:
		return "shed"
	case Unavailable:
		return "unavailable"
	}
	return "Verdict(?)"
}

// Outcome is the Enforcer's answer for one request.
type Outcome struct {
	// Verdict says whether to serve the request.
	Verdict Verdict
	// Decision combines the decisions of the enforcing limits (see
	// rate.Combine): its Limit, Remaining and ResetAfter are those of the
	// most restrictive one, which, of policies of different costs, is the
	// one with the fewest requests left (its Remaining units over its
	// policy's cost). It is meaningful only when Limit is not nil.
	Decision rate.Decision
	// Limit is the most restrictive limit that decided the request, the
	// one rate limit headers report; nil when no enforcing limit did
	// (nothing matched, only shadow policies, the store failed open, or
	// a sluice.Fallback decided in its FailOpen or FailClosed mode).
	Limit *Limit
	// RetryAfter is how long the client should wait, for every verdict
	// but Allow.
	RetryAfter time.Duration
	// Violated lists the policies that refused the request, the one with
	// the longest wait first. Only for Refuse.
	Violated []*Policy
	// Refused lists the limits that refused the request, the one with the
	// longest wait first, one per name: a limit's Name is its
	// RateLimit-Policy item's, the name an RFC 9457 problem's
	// violated-policies lists (a policy of several limits names each
	// apart). Only for Refuse.
	Refused []*Limit
	// Waited is how long the request was held back (max_delay or a
	// leaky_bucket's turn) before its verdict.
	Waited time.Duration
	// Err is the store's error when the store failed (whatever the
	// verdict), the context's error when the request ended before its
	// verdict, or ErrDrained when a Drain ended its wait. A
	// sluice.Fallback that decided in its FailOpen or FailClosed mode
	// failed too, though it returned no error: Err then wraps
	// sluice.ErrStoreDown.
	Err error

	gate *gate
}

// Done releases the request's slot in the concurrency limit. Transports
// call it once the request is finished; it is safe to call on any
// Outcome, and more than once.
func (o *Outcome) Done() {
	if o.gate != nil {
		o.gate.release()
		o.gate = nil
	}
}

// Event is one policy's part in the decision about one request, for an
// Observer.
type Event struct {
	// Policy is the policy that decided.
	Policy *Policy
	// Key is the store key of the policy's most restrictive limit for
	// this request (see rate.MostRestrictive): for a refusal, the key
	// that refused. It is a string the client influences, so a consumer
	// that keeps keys must bound how many (never a metric label).
	Key string
	// Decision combines the decisions of the policy's limits for this
	// request. When the store failed it is what the fallback decided (an
	// allowed, empty Decision for a fail-open policy, a refusal for a
	// fail-closed one), or what a sluice.Fallback's FailOpen or FailClosed
	// mode decided in the store's place.
	Decision rate.Decision
	// Waited is how long the policy held the request back before its
	// verdict: the max_delay wait of a window limit that refused the
	// request at first, a leaky_bucket's turn or a gcra or token_bucket's
	// unit reserved under max_delay (Decision.Delay), once waited, or
	// both. An Observer counts a request admitted after a wait from it.
	// It is 0 for a policy that held nothing back, a shadow one included,
	// though the request may have waited for another policy.
	Waited time.Duration
	// Shadow reports a shadow policy: its refusals refused nothing.
	Shadow bool
	// StoreErr is the store's error, if it failed: for a
	// sluice.Fallback that decided in its FailOpen or FailClosed mode, an
	// error wrapping sluice.ErrStoreDown, as no policy's limit decided.
	StoreErr error
}

// The results a decision is counted under (see Event.Result), as sluice
// serve's sluice_decisions_total and package metrics spell them in their
// result label: what the policy did to the request, whoever decided it.
const (
	// ResultAllowed: the request passed, a fail-open pass and a shadow
	// policy's every decision but a refusal included.
	ResultAllowed = "allowed"
	// ResultRefused: a limit refused the request (429), the local store's
	// under on_store_error: local included.
	ResultRefused = "refused"
	// ResultShadowRefused: a shadow policy would have refused the request.
	ResultShadowRefused = "shadow_refused"
	// ResultThrottled: the request passed after the policy held it back
	// (max_delay, a leaky_bucket's turn).
	ResultThrottled = "throttled"
	// ResultUnavailable: the store could not decide and the request was
	// refused for it (503): under on_store_error: closed, or by a
	// sluice.Fallback in its FailClosed mode.
	ResultUnavailable = "unavailable"
)

// The results each kind of policy is counted under: an enforcing policy
// never would-refuse, a shadow one refuses nothing.
var (
	enforcingResults = []string{ResultAllowed, ResultRefused, ResultThrottled, ResultUnavailable}
	shadowResults    = []string{ResultAllowed, ResultShadowRefused}
)

// Results returns the results p's events can have (Event.Result), for
// counters that declare their series at 0. The slice is shared: do not
// modify it.
func (p *Policy) Results() []string {
	if p.Shadow {
		return shadowResults
	}
	return enforcingResults
}

// Result returns the result e is counted under, one of the Result
// constants: what the policy did to the request, whether the store
// decided or, having failed, the policy's on_store_error did (open lets
// it through, local decides in the local store, closed answers 503). A
// sluice.Fallback in its FailClosed or FailOpen mode decides in place of
// every policy's on_store_error: its refusal is a 503 whatever the
// policy says, and its pass lets the request through even under
// on_store_error: closed. A shadow policy refused nothing, and says what
// it would have done only when the store could tell it. Counters that
// keep one definition of a result agree, whoever counts them.
func (e Event) Result() string {
	switch {
	case e.Shadow && e.StoreErr == nil && !e.Decision.Allowed:
		return ResultShadowRefused
	case e.Shadow:
		return ResultAllowed
	case errors.Is(e.StoreErr, errFailClosed):
		// No limit refused: the Enforcer answered 503, as storeFailed
		// says, under any on_store_error.
		return ResultUnavailable
	case e.StoreErr != nil && !errors.Is(e.StoreErr, errFailOpen) && e.Policy != nil && e.Policy.OnStoreError == sluice.FailClosed:
		return ResultUnavailable
	case !e.Decision.Allowed:
		return ResultRefused
	case e.Waited > 0:
		// The decision after a max_delay wait has no Delay: only the
		// Event knows the request waited.
		return ResultThrottled
	}
	return ResultAllowed
}

// Observer is told about every policy decision, to count them. It is
// called on the request's goroutine: it must be fast and must not keep
// the Event's Policy beyond the Set's life. Event.Result says what to
// count a decision as; package metrics is an Observer that counts them in
// Prometheus, as sluice serve does.
type Observer interface {
	// Observe is told, once per request, about each policy that decided
	// it: one that matched the request and whose key the request has.
	// Enforcing policies are told of once the verdict is known; shadow
	// ones as each is decided, which is only when the enforcing ones let
	// the request through. A request whose context ends before its
	// verdict is not observed, nor is a shed request (see Shed), but for
	// one that ends while held for the Delay its admission gave it (a
	// leaky_bucket's turn, a gcra or token_bucket's unit reserved under
	// max_delay), or whose Delay a Drain ends: its turn or units are
	// taken, and it is observed as held (Waited, the Delay), though it
	// goes no further.
	Observe(ctx context.Context, e Event)
	// Shed is told about a request the concurrency limit refused.
	Shed(ctx context.Context, p Priority)
}

// Options configures an Enforcer. The zero value is ready to use.
type Options struct {
	// Clock tells the time of waits (max_delay, leaky_bucket). If nil,
	// rate.SystemClock. It should be the store's clock.
	Clock rate.Clock
	// Local is the store of this instance that policies with
	// on_store_error: local fall back to. If nil, an in-memory store is
	// created on the Clock.
	Local sluice.Store
	// Observer is told about every decision. If nil, nobody is.
	Observer Observer
	// Logger logs store failures and recoveries (once per transition)
	// and the refusals of shadow policies (at most one line a second per
	// policy, with the store key and how many refusals it left out). If
	// nil, nothing is logged.
	Logger *slog.Logger
	// StoreLogs says that the store logs its own outages, as a
	// sluice.Fallback does: the Enforcer then logs no store failure or
	// recovery. A Fallback over a Redis Cluster logs each master's apart;
	// the Enforcer, which sees one store, would log a failure at each
	// request that meets a dead master after one decided by a live one,
	// and a recovery at the next of those.
	StoreLogs bool
	// InFlight counts the requests in flight under the Set's concurrency
	// limit. If nil, the Enforcer counts in its own; share one between
	// the Enforcers of successive configurations (see InFlight).
	InFlight *InFlight
}

// Drain is the end of a server's service, for the requests it serves: a
// server that stops cuts the requests still in flight at the end of its
// shutdown timeout, and a request held back past that end (by max_delay,
// or a leaky_bucket's turn) would be cut with no answer, its unit or turn
// spent for nothing; on a shared store, such as Redis, the reservation
// outlives the process, and the clients of the next one wait for units
// nobody used. An Enforcer deciding a request whose context carries a
// Drain (WithDrain) bounds its waits by the drain's end once it has
// begun: a wait that would end past it is not started, the request being
// refused at once with its Retry-After, as when its own deadline is too
// near, and taking no unit or turn. A request already held when the
// drain begins, whose wait would end past it, is answered at once:
// Unavailable, with the rest of its wait as RetryAfter and ErrDrained as
// Err, observed as a request whose context ended while it was held (see
// Observer).
//
// The zero value is a drain not begun. A server makes one, puts it in
// every request's context (http.Server's BaseContext), and calls Begin
// as it starts to shut down. It is safe for concurrent use.
type Drain struct {
	once  sync.Once
	begun context.Context // ends at Begin, waking the waits
	begin context.CancelFunc
	end   atomic.Pointer[time.Time]
}

// ErrDrained is Outcome.Err for a request held back whose wait a Drain
// ended: its turn or unit would have come after the drain's end.
// Its text is said to the client as it is (httplimit's problem detail,
// grpclimit's status message).
var ErrDrained = errors.New("the server is shutting down, and the wait would have outlasted it")

func (d *Drain) init() {
	d.once.Do(func() { d.begun, d.begin = context.WithCancel(context.Background()) })
}

// Begin begins the drain, which ends at end on the Enforcers' clock.
// Only the first call counts: a drain is not put off.
func (d *Drain) Begin(end time.Time) {
	d.init()
	// The end first: a wait woken by the cancel reads it.
	d.end.CompareAndSwap(nil, &end)
	d.begin()
}

type drainKey struct{}

// WithDrain returns a copy of ctx that carries d, which bounds the waits
// of the requests decided with it (see Drain): a context carried through
// the request, as a deadline is, since the drain is the end of every
// request's time, whichever Enforcer decides it.
func WithDrain(ctx context.Context, d *Drain) context.Context {
	return context.WithValue(ctx, drainKey{}, d)
}

// drainOf returns the Drain ctx carries, or nil.
func drainOf(ctx context.Context) *Drain {
	d, _ := ctx.Value(drainKey{}).(*Drain)
	return d
}

// ending returns the drain's end, and whether it has begun; a nil Drain
// never begins.
func (d *Drain) ending() (time.Time, bool) {
	if d == nil {
		return time.Time{}, false
	}
	if p := d.end.Load(); p != nil {
		return *p, true
	}
	return time.Time{}, false
}

// Enforcer applies a Set to requests: it matches them, builds their keys,
// decides them against a store, holds back the ones a policy lets wait,
// and handles store failures as each policy says. The httplimit and
// grpclimit packages wrap it; most programs use those.
//
// It is safe for concurrent use. Create one with [NewEnforcer].
type Enforcer struct {
	set      *Set
	store    sluice.Store
	src      sourcer // store, if it says who decided, as a Fallback does
	local    sluice.Store
	clock    rate.Clock
	observer Observer
	logger   *slog.Logger
	storeLog *slog.Logger // logger, unless the store logs its outages
	gate     *gate
	failing  atomic.Bool
	pool     sync.Pool
	// overrides indexes the overrides of each policy that has some, a
	// slice per key of the policy (see overrideIndex).
	overrides map[*Policy][]overrideIndex
}

// NewEnforcer returns an Enforcer that decides set's policies against
// store. A nil store is a memory store (package store/memory) with its
// default options, deciding on o.Clock. A store that says who decided,
// as a sluice.Fallback does, is asked on every request: a decision of its
// FailClosed or FailOpen mode, made for no limit while its primary is
// down, is a failure of the store, not a limit's: Outcome.Err wraps
// sluice.ErrStoreDown, its refusal is a 503 with its RetryAfter, as
// on_store_error: closed answers, and its pass lets the request through.
func NewEnforcer(set *Set, store sluice.Store, o Options) *Enforcer {
	e := &Enforcer{set: set, store: store, local: o.Local, clock: o.Clock, observer: o.Observer, logger: o.Logger}
	if !o.StoreLogs {
		e.storeLog = o.Logger
	}
	if e.clock == nil {
		e.clock = rate.SystemClock{}
	}
	if e.store == nil {
		e.store = memory.New(memory.Options{Clock: e.clock})
	}
	e.src, _ = e.store.(sourcer)
	if e.local == nil {
		e.local = memory.New(memory.Options{Clock: e.clock})
	}
	e.gate = newGate(set.conc, o.InFlight)
	e.pool.New = func() any { return new(state) }
	for _, p := range set.policies {
		if len(p.overrides) > 0 {
			if e.overrides == nil {
				e.overrides = map[*Policy][]overrideIndex{}
			}
			e.overrides[p] = indexOverrides(p)
		}
	}
	return e
}

// Set returns the policies the Enforcer applies.
func (e *Enforcer) Set() *Set { return e.set }

// state is the scratch space of one Enforce call, pooled.
type state struct {
	reqs  []rate.Request
	decs  []rate.Decision
	lims  []*Limit
	spans []int // key i is st.buf[spans[2i]:spans[2i+1]], the Key of reqs[i]
	nEnf  int   // entries [0, nEnf) enforce; [nEnf, len) are shadow
	// matched holds the policies with keys that the request matches.
	matched []*Policy
	buf     []byte
	parts   []byte
	values  []string
	// route is the request's host and path as the policies' patterns
	// match them, split once for all of them.
	route route
	// okey is where an override's lookup key is written.
	okey []byte
	// held is how long entry i held the request back: its decision
	// after a wait has no Delay left to say so.
	held []time.Duration
	// spent reports a request whose context ended while it was held
	// for its admission's Delay: its units are spent, and it is
	// observed, though it goes no further.
	spent bool
	// The fallback's entries when the store fails.
	lreqs []rate.Request
	ldecs []rate.Decision
	llims []*Limit
}

func (st *state) reset() {
	st.reqs, st.decs, st.lims, st.spans = st.reqs[:0], st.decs[:0], st.lims[:0], st.spans[:0]
	st.buf, st.matched = st.buf[:0], st.matched[:0]
	st.spent = false
}

// Enforce decides r. Whatever the verdict, the caller must call Done on
// the Outcome when the request is finished.
func (e *Enforcer) Enforce(ctx context.Context, r *Request) Outcome {
	st := e.pool.Get().(*state)
	st.reset()
	r.routed = routed(r.HTTP, e.set.paths.Options)
	st.route.reset(r.routed)
	defer func() {
		// The pooled slices must not pin this request's keys.
		clear(st.reqs)
		st.route.reset(nil)
		e.pool.Put(st)
		r.routed = nil
	}()

	// The policies r matches, enforcing ones first, then shadow ones, so
	// that each group's entries are contiguous; and its priority, the
	// lowest any matching enforcing policy sets (a route classified low by
	// one policy is low).
	prio, classified := Normal, false
	nEnf := 0 // st.matched[:nEnf] enforce
	for pass := 0; pass < 2; pass++ {
		shadow := pass == 1
		for _, p := range e.set.policies {
			if p.Shadow != shadow || !p.match.matches(r, &st.route) {
				continue
			}
			if !shadow && p.HasPriority && (!classified || p.Priority < prio) {
				prio, classified = p.Priority, true
			}
			if len(p.keys) > 0 {
				st.matched = append(st.matched, p)
			}
		}
		if !shadow {
			nEnf = len(st.matched)
		}
	}

	// The concurrency limit counts the request before its keys are built:
	// a form:NAME key reads the body, which a shed request need not, and
	// which the limit then bounds how many are held at once.
	var out Outcome
	decided := false // see the release below
	if e.gate != nil {
		if !e.gate.acquire(prio) {
			if e.observer != nil {
				e.observer.Shed(ctx, prio)
			}
			return Outcome{Verdict: Shed, RetryAfter: e.set.conc.RetryAfter}
		}
		out.gate = e.gate
		// A panic below (in a store, in an Observer) leaves the transport
		// no Outcome to call Done on: give the slot back here.
		defer func() {
			if !decided {
				e.gate.release()
			}
		}()
	}

	plan, planKnown := "", false
	collect := func(ps []*Policy) {
		for _, p := range ps {
			if p.usesPlan && !planKnown {
				plan, planKnown = e.set.planOf(r), true
			}
			e.collect(st, p, r, plan)
		}
	}
	collect(st.matched[:nEnf])
	st.nEnf = len(st.reqs)
	collect(st.matched[nEnf:])
	if len(st.reqs) > 0 {
		keys := string(st.buf)
		for i := range st.reqs {
			st.reqs[i].Key = keys[st.spans[2*i]:st.spans[2*i+1]]
		}
	}
	if cap(st.decs) < len(st.reqs) {
		st.decs = make([]rate.Decision, len(st.reqs))
	}
	st.decs = st.decs[:len(st.reqs)]
	if cap(st.held) < len(st.reqs) {
		st.held = make([]time.Duration, len(st.reqs))
	}
	st.held = st.held[:len(st.reqs)]
	clear(st.held)
	if st.nEnf > 0 {
		e.decide(ctx, st, &out)
	}
	// A request the enforcing policies refused, or could not decide,
	// consumes nothing there; enforced beside them, all or nothing, a
	// shadow policy would not have consumed either, so it is not asked:
	// its report would overstate what it would refuse.
	if st.nEnf < len(st.reqs) && out.Verdict != Refuse && out.Verdict != Unavailable {
		e.decideShadow(ctx, st)
	}
	decided = true
	return out
}

// collect appends the requests of policy p for r.
func (e *Enforcer) collect(st *state, p *Policy, r *Request, plan string) {
	var pathVals []string
	if p.usesPath {
		names := p.match.pathNames
		if cap(st.values) < len(names) {
			st.values = make([]string, len(names))
		}
		pathVals = st.values[:len(names)]
		clear(pathVals)
		p.match.pathValues(r.routed, names, pathVals)
	}
	// The plan whose limits the keys' counters hold, "" for the
	// policy's defaults: a global key's value (see appendPart).
	limitsPlan := ""
	if _, own := p.plans[plan]; own {
		limitsPlan = plan
	}
	for ki, key := range p.keys {
		// The parts, once, then one key per limit.
		st.parts = st.parts[:0]
		ok := true
		// The value spans of the parts, for overrides; load refuses a key
		// of more parts than it holds.
		var spans [2 * maxKeyParts]int
		for i := range key {
			if i > 0 {
				st.parts = append(st.parts, '|')
			}
			st.parts = append(st.parts, key[i].label...)
			st.parts = append(st.parts, '=')
			start := len(st.parts)
			st.parts, ok = appendPart(st.parts, &key[i], r, pathVals, limitsPlan)
			if !ok {
				break
			}
			if i < maxKeyParts {
				spans[2*i], spans[2*i+1] = start, len(st.parts)
			}
		}
		if !ok {
			continue
		}
		limits := e.limitsFor(st, p, plan, ki, spans[:])
		for _, l := range limits {
			// {prefix:policy:parts}:tag: the braces are a Redis Cluster
			// hash tag, so that a key's limits (10/s and 5000/d) share a
			// slot and are decided in one script call, all or nothing.
			start := len(st.buf)
			st.buf = append(st.buf, '{')
			st.buf = append(st.buf, p.keyHead...)
			st.buf = append(st.buf, st.parts...)
			st.buf = append(st.buf, '}', ':')
			st.buf = append(st.buf, l.tag...)
			st.spans = append(st.spans, start, len(st.buf))
			st.reqs = append(st.reqs, rate.Request{Limit: l.Limit, Cost: p.Cost, MaxDelay: p.MaxDelay})
			st.lims = append(st.lims, l)
		}
	}
}

// limitsFor returns the limits for key ki of p, whose parts are st.parts
// with the value spans spans: an override's if one names the key, else
// the plan's, else the defaults.
func (e *Enforcer) limitsFor(st *state, p *Policy, plan string, ki int, spans []int) []*Limit {
	if len(p.overrides) > 0 {
		if i := e.overrides[p][ki].first(st, spans); i >= 0 {
			return p.overrides[i].limits
		}
	}
	if plan != "" {
		if ls, ok := p.plans[plan]; ok {
			return ls
		}
	}
	return p.limits
}

// overrideIndex finds the first override that names a key of a policy
// (the first one with every part it names in the key, with its value) by
// hashing the key's values, not by comparing them with every override's:
// a policy may list thousands of them, one per partner or account.
// Overrides are grouped by the parts of the key they name, their shape;
// a key is looked up once per shape, of which there are at most
// 2^maxKeyParts.
type overrideIndex struct {
	shapes []overrideShape
}

// overrideShape holds the overrides that name one set of a key's parts.
type overrideShape struct {
	parts uint8 // bit i: the key's part i
	// first maps the values of those parts, in the key's order, as
	// appendOverrideValue writes them, to the index of the first override
	// in the policy's list that names them.
	first map[string]int
}

// indexOverrides returns the index of p's overrides for each of its keys.
// An override applies to a key when each part it names is among the
// key's first maxKeyParts parts (the first with its label), which alone
// have value spans, and has its value there.
func indexOverrides(p *Policy) []overrideIndex {
	idx := make([]overrideIndex, len(p.keys))
	for ki, key := range p.keys {
		shapes := map[uint8]int{} // parts to the shape's index in idx[ki]
	overrides:
		for oi, o := range p.overrides {
			var vals [maxKeyParts]string
			var mask uint8
			for _, w := range o.when {
				i := slices.IndexFunc(key, func(pt part) bool { return pt.label == w.part })
				if i < 0 || i >= maxKeyParts || mask&(1<<i) != 0 && vals[i] != w.value {
					continue overrides // never applies to this key
				}
				mask |= 1 << i
				vals[i] = w.value
			}
			var b []byte
			for i := range maxKeyParts {
				if mask&(1<<i) != 0 {
					b = appendOverrideValue(b, vals[i])
				}
			}
			si, ok := shapes[mask]
			if !ok {
				si = len(idx[ki].shapes)
				shapes[mask] = si
				idx[ki].shapes = append(idx[ki].shapes, overrideShape{parts: mask, first: map[string]int{}})
			}
			if _, ok := idx[ki].shapes[si].first[string(b)]; !ok {
				idx[ki].shapes[si].first[string(b)] = oi
			}
		}
	}
	return idx
}

// appendOverrideValue appends v to an override's lookup key, its length
// first, so that no two lists of values write one key.
func appendOverrideValue[V string | []byte](b []byte, v V) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

// first returns the index of the first override that names the key whose
// parts are st.parts, with the value spans spans, or -1 for none.
func (x *overrideIndex) first(st *state, spans []int) int {
	best := -1
	for i := range x.shapes {
		sh := &x.shapes[i]
		st.okey = st.okey[:0]
		for j := range maxKeyParts {
			if sh.parts&(1<<j) != 0 {
				st.okey = appendOverrideValue(st.okey, st.parts[spans[2*j]:spans[2*j+1]])
			}
		}
		if oi, ok := sh.first[string(st.okey)]; ok && (best < 0 || oi < best) {
			best = oi
		}
	}
	return best
}

// decide decides the enforcing entries against the store, waits where a
// policy allows it, and fills out.
func (e *Enforcer) decide(ctx context.Context, st *state, out *Outcome) {
	d, cut, err := e.hold(ctx, st, out, e.decideShared)
	switch {
	case err != nil:
		e.storeFailed(ctx, st, err, out)
	case !cut:
		conclude(d, st.decs[:st.nEnf], st.lims, out)
		e.observe(ctx, st, 0, st.nEnf, nil)
	case st.spent:
		e.observe(ctx, st, 0, st.nEnf, nil)
	}
}

// decideShared decides the enforcing entries against the store: decide's
// way to decide, for hold.
func (e *Enforcer) decideShared(ctx context.Context, st *state) (rate.Decision, error) {
	d, err := e.decideAll(ctx, st.reqs[:st.nEnf], st.decs[:st.nEnf])
	if err == nil {
		e.storeOK()
	}
	return d, err
}

// hold decides the enforcing entries with decide (which fills
// st.decs[:st.nEnf] and returns their combination) and holds the request
// back as its policies allow: the one place that does so, so that
// max_delay and a leaky_bucket's turn hold alike whichever store decides,
// the shared one or the local fallback. An admission with a Delay (a
// leaky_bucket's turn, a gcra or token_bucket's unit reserved within
// max_delay) is held for it. A window's refusal within max_delay is
// waited out and decided again, once per request: one that already
// waited (out.Waited), and whose store then failed, is not held a second
// time by the local store. It returns the final decision, or decide's
// error; cut reports a wait ended by the request's context, out then
// being Unavailable: after a refusal, nothing to be observed, as nothing
// was admitted; during an admission's Delay, st.spent set, the units
// being taken. A Drain in ctx bounds the waits as a deadline does, and
// cuts them as the context's end does (see wait), but that out.Err is
// ErrDrained and out.RetryAfter the rest of the wait.
func (e *Enforcer) hold(ctx context.Context, st *state, out *Outcome,
	decide func(context.Context, *state) (rate.Decision, error)) (d rate.Decision, cut bool, err error) {
	reqs, decs := st.reqs[:st.nEnf], st.decs[:st.nEnf]
	left, bounded := e.timeLeft(ctx, st)
	if bounded {
		deadline.Bound(reqs, left)
	}
	if d, err = decide(ctx, st); err != nil {
		return d, false, err
	}
	if !d.Allowed && d.RetryAfter > 0 && out.Waited == 0 && (!bounded || d.RetryAfter < left) && e.mayWait(st, decs, d.RetryAfter) {
		if rest, err := e.wait(ctx, d.RetryAfter); err != nil {
			out.Verdict, out.Err, out.RetryAfter = Unavailable, err, cmp.Or(rest, d.RetryAfter)
			return d, true, nil
		}
		out.Waited += d.RetryAfter
		// The limits that refused are the ones the request waited for;
		// deciding again overwrites their refusals.
		for i := range decs {
			if !decs[i].Allowed {
				st.held[i] += d.RetryAfter
			}
		}
		// What is left of max_delay after the wait bounds a turn or
		// unit decided next, so that the request is held no longer in
		// all than its policies allow; and so does what is left before
		// the deadline.
		for i := range reqs {
			if reqs[i].MaxDelay > 0 {
				reqs[i].MaxDelay = max(reqs[i].MaxDelay-d.RetryAfter, time.Nanosecond)
			}
		}
		if bounded {
			left, _ = e.timeLeft(ctx, st)
			deadline.Bound(reqs, left)
		}
		if d, err = decide(ctx, st); err != nil {
			return d, false, err
		}
	}
	if d.Allowed && d.Delay > 0 {
		if rest, err := e.wait(ctx, d.Delay); err != nil {
			// Admitted, its turn or units taken, but gone, or cut short
			// by the drain: observed as held (see state.spent).
			out.Verdict, out.Err, out.RetryAfter = Unavailable, err, cmp.Or(rest, d.Delay)
			heldFor(st.held, decs)
			st.spent = true
			return d, true, nil
		}
		out.Waited += d.Delay
		heldFor(st.held, decs)
		// The request goes ahead, and its answer out, d.Delay after the
		// decision: each state is that much nearer fresh.
		d.ResetAfter = max(0, d.ResetAfter-d.Delay)
		for i := range decs {
			decs[i].ResetAfter = max(0, decs[i].ResetAfter-d.Delay)
		}
	}
	return d, false, nil
}

// wait holds a request back for d on the Enforcer's clock, or until ctx
// ends, returning ctx's error. A wait that a Drain, beginning meanwhile,
// would not let end before its end is cut short there: ErrDrained, and
// rest, what was left of it. One that began after the drain did needs
// no watching: timeLeft bounded it by the drain's end.
func (e *Enforcer) wait(ctx context.Context, d time.Duration) (rest time.Duration, err error) {
	drain := drainOf(ctx)
	if _, begun := drain.ending(); drain == nil || begun {
		return 0, e.clock.Sleep(ctx, d)
	}
	drain.init()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(drain.begun, cancel)()
	start := e.clock.Now()
	switch err := e.clock.Sleep(wctx, d); {
	case err == nil:
		return 0, nil
	case ctx.Err() != nil:
		return 0, ctx.Err()
	}
	// Woken by the drain.
	end, _ := drain.ending()
	now := e.clock.Now()
	if rest = d - now.Sub(start); rest <= 0 {
		return 0, nil
	}
	if !now.Add(rest).Before(end) {
		return rest, ErrDrained
	}
	return 0, e.clock.Sleep(ctx, rest)
}

// heldFor adds to held the turn each of decs waited, once the request
// has waited the longest of them.
func heldFor(held []time.Duration, decs []rate.Decision) {
	for i := range decs {
		if decs[i].Allowed {
			held[i] += decs[i].Delay
		}
	}
}

// timeLeft returns how long ctx has before its deadline, or before the
// end of a Drain begun, whichever comes first, on the Enforcer's clock,
// when st has a limit that may make the request wait (a policy's
// max_delay, a leaky_bucket's turn); bounded is false when there is no
// deadline or nothing to wait for, which reads no clock. A request is
// never held back for a wait its deadline cannot cover: it is refused at
// once, with the wait as its Retry-After, instead of failing at the
// deadline with nothing to tell its client. A request with nothing to
// wait for reads no Drain either.
func (e *Enforcer) timeLeft(ctx context.Context, st *state) (left time.Duration, bounded bool) {
	if !slices.ContainsFunc(st.lims[:st.nEnf], func(l *Limit) bool { return l.Policy.MaxDelay > 0 || l.Algorithm == rate.LeakyBucket }) {
		return 0, false
	}
	dl, ok := ctx.Deadline()
	if end, begun := drainOf(ctx).ending(); begun && (!ok || end.Before(dl)) {
		dl, ok = end, true
	}
	if !ok {
		return 0, false
	}
	return dl.Sub(e.clock.Now()), true
}

// sourcer is a store that says who decided, as sluice.Fallback does.
type sourcer interface {
	DecideAllSource(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, sluice.Source, error)
}

// The failures of a store whose failure mode decided in its place
// (sluice.Fallback's FailClosed and FailOpen): no limit decided, so the
// Enforcer handles them as failures of the store, not as a limit's
// refusal or pass. Made once, as they may answer every request.
var (
	errFailClosed = fmt.Errorf("%w: its fallback refused the request (fail_closed)", sluice.ErrStoreDown)
	errFailOpen   = fmt.Errorf("%w: its fallback let the request through (fail_open)", sluice.ErrStoreDown)
)

// decideAll is store.DecideAll, through the simpler Decide when there is
// a single request, which stores can answer with less bookkeeping. A
// store that says who decided is asked so, and a decision of its
// FailClosed or FailOpen mode is returned with errFailClosed or
// errFailOpen, decs holding what the mode decided. A FailLocal
// Fallback's local decision is a limit's (its share): a success.
func (e *Enforcer) decideAll(ctx context.Context, reqs []rate.Request, decs []rate.Decision) (rate.Decision, error) {
	if e.src != nil {
		d, src, err := e.src.DecideAllSource(ctx, reqs, decs)
		switch {
		case err != nil:
			return d, err
		case src == sluice.SourceFailClosed:
			return d, errFailClosed
		case src == sluice.SourceFailOpen:
			return d, errFailOpen
		}
		return d, nil
	}
	if len(reqs) == 1 {
		d, err := e.store.Decide(ctx, reqs[0])
		decs[0] = d
		return d, err
	}
	return e.store.DecideAll(ctx, reqs, decs)
}

// mixedCosts reports whether lims belong to policies of more than one
// cost.
func mixedCosts(lims []*Limit) bool {
	for _, l := range lims[1:] {
		if l.Policy.Cost != lims[0].Policy.Cost {
			return true
		}
	}
	return false
}

// fewestRequests returns the index of the decision, of decs all allowed,
// that leaves the fewest requests of its policy's cost (its Remaining
// over the cost, rounded down), and of those the one whose reset is
// furthest, as rate.MostRestrictive picks among units.
func fewestRequests(decs []rate.Decision, lims []*Limit) int {
	best := 0
	for j := 1; j < len(decs); j++ {
		rj, rb := decs[j].Remaining/lims[j].Policy.Cost, decs[best].Remaining/lims[best].Policy.Cost
		if rj < rb || rj == rb && decs[j].ResetAfter > decs[best].ResetAfter {
			best = j
		}
	}
	return best
}

// mayWait reports whether every refusing limit's policy lets a request
// wait for wait. A bucket never does: a leaky_bucket already waits for
// its turn (its Delay) up to max_delay, a gcra or token_bucket for its
// unit, reserved, and each refuses only beyond it.
func (e *Enforcer) mayWait(st *state, decs []rate.Decision, wait time.Duration) bool {
	for i := range decs {
		if !decs[i].Allowed && (st.lims[i].Policy.MaxDelay < wait || st.lims[i].Algorithm.HasBurst()) {
			return false
		}
	}
	return true
}

// conclude turns the combined decision d of decs, made by lims, into out.
func conclude(d rate.Decision, decs []rate.Decision, lims []*Limit, out *Outcome) {
	i := rate.MostRestrictive(decs)
	if d.Allowed && mixedCosts(lims) {
		// The headers count requests (see Limit.HeaderRemaining): of
		// policies of different costs, the limit with the fewest units
		// left may not be the one with the fewest requests (9 at cost 1
		// against 20 at cost 4, 5 requests). Report that one, with its
		// own units, which its header divides by its cost.
		i = fewestRequests(decs, lims)
		d.Remaining, d.ResetAfter = decs[i].Remaining, decs[i].ResetAfter
	}
	out.Decision, out.Limit = d, lims[i]
	if d.Allowed {
		out.Verdict = Allow
		return
	}
	out.Verdict, out.RetryAfter = Refuse, d.RetryAfter
	// The refusing limits, the longest wait first, one per name; their
	// policies, in that order, are the violated ones (a limit's name holds
	// its policy's, so no two policies share one).
	for {
		best := -1
		for j := range decs {
			if decs[j].Allowed || slices.ContainsFunc(out.Refused, func(l *Limit) bool { return l.Name == lims[j].Name }) {
				continue
			}
			if best < 0 || decs[j].RetryAfter > decs[best].RetryAfter {
				best = j
			}
		}
		if best < 0 {
			break
		}
		out.Refused = append(out.Refused, lims[best])
	}
	for _, l := range out.Refused {
		if !containsPolicy(out.Violated, l.Policy) {
			out.Violated = append(out.Violated, l.Policy)
		}
	}
}

func containsPolicy(ps []*Policy, p *Policy) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// storeFailed applies each enforcing policy's on_store_error: a
// fail-closed policy refuses with 503, a fail-local one is decided
// against the local store with its share of the limit, held back as
// decide holds it (hold), and a fail-open one lets the request through
// undecided. A store whose own failure mode decided for every policy
// (errFailClosed, errFailOpen) leaves them nothing to apply: its refusal
// is a 503 with its RetryAfter, as on_store_error: closed answers, its
// pass lets the request through, and decs keep what it decided, for the
// Observer. A call that failed because the request ended is no failure
// of the store: the request is Unavailable, and nothing is logged or
// observed, as nothing was decided.
func (e *Enforcer) storeFailed(ctx context.Context, st *state, err error, out *Outcome) {
	if cerr := ctx.Err(); cerr != nil {
		*out = Outcome{Verdict: Unavailable, Err: cerr, gate: out.gate, Waited: out.Waited}
		return
	}
	e.storeDown(err)
	*out = Outcome{Err: err, gate: out.gate, Waited: out.Waited}
	decs := st.decs[:st.nEnf]
	switch err {
	case errFailClosed:
		out.Verdict, out.RetryAfter = Unavailable, rate.Combine(decs).RetryAfter
		e.observe(ctx, st, 0, st.nEnf, err)
		return
	case errFailOpen:
		out.Verdict = Allow
		e.observe(ctx, st, 0, st.nEnf, err)
		return
	}
	st.llims = st.llims[:0]
	closed := false
	for i := range decs {
		decs[i] = rate.Decision{Allowed: true}
		switch st.lims[i].Policy.OnStoreError {
		case sluice.FailClosed:
			closed = true
			decs[i] = rate.Decision{RetryAfter: time.Second}
		case sluice.FailLocal:
			st.llims = append(st.llims, st.lims[i].local)
		}
	}
	switch {
	case closed:
		out.Verdict, out.RetryAfter = Unavailable, time.Second
	case len(st.llims) == 0:
		out.Verdict = Allow
	default:
		// The pooled slice must not pin this request's keys: cleared as
		// decideLocal leaves it, which may have grown it.
		defer func() { clear(st.lreqs) }()
		d, cut, lerr := e.hold(ctx, st, out, e.decideLocal)
		if cut {
			if st.spent {
				e.observe(ctx, st, 0, st.nEnf, err)
			}
			return
		}
		if lerr != nil {
			// The local store is in memory: it fails only for requests
			// that can never pass, which loading refuses. Let the request
			// through rather than fail it for our own mistake.
			for i := range decs {
				decs[i] = rate.Decision{Allowed: true}
			}
			out.Verdict = Allow
			break
		}
		conclude(d, st.ldecs, st.llims, out)
	}
	e.observe(ctx, st, 0, st.nEnf, err)
}

// decideLocal decides the enforcing entries of fail-local policies
// against the local store, each with its share of its limit, and reports
// their decisions in place of the failed ones: storeFailed's way to
// decide, for hold. The entries of other policies keep what storeFailed
// gave them. The local requests are built afresh at each call, as hold
// bounds the turns of st.reqs between two.
func (e *Enforcer) decideLocal(ctx context.Context, st *state) (rate.Decision, error) {
	reqs, decs := st.reqs[:st.nEnf], st.decs[:st.nEnf]
	st.lreqs, st.ldecs = st.lreqs[:0], st.ldecs[:0]
	for i := range reqs {
		if st.lims[i].Policy.OnStoreError == sluice.FailLocal {
			lr := reqs[i]
			lr.Limit = st.lims[i].Local
			st.lreqs = append(st.lreqs, lr)
			st.ldecs = append(st.ldecs, rate.Decision{})
		}
	}
	d, err := e.local.DecideAll(ctx, st.lreqs, st.ldecs)
	if err != nil {
		return d, err // storeFailed lets the request through
	}
	k := 0
	for i := range reqs {
		if st.lims[i].Policy.OnStoreError == sluice.FailLocal {
			decs[i] = st.ldecs[k]
			k++
		}
	}
	return d, nil
}

// decideShadow decides each shadow policy on its own, as it would if it
// enforced, and reports what it would have done. Enforce calls it only
// for requests the enforcing policies let through.
func (e *Enforcer) decideShadow(ctx context.Context, st *state) {
	for a := st.nEnf; a < len(st.reqs); {
		p := st.lims[a].Policy
		b := a + 1
		for b < len(st.reqs) && st.lims[b].Policy == p {
			b++
		}
		d, err := e.decideAll(ctx, st.reqs[a:b], st.decs[a:b])
		if err != nil && ctx.Err() != nil {
			return // the request ended: nothing more to decide
		}
		if err == nil && !d.Allowed && e.logger != nil {
			if held, ok := p.refusalLog.Take(e.clock.Now()); ok {
				// The key by its hash: its values are a client's (an
				// API key), which a log must not hold.
				e.logger.LogAttrs(ctx, slog.LevelInfo, "shadow policy would refuse",
					slog.String("policy", p.Name), slog.String("key_hash", shortHash(st.reqs[a].Key)),
					slog.String("retry_after", d.RetryAfter.String()), slog.Int64("not_logged", held))
			}
		}
		e.observe(ctx, st, a, b, err)
		a = b
	}
}

// observe reports the policies of entries [a, b) to the observer.
func (e *Enforcer) observe(ctx context.Context, st *state, a, b int, err error) {
	if e.observer == nil {
		return
	}
	for a < b {
		p := st.lims[a].Policy
		c := a + 1
		for c < b && st.lims[c].Policy == p {
			c++
		}
		ds := st.decs[a:c]
		key := st.reqs[a+max(0, rate.MostRestrictive(ds))].Key
		e.observer.Observe(ctx, Event{Policy: p, Key: key, Decision: rate.Combine(ds), Waited: slices.Max(st.held[a:c]),
			Shadow: p.Shadow, StoreErr: err})
		a = c
	}
}

// storeDown logs the first failure after a success.
func (e *Enforcer) storeDown(err error) {
	if !e.failing.Swap(true) && e.storeLog != nil {
		msg := "rate limit store failed; applying on_store_error"
		if err == errFailClosed || err == errFailOpen {
			msg = "rate limit store failed; its failure mode decides for every policy"
		}
		e.storeLog.LogAttrs(context.Background(), slog.LevelWarn, msg, slog.String("error", err.Error()))
	}
}

// storeOK logs the first success after a failure.
func (e *Enforcer) storeOK() {
	if e.failing.Load() && e.failing.Swap(false) && e.storeLog != nil {
		e.storeLog.LogAttrs(context.Background(), slog.LevelInfo, "rate limit store recovered")
	}
}
