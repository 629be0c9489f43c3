package retry

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// maxDrain bounds how much of a discarded response body is read so that
// its connection can be reused: a body of up to maxDrain bytes is read to
// its end; a larger one is cut off and its connection closed, which is
// cheaper than reading megabytes of error page.
const maxDrain = 64 << 10

// maxDrainTime bounds, as maxDrain bounds the bytes, how long a discarded
// response body is read for; a body not read to its end by then is cut
// off and its connection closed, as one too large. A refusal's body is
// small and leaves the server with its header, so one that has not
// arrived a quarter of a second after it is stalled; and a new
// connection, a handshake of a round trip or two, costs about as much on
// a slow link and far less on a fast one. Without this bound a 503 whose
// body stops coming would hold the call until its deadline, or for ever.
//
// It is real time, the one wait that does not go through Options.Clock:
// like net/http's own timeouts it bounds I/O on a real connection, which
// a fake clock does not drive.
const maxDrainTime = 250 * time.Millisecond

// Transport is an http.RoundTripper that retries a request refused with
// 429 Too Many Requests or 503 Service Unavailable, or lost to a
// connection error, when the request is safe to send again. It waits as
// long as the server's Retry-After asks, or else an exponentially growing,
// fully jittered backoff. It never waits for a retry that its request's
// deadline would cut short (one that could not take as long as the last
// attempt did before the deadline), and a retry budget keeps its retries
// to a share of its requests. Nor does it hold one request for longer
// than Options.MaxWait in all: when the next wait would take the sum of
// the request's waits past it, the last response comes back at once.
// With Options.Pacing it also slows down before the server refuses
// anything: a retry then waits the longer of its own wait and the time to
// the host's pacing slot, and that one wait is what the deadline,
// Options.MaxRetryAfter and MaxWait are checked against. A first attempt
// whose slot lies beyond MaxRetryAfter or MaxWait, or leaves no time
// before the deadline for an attempt as long as the host's last, is sent
// at once. A request whose caller gives up while it waits for its slot
// gives the slot back, so the requests after it are not held back by a
// send that never happens.
//
// A request is safe to send again when its method is GET, HEAD, OPTIONS,
// TRACE, PUT or DELETE, or when its Header map has an Idempotency-Key or
// X-Idempotency-Key entry, as for net/http's Transport (a zero-length
// entry marks the request without being sent); and, if it has a body,
// when the body can be replayed through Request.GetBody (http.NewRequest
// sets it for in-memory bodies). Other requests are sent once and their
// response is returned untouched, with one exception: a request whose
// connection could not even be made (a failed dial) never reached the
// server, so it is retried whatever its method, if its body can be
// replayed, as net/http's Transport does with a request it never wrote.
//
// Of the errors of the wrapped RoundTripper, only those of the connection
// are retried: a dial, read or write that failed or timed out (a
// net.Error), or a connection the server closed under the request (io.EOF,
// io.ErrUnexpectedEOF, and net/http's own reports of a lost connection).
// Any other error is returned at once, since every attempt would fail the
// same way: one from before any I/O (an unsupported URL scheme, an invalid
// header field, a nil URL), a server certificate that fails verification,
// a TLS alert from the server (a client certificate it refused), a server
// that does not speak TLS where TLS was asked for, or an address that
// cannot be dialled as written (a port out of range), a failed dial that
// no other attempt would get past.
//
// Before a retry the Transport reads the refused body, so that the retry
// can reuse its connection: up to 64 KiB, for up to a quarter of a second,
// and never so long that the retry would no longer fit before the
// deadline. A body not read to its end by then is given up, and its
// connection with it.
//
// When it gives up, RoundTrip returns the last response (or error) as it
// came: a caller sees the server's real 429, with its headers and body.
// That includes a caller whose context ends as the refusal arrives, or
// while the Transport reads the refused body to reuse its connection:
// what it read is given back in front of the rest of the body.
//
// A Transport is safe for concurrent use, and its budget and pacing state
// span all its requests, so create one per client, not per request. The
// zero value behaves like NewTransport(nil, Options{}). Most callers want
// Client; NewTransport wraps a RoundTripper of one's own.
type Transport struct {
	next http.RoundTripper
	opts Options // defaults applied by init

	once   sync.Once
	budget *budget // nil if Options.NoBudget
	pacer  *pacer  // nil unless Options.Pacing
	randMu sync.Mutex

	drainTime time.Duration // maxDrainTime; tests set less
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport that sends each attempt through next,
// or through http.DefaultTransport if next is nil.
func NewTransport(next http.RoundTripper, opts Options) *Transport {
	t := &Transport{next: next, opts: opts}
	t.once.Do(t.init)
	return t
}

// Client returns an http.Client whose transport is
// NewTransport(http.DefaultTransport, opts).
func Client(opts Options) *http.Client {
	return &http.Client{Transport: NewTransport(nil, opts)}
}

func (t *Transport) init() {
	t.opts = t.opts.withDefaults()
	if t.next == nil {
		t.next = http.DefaultTransport
	}
	if !t.opts.NoBudget {
		t.budget = newBudget(t.opts.BudgetRatio, t.opts.BudgetMinRetries, t.opts.BudgetWindow, t.opts.Clock.Now())
	}
	if t.opts.Pacing {
		t.pacer = newPacer(t.opts.PaceThreshold)
	}
	if t.drainTime <= 0 {
		t.drainTime = maxDrainTime
	}
}

// Backoff returns the wait before the retry that follows the attempt-th
// failed attempt, when the server gave no usable Retry-After: a random
// duration in [0, W], W = min(Cap, Base·2^(attempt-1)), "full jitter". It
// is W times Options.Rand's value clamped to [0, 1]: the default Rand's
// values are below 1, so it returns W only from a Rand that returns 1 or
// more. attempt counts from 1; smaller values are treated as 1, and huge
// ones simply reach Cap.
//
// Full jitter is what breaks up a herd: clients refused at the same
// instant come back spread evenly over the whole window instead of
// together. A constant Rand turns it off.
func (t *Transport) Backoff(attempt int) time.Duration {
	t.once.Do(t.init)
	return jitter(t.rand(), ceiling(t.opts.Base, t.opts.Cap, attempt))
}

// ceiling returns min(cap, base·2^(attempt-1)) without overflowing.
func ceiling(base, cap time.Duration, attempt int) time.Duration {
	d := min(base, cap)
	for i := 1; i < attempt && d < cap; i++ {
		if d > cap/2 {
			return cap
		}
		d *= 2
	}
	return d
}

// jitter scales d by r, clamped to [0, 1].
func jitter(r float64, d time.Duration) time.Duration {
	switch {
	case !(r > 0): // also catches NaN
		return 0
	case r >= 1:
		return d
	}
	return time.Duration(r * float64(d))
}

func (t *Transport) rand() float64 {
	t.randMu.Lock()
	defer t.randMu.Unlock()
	return t.opts.Rand()
}

// CloseIdleConnections closes the idle connections of the wrapped
// RoundTripper, if it has such a method; http.Client.CloseIdleConnections
// relies on this.
func (t *Transport) CloseIdleConnections() {
	t.once.Do(t.init)
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip implements http.RoundTripper. See Transport for what is
// retried and how long it waits.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.once.Do(t.init)
	o := &t.opts
	ctx := req.Context()
	if t.budget != nil {
		t.budget.request(o.Clock.Now())
	}
	safe, rewindable := idempotent(req), rewindable(req)
	deadline, hasDeadline := ctx.Deadline()
	var host string
	if req.URL != nil {
		host = req.URL.Host
	}
	// fits reports whether, at at, a wait of d leaves time before the
	// deadline for an attempt that takes took.
	fits := func(at time.Time, d, took time.Duration) bool {
		return !hasDeadline || addSat(d, took) < deadline.Sub(at)
	}
	// waited is the sum of the waits the request has taken so far, which
	// MaxWait bounds: the planned durations, not the clock's, so that a
	// clock stepping under a wait neither stretches nor shrinks the sum.
	var waited time.Duration
	// paceLimit returns the longest a request may wait for a pacing slot
	// at at: MaxRetryAfter, no more than left (what remains of MaxWait),
	// and less than leaves time before the deadline for an attempt that
	// takes took.
	paceLimit := func(at time.Time, took, left time.Duration) time.Duration {
		limit := min(o.MaxRetryAfter, left)
		if hasDeadline {
			// deadline-at is clamped at 0 so that it less took, less one,
			// cannot overflow; a negative limit admits no wait at all.
			limit = min(limit, max(deadline.Sub(at), 0)-took-1)
		}
		return limit
	}

	if t.pacer != nil {
		// The first attempt waits for the host's slot, unless the slot lies
		// beyond the limit: then it is sent at once, and the server, which
		// has the last word, answers it. Its attempt is expected to take as
		// long as the host's last.
		now := o.Clock.Now()
		if wait, booked, ok := t.pacer.reserveSlot(host, now, 0, paceLimit(now, t.pacer.latency(host), o.MaxWait), true); ok && wait > 0 {
			if err := o.Clock.Sleep(ctx, wait); err != nil {
				// Never sent: the requests after it need not wait for its slot.
				t.pacer.release(booked, o.Clock.Now())
				closeBody(req) // a RoundTripper must close the body, even on error
				return nil, err
			}
			waited = wait
		}
	}

	cur := req
	for attempt := 1; ; attempt++ {
		sent := o.Clock.Now()
		resp, err := t.next.RoundTrip(cur)
		now := o.Clock.Now()
		if err == nil && resp != nil && t.pacer != nil {
			t.pacer.observe(host, resp.Header, sent, now)
		}

		switch {
		case err != nil:
			// Only the caller's own context says the caller gave up: a
			// dialer's timeout also matches context.DeadlineExceeded with
			// errors.Is, and is a connection error like any other.
			if ctx.Err() != nil {
				return nil, err // the caller gave up; that is not the server's fault
			}
			if !transient(err) {
				return nil, err // another attempt would fail the same way
			}
		case resp == nil:
			return nil, fmt.Errorf("retry: %T returned a nil *Response with a nil error", t.next)
		case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusServiceUnavailable:
			if ctx.Err() != nil {
				return resp, nil // the caller gave up: no retry, no budget spent, the refusal as it came
			}
		default:
			return resp, nil
		}
		// A request that never left, its connection not even made, repeats
		// nothing when sent again, whatever its method.
		if !rewindable || !(safe || err != nil && unsent(err)) || attempt >= o.MaxAttempts {
			return resp, err
		}

		// left is what remains of MaxWait for this retry's wait; never
		// negative, as no wait taken went past it.
		left := o.MaxWait - waited
		wait, told := time.Duration(0), false
		if resp != nil {
			var ra time.Duration
			if ra, told = retryAfter(resp.Header, now); told {
				if ra > o.MaxRetryAfter || ra > left {
					return resp, nil
				}
				// Up to one Base of jitter on top of the server's floor, so
				// clients told "1 second" at the same moment do not all
				// come back in the same millisecond; but no more than
				// left allows, so that a Retry-After MaxRetryAfter
				// admits is not refused for its jitter alone.
				wait = addSat(ra, jitter(t.rand(), min(o.Base, left-ra)))
			}
		}
		if !told {
			wait = t.Backoff(attempt)
		}
		// took is how long this attempt took: none, if the clock stepped
		// back under it, since addSat takes no negative duration.
		took := max(now.Sub(sent), 0)
		// plan returns the wait before the retry, decided at at: its own
		// wait or, with Pacing, the time to the host's next slot, whichever
		// is longer, one wait and not one after the other. It reports false
		// when the retry is not to be made: the slot lies beyond
		// MaxRetryAfter, as a Retry-After beyond it would, the wait would
		// take the request's waits past MaxWait, or it leaves too little
		// time before the deadline for a retry as long as this attempt;
		// the caller then gets the server's answer now, not its own
		// deadline later. With book, the slot is booked, and returned to
		// be given back if the retry is not sent after all.
		plan := func(at time.Time, book bool) (time.Duration, slot, bool) {
			if wait > left || !fits(at, wait, took) {
				return 0, slot{}, false
			}
			if t.pacer == nil {
				return wait, slot{}, true
			}
			return t.pacer.reserveSlot(host, at, wait, paceLimit(at, took, left), book)
		}
		total, _, ok := plan(now, false)
		if !ok {
			return resp, err
		}
		if resp != nil {
			// The refused body is read before the retry is decided, as
			// reading it takes time too: if that time is the retry's, or
			// the caller gives up meanwhile, the caller gets the refusal,
			// body and all. The read stops when it no longer leaves time
			// for the retry.
			limit := t.drainTime
			if hasDeadline {
				limit = min(limit, deadline.Sub(now)-addSat(total, took))
			}
			resp.Body = readAhead(ctx, resp.Body, limit)
			if ctx.Err() != nil {
				return resp, nil
			}
		}
		at := o.Clock.Now()
		if _, _, ok := plan(at, false); !ok {
			return resp, err
		}
		next := req.Clone(ctx)
		if hasBody(req) {
			body, gerr := req.GetBody()
			if gerr != nil {
				return resp, err
			}
			next.Body = body
		}
		// The budget is spent, and the pacing slot booked, last, once
		// nothing else can stop the retry. A request to the same host may
		// have taken the slot meanwhile and pushed the next beyond the
		// limit: then the retry is not made after all, and its budget is
		// given back.
		if t.budget != nil && !t.budget.allowRetry(now) {
			closeBody(next)
			return resp, err
		}
		var booked slot
		if total, booked, ok = plan(at, true); !ok {
			if t.budget != nil {
				t.budget.refund(now)
			}
			closeBody(next)
			return resp, err
		}

		if o.OnRetry != nil {
			info := RetryInfo{Request: req, Attempt: attempt, Wait: total, Err: err}
			if resp != nil {
				info.StatusCode = resp.StatusCode
			}
			o.OnRetry(info)
		}
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		if serr := o.Clock.Sleep(ctx, total); serr != nil {
			// The retry was never sent: the budget bounds retries sent,
			// and the requests after it need not wait for its slot.
			if t.budget != nil {
				t.budget.refund(now)
			}
			if t.pacer != nil {
				t.pacer.release(booked, o.Clock.Now())
			}
			closeBody(next)
			return nil, serr
		}
		waited += total
		cur = next
	}
}

// retryAfter returns the wait the Retry-After field of h asks for, in a
// response received at now, and whether h has that field. A date is
// measured from the response's Date when it has a valid one, as RFC 9110
// §10.2.3 says, so that a client clock ahead of the server's does not
// shorten the wait. A value that cannot be read is taken for one second,
// the least a server can ask for in delta-seconds: it asked for a wait,
// and the first backoff is far shorter.
//
// The field holds one value, but it arrives repeated: a gateway adds its
// own to the server's, or a proxy joins two into "5, 60". Each value is a
// wait someone asked for, so the longest wins; taking the first, or the
// joined line for garbage, would bring the client back too early.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	lines := h.Values("Retry-After")
	if len(lines) == 0 {
		return 0, false
	}
	if date, ok := parseHTTPDate(h.Get("Date")); ok {
		now = date
	}
	longest, told := time.Duration(0), false
	take := func(ra time.Duration, ok bool) {
		if !ok {
			ra = time.Second // asked for a wait, unreadable
		}
		longest, told = max(longest, ra), true
	}
	for _, line := range lines {
		if strings.Trim(line, " \t") == "" {
			continue
		}
		if ra, ok := ParseRetryAfter(line, now); ok || !strings.Contains(line, ",") {
			take(ra, ok)
			continue
		}
		// A joined line. An HTTP-date has a comma of its own, after the
		// day of the week: a member that cannot be read alone is tried
		// with the next one.
		members := strings.Split(line, ",")
		for i := 0; i < len(members); i++ {
			m := members[i]
			if strings.Trim(m, " \t") == "" {
				continue
			}
			ra, ok := ParseRetryAfter(m, now)
			if !ok && i+1 < len(members) {
				if joined, jok := ParseRetryAfter(m+","+members[i+1], now); jok {
					ra, ok, i = joined, true, i+1
				}
			}
			take(ra, ok)
		}
	}
	return longest, told
}

