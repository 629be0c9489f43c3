package retry

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// maxSeconds is the largest whole number of seconds a time.Duration holds.
const maxSeconds = math.MaxInt64 / int64(time.Second)

// unixThreshold separates the two readings of X-RateLimit-Reset: a value
// above it (about September 2001 as a Unix time, or 31 years as a delay)
// can only sensibly be an absolute Unix time.
const unixThreshold = 1_000_000_000

// ParseRetryAfter interprets a Retry-After field value (RFC 9110 §10.2.3)
// received at now, and reports how long the server asked the client to
// wait. ok is false when the value is empty or not valid, in which case
// the caller should fall back to its own backoff.
//
// Both forms are accepted: delta-seconds ("120") and an HTTP-date, in any
// of its three formats as RFC 9110 §5.6.7 writes them, or as an
// IMF-fixdate whose zone is UTC, UT, +0000 or -0000 where GMT belongs
// (what time.RFC1123 and time.RFC1123Z write for a UTC time), which all
// mean GMT; an IMF-fixdate in any other zone is invalid. The obsolete
// rfc850-date is valid only in GMT, as the RFC allows: http.ParseTime also
// takes it in other zones, whose offsets it looks up in the local zone, so
// that the same value would give another wait on another machine. A date
// is measured from now, and one in the past yields 0. The RFC measures it
// from the response, so when the response carries a valid Date, pass that
// as now (Transport does): the wait is then the one the server meant,
// however far the client's clock is from the server's.
//
// A decimal number of seconds ("1.5"), which the RFC does not allow but
// some servers send, is read as the wait it plainly means, rounded up to
// the nanosecond, never down: taking it for garbage would have the client
// come back sooner than asked. Signs, exponents and other garbage are
// invalid. A number of seconds too large for a time.Duration is not an
// error: following the rule RFC 9111 §1.2.2 gives for delta-seconds, it
// saturates to the largest Duration, so a server asking for "forever" is
// read as asking for more than any cap rather than being ignored.
func ParseRetryAfter(value string, now time.Time) (wait time.Duration, ok bool) {
	v := strings.Trim(value, " \t")
	if v == "" {
		return 0, false
	}
	if n, ok := parseDigits(v); ok {
		return seconds(n), true
	}
	if d, ok := parseDecimalSeconds(v); ok {
		return d, true
	}
	t, ok := parseHTTPDate(v)
	if !ok {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// httpDateLayouts are the three formats of an HTTP-date (RFC 9110
// §5.6.7) as it writes them: IMF-fixdate, and the obsolete rfc850-date and
// asctime-date. Each names its zone, GMT, as a literal or not at all, so
// time.Parse reads it in UTC. http.ParseTime is not used: its rfc850-date
// layout takes any zone name, which time.Parse resolves in the machine's
// local zone (EST is five hours off GMT in New York, and none where EST
// is unknown), so the same field would ask for a different wait on every
// machine.
var httpDateLayouts = []string{
	http.TimeFormat,                  // Sun, 06 Nov 1994 08:49:37 GMT
	"Monday, 02-Jan-06 15:04:05 GMT", // Sunday, 06-Nov-94 08:49:37 GMT
	time.ANSIC,                       // Sun Nov  6 08:49:37 1994
}

// utcZones are the zones that, written in place of GMT at the end of an
// IMF-fixdate, mean GMT all the same: what time.RFC1123 writes for a UTC
// time ("UTC"), RFC 5322's "UT", and what time.RFC1123Z writes ("+0000",
// or "-0000" for "no offset known").
var utcZones = []string{" UTC", " UT", " +0000", " -0000"}

// parseHTTPDate parses an HTTP-date (RFC 9110 §5.6.7): one of
// httpDateLayouts, or an IMF-fixdate whose zone is one of utcZones.
// Servers that format dates with time.RFC1123 or RFC1123Z send those, and
// the RFC asks recipients to read dates robustly. No other zone is taken,
// in an IMF-fixdate or an obsolete form: the offset of an abbreviation
// such as EST Go's parser would have to guess, and an offset such as
// +0100 no HTTP server should send.
func parseHTTPDate(v string) (time.Time, bool) {
	for _, layout := range httpDateLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return t, true
		}
	}
	for _, z := range utcZones {
		if rest, ok := strings.CutSuffix(v, z); ok {
			// No zone in the layout: time.Parse then reads UTC.
			t, err := time.Parse("Mon, 02 Jan 2006 15:04:05", rest)
			return t, err == nil
		}
	}
	return time.Time{}, false
}

// Quota is one rate-limit quota a server reported in a response.
type Quota struct {
	// Policy is the name of the quota policy from the RateLimit field,
	// or "" for the X-RateLimit-* fields.
	Policy string
	// Remaining is the number of requests the server will still accept
	// before Reset; never negative.
	Remaining int64
	// Reset is the time until more quota becomes available; never negative.
	Reset time.Duration
}

