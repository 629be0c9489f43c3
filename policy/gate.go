package policy

import (
	"sync/atomic"
)

// InFlight counts the requests in flight under a concurrency limit
// (concurrency: max_in_flight). An Enforcer counts in its own unless given
// one (Options.InFlight): give the Enforcers of successive generations of
// a reloaded configuration the same, so that the requests still in flight
// on the old one count against the new one's limit, whether or not the old
// one set a limit. The zero value is ready to use.
type InFlight struct {
	n atomic.Int64
}

// N returns how many requests are in flight.
func (f *InFlight) N() int64 { return f.n.Load() }

// gate bounds the requests in flight, with a threshold per priority: a
// request of priority p is admitted only while the requests in flight,
// itself included, stay within limit[p]. Low priorities have lower
// thresholds, so as load rises they are shed first and the slots above
// their threshold stay free for critical work.
type gate struct {
	inFlight  *atomic.Int64
	limit     [numPriorities]int64
	unlimited bool // no limit: count, never shed
}

// newGate returns the gate of c counting in f, or nil if c sets no limit
// and f is nil. With a shared f and no limit, the gate counts and admits
// every request: a later generation that sets a limit counts the requests
// this one still has in flight.
func newGate(c Concurrency, f *InFlight) *gate {
	if c.MaxInFlight <= 0 {
		if f == nil {
			return nil
		}
		return &gate{inFlight: &f.n, unlimited: true}
	}
	if f == nil {
		f = new(InFlight)
	}
	g := &gate{inFlight: &f.n}
	for p, share := range c.Shares {
		g.limit[p] = max(1, int64(c.MaxInFlight)*int64(share)/100)
	}
	return g
}

// acquire takes a slot for a request of priority p, or reports that the
// request must be shed. A request it sheds never counts, not even for an
// instant: were it counted and then taken back, a flood of requests shed
// at their low threshold would keep the count above the free slots and
// shed critical requests too.
func (g *gate) acquire(p Priority) bool {
	if g.unlimited {
		// One atomic add, where the loop below may try again under
		// contention: nothing is shed, so nothing need be read first.
		g.inFlight.Add(1)
		return true
	}
	for {
		n := g.inFlight.Load()
		if n >= g.limit[p] {
			return false
		}
		if g.inFlight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (g *gate) release() { g.inFlight.Add(-1) }
