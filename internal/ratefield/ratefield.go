// Package ratefield writes the RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-10), one item at a time, for every
// part of sluice that answers with them: the HTTP and gRPC middlewares
// (through Header, in which package policy and package keyed precompute
// a limit's parts) and Envoy's rate limit service.
//
//	RateLimit-Policy: "per-user";q=20;w=60
//	RateLimit: "per-user";r=0;t=25
//
// A policy's q per w seconds states the limit's rate, which the draft has
// clients pace themselves by; how many may go at once is what the
// RateLimit field's r tells. The draft's w is whole seconds, so:
//
//   - When the limit's capacity (a bucket's burst, a window's count)
//     comes back in a whole number of seconds, q is the capacity and w
//     that time: exact, and q is also how many may go at once.
//   - Otherwise, when the period is whole seconds and no shorter than
//     that time, q is the count and w the period: exact.
//   - Otherwise w is the least whole number of seconds, at least 1, in
//     which the capacity comes back, and q the most units the rate
//     allows in w, rounded down: at most the rate, so that a client
//     pacing itself by it is never refused, and at least half of it, as
//     q is at least the capacity. (100/s burst 10 is q=100;w=1, not
//     q=10;w=1, a tenth of it; 3 per 2s burst 5 is q=6;w=4.)
//
// The fields count requests, as the draft has them when they name no
// other unit: for requests of several units each (a policy's cost), q
// and r are the units over the cost, rounded down (see Header).
//
// A q past what a Structured Field holds is written as the largest it
// holds, which understates the rate rather than break the field.
//
// It also words the rest of what a client not served is told: gRPC's
// grpc-retry-pushback-ms (Pushback), and the sentence that says why
// (Refusal), which every transport and middleware of sluice says alike.
package ratefield