// rewindable reports whether req's body, if it has one, can be sent
// again.
func rewindable(req *http.Request) bool {
	return !hasBody(req) || req.GetBody != nil
}

// idempotent reports whether req may be sent again once the server may
// have received it: an idempotent method (RFC 9110 §9.2.2) or an
// idempotency key.
//
// The key is read as net/http's Transport reads it, so that a request it
// would replay is replayed here too: an Idempotency-Key or
// X-Idempotency-Key entry in the Header map, whatever its value; an empty
// entry marks the request without being sent.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace,
		http.MethodPut, http.MethodDelete:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// unsent reports whether err, a connection error, means that the request
// never reached the server: the connection to it could not be made. Then
// nothing of the request was written, and sending it again cannot repeat
// it, as net/http's Transport reasons when it retries such a request of
// any method. A proxy's report of a failed dial wraps the dial's error;
// any other report of a proxy, a TLS handshake or a read or write is not
// taken for proof.
func unsent(err error) bool {
	var op *net.OpError
	for errors.As(err, &op) {
		if op.Op == "dial" {
			return true
		}
		if op.Op != "proxyconnect" {
			return false
		}
		err = op.Err
	}
	return false
}

// lostConnection holds the texts of the errors net/http reports, with
// types it does not export, when a connection is lost under a request:
// the server closed a kept-alive connection, an HTTP/2 connection stopped
// answering pings, or the server closed one after GOAWAY.
var lostConnection = []string{
	"http: server closed idle connection",
	"http2: client connection lost",
	"http2: server sent GOAWAY and closed the connection",
}

