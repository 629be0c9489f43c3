package ratefield

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// errDrained stands for policy.ErrDrained, which this package cannot
// import: its text is said as it is.
var errDrained = errors.New("the server is shutting down, and the wait would have outlasted it")

// Each cause in its words, and the order of causes that hold together:
// a verdict first, then the drain, then the request's end, then the
// store. Each row can be checked by hand.
func TestRefusal(t *testing.T) {
	for _, c := range []struct {
		name string
		r    Refusal
		why  Why
		want string
	}{
		{"policy refusal", Refusal{Refused: true, Policy: "api", Limit: "gcra 2/m burst 2", RetryAfter: 30 * time.Second},
			Refused, `rate limited by policy "api" (limit gcra 2/m burst 2); retry in 30s`},
		{"limiter refusal", Refusal{Refused: true, Name: "api.2", Limit: "fixed_window 3/h", RetryAfter: time.Hour},
			Refused, `rate limited by "api.2" (limit fixed_window 3/h); retry in 3600s`},
		{"refusal of no limit", Refusal{Refused: true, RetryAfter: 5 * time.Second},
			Refused, "rate limited; retry in 5s"},
		// A wait is whole seconds, rounded up, at least 1.
		{"wait rounded up", Refusal{Refused: true, Name: "api", Limit: "gcra 25/m", RetryAfter: 2400 * time.Millisecond},
			Refused, `rate limited by "api" (limit gcra 25/m); retry in 3s`},
		{"no wait", Refusal{RetryAfter: 0}, Unavailable, "the rate limiter is unavailable; retry in 1s"},
		{"shed request", Refusal{Shed: true, RetryAfter: 3 * time.Second},
			Shed, "the server is at capacity for requests of this priority; retry in 3s"},
		{"shed call", Refusal{Shed: true, Call: true, RetryAfter: 3 * time.Second},
			Shed, "the server is at capacity for calls of this priority; retry in 3s"},
		{"drained", Refusal{Drained: errDrained, RetryAfter: 2 * time.Second},
			Drained, errDrained.Error() + "; retry in 2s"},
		// The drain ended the wait while the request was alive; that it
		// has ended since does not undo what the client is told.
		{"drained, then ended", Refusal{Drained: errDrained, Ended: true, RetryAfter: 2 * time.Second},
			Drained, errDrained.Error() + "; retry in 2s"},
		{"ended request", Refusal{Ended: true, RetryAfter: time.Second},
			Ended, "the request ended before it could be served"},
		{"ended call", Refusal{Ended: true, Call: true}, Ended, "the call ended before it could be served"},
		{"store failed", Refusal{RetryAfter: time.Second}, Unavailable, "the rate limiter is unavailable; retry in 1s"},
		// A verdict stands whatever became of the request since.
		{"refused, then ended", Refusal{Refused: true, Ended: true, Drained: errDrained, RetryAfter: time.Second},
			Refused, "rate limited; retry in 1s"},
		{"shed, then ended", Refusal{Shed: true, Ended: true, RetryAfter: time.Second},
			Shed, "the server is at capacity for requests of this priority; retry in 1s"},
	} {
		if got := c.r.Why(); got != c.why {
			t.Errorf("%s: Why = %d, want %d", c.name, got, c.why)
		}
		if got := c.r.Detail(); got != c.want {
			t.Errorf("%s: Detail = %q, want %q", c.name, got, c.want)
		}
	}
}

// A QuotaFailure's violation names the limit as the sentence does, with
// no wait, and leaves out a limit it does not report.
func TestLimitedBy(t *testing.T) {
	for _, c := range []struct {
		r    Refusal
		want string
	}{
		{Refusal{Policy: "check", Limit: "gcra 2/m burst 2"}, `rate limited by policy "check" (limit gcra 2/m burst 2)`},
		{Refusal{Policy: "other"}, `rate limited by policy "other"`},
		{Refusal{Name: "api.1", Limit: "gcra 100/m"}, `rate limited by "api.1" (limit gcra 100/m)`},
		{Refusal{Name: `a"b`, Limit: "10/s"}, `rate limited by "a\"b" (limit 10/s)`},
		{Refusal{}, "rate limited"},
	} {
		if got := c.r.LimitedBy(); got != c.want {
			t.Errorf("%+v: LimitedBy = %q, want %q", c.r, got, c.want)
		}
	}
}

// A Header gives the values the package's functions write, and a policy
// list that an append copies rather than extends in place.
func TestHeader(t *testing.T) {
	l := rate.MustParseLimit("20/s burst 40")
	h := NewHeader(`per "user"`, l, 1)
	if got, want := h.HeaderPolicy(), string(AppendPolicy(nil, `per "user"`, l)); got != want {
		t.Errorf("HeaderPolicy = %q, want %q", got, want)
	}
	if got := h.HeaderLimit(); got != "40" {
		t.Errorf("HeaderLimit = %q, want 40", got)
	}
	d := rate.Decision{Allowed: true, Remaining: 39, ResetAfter: 50 * time.Millisecond}
	if got, want := string(h.AppendHeader([]byte("x, "), d)), "x, "+string(AppendDecision(AppendString(nil, `per "user"`), d)); got != want {
		t.Errorf("AppendHeader = %q, want %q", got, want)
	}
	want := h.HeaderPolicy()
	grown := append(h.HeaderPolicyValues(), "other")
	grown[0] = "changed"
	if got := h.HeaderPolicyValues(); len(got) != 1 || got[0] != want {
		t.Errorf("HeaderPolicyValues after an append to it = %q, want [%q]", got, want)
	}
}
