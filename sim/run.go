package sim

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
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
//	   "held": 9, "max_delay_ns": 9000000000,
//	   "per_second": [… {"t": 9, "passed": 10, "refused": 0, "held": 9}, …]},
//	  …]}
//
// Only Scenario and Rows are in it, and of each row what the example
// shows, over_capacity and clients (see Row); the other fields are for Go
// callers. Every count is by the second the request arrived: one that was
// held back is counted there, though it went ahead up to max_delay_ns
// later.
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
	// MaxDelay is the scenario's: how long a client waited to be let
	// through rather than refused (see Scenario.MaxDelay).
	MaxDelay time.Duration `json:"-"`
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
	// Held counts the requests, among Passed, held back first: for a
	// leaky_bucket's turn, for a gcra or token_bucket unit that refilled
	// within the scenario's MaxDelay, or, refused by a window, for its
	// Retry-After within MaxDelay, and let through when decided again.
	// They went ahead later than they arrived, up to MaxDelay later; a row
	// that counts none passed every request at once. In JSON it is held, left out
	// when 0.
	Held int `json:"held,omitempty"`
	// PerSecond has one entry per second of the scenario, every second
	// included, in order: entry i covers [i s, i+1 s) after the start.
	PerSecond []Second `json:"per_second"`

	// Limit is the limit as this row applied it: the scenario's, with
	// this row's algorithm and without a burst for the window algorithms.
	Limit rate.Limit `json:"-"`
	// Instances is how many limiters decided: 1 for Single.
	Instances int `json:"-"`
	// Clients has the totals of each client (see Event.Client), in the
	// order of their first request. In JSON it is clients, given only
	// for 2 to MaxClients clients: one client's totals are the row's,
	// and a list of thousands of keys would swamp the rest.
	Clients []ClientTotal `json:"-"`
	// MaxDelay is the longest an admitted request had to wait: non-zero
	// only for a row that held some (see Held). In JSON it is
	// max_delay_ns, in nanoseconds, left out when 0.
	MaxDelay time.Duration `json:"max_delay_ns,omitempty"`
	// OverCapacity counts the requests, among Refused, that cost more
	// than Limit's capacity ([rate.Limit.Capacity]). No wait lets them
	// pass, and a store does not refuse them: it answers with an error
	// wrapping [rate.ErrCostExceedsCapacity]. In JSON it is
	// over_capacity, left out when 0.
	OverCapacity int `json:"over_capacity,omitempty"`
}

// Second counts the requests that arrived in one second. A second is
// that of arrival, not of going ahead: so that a row's columns count the
// same requests in every algorithm, and a refusal, which has no time to
// go ahead, has its second.
type Second struct {
	// T is the second, counted from the scenario's start.
	T int `json:"t"`
	// Passed counts the requests admitted, at once or after a Delay:
	// those that arrived in this second, whenever they went ahead.
	Passed int `json:"passed"`
	// Refused counts the requests that arrived in this second and were
	// refused.
	Refused int `json:"refused"`
	// Held counts the requests, among Passed, held back first (see
	// Row.Held): what a leaky_bucket shaped, what a gcra or token_bucket
	// held within MaxDelay, or a window's refusal waited out. In JSON it is held, left out
	// when 0.
	Held int `json:"held,omitempty"`
}

// MaxClients is the most clients whose totals the outputs show (the text
// table, the picture, JSON). A scenario with more shows none, rather than
// an arbitrary few: Row.Clients has them all.
const MaxClients = 8

// ClientTotal counts one client's requests. In JSON it is {"client":
// NAME, "passed": N, "refused": N}, with "held": N when not 0.
type ClientTotal struct {
	// Client is the client's name (see Event.Client).
	Client string `json:"client"`
	// Passed counts the client's requests admitted.
	Passed int `json:"passed"`
	// Refused counts the client's requests refused.
	Refused int `json:"refused"`
	// Held counts the client's requests, among Passed, held back (see
	// Row.Held).
	Held int `json:"held,omitempty"`
}

// shownClients returns the client totals the outputs show: all of them
// for 2 to MaxClients clients, else none.
func shownClients(c []ClientTotal) []ClientTotal {
	if len(c) < 2 || len(c) > MaxClients {
		return nil
	}
	return c
}

