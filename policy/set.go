package policy

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/logpace"
	"github.com/sluicehq/sluice/internal/ratefield"
	"github.com/sluicehq/sluice/internal/urlpath"
	"github.com/sluicehq/sluice/rate"
)

// Set is a compiled policy file: every policy validated, every pattern
// registered, every header value the middleware sends precomputed. It is
// immutable and safe for concurrent use; a reload builds a new Set.
//
// Build one with [Load] or [LoadFile].
type Set struct {
	file      string
	prefix    string
	instances int
	policies  []*Policy
	resolver  *clientip.Resolver
	plans     plans
	// headersRead: see HeadersRead.
	headersRead []string
	conc        Concurrency
	store       StoreConfig
	paths       pathForms
	response    Response
	warnings    []Problem
	// serveWarnings: see ServeWarnings.
	serveWarnings []Problem
	// userHeader is the user section's header, canonical; "" when the
	// file has none.
	userHeader string
	// What some policy reads, so transports skip finding what none does.
	usesUser, usesPlan, usesIP bool
}

// UsesUser reports whether some policy keys by the user or matches on
// authentication: if none does, transports need not look the user up.
func (s *Set) UsesUser() bool { return s.usesUser }

// UsesPlan reports whether some policy gives limits per plan.
func (s *Set) UsesPlan() bool { return s.usesPlan }

// UsesClientIP reports whether some policy keys by the client address.
func (s *Set) UsesClientIP() bool { return s.usesIP }

// Warnings returns what loads but is likely not what the author meant,
// in the order of the file, each as file:line:col: message like the
// problems of an *Error: a policy that leaves the requests of some plans
// unlimited (it has no default limits and none for them), one whose every
// key needs a part some requests lack (user, header:NAME, form:NAME), so
// that those pass unlimited, a key that can never apply, a plans section
// no policy uses, a trusted proxy prefix that spans much of the Internet,
// a priority on a shadow policy (which classifies nothing), a user
// section no policy reads, header conditions that contradict each other
// (the policy matches no request).
// A Set may serve with warnings; `sluice check` prints them and `sluice
// serve` logs them. The slice is shared: do not modify it.
func (s *Set) Warnings() []Problem { return s.warnings }

// ServeWarnings returns, in the form of Warnings, what is likely not
// meant when the file is served by `sluice serve`, which has no
// application to name users: policies that key by user or match on
// authentication in a file with no user section, so that every request
// is anonymous to them. A program that names users itself
// (policy.WithUser, httplimit's Identify) can ignore them. The slice is
// shared: do not modify it.
func (s *Set) ServeWarnings() []Problem { return s.serveWarnings }

// UserOf returns the user the file's user section names for r: the value
// of its header when r's peer is a trusted proxy (client_ip) and gives
// the header once, else "", anonymous. From any other peer the header is
// the client's own word and is not believed, and a header given twice has
// no one value that the proxy is sure to have written. Without a user
// section it always returns "". `sluice serve` identifies users with it;
// libraries ignore the section unless told to, as in
// httplimit.Options{Identify: set.UserOf}.
func (s *Set) UserOf(r *http.Request) string {
	if s.userHeader == "" {
		return ""
	}
	v, ok := single(r.Header[s.userHeader])
	if !ok || !s.resolver.Trusted(clientip.PeerOf(r)) {
		return ""
	}
	return v
}

// UserHeader returns the header the user section names, canonical, or ""
// when the file has no user section.
func (s *Set) UserHeader() string { return s.userHeader }

// PlanHeaderOf returns the value of r's plans.header as the policies
// believe it, by the rule of UserOf: when r's peer is a trusted proxy
// (client_ip) and gives the header once, else "". From any other peer the
// header is the client's own word, and the policies give the request the
// plan its API key maps to, or plans.default. The value may name no plan
// in plans.names (which the policies read as plans.default). Without a
// plans.header it always returns "". `sluice serve` forwards the header
// only where this returns a value.
func (s *Set) PlanHeaderOf(r *http.Request) string {
	if s.plans.header == "" {
		return ""
	}
	v, ok := single(r.Header[s.plans.header])
	if !ok || !s.resolver.Trusted(clientip.PeerOf(r)) {
		return ""
	}
	return v
}

