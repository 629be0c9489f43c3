package retry

import (
	"net/http"
	"sync"
	"time"
)

// maxPacedHosts bounds the pacer's memory: past it, stale hosts are
// dropped, then arbitrary ones.
const maxPacedHosts = 1024

// maxPaceReset bounds how far ahead a reported reset is believed, so a
// bogus Reset (a millisecond timestamp read as seconds, say) cannot pin a
// host for centuries. Each single wait is bounded by MaxRetryAfter too.
const maxPaceReset = 24 * time.Hour

// pacer spreads requests to a host over the time until its quota resets,
// once the host reports little quota left. After a response reports r
// requests remaining until a reset t away, sends to that host are spaced
// t/(r+1) apart: r=0 waits for the reset, r=1 sends one request half way
// and one at the reset, and so on. Concurrent requests reserve successive
// slots, so they are spaced too instead of all leaving at once.
type pacer struct {
	threshold int64
	maxWait   time.Duration

	mu    sync.Mutex
	hosts map[string]*paceState // guarded by mu
}

type paceState struct {
	interval time.Duration // spacing between sends
	until    time.Time     // when the reported quota resets; the state is stale after it
	last     time.Time     // the latest send booked or observed; the next leaves interval after it
}

func newPacer(threshold int, maxWait time.Duration) *pacer {
	return &pacer{threshold: int64(threshold), maxWait: maxWait, hosts: map[string]*paceState{}}
}

// reserve returns how long a request to host should wait at now, and
// books that slot. When the slot would not come before the request's
// deadline, it returns 0 and books nothing: the request is better sent at
// once, and the server, which has the last word anyway, may still accept it.
func (p *pacer) reserve(host string, now, deadline time.Time, hasDeadline bool) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.hosts[host]
	if st == nil {
		return 0
	}
	if !now.Before(st.until) {
		delete(p.hosts, host)
		return 0
	}
	at := st.last.Add(st.interval)
	if at.Before(now) {
		at = now
	}
	if at.Sub(now) > p.maxWait {
		at = now.Add(p.maxWait)
	}
	if hasDeadline && !at.Before(deadline) {
		return 0
	}
	st.last = at
	return at.Sub(now)
}

// observe updates host's state from a response header received at now
// for a request sent at sent. Of the quotas at or below the threshold, the
// one that forces the widest spacing wins; if the response reports quotas
// and none is low, pacing for the host stops. A response that reports no
// quota leaves the state as it was.
func (p *pacer) observe(host string, h http.Header, sent, now time.Time) {
	quotas := ParseRateLimit(h, now)
	if len(quotas) == 0 {
		return
	}
	interval, reset := time.Duration(-1), time.Duration(0)
	for _, q := range quotas {
		if q.Remaining > p.threshold {
			continue
		}
		r := min(q.Reset, maxPaceReset)
		if iv := r / time.Duration(q.Remaining+1); iv > interval {
			interval, reset = iv, r
		}
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
