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
type pacer struct {
	threshold int64
	maxWait   time.Duration

	mu    sync.Mutex
	hosts map[string]*paceState // guarded by mu
}

type paceState struct {
	interval time.Duration // spacing between sends
	until    time.Time     // when the reported quota resets; the state is stale after it
	last     time.Time     // the latest slot booked or send observed; the next leaves interval after it
}

func newPacer(threshold int, maxWait time.Duration) *pacer {
	return &pacer{threshold: int64(threshold), maxWait: maxWait, hosts: map[string]*paceState{}}
}

// reserve returns how long a request to host should wait at now, and
// books that slot. When the slot would not come before the request's
// deadline, it returns 0 and books nothing: the request is better sent at
// once, and the server, which has the last word anyway, may still accept it.
// When the slot lies beyond maxWait, the request waits maxWait and books
// nothing either: it leaves before its slot, so the slots after it are
// still counted from the schedule, not from the bound.
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
	if at.After(st.until) {
		at = st.until
	}
	held := at.Sub(now) > p.maxWait
	if held {
		at = now.Add(p.maxWait)
	}
	if hasDeadline && !at.Before(deadline) {
		return 0
	}
	if !held {
		st.last = at
	}
	return at.Sub(now)
}

// observe updates host's state from a response header received at now
// for a request sent at sent. Of the quotas at or below the threshold, the
// one that forces the widest spacing wins; if the response reports quotas
// and none is low, pacing for the host stops. A response that reports no
// quota, or none that resets within maxPaceReset, leaves the state as it
// was.
func (p *pacer) observe(host string, h http.Header, sent, now time.Time) {
	interval, reset, reported := time.Duration(-1), time.Duration(0), false
	for _, q := range ParseRateLimit(h, now) {
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