// PlanHeader returns plans.header, canonical, or "" when the file has
// none.
func (s *Set) PlanHeader() string { return s.plans.header }

// HeadersRead returns the header fields the policies key on (header:NAME)
// or match on, and plans.api_key_header, canonical, in the order of the
// file; not the user and plan headers (see UserHeader, PlanHeader).
// sluice serve drops every other spelling of them (X_Api_Key) from the
// requests it forwards: the policies read none of those, and CGI-style
// servers read them as the header itself, so an upstream would take a key
// that no policy counted. The slice is shared: do not modify it.
func (s *Set) HeadersRead() []string { return s.headersRead }

// readHeader adds name, canonical, to HeadersRead.
func (s *Set) readHeader(name string) {
	if !slices.Contains(s.headersRead, name) {
		s.headersRead = append(s.headersRead, name)
	}
}

// Policies returns the policies in the order of the file. The slice is
// shared: do not modify it.
func (s *Set) Policies() []*Policy { return s.policies }

// Policy returns the policy with the given name, or nil.
func (s *Set) Policy(name string) *Policy {
	for _, p := range s.policies {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// ClientIP returns the resolver that finds the client address of a
// request, configured by the file's client_ip section.
func (s *Set) ClientIP() *clientip.Resolver { return s.resolver }

// Concurrency returns the file's concurrency section; its MaxInFlight is
// zero when there is none.
func (s *Set) Concurrency() Concurrency { return s.conc }

// Response returns the file's response section: which rate limit
// headers sluice serve sends and the type of its 429 problem bodies. Its
// zero value, when there is none, is httplimit's default. Libraries
// ignore it unless they pass it on to httplimit.Options.
func (s *Set) Response() Response { return s.response }

// Prefix returns the prefix of every key the set builds.
func (s *Set) Prefix() string { return s.prefix }

// Instances returns how many instances share the limits, by which the
// on_store_error: local fallback divides each limit.
func (s *Set) Instances() int { return s.instances }

// pathForms is the file's paths section: the spellings of a path that
// the application serves as one, and that every policy on it must count.
type pathForms struct {
	// Case and parameters: requests' paths are rewritten (see routed),
	// and with FoldCase patterns are compiled in lower case.
	urlpath.Options
	// trailingSlash: each pattern is registered in both forms, with and
	// without a final slash (see slashForm), rather than requests' paths
	// rewritten, so that a subtree pattern (/api/) keeps its meaning.
	trailingSlash bool
}

// Priority is a request's class under load (see [Concurrency]). Lower
// classes are shed first.
type Priority uint8

const (
	// Low is shed first: analytics, prefetches, batch work.
	Low Priority = iota
	// Normal is the class of every request no policy classifies.
	Normal
	// Critical is shed last: payments, logins, health checks.
	Critical

	numPriorities = iota
)

var priorityNames = [numPriorities]string{"low", "normal", "critical"}

// String returns low, normal or critical.
func (p Priority) String() string {
	if int(p) < len(priorityNames) {
		return priorityNames[p]
	}
	return "Priority(" + strconv.Itoa(int(p)) + ")"
}

// Concurrency bounds the requests in flight, shedding low priorities
// first. The zero value (MaxInFlight 0) bounds nothing.
type Concurrency struct {
	// MaxInFlight is how many requests may be in flight at once.
	MaxInFlight int
	// Shares is the percentage of MaxInFlight each priority may fill,
	// indexed by Priority: a request is shed when the requests in flight,
	// itself included, would exceed its share. Defaults: low 50, normal
	// 80, critical 100.
	Shares [numPriorities]int
	// RetryAfter is the Retry-After sent with a shed request. Default 1s.
	RetryAfter time.Duration
}

// Policy is one compiled policy: which requests it matches, how it keys
// them and the limits it applies. Its exported fields are read-only.
type Policy struct {
	// Name identifies the policy in keys, headers, logs and metrics.
	Name string
	// Shadow policies decide and report but never refuse.
	Shadow bool
	// OnStoreError is what the policy does when the store fails: let the
	// request through (sluice.FailOpen, the default), refuse it with 503
	// (sluice.FailClosed: not 429, the client did nothing wrong), or
	// decide it in this process with each limit divided by the number of
	// instances (sluice.FailLocal). The file spells them open, closed and
	// local.
	OnStoreError sluice.FailureMode
	// MaxDelay is how long a request may be held back instead of refused
	// (zero: never, except a leaky_bucket's Delay).
	MaxDelay time.Duration
	// Priority is the class of the requests the policy matches, when
	// HasPriority.
	Priority Priority
	// HasPriority reports whether the policy sets a priority.
	HasPriority bool
	// Cost is how many units one request takes.
	Cost int64

	match     matcher
	keys      [][]part
	limits    []*Limit
	plans     map[string][]*Limit
	overrides []override
	keyHead   string // prefix:name:
	usesPlan  bool
	usesPath  bool
	foldKey   bool // fold_key: values a client spells are folded (see foldValue)

	refusalLog *logpace.Pacer // paces the log of a shadow policy's refusals
}

// Limits returns the policy's default limits (for requests that no plan
// or override gives others). The slice is shared: do not modify it.
func (p *Policy) Limits() []*Limit { return p.limits }

// AllLimits returns every limit the policy may apply: its default limits,
// then each plan's, plans in the order of their names, then each
// override's, in the order of the file. It allocates a new slice.
func (p *Policy) AllLimits() []*Limit {
	all := slices.Clone(p.limits)
	for _, plan := range slices.Sorted(maps.Keys(p.plans)) {
		all = append(all, p.plans[plan]...)
	}
	for _, o := range p.overrides {
		all = append(all, o.limits...)
	}
	return all
}

// PlanLimits returns the limits the policy applies to a plan, and whether
// it names that plan.
func (p *Policy) PlanLimits(plan string) ([]*Limit, bool) {
	ls, ok := p.plans[plan]
	return ls, ok
}

// Limit is one compiled limit of a policy, with the header values that
// describe it precomputed.
type Limit struct {
	// Limit is the rate limit itself.
	rate.Limit
	// Name identifies the limit in the RateLimit headers: the policy's
	// name, followed by .N when the list it comes from holds several.
	Name string
	// Policy is the policy the limit belongs to.
	Policy *Policy
	// Local is the limit each instance applies on its own when the store
	// fails and the policy falls back to local decisions.
	Local rate.Limit

	local *Limit // Local, compiled, for the headers of local decisions

	tag    string           // stateTag: what the key's state means, in every key
	header ratefield.Header // the header values, which the methods below give out
}

// HeaderPolicy returns the limit's RateLimit-Policy item,
// `"name";q=100;w=60` (draft-ietf-httpapi-ratelimit-headers-10): q units
// per w whole seconds state the limit's rate. w is the time in which the
// capacity (a bucket's burst, a window's count) comes back, when that is
// whole seconds, and q the capacity; otherwise the period, when it is
// whole seconds, and q the count; otherwise the least whole seconds in
// which the capacity comes back, and q what the rate allows in them,
// rounded down (100/s burst 10 is q=100;w=1). w is omitted for calendar
// months, where q is the month's count.
func (l *Limit) HeaderPolicy() string { return l.header.HeaderPolicy() }

// HeaderPolicyValues returns HeaderPolicy as a value list of one, shared
// by every caller, for an API that copies the lists it is given, as gRPC
// metadata does (grpc.SetHeader). Its capacity is one, so an append
// copies it; never modify its element, and never put it in an
// http.Header, whose handler could (h[k][0] = v) for every response.
func (l *Limit) HeaderPolicyValues() []string { return l.header.HeaderPolicyValues() }

// AppendHeader appends the RateLimit item for a decision of l:
// `"name";r=50;t=30`, with t in whole seconds rounded up until more quota
// is made available (draft-ietf-httpapi-ratelimit-headers-10): for a
// refusal, the wait after which the request passes, as Retry-After says
// (the draft wants Retry-After no earlier than t); otherwise until the
// quota is whole again.
func (l *Limit) AppendHeader(dst []byte, d rate.Decision) []byte {
	return l.header.AppendHeader(dst, d)
}

// HeaderLimit returns the X-RateLimit-Limit value: the requests of the
// policy's cost the limit's capacity holds.
func (l *Limit) HeaderLimit() string { return l.header.HeaderLimit() }

// HeaderRemaining returns the X-RateLimit-Remaining value, and the r of
// AppendHeader's item, for a decision d of l: the requests of the
// policy's cost its Remaining units hold, rounded down (the fields count
// requests, as the draft has them when they name no other unit).
func (l *Limit) HeaderRemaining(d rate.Decision) int64 { return l.header.HeaderRemaining(d) }

// String returns the limit as ParseLimit reads it.
func (l *Limit) String() string { return l.Limit.String() }

// plans says where a request's plan comes from.
type plans struct {
	names       map[string]bool
	list        []string // the names, in the order of the file
	header      string   // canonical; "" when plans do not come from a header
	headerLower string
	keys        map[string]string // API key to plan
	keyHdr      string
	keyLower    string
	fallback    string
}

// override gives named keys their own limits.
type override struct {
	when   []partValue
	limits []*Limit
}

type partValue struct {
	part  string // the part's label, as in keys
	value string
}

// compileLimit fills in a Limit's derived fields.
func compileLimit(p *Policy, name string, l rate.Limit, instances int) *Limit {
	cl := newLimit(p, name, l)
	cl.Local = l.Share(int64(instances))
	cl.local = cl
	if cl.Local != l {
		cl.local = newLimit(p, name, cl.Local)
		cl.local.Local, cl.local.local = cl.Local, cl.local
	}
	return cl
}

func newLimit(p *Policy, name string, l rate.Limit) *Limit {
	return &Limit{Limit: l, Name: name, Policy: p, tag: stateTag(l), header: ratefield.NewHeader(name, l, p.Cost)}
}

// stateTag returns the tag of l's keys: a short hash of what the state
// stored under them means, so that a reload keeps the state of a limit
// whose state still means the same, and starts a changed one afresh. It
// makes the distinctions rate.Limit.StateName makes (a bucket's tag is
// its whole limit; a window's, its algorithm and window, so that a
// changed count keeps its windows' usage), but hashes the text it always
// has, so that counters kept in Redis survive an upgrade of sluice. One
// difference follows from that text: a bucket's burst written equal to
// its count ("10/s burst 10") is a tag apart from the limit without one
// ("10/s"), where StateName takes them as one: a reload that rewrites
// one as the other starts the bucket afresh.
func stateTag(l rate.Limit) string {
	if l.Algorithm.HasBurst() {
		return shortHash(l.String())
	}
	window := strconv.FormatInt(l.Period.Microseconds(), 10) + "us"
	if l.Calendar != rate.NoCalendar {
		window = "calendar " + strconv.Itoa(int(l.Calendar))
	}
	return shortHash(l.Algorithm.String() + " per " + window)
}

var _ http.Handler = (*marker)(nil)

// planOf returns the plan of r: the one the application assigned, else
// the one its API key maps to, else the one its plan header names, else
// the default plan. An assigned or named plan that plans.names does not
// list is the default plan: it has no limits of its own, and a policy
// with limits only per plan would leave it unlimited. The plan header is
// believed only from a trusted proxy, r.HTTP's peer (see PlanHeaderOf):
// from any other, any client could name the best plan.
func (s *Set) planOf(r *Request) string {
	pl := &s.plans
	if r.Plan != "" {
		if pl.names[r.Plan] {
			return r.Plan
		}
		return pl.fallback
	}
	if pl.keyHdr != "" {
		if v, ok := single(r.header(pl.keyHdr, pl.keyLower)); ok {
			if plan, ok := pl.keys[v]; ok {
				return plan
			}
		}
	}
	if pl.header != "" {
		if v, ok := single(r.header(pl.header, pl.headerLower)); ok && pl.names[v] && s.resolver.Trusted(clientip.PeerOf(r.HTTP)) {
			return v
		}
	}
	return pl.fallback
}