// ParseRateLimit extracts the quotas a response's header reports at now.
// It reads two vocabularies and returns the quotas of both:
//
//   - RateLimit and RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers-10),
//     Structured Field Lists such as
//     RateLimit: "burst";r=5;t=1, "daily";r=900;t=3600 and
//     RateLimit-Policy: "burst";q=100;w=60. Each RateLimit item with an r
//     gives a Quota. When t is missing, the w of the policy of the same
//     name stands in for it; an item with neither is skipped, since a
//     quota with no known reset cannot be paced. Items whose policy counts
//     something other than requests (qu other than "requests") are skipped.
//   - X-RateLimit-Remaining and X-RateLimit-Reset, the older convention.
//     Reset is read as delta-seconds, or as a Unix time when it is larger
//     than 10^9 (no delay that long is plausible, and many servers send
//     the absolute form).
//
// A field that is malformed is ignored as a whole, as RFC 9651 requires;
// ParseRateLimit never panics and never returns negative values. It
// returns nil when the response reports no usable quota.
func ParseRateLimit(h http.Header, now time.Time) []Quota {
	var quotas []Quota

	type policy struct {
		window    int64
		hasWindow bool
		requests  bool
	}
	policies := map[string]policy{}
	if items, ok := parseSFList(strings.Join(h.Values("RateLimit-Policy"), ",")); ok {
		for _, it := range items {
			name, ok := it.name()
			if !ok {
				continue
			}
			if q, ok := it.param("q"); !ok || q.kind != sfInteger || q.i < 0 {
				continue // the draft makes q required
			}
			pol := policy{requests: true}
			if w, ok := it.param("w"); ok && w.kind == sfInteger && w.i >= 0 {
				pol.window, pol.hasWindow = w.i, true
			}
			if qu, ok := it.param("qu"); ok && (qu.kind != sfString || qu.s != "requests") {
				pol.requests = false
			}
			policies[name] = pol
		}
	}
	if items, ok := parseSFList(strings.Join(h.Values("RateLimit"), ",")); ok {
		for _, it := range items {
			name, ok := it.name()
			if !ok {
				continue
			}
			r, ok := it.param("r")
			if !ok || r.kind != sfInteger || r.i < 0 {
				continue
			}
			pol, known := policies[name]
			if known && !pol.requests {
				continue
			}
			var reset int64
			if t, ok := it.param("t"); ok && t.kind == sfInteger && t.i >= 0 {
				reset = t.i
			} else if known && pol.hasWindow {
				reset = pol.window
			} else {
				continue
			}
			quotas = append(quotas, Quota{Policy: name, Remaining: r.i, Reset: seconds(reset)})
		}
	}

	remaining, okR := parseDigits(strings.Trim(h.Get("X-RateLimit-Remaining"), " \t"))
	reset, okT := parseDigits(strings.Trim(h.Get("X-RateLimit-Reset"), " \t"))
	if okR && okT {
		d := seconds(reset)
		if reset > unixThreshold {
			// time.Unix wraps for values far beyond any real date; 2^40
			// seconds is some 35,000 years, already past any Duration.
			if reset > 1<<40 {
				d = math.MaxInt64
			} else {
				d = max(time.Unix(reset, 0).Sub(now), 0)
			}
		}
		quotas = append(quotas, Quota{Remaining: remaining, Reset: d})
	}
	return quotas
}

// parseDigits parses a non-empty run of ASCII digits, saturating at
// math.MaxInt64 instead of overflowing.
func parseDigits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isDigit(c) {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			n = math.MaxInt64
			continue // keep validating the rest
		}
		n = n*10 + d
	}
	return n, true
}

// parseDecimalSeconds parses digits, a dot and digits as a number of
// seconds, rounding up to the nanosecond and saturating at the largest
// Duration.
func parseDecimalSeconds(s string) (time.Duration, bool) {
	whole, frac, found := strings.Cut(s, ".")
	n, ok := parseDigits(whole)
	if !found || !ok || frac == "" {
		return 0, false
	}
	var ns int64 // the first nine digits of the fraction
	up := false  // a non-zero digit past the ninth
	for i := 0; i < len(frac); i++ {
		c := frac[i]
		switch {
		case !isDigit(c):
			return 0, false
		case i < 9:
			ns = ns*10 + int64(c-'0')
		case c != '0':
			up = true
		}
	}
	for i := len(frac); i < 9; i++ {
		ns *= 10
	}
	if up {
		ns++
	}
	return addSat(seconds(n), time.Duration(ns)), true
}

// seconds converts a non-negative number of seconds to a Duration,
// saturating at the largest Duration.
func seconds(n int64) time.Duration {
	if n > maxSeconds {
		return math.MaxInt64
	}
	return time.Duration(n) * time.Second
}
