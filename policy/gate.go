package policy

import "sync/atomic"

// gate bounds the requests in flight, with a threshold per priority: a
// request of priority p is admitted only while the requests in flight,
// itself included, stay within limit[p]. Low priorities have lower
// thresholds, so as load rises they are shed first and the slots above
// their threshold stay free for critical work.
type gate struct {
	inFlight atomic.Int64
	limit    [numPriorities]int64
}

func newGate(c Concurrency) *gate {
	if c.MaxInFlight <= 0 {
		return nil
	}
	g := &gate{}
	for p, share := range c.Shares {
		g.limit[p] = max(1, int64(c.MaxInFlight)*int64(share)/100)
	}
	return g
}

// acquire takes a slot for a request of priority p, or reports that the
// request must be shed.
func (g *gate) acquire(p Priority) bool {
	if g.inFlight.Add(1) > g.limit[p] {
		g.inFlight.Add(-1)
		return false
	}
	return true
}

func (g *gate) release() { g.inFlight.Add(-1) }