// rowJSON is Row without its methods, so that MarshalJSON and
// UnmarshalJSON can use the fields' tags without calling themselves.
type rowJSON Row

// rowWithClients is a Row's JSON form: its fields and the clients shown.
type rowWithClients struct {
	rowJSON
	Clients []ClientTotal `json:"clients,omitempty"`
}

// MarshalJSON implements [json.Marshaler]: the row's tagged fields, and
// clients when there are 2 to MaxClients of them.
func (r Row) MarshalJSON() ([]byte, error) {
	return json.Marshal(rowWithClients{rowJSON: rowJSON(r), Clients: shownClients(r.Clients)})
}

// UnmarshalJSON implements [json.Unmarshaler], reading what MarshalJSON
// writes, clients included.
func (r *Row) UnmarshalJSON(b []byte) error {
	var v rowWithClients
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Row(v.rowJSON)
	r.Clients = v.Clients
	return nil
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
// order of arrival, through [rate.Limit.StepWithin] over a state per key
// with s.MaxDelay, exactly as a store would. Time is the scenario's, not
// the clock's: a run takes no longer than the steps it computes and gives
// the same result every time.
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
		MaxDelay:    s.MaxDelay,
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
			// A request a window refused, waiting for its Retry-After
			// (see Scenario.MaxDelay), by when it is decided again.
			var waiting []retry
			waits := s.MaxDelay > 0 && !l.Algorithm.HasBurst()
			// settle counts event i's outcome, in the second it arrived.
			settle := func(i int, ok bool, delay time.Duration, over bool) {
				sec := &row.PerSecond[events[i].At/time.Second]
				ct := &row.Clients[clientOf[i]]
				if ok {
					row.Passed++
					sec.Passed++
					ct.Passed++
					if delay > 0 {
						row.Held++
						sec.Held++
						ct.Held++
						row.MaxDelay = max(row.MaxDelay, delay)
					}
				} else {
					row.Refused++
					sec.Refused++
					ct.Refused++
					if over {
						row.OverCapacity++
					}
				}
			}
			// decideWaiting decides again the requests whose wait ends
			// by at: after it, no other wait.
			decideWaiting := func(at time.Duration) {
				for len(waiting) > 0 && waiting[0].at <= at {
					r := waiting[0]
					waiting = waiting[1:]
					e := events[r.i]
					e.At = r.at
					d, over := decide(l, states[r.i%counters], e, start, 0)
					settle(r.i, d.Allowed, r.wait, over)
				}
			}
			for i, e := range events {
				if steps++; steps%4096 == 0 {
					if err := ctx.Err(); err != nil {
						return Result{}, fmt.Errorf("sim %s: %w", s.Name, err)
					}
				}
				decideWaiting(e.At)
				d, over := decide(l, states[i%counters], e, start, s.MaxDelay)
				if w := d.RetryAfter; waits && !d.Allowed && !over && w > 0 && w <= s.MaxDelay {
					r := retry{at: e.At + w, i: i, wait: w}
					k, _ := slices.BinarySearchFunc(waiting, r, func(a, b retry) int {
						return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.i, b.i))
					})
					waiting = slices.Insert(waiting, k, r)
					continue
				}
				settle(i, d.Allowed, d.Delay, over)
			}
			decideWaiting(math.MaxInt64)
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

// retry is a request a window refused, waiting to be decided again.
type retry struct {
	at   time.Duration // when it is decided again
	i    int           // its event
	wait time.Duration // how long it waited
}

// decide steps l for e, from a client who waits up to maxDelay, over the
// states in m, storing the new state if the request passes, and returns
// the decision, and whether it was refused for costing more than l's
// capacity.
func decide(l rate.Limit, m map[string]rate.State, e Event, start int64, maxDelay time.Duration) (d rate.Decision, over bool) {
	cost := e.cost()
	if cost > l.Capacity() {
		// No wait would let it pass; a store answers it with an error,
		// counted apart as Row.OverCapacity.
		return rate.Decision{}, true
	}
	now := start + int64(e.At/time.Microsecond)
	next, d := l.StepWithin(m[e.Key], now, cost, maxDelay)
	if d.Allowed {
		m[e.Key] = next
	}
	return d, false
}
