package retry

import (
	"net/http"
	"slices"
	"sync"
	"time"
)

// maxPacedHosts bounds the pacer's memory: past it, stale hosts are
// dropped, then arbitrary ones.
const maxPacedHosts = 1024

// maxPaceReset bounds how far ahead a reported reset is believed. A
// quota that resets later is ignored, as if not reported: it is most
// likely a misread field (an X-RateLimit-Reset in Unix milliseconds, read
// as seconds, or a timestamp sent where delta-seconds belong), and pacing
// by it would hold every request to the host for the longest wait while
// the server still has quota to give.
const maxPaceReset = 24 * time.Hour

// pacer spreads requests to a host over the time until its quota resets,
// once the host reports little quota left. After a response reports r
// requests remaining until a reset t away, sends to that host are spaced
// t/(r+1) apart: r=0 waits for the reset, r=1 sends one request half way
// and one at the reset, and so on. Concurrent requests reserve successive
// slots, so they are spaced too instead of all leaving at once; a request
// whose caller stops waiting gives its slot back, so that the ones after
// it do not wait for a send that never happens.
//
// No slot lies past the reset. The report says nothing of the quota after
// it, and a request arriving then is sent at once; one that has been
// waiting since before must not leave later. So requests beyond the r+1
// slots of the window all leave at the reset, and the reports of their
// responses space the next ones.
//
// The pacer only keeps the schedule; how long a request may wait for its
// slot (Options.MaxRetryAfter, Options.MaxWait, its deadline) is the
// Transport's to say, through reserve's limit.
type pacer struct {
	threshold int64

	mu    sync.Mutex
	hosts map[string]*paceState // guarded by mu
}

type paceState struct {
	interval time.Duration // spacing between sends
	until    time.Time     // when the reported quota resets; the state is stale after it
	left     time.Time     // the latest send observed, or booked and come
	booked   []time.Time   // the sends booked and still ahead, which release can give back
	took     time.Duration // how long the latest observed attempt took, from its send to its response
}

// slot is a send booked by reserveSlot, which release gives back. The
// zero slot holds nothing.
type slot struct {
	st *paceState // the state it was booked in; one since dropped holds it no more
	at time.Time  // when its request leaves
}

// last returns the latest send booked or observed: the next leaves an
// interval after it. Requires that the pacer's mu is held.
func (st *paceState) last() time.Time {
	last := st.left
	for _, at := range st.booked {
		if at.After(last) {
			last = at
		}
	}
	return last
}

// settle counts the booked sends whose time has come, at now, as sent:
// their requests have left, or are leaving, so their slots can no longer
// be given back, and booked holds only the requests still waiting.
// Requires that the pacer's mu is held.
func (st *paceState) settle(now time.Time) {
	waiting := st.booked[:0]
	for _, at := range st.booked {
		switch {
		case at.After(now):
			waiting = append(waiting, at)
		case at.After(st.left):
			st.left = at
		}
	}
	clear(st.booked[len(waiting):])
	st.booked = waiting
}

func newPacer(threshold int) *pacer {
	return &pacer{threshold: int64(threshold), hosts: map[string]*paceState{}}
}

// reserveSlot returns how long a request to host, at now, must wait
// before it leaves: the longer of least (the request's own wait, a retry's
// backoff say) and the time to the host's next slot. When the slot is more
// than limit away, it returns false and books nothing: the caller does
// not wait for it. Otherwise, if book is set, it books the send, so that
// the next request to the host leaves an interval after it, and returns
// the slot, for release to give back if the request does not leave after
// all; without book it only looks. A host not paced has no slot to wait
// for: least is returned, whatever the limit.
func (p *pacer) reserveSlot(host string, now time.Time, least, limit time.Duration, book bool) (time.Duration, slot, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.hosts[host]
	if st == nil {
		return least, slot{}, true
	}
	if !now.Before(st.until) {
		delete(p.hosts, host)
		return least, slot{}, true
	}
	st.settle(now)
	at := st.last().Add(st.interval)
	if at.Before(now) {
		at = now
	}
	if at.After(st.until) {
		at = st.until
	}
	if at.Sub(now) > limit {
		return 0, slot{}, false
	}
	wait := max(at.Sub(now), least)
	if !book {
		return wait, slot{}, true
	}
	leave := now.Add(wait)
	if !leave.After(now) {
		// Leaving now, it is sent already as far as the schedule can tell.
		if leave.After(st.left) {
			st.left = leave
		}
		return wait, slot{}, true
	}
	st.booked = append(st.booked, leave)
	return wait, slot{st: st, at: leave}, true
}

