package dashboard

import (
	"fmt"
	"math"
	"sort"
	"sync"
)

// Other is the policy under which [Dashboard.Record] counts the decisions
// of policies beyond Options.MaxPolicies. A policy really named "other"
// shares its row.
const Other = "other"

// Live is a snapshot of the decisions recorded in the last seconds, what
// GET api/live returns as JSON:
//
//	{"now": 1767225600, "seconds": 60, "policies": [
//	  {"policy": "api", "passed": 590, "refused": 12, "shadow_refused": 0,
//	   "per_second": [{"t": 1767225541, "passed": 10, "refused": 0, "shadow_refused": 0}, …]},
//	  …]}
//
// Each policy counts its own decisions. A request is refused whole, so
// one that a policy allowed and another refused counts as passed in the
// first's row, though its client got the refusal and the first's limits
// counted nothing: a row's Passed may exceed its limit. What clients got
// is sluice serve's sluice_requests_total.
type Live struct {
	// Now is the current second, in Unix seconds: the last entry of every
	// PerSecond. It is still running, so its counts may grow.
	Now int64 `json:"now"`
	// Seconds is how many seconds the snapshot covers: the length of every
	// PerSecond.
	Seconds int `json:"seconds"`
	// Policies holds the policies that decided anything in those seconds,
	// sorted by name, with Other last.
	Policies []LivePolicy `json:"policies"`
}

// LivePolicy is one policy's decisions over a [Live] snapshot.
type LivePolicy struct {
	// Policy is the policy's name, or Other.
	Policy string `json:"policy"`
	// Passed and Refused count the decisions over the whole snapshot:
	// what the policy allowed and what it refused.
	Passed  int64 `json:"passed"`
	Refused int64 `json:"refused"`
	// ShadowRefused counts those of Passed that a shadow policy would
	// have refused: seeing them is what a policy is tried in shadow for,
	// and counting them apart from Refused keeps that what clients got.
	ShadowRefused int64 `json:"shadow_refused"`
	// PerSecond has one entry per second of the snapshot, oldest first,
	// every second included.
	PerSecond []LiveSecond `json:"per_second"`
}

// LiveSecond counts the decisions of one second.
type LiveSecond struct {
	// T is the second, in Unix seconds.
	T int64 `json:"t"`
	// Passed, Refused and ShadowRefused count the decisions made in it,
	// as LivePolicy's do over the snapshot.
	Passed        int64 `json:"passed"`
	Refused       int64 `json:"refused"`
	ShadowRefused int64 `json:"shadow_refused"`
}

// String formats s for logs and test failures: {T Passed Refused},
// ShadowRefused after them only when there are some, as most policies
// enforce and would print a zero that says nothing.
func (s LiveSecond) String() string {
	if s.ShadowRefused == 0 {
		return fmt.Sprintf("{%d %d %d}", s.T, s.Passed, s.Refused)
	}
	return fmt.Sprintf("{%d %d %d %d}", s.T, s.Passed, s.Refused, s.ShadowRefused)
}

// verdict is what one decision is counted as. A shadowRefused counts as
// passed too, the request having gone through, so that refused stays
// what clients got.
type verdict uint8

const (
	passed verdict = iota
	refused
	shadowRefused
)

// live keeps per-second counters for each policy over a sliding window.
// Its map is guarded by mu; each series guards its own ring, so that
// recording for one policy does not wait for another.
type live struct {
	window      int // seconds
	maxPolicies int

	mu     sync.RWMutex
	series map[string]*series
	// fullAt is the last second at which a new name found no place and
	// was folded into Other. Until the next second, new names go to
	// Other under the read lock: a flood of names beyond the bound
	// takes the write lock at most once a second.
	fullAt int64
}

// series is one policy's ring of per-second counters: slot t mod len(ring)
// holds second t, if its sec says so; a slot holding an older second is
// stale and reads as zero.
type series struct {
	mu   sync.Mutex
	ring []slot
	last int64 // the latest second recorded
	dead bool  // evicted from the map: record elsewhere
}

type slot struct {
	sec                     int64
	passed, refused, shadow int64 // shadow: of passed, shadowRefused
}

func newLive(window, maxPolicies int) *live {
	return &live{window: window, maxPolicies: maxPolicies, series: map[string]*series{}, fullAt: math.MinInt64}
}