// transient reports whether err, from a RoundTripper, is a failure of the
// connection that another attempt may not meet: a network operation that
// failed or timed out (a net.Error, which net/http reports for a failed
// dial, read or write, a reset or refused connection, a DNS failure, or a
// timeout awaiting headers or a TLS handshake), or a connection the server
// closed. Any other error, one from before any I/O above all, would recur.
func transient(err error) bool {
	if permanent(err) {
		return false
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		// A *url.Error is a net.Error whatever it wraps: judge what it wraps.
		if ue, ok := ne.(*url.Error); ok {
			return transient(ue.Err)
		}
		return true
	}
	msg := err.Error()
	for _, s := range lostConnection {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// permanent reports whether err is a connection error that sending the
// request again cannot cure: the server's certificate failed verification;
// the server answered the TLS handshake with an alert (it refused the
// client's certificate, or has none for the name asked), or with something
// other than TLS (plain HTTP on an HTTPS port, say); or the address cannot
// be dialled as written (a port out of range, an address that does not
// parse), which no network change will mend.
func permanent(err error) bool {
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		record    tls.RecordHeaderError
		addr      *net.AddrError
		parse     *net.ParseError
	)
	return errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &record) ||
		errors.As(err, &addr) || errors.As(err, &parse) || alerted(err)
}