// release gives back s, a send whose request, at now, no longer leaves:
// its caller stopped waiting for it. Without it every later request to
// the host would wait an interval more than the server asked, one for
// each caller that gave up.
//
// The slot is struck from the sends booked, and the next request is
// spaced from the latest send still booked or observed. So slots given
// back in any order all come free once the latest of them is. Rolling
// the schedule back only when the slot given back is the latest would be
// simpler, but callers whose shared context ends give up in no particular
// order: given back in the order booked, five slots would free one.
//
// The requests booked after it keep their slots, and a request arriving
// later is not given the hole under them: their callers already wait for
// those times, and spacing every new slot from the latest one booked is
// what keeps any two sends an interval apart (short of the reset, where
// the requests beyond the window all leave together anyway). A slot whose
// time has come is spent, as if sent: booked then holds only requests
// still waiting, which keeps it as short as the queue, and a caller who
// gives up that late costs the next request at most one interval. A slot
// booked in a state since dropped (the reset passed, the host reported
// plenty) changes nothing.
func (p *pacer) release(s slot, now time.Time) {
	if s.st == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s.st.settle(now)
	if i := slices.IndexFunc(s.st.booked, s.at.Equal); i >= 0 {
		s.st.booked = slices.Delete(s.st.booked, i, i+1)
	}
}

// latency returns how long the latest observed attempt to host took, or 0
// if host is not paced: what a request to it is expected to take.
func (p *pacer) latency(host string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.hosts[host]; st != nil {
		return st.took
	}
	return 0
}

// observe updates host's state from a response header received at now
// for a request sent at sent. Of the quotas at or below the threshold, the
// one that forces the widest spacing wins; if the response reports quotas
// and none is low, pacing for the host stops. A response that reports no
// quota, or none that resets within maxPaceReset, leaves the state as it
// was.
//
// A reset given as a Unix time (X-RateLimit-Reset) is measured from the
// response's Date when it has a valid one, as a Retry-After date is, so
// that a client clock off the server's neither stretches the wait nor
// cancels it; the reset found is then counted from now, on the client's
// clock.
func (p *pacer) observe(host string, h http.Header, sent, now time.Time) {
	at := now
	if date, ok := parseHTTPDate(h.Get("Date")); ok {
		at = date
	}
	interval, reset, reported := time.Duration(-1), time.Duration(0), false
	for _, q := range ParseRateLimit(h, at) {
		if q.Reset > maxPaceReset {
			continue
		}
		reported = true
		if q.Remaining > p.threshold {
			continue
		}
		if iv := q.Reset / time.Duration(q.Remaining+1); iv > interval {
			interval, reset = iv, q.Reset
		}
	}
	if !reported {
		return
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if interval <= 0 {
		delete(p.hosts, host)
		return
	}
	st := p.hosts[host]
	if st == nil {
		p.evict(now)
		st = &paceState{}
		p.hosts[host] = st
	}
	// The spacing counts from the latest send booked, with the interval
	// just reported: a slot booked under an older, wider interval (waiting
	// out an exhausted quota, say) must not hold back the new window.
	st.interval = interval
	st.until = now.Add(reset)
	st.took = max(now.Sub(sent), 0)
	if sent.After(st.left) {
		st.left = sent
	}
}

// evict makes room for one more host. Requires that p.mu is held.
func (p *pacer) evict(now time.Time) {
	if len(p.hosts) < maxPacedHosts {
		return
	}
	for h, st := range p.hosts {
		if !now.Before(st.until) {
			delete(p.hosts, h)
		}
	}
	for h := range p.hosts {
		if len(p.hosts) < maxPacedHosts {
			return
		}
		delete(p.hosts, h)
	}
}