// record counts one decision of policy at second now.
func (l *live) record(policy string, v verdict, now int64) {
	for {
		l.mu.RLock()
		s := l.series[policy]
		if s == nil && l.fullAt == now {
			s = l.series[Other]
		}
		l.mu.RUnlock()
		if s == nil {
			s = l.add(policy, now)
		}
		s.mu.Lock()
		if s.dead {
			// Evicted between the lookup and the lock: look again, so
			// that the decision lands in the map's series.
			s.mu.Unlock()
			continue
		}
		s.add(now, v)
		s.mu.Unlock()
		return
	}
}

// add returns policy's series, creating it, or Other's if the map is
// full even after evicting the policies idle for the whole window.
func (l *live) add(policy string, now int64) *series {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.series[policy]; s != nil {
		return s
	}
	// Names other than Other take at most maxPolicies-1 places, so that
	// there is always room for Other.
	if policy != Other && l.namedLocked() >= l.maxPolicies-1 {
		l.evictLocked(now)
		if l.namedLocked() >= l.maxPolicies-1 {
			l.fullAt = now
			policy = Other
			if s := l.series[policy]; s != nil {
				return s
			}
		}
	}
	s := &series{ring: make([]slot, l.window), last: now}
	for i := range s.ring {
		s.ring[i].sec = -1 << 62 // stale whatever the clock says
	}
	l.series[policy] = s
	return s
}

// namedLocked returns how many series there are besides Other's. It
// requires l.mu held.
func (l *live) namedLocked() int {
	if _, ok := l.series[Other]; ok {
		return len(l.series) - 1
	}
	return len(l.series)
}

// evictLocked removes the series that recorded nothing in the window
// ending at now. It requires l.mu held for writing.
func (l *live) evictLocked(now int64) {
	for name, s := range l.series {
		s.mu.Lock()
		if s.last <= now-int64(l.window) {
			s.dead = true
			delete(l.series, name)
			l.fullAt = math.MinInt64 // there is room again
		}
		s.mu.Unlock()
	}
}

// add counts one decision at second now. It requires s.mu held.
func (s *series) add(now int64, v verdict) {
	sl := &s.ring[mod(now, int64(len(s.ring)))]
	switch {
	case sl.sec == now:
	case sl.sec < now:
		*sl = slot{sec: now}
	default:
		// The slot holds a later second: now is older than the window
		// (the clock went back that far), and nothing shows it.
		return
	}
	switch v {
	case passed:
		sl.passed++
	case refused:
		sl.refused++
	case shadowRefused:
		sl.passed++
		sl.shadow++
	}
	s.last = max(s.last, now)
}

// snapshot returns the last n seconds up to now, n at most the window.
func (l *live) snapshot(now int64, n int) Live {
	if n <= 0 || n > l.window {
		n = l.window
	}
	out := Live{Now: now, Seconds: n, Policies: []LivePolicy{}}
	// Forget the policies idle for the whole window: a policy removed
	// from the config does not keep its place forever. The map is held
	// only for that and to list the series; each is then copied under its
	// own lock, so that recording waits for one copy at most, not for the
	// whole snapshot.
	type named struct {
		name string
		s    *series
	}
	l.mu.Lock()
	l.evictLocked(now)
	all := make([]named, 0, len(l.series))
	for name, s := range l.series {
		all = append(all, named{name, s})
	}
	l.mu.Unlock()
	for _, ns := range all {
		s := ns.s
		p := LivePolicy{Policy: ns.name, PerSecond: make([]LiveSecond, n)}
		s.mu.Lock()
		for i := range p.PerSecond {
			t := now - int64(n-1-i)
			sec := LiveSecond{T: t}
			if sl := s.ring[mod(t, int64(len(s.ring)))]; sl.sec == t {
				sec.Passed, sec.Refused, sec.ShadowRefused = sl.passed, sl.refused, sl.shadow
			}
			p.PerSecond[i] = sec
			p.Passed += sec.Passed
			p.Refused += sec.Refused
			p.ShadowRefused += sec.ShadowRefused
		}
		s.mu.Unlock()
		if p.Passed+p.Refused > 0 {
			out.Policies = append(out.Policies, p)
		}
	}
	sort.Slice(out.Policies, func(i, j int) bool {
		a, b := out.Policies[i].Policy, out.Policies[j].Policy
		if (a == Other) != (b == Other) {
			return b == Other
		}
		return a < b
	})
	return out
}

// mod returns a mod n in [0, n) for n > 0.
func mod(a, n int64) int64 {
	m := a % n
	if m < 0 {
		m += n
	}
	return m
}
