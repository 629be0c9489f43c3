package sim

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// Result is what a scenario's replay shows: for each algorithm and setup,
// how many requests passed and how many were refused, second by second.
//
// Its JSON form is the one "sluice sim --json" prints:
//
//	{"scenario": "boundary", "results": [
//	  {"algorithm": "fixed_window", "setup": "single", "passed": 20, "refused": 0,
//	   "per_second": [{"t": 0, "passed": 0, "refused": 0}, …]},
//	  {"algorithm": "leaky_bucket", "setup": "single", "passed": 10, "refused": 10,
//	   "max_delay_ns": 9000000000, "per_second": […]},
//	  …]}
//
// Only Scenario and Rows are in it, and of each row what the example
// shows and over_capacity (see Row); the other fields are for Go callers.
type Result struct {
	// Scenario is the scenario's name.
	Scenario string `json:"scenario"`
	// Rows holds one row per algorithm and setup: for each algorithm in
	// the scenario's order, each setup in its order.
	Rows []Row `json:"results"`

	// Summary and Description are the scenario's.
	Summary     string `json:"-"`
	Description string `json:"-"`
	// Limit is the scenario's limit (its Algorithm is meaningless: each
	// row has its own).
	Limit rate.Limit `json:"-"`
	// Seconds is how many seconds the scenario lasts: the length of every
	// row's PerSecond.
	Seconds int `json:"-"`
	// Start is the instant of second 0.
	Start time.Time `json:"-"`
	// Instances is how many instances the OwnCounters and SharedCounter
	// rows ran.
	Instances int `json:"-"`
}

// Row is the replay of a scenario by one algorithm in one setup.
type Row struct {
	// Algorithm decided the requests.
	Algorithm rate.Algorithm `json:"algorithm"`
	// Setup says how many limiters decided and whether they shared their
	// counters.
	Setup Setup `json:"setup"`
	// Passed and Refused count requests (not units of cost).
	Passed  int `json:"passed"`
	Refused int `json:"refused"`
	// PerSecond has one entry per second of the scenario, every second
	// included, in order: entry i covers [i s, i+1 s) after the start.
	PerSecond []Second `json:"per_second"`

	// Limit is the limit as this row applied it: the scenario's, with
	// this row's algorithm and without a burst for the window algorithms.
	Limit rate.Limit `json:"-"`
	// Instances is how many limiters decided: 1 for Single.
	Instances int `json:"-"`
	// Clients has the totals of each client (see Event.Client), in the
	// order of their first request.
	Clients []ClientTotal `json:"-"`
	// MaxDelay is the longest an admitted request had to wait for its
	// turn: non-zero only for leaky_bucket, which shapes traffic. In JSON
	// it is max_delay_ns, in nanoseconds, left out when 0.
	MaxDelay time.Duration `json:"max_delay_ns,omitempty"`
	// OverCapacity counts the requests, among Refused, that cost more
	// than Limit's capacity ([rate.Limit.Capacity]). No wait lets them
	// pass, and a store does not refuse them: it answers with an error
	// wrapping [rate.ErrCostExceedsCapacity]. In JSON it is
	// over_capacity, left out when 0.
	OverCapacity int `json:"over_capacity,omitempty"`
}

// Second counts the requests that arrived in one second.
type Second struct {
	// T is the second, counted from the scenario's start.
	T int `json:"t"`
	// Passed counts the requests admitted (for leaky_bucket, possibly
	// after a Delay): those that arrived in this second, whenever they
	// went ahead.
	Passed int `json:"passed"`
	// Refused counts the requests that arrived in this second and were
	// refused.
	Refused int `json:"refused"`
}

// ClientTotal counts one client's requests.
type ClientTotal struct {
	// Client is the client's name (see Event.Client).
	Client string
	// Passed counts the client's requests admitted.
	Passed int
	// Refused counts the client's requests refused.
	Refused int
}

// Row returns the row of algorithm a in setup s, if r has one.
func (r Result) Row(a rate.Algorithm, s Setup) (Row, bool) {
	for _, row := range r.Rows {
		if row.Algorithm == a && row.Setup == s {
			return row, true
		}
	}
	return Row{}, false
}

