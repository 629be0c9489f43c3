package retry

import (
	"net/http"
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
// slots, so they are spaced too instead of all leaving at once.
//
// No slot lies past the reset. The report says nothing of the quota after
// it, and a request arriving then is sent at once; one that has been
// waiting since before must not leave later. So requests beyond the r+1
// slots of the window all leave at the reset, and the reports of their
// responses space the next ones.
//
// The pacer only keeps the schedule; how long a request may wait for its
// slot (Options.MaxRetryAfter, its deadline) is the Transport's to say,
// through reserve's limit.
type pacer struct {
	threshold int64

	mu    sync.Mutex
	hosts map[string]*paceState // guarded by mu
}

type paceState struct {
	interval time.Duration // spacing between sends
	until    time.Time     // when the reported quota resets; the state is stale after it
	last     time.Time     // the latest send booked or observed; the next leaves interval after it
	took     time.Duration // how long the latest observed attempt took, from its send to its response
}

func newPacer(threshold int) *pacer {
	return &pacer{threshold: int64(threshold), hosts: map[string]*paceState{}}
}

// reserve returns how long a request to host, at now, must wait before it
// leaves: the longer of least (the request's own wait, a retry's backoff
// say) and the time to the host's next slot. When the slot is more than
// limit away, it returns false and books nothing: the caller does not
// wait for it. Otherwise, if book is set, it books the send, so that the
// next request to the host leaves an interval after it; without book it
// only looks. A host not paced has no slot to wait for: least is
// returned, whatever the limit.
func (p *pacer) reserve(host string, now time.Time, least, limit time.Duration, book bool) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.hosts[host]
	if st == nil {
		return least, true
	}
	if !now.Before(st.until) {
		delete(p.hosts, host)
		return least, true
	}
	at := st.last.Add(st.interval)
	if at.Before(now) {
		at = now
	}
	if at.After(st.until) {
		at = st.until
	}
	if at.Sub(now) > limit {
		return 0, false
	}
	wait := max(at.Sub(now), least)
	if leave := now.Add(wait); book && leave.After(st.last) {
		st.last = leave
	}
	return wait, true
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
	if sent.After(st.last) {
		st.last = sent
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