// alerted reports whether err is, or wraps through a proxy's report, a TLS
// alert the server sent: crypto/tls reports one as a *net.OpError whose Op
// is "remote error", around an alert type it does not export.
func alerted(err error) bool {
	var op *net.OpError
	for errors.As(err, &op) {
		if op.Op == "remote error" {
			return true
		}
		err = op.Err
	}
	return false
}

func hasBody(req *http.Request) bool {
	return req.Body != nil && req.Body != http.NoBody
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// readAhead reads a refused response's body to its end, if that is at
// most maxDrain bytes away and comes within limit (and before ctx is
// done), so that its connection can be reused once it is closed, and
// returns a body that gives what it read back, followed by the rest. A
// nil body, which http.Client tolerates from a RoundTripper, stays nil.
//
// The reading is done by a goroutine, so that a body that stalls can be
// left behind: the returned body's Read waits for it to end, and its
// Close closes the body, which ends it (net/http's bodies return from a
// Read when closed) and, the body unfinished, gives up its connection.
func readAhead(ctx context.Context, body io.ReadCloser, limit time.Duration) io.ReadCloser {
	if body == nil {
		return nil
	}
	b := &readAheadBody{body: body, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		// One byte more than maxDrain: the end of a body (the last,
		// empty chunk of a chunked one) can take a read of its own after
		// the last byte, and a body closed before its end loses its
		// connection.
		_, _ = b.ahead.ReadFrom(io.LimitReader(body, maxDrain+1))
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-b.done:
	case <-timer.C:
	case <-ctx.Done():
	}
	return b
}

// readAheadBody is a body whose first bytes were read ahead.
type readAheadBody struct {
	body  io.ReadCloser
	done  chan struct{} // closed when the read ahead ends
	ahead bytes.Buffer  // what was read ahead; written only before done is closed
}

func (b *readAheadBody) Read(p []byte) (int, error) {
	<-b.done
	if b.ahead.Len() > 0 {
		return b.ahead.Read(p)
	}
	return b.body.Read(p)
}

func (b *readAheadBody) Close() error { return b.body.Close() }

// addSat returns a+b for non-negative a and b, saturating instead of
// overflowing.
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