// Client returns the totals of the named client, if it sent anything.
func (r Row) Client(name string) (ClientTotal, bool) {
	for _, c := range r.Clients {
		if c.Client == name {
			return c, true
		}
	}
	return ClientTotal{}, false
}

// Run replays s: each algorithm in each setup decides every request in
// order of arrival, through [rate.Limit.Step] over a state per key, exactly
// as a store would. Time is the scenario's, not the clock's: a run takes
// no longer than the steps it computes and gives the same result every
// time.
//
// In the OwnCounters and SharedCounter setups a round-robin balancer sends
// the i-th request (in order of arrival, whatever its key) to instance
// i mod Instances. A request is admitted if the state it is decided
// against admits it; an admitted request's new state is stored, a refused
// one changes nothing.
//
// Run returns an error wrapping [ErrInvalid] if s does not validate, or
// ctx's error if ctx ends first (it is checked every few thousand steps).
func Run(ctx context.Context, s Scenario) (Result, error) {
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	events := slices.Clone(s.Events)
	slices.SortStableFunc(events, func(a, b Event) int { return cmp.Compare(a.At, b.At) })

	// Clients in order of first request, and each event's client index.
	var clients []string
	clientOf := make([]int, len(events))
	index := map[string]int{}
	for i, e := range events {
		c := e.client()
		k, ok := index[c]
		if !ok {
			k = len(clients)
			index[c] = k
			clients = append(clients, c)
		}
		clientOf[i] = k
	}

	res := Result{
		Scenario:    s.Name,
		Summary:     s.Summary,
		Description: s.Description,
		Limit:       s.Limit,
		Seconds:     s.seconds(),
		Start:       time.UnixMicro(s.startMicros()).UTC(),
		Instances:   s.instances(),
	}
	start := s.startMicros()
	steps := 0
	for _, a := range s.algorithms() {
		l := s.LimitFor(a)
		for _, setup := range s.setups() {
			row := Row{
				Algorithm: a,
				Setup:     setup,
				Limit:     l,
				Instances: 1,
				PerSecond: make([]Second, res.Seconds),
				Clients:   make([]ClientTotal, len(clients)),
			}
			for i := range row.PerSecond {
				row.PerSecond[i].T = i
			}
			for i, c := range clients {
				row.Clients[i].Client = c
			}
			counters := 1
			if setup != Single {
				row.Instances = res.Instances
			}
			if setup == OwnCounters {
				counters = res.Instances
			}
			states := make([]map[string]rate.State, counters)
			for i := range states {
				states[i] = map[string]rate.State{}
			}
			for i, e := range events {
				if steps++; steps%4096 == 0 {
					if err := ctx.Err(); err != nil {
						return Result{}, fmt.Errorf("sim %s: %w", s.Name, err)
					}
				}
				m := states[i%counters]
				ok, delay, over := decide(l, m, e, start)
				sec := &row.PerSecond[e.At/time.Second]
				ct := &row.Clients[clientOf[i]]
				if ok {
					row.Passed++
					sec.Passed++
					ct.Passed++
					row.MaxDelay = max(row.MaxDelay, delay)
				} else {
					row.Refused++
					sec.Refused++
					ct.Refused++
					if over {
						row.OverCapacity++
					}
				}
			}
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

// decide steps l for e over the states in m, storing the new state if the
// request passes, and returns whether it passed, its delay, and whether
// it was refused for costing more than l's capacity.
func decide(l rate.Limit, m map[string]rate.State, e Event, start int64) (ok bool, delay time.Duration, over bool) {
	cost := e.cost()
	if cost > l.Capacity() {
		// No wait would let it pass; a store answers it with an error,
		// counted apart as Row.OverCapacity.
		return false, 0, true
	}
	now := start + int64(e.At/time.Microsecond)
	next, d := l.Step(m[e.Key], now, cost)
	if !d.Allowed {
		return false, 0, false
	}
	m[e.Key] = next
	return true, d.Delay, false
}