import (
	"math/bits"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// AppendPolicy appends the RateLimit-Policy item of l, named name:
// `"name";q=Q;w=W`, with q units per w whole seconds stating l's rate as
// the package doc says. w is left out for calendar months, which have no
// fixed window: q is then the month's count.
func AppendPolicy(dst []byte, name string, l rate.Limit) []byte {
	return appendPolicy(dst, name, l, 1)
}

// appendPolicy is AppendPolicy for requests of cost units each (1 at
// least): q counts requests, the units over the cost, rounded down, so
// that it states no more than the rate still.
func appendPolicy(dst []byte, name string, l rate.Limit, cost int64) []byte {
	dst = AppendString(dst, name)
	q, w, ok := quota(l)
	q /= cost
	dst = append(dst, ";q="...)
	dst = strconv.AppendInt(dst, q, 10)
	if ok {
		dst = append(dst, ";w="...)
		dst = strconv.AppendInt(dst, w, 10)
	}
	return dst
}

// AppendItem appends a RateLimit item: `"name";r=R;t=T`, with r the units
// left (0 at least) and t the whole seconds, rounded up, of reset: until
// more quota is made available, as the draft says, which callers take to
// be the wait of a refused request and, for an allowed one, the time until
// the quota is whole again.
func AppendItem(dst []byte, name string, remaining int64, reset time.Duration) []byte {
	dst = AppendString(dst, name)
	return AppendRest(dst, remaining, reset)
}

// AppendRest appends what follows the name in a RateLimit item,
// `;r=R;t=T`, for a caller that keeps the quoted name.
func AppendRest(dst []byte, remaining int64, reset time.Duration) []byte {
	dst = append(dst, ";r="...)
	dst = strconv.AppendInt(dst, sfInteger(max(remaining, 0)), 10)
	dst = append(dst, ";t="...)
	return strconv.AppendInt(dst, sfInteger(rate.CeilSeconds(reset)), 10)
}

// AppendDecision appends what follows the name in the RateLimit item of
// the decision d, `;r=R;t=T`: T is until more quota is made available, as
// the draft says, which for a refusal is the wait after which the request
// passes (as Retry-After says; the draft wants Retry-After no earlier than
// t), and for an admission the time until the quota is whole again.
func AppendDecision(dst []byte, d rate.Decision) []byte {
	t := d.ResetAfter
	if !d.Allowed && d.RetryAfter > 0 {
		t = d.RetryAfter
	}
	return AppendRest(dst, d.Remaining, t)
}

// maxSFInteger is the largest integer a Structured Field holds (RFC 9651:
// 15 digits). A limit may count up to 2^52, 16 digits: a parser that
// meets more than 15 refuses the whole field, and the draft has clients
// ignore a field that does not parse, so a larger value is written as
// this one.
const maxSFInteger = 999_999_999_999_999

func sfInteger(v int64) int64 { return min(v, maxSFInteger) }

// AppendString appends s as a Structured Field string (RFC 9651): quoted,
// with '"' and '\' escaped and bytes outside printable ASCII replaced by
// '?'. sluice.NewLimiter and policy files refuse names with such bytes, as
// the headers would then name a limit otherwise than a problem body does
// (and two names alike); the replacement only keeps the field parsable
// should one get here.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c > 0x7e:
			dst = append(dst, '?')
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// second is a second in the unit of time.Duration.
const second = uint64(time.Second)

// quota returns the q and w of l's RateLimit-Policy item (see the package
// doc), and false for calendar months, which have q alone. It computes in
// 128 bits, without allocating, as a response may write its item afresh:
// count and burst times a period in ns pass 64 bits.
func quota(l rate.Limit) (q, w int64, ok bool) {
	capacity := l.Capacity()
	if l.Calendar == rate.Month {
		return sfInteger(capacity), 0, false
	}
	if l.Count < 1 || l.Period <= 0 || capacity < 1 {
		// Not a valid limit: say what it holds, over the least window.
		return sfInteger(max(capacity, 1)), 1, true
	}
	count, period := uint64(l.Count), uint64(l.Period)
	// The capacity comes back in period × capacity / count (ns).
	back, rem, fits := mulDiv(period, uint64(capacity), count)
	switch {
	case fits && rem == 0 && back%second == 0 && back/second <= maxSFInteger:
		return sfInteger(capacity), int64(back / second), true
	case period%second == 0 && capacity <= l.Count:
		return sfInteger(l.Count), int64(period / second), true
	}
	// The least whole seconds, at least 1, in which the capacity comes
	// back. Where no such w fits a Structured Field, the largest one
	// understates the rate.
	w = maxSFInteger
	if fits {
		ws := back / second
		if back%second != 0 || rem != 0 {
			ws++
		}
		w = max(1, min(int64(ws), maxSFInteger))
	}
	// ⌊count × w s / period⌋ is at least capacity, as w s is at least
	// the time it comes back in (unless w was cut short above).
	return max(1, int64(min(mulMulDiv(count, uint64(w), second, period), maxSFInteger))), w, true
}

// mulMulDiv returns ⌊a × b × c / d⌋, or the largest uint64 if that does
// not fit 64 bits: the product takes up to 192 bits, divided a word at a
// time. d must not be 0.
func mulMulDiv(a, b, c, d uint64) uint64 {
	xh, xl := bits.Mul64(a, b)
	// (xh, xl) × c = (p2, p1, p0).
	h0, p0 := bits.Mul64(xl, c)
	h1, l1 := bits.Mul64(xh, c)
	p1, carry := bits.Add64(l1, h0, 0)
	p2 := h1 + carry
	if p2 >= d {
		return ^uint64(0)
	}
	q1, r := bits.Div64(p2, p1, d)
	if q1 != 0 {
		return ^uint64(0)
	}
	q0, _ := bits.Div64(r, p0, d)
	return q0
}

// mulDiv returns ⌊a × b / c⌋ and its remainder, and false if the quotient
// does not fit 64 bits. c must not be 0.
func mulDiv(a, b, c uint64) (q, rem uint64, fits bool) {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return 0, 0, false
	}
	q, rem = bits.Div64(hi, lo, c)
	return q, rem, true
}
