package policy

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
)

// Every Event an Enforcer reports is counted under one result, whoever
// decided the request: the store, a policy's on_store_error, or a
// sluice.Fallback's failure mode, which decides for every policy alike.
func TestEventResult(t *testing.T) {
	set, err := Load("test.yaml", []byte(`
policies:
  - {name: open, limits: ["10/s"], on_store_error: open}
  - {name: closed, limits: ["10/s"], on_store_error: closed}
  - {name: local, limits: ["10/s"], on_store_error: local}
  - {name: trial, shadow: true, limits: ["10/s"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	allowed, refused := rate.Decision{Allowed: true}, rate.Decision{RetryAfter: time.Second}
	down := errors.New("redis: connection refused")
	breaker := fmt.Errorf("%w: redis: connection refused", sluice.ErrStoreDown) // a FailError Fallback's
	for _, c := range []struct {
		name   string
		policy string
		d      rate.Decision
		waited time.Duration
		err    error
		want   string
	}{
		{"passed", "open", allowed, 0, nil, ResultAllowed},
		{"refused", "open", refused, 0, nil, ResultRefused},
		{"passed after a wait", "open", allowed, time.Second, nil, ResultThrottled},
		{"shadow would refuse", "trial", refused, 0, nil, ResultShadowRefused},
		{"shadow passed", "trial", allowed, 0, nil, ResultAllowed},
		{"shadow, store down", "trial", refused, 0, down, ResultAllowed},
		{"shadow, FailClosed Fallback", "trial", refused, 0, errFailClosed, ResultAllowed},
		{"closed, store down", "closed", refused, 0, down, ResultUnavailable},
		{"closed, breaker open", "closed", refused, 0, breaker, ResultUnavailable},
		{"open, store down", "open", allowed, 0, down, ResultAllowed},
		{"local, store down, local refusal", "local", refused, 0, breaker, ResultRefused},
		{"local, store down, local wait", "local", allowed, time.Second, down, ResultThrottled},
		{"open, FailClosed Fallback", "open", refused, 0, errFailClosed, ResultUnavailable},
		{"local, FailClosed Fallback", "local", refused, 0, errFailClosed, ResultUnavailable},
		{"closed, FailClosed Fallback", "closed", refused, 0, errFailClosed, ResultUnavailable},
		{"open, FailClosed Fallback, wrapped", "open", refused, 0, fmt.Errorf("decide: %w", errFailClosed), ResultUnavailable},
		{"closed, FailOpen Fallback", "closed", allowed, 0, errFailOpen, ResultAllowed},
		{"closed, FailOpen Fallback after a wait", "closed", allowed, time.Second, errFailOpen, ResultThrottled},
		{"open, FailOpen Fallback", "open", allowed, 0, errFailOpen, ResultAllowed},
	} {
		p := set.Policy(c.policy)
		e := Event{Policy: p, Decision: c.d, Waited: c.waited, Shadow: p.Shadow, StoreErr: c.err}
		if got := e.Result(); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// The Events an Enforcer over a sluice.Fallback reports while its primary
// is down are counted under what the client got, whatever the policy's
// on_store_error: the Fallback's FailClosed refusal is a 503, so
// unavailable, not a limit's refusal; its FailOpen pass is allowed, not
// the 503 the policy's on_store_error: closed would have answered.
func TestEventResultOverFallback(t *testing.T) {
	for _, c := range []struct {
		mode   sluice.FailureMode
		policy string
		want   Verdict
		result string
	}{
		{sluice.FailClosed, `{name: api, limits: ["10/s"], on_store_error: open}`, Unavailable, ResultUnavailable},
		{sluice.FailClosed, `{name: api, limits: ["10/s"], on_store_error: local}`, Unavailable, ResultUnavailable},
		{sluice.FailOpen, `{name: api, limits: ["10/s"], on_store_error: closed}`, Allow, ResultAllowed},
	} {
		rec := &keyRecorder{}
		e, _ := overFallback(t, "policies:\n  - "+c.policy+"\n", c.mode, rec, nil)
		for i := range 2 { // the primary's failure, then the breaker open
			rec.events = nil
			out := enforceOne(t, e)
			if out.Verdict != c.want || len(rec.events) != 1 {
				t.Fatalf("%v, %s, request %d: %v, %d events; want %v, 1 event", c.mode, c.policy, i+1, out.Verdict, len(rec.events), c.want)
			}
			if got := rec.events[0].Result(); got != c.result {
				t.Errorf("%v, %s, request %d: counted %q, want %q", c.mode, c.policy, i+1, got, c.result)
			}
		}
	}
}
