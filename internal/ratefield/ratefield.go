// Package ratefield writes the RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-10), one item at a time, for every
// part of sluice that answers with them: the HTTP middleware (through
// package policy, which precomputes a limit's parts) and Envoy's rate
// limit service.
//
//	RateLimit-Policy: "per-user";q=20;w=60
//	RateLimit: "per-user";r=0;t=25
package ratefield

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// AppendPolicy appends the RateLimit-Policy item of l, named name:
// `"name";q=Q;w=W`, with q the most units a client may take at once (the
// limit's capacity) and w the whole seconds, rounded up, a full quota
// takes to come back. w is left out for calendar months, which have no
// fixed window.
func AppendPolicy(dst []byte, name string, l rate.Limit) []byte {
	dst = AppendString(dst, name)
	dst = append(dst, ";q="...)
	dst = strconv.AppendInt(dst, sfInteger(l.Capacity()), 10)
	if w, ok := window(l); ok {
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
// '?'.
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

// window returns the seconds a full quota of l takes to come back, and
// false for calendar months.
func window(l rate.Limit) (int64, bool) {
	if l.Calendar == rate.Month {
		return 0, false
	}
	w := l.Period
	if l.Burst > 0 && l.Burst != l.Count {
		// A bucket of Burst refills one unit every Period/Count.
		w = time.Duration(float64(l.Period) * float64(l.Burst) / float64(l.Count))
	}
	// At least 1: the draft's w is a positive integer, and a burst that
	// comes back within a microsecond still takes some of a second.
	return max(1, sfInteger(rate.CeilSeconds(w))), true
}
