package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/rate"
)

// Bounds on what one simulation may hold. They keep a run instant and its
// output readable, and they bound what a scenario from an untrusted source
// (a CSV upload) can cost.
const (
	// MaxSeconds is the longest a scenario may last: an hour, one column
	// per second.
	MaxSeconds = 3600
	// MaxEvents is the most requests a scenario may hold.
	MaxEvents = 1_000_000
	// MaxInstances is the most instances a setup may have.
	MaxInstances = 64
	// MaxKeyLen is the longest key or client name, in bytes.
	MaxKeyLen = 256
	// DefaultInstances is how many instances the OwnCounters and
	// SharedCounter setups run when Scenario.Instances is zero.
	DefaultInstances = 3
)

// Setup says how many limiters decide a scenario's traffic and whether
// they share their counters. The zero value is Single.
type Setup uint8

// The setups, named on the command line and in JSON as their String.
const (
	// Single is one limiter deciding every request.
	Single Setup = iota
	// OwnCounters is several instances behind a round-robin balancer,
	// each keeping its own counters, like replicas that each use an
	// in-memory store: together they let through up to Instances times
	// the limit.
	OwnCounters
	// SharedCounter is several instances behind a round-robin balancer
	// that share one counter per key, like replicas on one Redis. The
	// simulation has no network delay, so it decides exactly as Single
	// does: that is the point of sharing.
	SharedCounter

	numSetups = iota
)

var setupNames = [numSetups]string{
	Single:        "single",
	OwnCounters:   "own-counters",
	SharedCounter: "shared-counter",
}

// Setups lists every setup, in a stable order.
func Setups() []Setup { return []Setup{Single, OwnCounters, SharedCounter} }

// String returns the setup's name: single, own-counters or shared-counter.
func (s Setup) String() string {
	if int(s) < len(setupNames) {
		return setupNames[s]
	}
	return fmt.Sprintf("Setup(%d)", uint8(s))
}

// ParseSetup returns the setup with the given name.
func ParseSetup(name string) (Setup, error) {
	for s, n := range setupNames {
		if n == name {
			return Setup(s), nil
		}
	}
	return 0, fmt.Errorf("unknown setup %q (want single, own-counters or shared-counter)", name)
}

