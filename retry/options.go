package retry

import (
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// Defaults applied by Options when a field is left at its zero value.
const (
	DefaultMaxAttempts      = 4                      // attempts per request, the first included
	DefaultBase             = 100 * time.Millisecond // backoff unit
	DefaultCap              = 30 * time.Second       // largest backoff window
	DefaultMaxRetryAfter    = 5 * time.Minute        // longest Retry-After honoured
	DefaultBudgetRatio      = 0.1                    // retries per request over the budget window
	DefaultBudgetMinRetries = 10                     // retries always allowed per budget window
	DefaultBudgetWindow     = 10 * time.Second       // sliding period of the retry budget
	DefaultPaceThreshold    = 10                     // remaining quota at which pacing starts
)

// Options configures a Transport. The zero value is ready to use: every
// field documents the default it stands for when left at zero.
type Options struct {
	// MaxAttempts caps the number of times one request is sent, the first
	// attempt included. Values below 1 mean DefaultMaxAttempts (4, so at
	// most 3 retries). Set it to 1 to turn retries off.
	MaxAttempts int

	// Base is the backoff unit: the wait before the first retry is Base
	// times Rand's value, in [0, Base]; before the second, 2·Base times
	// it, in [0, 2·Base]; and so on up to Cap (see Transport.Backoff).
	// The default Rand's values are below 1, so with it a wait is never
	// the whole window. Base is also the most jitter added to a server's
	// Retry-After. Zero or negative means DefaultBase (100ms).
	Base time.Duration

	// Cap bounds the backoff window, so a long outage never makes a
	// client back off longer than Cap between attempts. It bounds only
	// the backoff, taken when the server gave no Retry-After: a
	// Retry-After, or a pacing wait, may ask for up to MaxRetryAfter.
	// Zero or negative means DefaultCap (30s).
	Cap time.Duration

	// MaxRetryAfter is the longest Retry-After the Transport will honour.
	// When a server asks for more, the response is returned to the caller
	// at once instead of being retried: waiting less would break the
	// server's request, and silently blocking a caller for longer is
	// rarely what the caller wants. The caller still sees the status and
	// the Retry-After header and can decide. MaxWait bounds the sum of a
	// request's waits as MaxRetryAfter bounds each.
	//
	// It bounds pacing waits the same way, never adding to a Retry-After:
	// a retry waits once, the longer of its Retry-After (or backoff) and
	// the time to the host's pacing slot, and is not made, its response
	// returned at once, when that slot lies beyond MaxRetryAfter. A first
	// attempt whose slot lies beyond it is sent at once, unpaced, since
	// there is no response yet to return. Zero or negative means
	// DefaultMaxRetryAfter (5m).
	MaxRetryAfter time.Duration

	// MaxWait is the most one request waits in all: the sum of its waits
	// before retries, pacing included, and of a first attempt's wait for
	// its pacing slot. The attempts themselves, and reading a refused
	// body, do not count. MaxRetryAfter bounds each wait, but with
	// MaxAttempts 4 a server answering every attempt with a Retry-After
	// at that bound would hold the call for three of them. When the next
	// wait would take the sum past MaxWait, the last response (or error)
	// is returned at once, as for a Retry-After beyond MaxRetryAfter,
	// with no OnRetry call and no budget spent; a first attempt whose
	// pacing slot lies beyond it is sent at once, unpaced. The jitter on a
	// Retry-After shrinks to fit what is left, so that a Retry-After that
	// fits is not refused for its jitter alone; a backoff, the client's
	// own choice, is not shortened to fit.
	//
	// Zero or negative means MaxRetryAfter (5m by default): a caller who
	// accepts one wait of MaxRetryAfter inside a call accepts that much
	// time, not that much for every retry, and the longest Retry-After
	// MaxRetryAfter admits is still honoured when it comes first.
	MaxWait time.Duration

	// BudgetRatio is the share of requests that may be retried over
	// BudgetWindow: with 0.1, a client sends at most 10% more traffic
	// than its callers asked for, however long an outage lasts. Zero,
	// negative or NaN means DefaultBudgetRatio (0.1).
	BudgetRatio float64

	// BudgetMinRetries is the number of retries always allowed per
	// BudgetWindow, so a quiet client can still retry its few requests.
	// Zero or negative means DefaultBudgetMinRetries (10).
	BudgetMinRetries int

	// BudgetWindow is the sliding period over which the budget counts
	// requests and retries, in ten buckets. Zero or negative means
	// DefaultBudgetWindow (10s).
	BudgetWindow time.Duration

	// NoBudget turns the retry budget off; only MaxAttempts bounds retries.
	NoBudget bool

	// Pacing turns on pacing from the server's quota headers (RateLimit,
	// RateLimit-Policy, X-RateLimit-Remaining, X-RateLimit-Reset): when a
	// host reports little quota left, the next requests to it are spread
	// over the time until the quota resets instead of running into a 429.
	// No pacing wait exceeds MaxRetryAfter, takes a request's waits past
	// MaxWait, or leaves too little time before the request's deadline
	// (see MaxRetryAfter, MaxWait and Transport).
	// Off by default.
	Pacing bool

	// PaceThreshold is the remaining quota at or below which pacing starts.
	// Zero or negative means DefaultPaceThreshold (10).
	PaceThreshold int

	// Rand returns the jitter, a number in [0, 1] that scales a wait's
	// window; values outside are clamped to it, and NaN counts as 0.
	// Calls are serialized, so the Float64 method of a seeded *rand.Rand
	// is fine. A Rand that always returns 1 gives plain, unjittered
	// exponential backoff: useful only as a baseline, since clients
	// refused together then retry together. If nil, the math/rand/v2
	// top-level Float64, whose values are in [0, 1).
	Rand func() float64

	// Clock supplies time and sleeping. If nil, the system clock.
	Clock Clock

	// OnRetry, if set, is called before each retry, before the wait, on
	// the goroutine of the request: concurrent requests call it from many
	// goroutines at once, so it must be safe for that. It must not modify
	// the request and should return quickly.
	OnRetry func(RetryInfo)
}

// RetryInfo describes one retry about to happen; it is passed to
// Options.OnRetry.
type RetryInfo struct {
	// Request is the caller's original request.
	Request *http.Request
	// Attempt is the number of attempts sent so far: 1 before the first
	// retry.
	Attempt int
	// Wait is how long the Transport will wait before the retry: the
	// server's Retry-After with its jitter, or else the backoff, or, with
	// Options.Pacing, the time to the host's next pacing slot if that is
	// longer. It is the whole wait: none follows it.
	Wait time.Duration
	// StatusCode is the status of the refused response (429 or 503), or 0
	// when Err is set.
	StatusCode int
	// Err is the transport error that caused the retry, or nil.
	Err error
}

// Clock is the Transport's source of time: [rate.Clock], the one clock
// interface of sluice, so a fake such as ratetest.Clock drives a client and
// a limiter alike. Tests pass a fake whose Sleep advances its Now, so no
// test waits for real.
type Clock = rate.Clock

// withDefaults returns o with every zero field replaced by its default.
func (o Options) withDefaults() Options {
	if o.MaxAttempts < 1 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.Base <= 0 {
		o.Base = DefaultBase
	}
	if o.Cap <= 0 {
		o.Cap = DefaultCap
	}
	if o.MaxRetryAfter <= 0 {
		o.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if o.MaxWait <= 0 {
		o.MaxWait = o.MaxRetryAfter
	}
	if !(o.BudgetRatio > 0) { // also catches NaN, which would turn the budget off
		o.BudgetRatio = DefaultBudgetRatio
	}
	if o.BudgetMinRetries <= 0 {
		o.BudgetMinRetries = DefaultBudgetMinRetries
	}
	if o.BudgetWindow <= 0 {
		o.BudgetWindow = DefaultBudgetWindow
	}
	if o.PaceThreshold <= 0 {
		o.PaceThreshold = DefaultPaceThreshold
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.Clock == nil {
		o.Clock = rate.SystemClock{}
	}
	return o
}