// ParseNames reads a list of names a user gave, such as the algorithms
// or setups to compare, with all every value there is and parse reading
// one name. "sluice sim" and the dashboard's playground both read their
// lists with it, so that the same text runs the same rows wherever it is
// typed.
//
// Each entry may hold several names separated by commas, as a flag or a
// form's field does; spaces around a name are ignored, and so are blank
// names, which a trailing comma or an empty field leaves. A name given
// twice counts once, where it first came. "all" stands for every value:
// anywhere in the list it gives all, in its own order, as the names it
// stands for would. Every other name must still be one parse knows, so
// that a typo is not hidden by an "all" beside it.
//
// No names at all give nil, which the callers read as their default
// (Scenario.Algorithms: every algorithm; Setups: the scenario's own):
// every setting of a run is optional, and leaving one empty, as an unset
// field or a script's empty variable does, means the default rather than
// a run of nothing.
func ParseNames[T comparable](list []string, all []T, parse func(string) (T, error)) ([]T, error) {
	var out []T
	every := false
	for _, entry := range list {
		for _, name := range strings.Split(entry, ",") {
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			if name == "all" {
				every = true
				continue
			}
			v, err := parse(name)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	if every {
		return slices.Clone(all), nil
	}
	return out, nil
}

// MarshalText implements [encoding.TextMarshaler].
func (s Setup) MarshalText() ([]byte, error) {
	if int(s) >= len(setupNames) {
		return nil, fmt.Errorf("invalid setup %d", uint8(s))
	}
	return []byte(setupNames[s]), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (s *Setup) UnmarshalText(b []byte) error {
	v, err := ParseSetup(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Event is one request of a scenario's traffic.
type Event struct {
	// At is when the request arrives, measured from the scenario's Start.
	// It is used to the microsecond, like every step of package rate.
	At time.Duration
	// Key is whose counter the request counts against.
	Key string
	// Cost is how many units the request takes. Zero means 1: a request
	// of cost 0 would only look, and there is nothing to see in that. A
	// cost above the limit's capacity can never pass: a store answers it
	// with an error, not a refusal, and Run counts it as refused and in
	// Row.OverCapacity.
	Cost int64
	// Client names who sent the request, for the per-client totals (a
	// calm client and a burst may share a key). Empty means Key.
	Client string
	// Line is the line of the CSV file the request was read from (see
	// [ReadCSV]), so that an error about it names the line a user can
	// find; zero for a request built otherwise, named by its index.
	Line int
}

// cost returns the event's cost, 1 when unset.
func (e Event) cost() int64 {
	if e.Cost == 0 {
		return 1
	}
	return e.Cost
}

// client returns the name the event is counted under.
func (e Event) client() string {
	if e.Client == "" {
		return e.Key
	}
	return e.Client
}

// Scenario is traffic to replay and how to limit it: one limit, decided by
// each of several algorithms in each of several setups. [Run] replays it.
//
// The zero value has no traffic and no limit; build a scenario with a
// composite literal, [Builtin] or [ReadCSV].
type Scenario struct {
	// Name identifies the scenario, as in "sluice sim --scenario NAME".
	Name string
	// Summary says in one line what the traffic is.
	Summary string
	// Description says what to look at in the result and why each
	// algorithm decides as it does. It may hold several paragraphs.
	Description string
	// Limit is the limit every algorithm applies: its Count, Period and
	// Burst. Its Algorithm is ignored (see Algorithms). Burst zero means
	// Count, as in package rate; the window algorithms have no burst and
	// ignore it. Calendar months cannot be simulated second by second.
	Limit rate.Limit
	// Algorithms decide the traffic, each on its own. Nil means every
	// algorithm, in the order of [rate.Algorithms].
	Algorithms []rate.Algorithm
	// Setups are the ways instances share counters. Nil means Single.
	Setups []Setup
	// Instances is how many instances OwnCounters and SharedCounter run.
	// Zero means DefaultInstances.
	Instances int
	// MaxDelay is how long a client waits to be let through rather than
	// refused, as a policy's max_delay (Request.MaxDelay) has the stores
	// apply it: a gcra or token_bucket lets a request past the burst
	// through with a Delay when its units refill within MaxDelay,
	// reserving them; a leaky_bucket refuses a request whose turn comes
	// later; a request a window algorithm refused waits once for its
	// Retry-After, if within MaxDelay, and is decided again then, refused
	// if it does not pass (sluice serve's wait for a window). Zero means
	// no wait: the buckets refuse past the burst, and a leaky_bucket's
	// queue is bound only by its capacity. A request let through after a
	// wait is counted as passed, and as held (Row.Held).
	MaxDelay time.Duration
	// Start is the instant of second 0. The zero value means the Unix
	// epoch, so fixed windows start at second 0 whatever their Period.
	// It cannot be earlier: package rate counts time from the epoch, and
	// a key's fresh state is at the epoch.
	Start time.Time
	// Seconds is how long the scenario lasts, one column per second.
	// Zero means up to the second of the last event. Every event must
	// arrive before it ends.
	Seconds int
	// Events is the traffic, in any order: Run replays it sorted by At,
	// keeping the given order among equal times.
	Events []Event
}

// algorithms returns the algorithms to run.
func (s Scenario) algorithms() []rate.Algorithm {
	if len(s.Algorithms) == 0 {
		return rate.Algorithms()
	}
	return s.Algorithms
}

// setups returns the setups to run.
func (s Scenario) setups() []Setup {
	if len(s.Setups) == 0 {
		return []Setup{Single}
	}
	return s.Setups
}

// instances returns how many instances the shared setups run.
func (s Scenario) instances() int {
	if s.Instances == 0 {
		return DefaultInstances
	}
	return s.Instances
}

// seconds returns how many seconds the scenario lasts.
func (s Scenario) seconds() int {
	if s.Seconds > 0 {
		return s.Seconds
	}
	var last time.Duration
	for _, e := range s.Events {
		last = max(last, e.At)
	}
	return int(last/time.Second) + 1
}

// startMicros returns Start in microseconds since the Unix epoch.
func (s Scenario) startMicros() int64 {
	if s.Start.IsZero() {
		return 0
	}
	return rate.Micros(s.Start)
}

// LimitFor returns the limit algorithm a applies in s: s.Limit with its
// Algorithm set to a, and without a burst for the window algorithms.
func (s Scenario) LimitFor(a rate.Algorithm) rate.Limit {
	l := s.Limit
	l.Algorithm = a
	if !a.HasBurst() {
		l.Burst = 0
	}
	return l
}

// ParseLimit reads the limit of a scenario as people write it, "10 per
// 10s" or "5/s burst 20", for every algorithm (see [Scenario.LimitFor]):
// it names none (its Algorithm is the zero value), and it refuses a text
// that does, and a calendar period, which cannot be simulated second by
// second. [rate.ParseLimit] checks what it reads as gcra's limit when the
// text names no algorithm; here the text is read as each algorithm's in
// turn, and the first that accepts it gives the count, period and burst,
// so that a daily quota too large for the buckets, or a burst the windows
// ignore, does not stop a run that compares other algorithms: if only the
// burst stands in the way, the text without it is read as the windows'
// limit, and the burst kept for the buckets. Whether each algorithm
// compared can apply the limit is [Scenario.Validate]'s to check.
func ParseLimit(text string) (rate.Limit, error) {
	if first, _, _ := strings.Cut(strings.TrimSpace(text), " "); first != "" {
		if _, err := rate.ParseAlgorithm(first); err == nil {
			return rate.Limit{}, fmt.Errorf("limit %q names an algorithm; it applies to every algorithm compared: choose those with the list of algorithms", text)
		}
	}
	l, err := rate.ParseLimit(text)
	if err != nil {
		l, err = readAsEach(text, err)
	}
	if err != nil {
		return rate.Limit{}, err
	}
	if l.Calendar != rate.NoCalendar {
		return rate.Limit{}, fmt.Errorf("limit %q: monthly limits cannot be simulated second by second; use a period such as 10s or 1m", text)
	}
	l.Algorithm = 0
	return l, nil
}

// readAsEach reads text as the limit of each algorithm in turn, and if
// none accepts it, the text without its burst as fixed_window's (the
// window that accepts the most), with the burst read apart: a burst too
// large for every bucket is no fault of the windows', which ignore it.
// It returns the first limit read, or asIs, the error of reading the text
// as it is, which names no algorithm.
func readAsEach(text string, asIs error) (rate.Limit, error) {
	for _, a := range rate.Algorithms() {
		if l, err := rate.ParseLimit(a.String() + " " + text); err == nil {
			return l, nil
		}
	}
	fields := strings.Fields(text)
	n := len(fields)
	if n < 2 || fields[n-2] != "burst" {
		return rate.Limit{}, asIs
	}
	// The burst read as a fixed_window's count: the same digits, and a
	// bound (2^52) that no burst a bucket can hold passes.
	b, err := rate.ParseLimit("fixed_window " + fields[n-1] + "/s")
	if err != nil {
		return rate.Limit{}, asIs
	}
	l, err := rate.ParseLimit("fixed_window " + strings.Join(fields[:n-2], " "))
	if err != nil {
		return rate.Limit{}, asIs
	}
	l.Burst = b.Count
	return l, nil
}

// tooLargeAdvice says why l, one algorithm's limit of s, is too large for
// that algorithm's exact arithmetic, and what a simulation can do about
// it; or "" if l has another fault, or an algorithm whose own advice
// works here. [rate.Limit.Validate] advises a limit that names
// fixed_window, which a scenario's limit may not: here the advice is to
// leave the algorithm out, or to choose a smaller burst or period.
func (s Scenario) tooLargeAdvice(l rate.Limit) string {
	switch l.Algorithm {
	case rate.FixedWindow, rate.SlidingLog:
		return ""
	}
	small := l
	small.Count, small.Burst = 1, 0
	if l.Count < 1 || l.Burst < 0 || small.Validate() != nil {
		return "" // not the count nor the burst: the period itself, or worse
	}
	why := fmt.Sprintf("%s is too large for %s: its count and burst times the period in microseconds must be at most 2^52 for exact arithmetic", l.RateString(), l.Algorithm)
	noBurst := l
	noBurst.Burst = 0
	if l.Burst > l.Count && noBurst.Validate() == nil {
		return fmt.Sprintf("%s; give a burst of at most %d, or leave %s out of the algorithms compared (the window algorithms ignore the burst)",
			why, rate.MaxExact/l.Period.Microseconds(), l.Algorithm)
	}
	also := ""
	if s.LimitFor(rate.FixedWindow).Validate() == nil {
		also = " (fixed_window can apply it, as a quota)"
	}
	return fmt.Sprintf("%s; state the rate over a shorter period (this one is %.4g per second), or leave %s out of the algorithms compared%s",
		why, float64(l.Count)/l.Period.Seconds(), l.Algorithm, also)
}

// ErrInvalid is wrapped by the errors of [Scenario.Validate], and so of
// [Run], for a scenario that cannot be run.
var ErrInvalid = errors.New("invalid scenario")

// Validate reports why s cannot be run, or nil. Its errors wrap ErrInvalid
// and name the scenario and what to change.
func (s Scenario) Validate() error {
	name := s.Name
	if name == "" {
		name = "unnamed"
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalid, name, fmt.Sprintf(format, args...))
	}
	// failEvent names the request at fault: by its line, as a
	// *LineError, if it was read from CSV, as ReadCSV's errors do; else
	// by its index.
	failEvent := func(i int, e Event, format string, args ...any) error {
		what := fmt.Sprintf(format, args...)
		if e.Line > 0 {
			return fmt.Errorf("%w %q: %w", ErrInvalid, name, &LineError{Line: e.Line, Err: errors.New("the request " + what)})
		}
		return fmt.Errorf("%w %q: request %d %s", ErrInvalid, name, i, what)
	}
	if s.Limit.Calendar != rate.NoCalendar {
		return fail("monthly limits cannot be simulated second by second; use a period such as 10s or 1m")
	}
	if s.startMicros() < 0 {
		return fail("starts at %s, before 1970: sluice's algorithms count time from the Unix epoch", s.Start.UTC().Format(time.RFC3339Nano))
	}
	for _, a := range s.algorithms() {
		l := s.LimitFor(a)
		if err := l.Validate(); err != nil {
			if advice := s.tooLargeAdvice(l); advice != "" {
				return fail("limit for %s: %s", a, advice)
			}
			return fail("limit for %s: %v; leave %s out of the algorithms compared", a, err, a)
		}
	}
	for _, st := range s.setups() {
		if int(st) >= numSetups {
			return fail("invalid setup %d", uint8(st))
		}
	}
	if s.MaxDelay < 0 {
		return fail("max delay must not be negative, got %v (0 for none)", s.MaxDelay)
	}
	if s.Instances < 0 || s.Instances > MaxInstances {
		return fail("instances must be between 1 and %d (0 for %d), got %d", MaxInstances, DefaultInstances, s.Instances)
	}
	if s.Seconds < 0 || s.Seconds > MaxSeconds {
		return fail("seconds must be between 1 and %d (0 for up to the last request), got %d", MaxSeconds, s.Seconds)
	}
	if len(s.Events) > MaxEvents {
		return fail("%d requests; at most %d", len(s.Events), MaxEvents)
	}
	// Compared in seconds: a request late enough makes the length times a
	// second overflow a Duration.
	seconds := s.seconds()
	if seconds > MaxSeconds {
		return fail("the traffic lasts %ds; at most %ds", seconds, MaxSeconds)
	}
	end := time.Duration(seconds) * time.Second
	for i, e := range s.Events {
		switch {
		case e.At < 0:
			return failEvent(i, e, "arrives at %v, before the start", e.At)
		case e.At >= end:
			return failEvent(i, e, "arrives at %v, after the scenario's %d seconds", e.At, seconds)
		case e.Key == "":
			return failEvent(i, e, "has no key")
		case len(e.Key) > MaxKeyLen || len(e.Client) > MaxKeyLen:
			return failEvent(i, e, "has a key or client longer than %d bytes", MaxKeyLen)
		case !utf8.ValidString(e.Key) || !utf8.ValidString(e.Client):
			return failEvent(i, e, "has a key or client that is not valid UTF-8")
		case e.Cost < 0:
			return failEvent(i, e, "has a negative cost %d", e.Cost)
		}
	}
	return nil
}

// describeLimit returns l without its algorithm and burst: "10 per 10s",
// "5/s".
func describeLimit(l rate.Limit) string {
	l.Burst = 0
	return l.RateString()
}

// describeBucket returns how a bucket algorithm applies l: "burst 10,
// refilled 1 every 1s", or "burst 3000000, refilled 3000000 every 1s" when
// one unit refills in less than a microsecond.
func describeBucket(l rate.Limit) string {
	every := l.Period / time.Duration(l.Count)
	if every < time.Microsecond {
		return fmt.Sprintf("burst %d, refilled %d every %v", l.Capacity(), l.Count, l.Period)
	}
	return fmt.Sprintf("burst %d, refilled 1 every %v", l.Capacity(), every.Round(time.Microsecond))
}
