package rate

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Calendar says whether a limit's windows follow the calendar rather than a
// fixed Period. The zero value, NoCalendar, uses Period.
type Calendar uint8

const (
	// NoCalendar: windows are Period long, aligned to the Unix epoch.
	NoCalendar Calendar = iota
	// Month: windows are UTC calendar months (fixed_window only).
	Month
)

// MaxExact bounds the products the algorithms compute: Count and Burst
// times Period in microseconds, for the algorithms that weigh time against
// counts (gcra, token_bucket, leaky_bucket, sliding_window). Keeping them
// at most 2^52 keeps every intermediate value an exact integer both in Go and
// in the float64 numbers of Redis's Lua, so the two stores agree to the
// last token. It allows, for example, 52,000 per day or 1.2 million per
// hour; larger daily quotas belong in a fixed_window.
const MaxExact = 1 << 52

// MaxLogCount bounds a sliding_log's Count: it keeps one timestamp per
// admitted unit, so its memory per key grows with Count: in the memory
// store about 9.5 bytes a unit of it (about 600 KiB a key at
// MaxLogCount); in Redis 16 bytes a run of units admitted in one µs.
const MaxLogCount = 1 << 16

// Limit says how much a key may do: Count requests (units of cost) per
// Period, decided by Algorithm, with up to Burst at once for the algorithms
// that have a bucket.
//
// The zero value is not a valid limit; build one with a composite literal
// or [ParseLimit] and check it with [Limit.Validate]. A Limit is a small
// value: copy it freely.
type Limit struct {
	// Algorithm decides requests; the zero value is GCRA.
	Algorithm Algorithm
	// Count is how many units pass per Period. It must be at least 1.
	Count int64
	// Period is the length of the window, or the time over which a bucket
	// refills Count units. It must be a whole number of microseconds, and
	// zero when Calendar is Month.
	Period time.Duration
	// Burst is the capacity of gcra, token_bucket and leaky_bucket: how many
	// units can pass at once after a quiet spell, the first included (for
	// leaky_bucket, the places of its queue, the one served now among them).
	// NGINX's limit_req burst=N counts only the requests beyond the one
	// served, so it is Burst N+1, and NGINX's no burst is Burst 1 (see
	// docs/nginx.md). Zero means Count, not 1. The window algorithms have
	// no burst and require zero.
	Burst int64
	// Calendar makes the windows of a fixed_window limit UTC calendar months.
	Calendar Calendar
}

// Capacity returns the most units a single request can cost and still pass:
// Burst (or Count when Burst is zero) for the bucket algorithms, Count for
// the window algorithms.
func (l Limit) Capacity() int64 {
	if l.Algorithm.HasBurst() && l.Burst > 0 {
		return l.Burst
	}
	return l.Count
}

// Share returns one instance's share of l, for n instances that each
// decide alone (a fallback while a shared store is down). Together the n
// shares admit what l admits as nearly as whole units allow and, where
// they cannot match it, less rather than more, but for the cases said
// below. A share is valid; n below 2 returns l, and so does an l that is
// not valid, so that deciding with it reports why.
//
// gcra, token_bucket and leaky_bucket: a share refills at exactly 1/n of
// l's rate, Count per n×Period with the fraction reduced (on 4 instances
// 10/s is 5 per 2s, 5/m is 5 per 4m, 1/s is 1 per 4s), and holds Burst/n
// rounded up, at least 1 (Burst 0 counting as Count): that is its
// capacity, the Decision.Limit it reports. In any span of time D the
// fleet admits at most n×⌈Burst/n⌉ + D×Count/Period: what l admits, plus
// at most n−1 units once, however long the outage lasts. Where Count or
// Burst times n×Period would pass Validate's bound of 2^52 µs, the
// fraction is reduced to its lowest terms (1000000/h on 3 instances is 1
// per 10.8ms); if even that passes it, the rate is rounded down to one
// that fits: by less than a millionth, unless ⌈Burst/n⌉ leaves the
// share's period no room to be twice as long. Only if 1 per
// ⌈n×Period/Count⌉ does not fit either (Count below n, and a period of
// decades or a vast n) does a share refill faster than 1/n of l, at the
// slowest rate valid: 1 per 2^52 µs/⌈Burst/n⌉.
//
// fixed_window, sliding_window and sliding_log: a share keeps l's windows
// and gets ⌊Count/n⌋ units. The fleet never admits more than Count in one
// window (fixed_window) or in any Period (sliding_log), nor do the
// instances' counts summed take sliding_window's estimate past Count; it
// admits up to n−1 units a window fewer than l, more if traffic is spread
// unevenly. (Windows n times as long would admit l's rate on average, but
// up to n×Count in one window.) Where Count is below n, a share gets 1
// unit per k windows, k = ⌈n/Count⌉, a Period of k×Period: the fleet
// admits at most n ≤ k×Count in each of those, no more than l admits in
// the k windows, but up to n in one of them, as any split into whole
// units must. Two cases admit more: a monthly limit with Count below n
// gives each instance 1 a month (a calendar month cannot be stretched),
// so the fleet up to n; and k×Period is capped at 2^52 µs (142 years).
func (l Limit) Share(n int64) Limit {
	if n <= 1 || l.Validate() != nil {
		return l
	}
	if l.Algorithm.HasBurst() {
		return l.shareBucket(n)
	}
	if l.Count >= n || l.Calendar == Month {
		l.Count = max(1, l.Count/n)
		return l
	}
	t := l.periodMicros()
	k := min((n-1)/l.Count+1, MaxExact/t) // ⌈n/Count⌉ windows, capped
	l.Count, l.Period = 1, dur(k*t)
	return l
}

// shareBucket is Share for the bucket algorithms, for a valid l and n ≥ 2.
func (l Limit) shareBucket(n int64) Limit {
	b := (l.burst()-1)/n + 1 // ⌈B/n⌉
	t := l.periodMicros()
	// Count/(n·T) per µs is c/(m·T) in lower terms, and c/h per m·(T/h)
	// µs in the lowest. The first keeps Count where it can, for a share
	// that reads as l does.
	g := gcd(l.Count, n)
	c, m := l.Count/g, n/g
	h := gcd(c, t)
	for _, d := range [2]int64{1, h} {
		if p := t / d; m <= MaxExact/p && max(c/d, b) <= MaxExact/(m*p) {
			return l.bucketShare(c/d, m*p, b)
		}
	}
	// Rounded down: x per ⌈x·n·T/Count⌉ µs, at most Count/(n·T), for the
	// largest count x that fits with that period. A larger x takes a
	// period no shorter, so once x does not fit no larger one does: the
	// largest is found by bisection, below the c/h that did not fit.
	c, t = c/h, t/h
	fits := func(x int64) (int64, bool) {
		p, ok := mulMulDivCeil(uint64(x), uint64(m), uint64(t), uint64(c))
		return int64(p), ok && p <= uint64(MaxExact/max(x, b))
	}
	lo, hi := int64(0), c // fits(lo) or lo == 0; !fits(hi)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if _, ok := fits(mid); ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	if p, ok := fits(lo); lo > 0 && ok {
		// Where a microsecond holds many units, the largest count can
		// need a period a microsecond longer than a slightly smaller
		// count does: ⌊(p−1)·c/(m·t)⌋ per p−1 µs, which fits as well,
		// may be faster.
		if q, ok := mulDivDivFloor(uint64(p-1), uint64(c), uint64(t), uint64(m)); ok && p > 1 {
			x := int64(q)
			h1, l1 := bits.Mul64(uint64(x), uint64(p))
			h2, l2 := bits.Mul64(uint64(lo), uint64(p-1))
			if h1 > h2 || h1 == h2 && l1 > l2 { // x/(p−1) > lo/p
				return l.bucketShare(x, p-1, b)
			}
		}
		return l.bucketShare(lo, p, b)
	}
	// Not even 1 unit fits: the slowest rate a burst of b allows.
	return l.bucketShare(1, MaxExact/b, b)
}

// bucketShare returns l's algorithm with count per period µs and a burst
// of b, written as Burst 0 when it is the count.
func (l Limit) bucketShare(count, period, b int64) Limit {
	if b == count {
		b = 0
	}
	return Limit{Algorithm: l.Algorithm, Count: count, Period: dur(period), Burst: b}
}

// mulMulDivCeil returns ⌈a·b·c/d⌉ for d > 0, and false if it is 2^64 or
// more.
func mulMulDivCeil(a, b, c, d uint64) (uint64, bool) {
	h1, l1 := bits.Mul64(a, b)
	h2, l2 := bits.Mul64(l1, c)
	h3, l3 := bits.Mul64(h1, c)
	hi, carry := bits.Add64(h2, l3, 0)
	if h3 != 0 || carry != 0 || hi >= d {
		return 0, false
	}
	q, r := bits.Div64(hi, l2, d)
	if r != 0 {
		if q == math.MaxUint64 {
			return 0, false
		}
		q++
	}
	return q, true
}

// mulDivDivFloor returns ⌊a·b/(d·e)⌋ for d, e > 0, and false if it is
// 2^64 or more. a·b/d may pass 2^64 where the result does not: it is kept
// in 128 bits, as ⌊⌊a·b/d⌋/e⌋ is ⌊a·b/(d·e)⌋.
func mulDivDivFloor(a, b, d, e uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	qh := hi / d
	ql, _ := bits.Div64(hi%d, lo, d)
	if qh >= e {
		return 0, false
	}
	q, _ := bits.Div64(qh, ql, e)
	return q, true
}

// gcd returns the greatest common divisor of a, b > 0.
func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// periodMicros returns Period in microseconds.
func (l *Limit) periodMicros() int64 { return int64(l.Period / time.Microsecond) }

// Validate reports why l cannot be used, or nil. Its errors are sentences
// a user can act on.
func (l Limit) Validate() error {
	if int(l.Algorithm) >= numAlgorithms {
		return fmt.Errorf("invalid algorithm %d", l.Algorithm)
	}
	if l.Count < 1 {
		return fmt.Errorf("count must be at least 1, got %d", l.Count)
	}
	if l.Burst < 0 {
		return fmt.Errorf("burst must not be negative (0 means the count), got %d", l.Burst)
	}
	if l.Burst != 0 && !l.Algorithm.HasBurst() {
		return fmt.Errorf("%s has no burst (got burst %d); use token_bucket, gcra or leaky_bucket for bursts", l.Algorithm, l.Burst)
	}
	switch l.Calendar {
	case NoCalendar:
	case Month:
		if l.Algorithm != FixedWindow {
			return fmt.Errorf("monthly limits are UTC calendar months and need fixed_window, not %s", l.Algorithm)
		}
		if l.Period != 0 {
			return fmt.Errorf("a monthly limit has no period (got %v)", l.Period)
		}
		if l.Count > MaxExact {
			return errCountTooLarge(l.Count)
		}
		return nil
	default:
		return fmt.Errorf("invalid calendar %d", l.Calendar)
	}
	if l.Period <= 0 {
		return fmt.Errorf("period must be positive, got %v", l.Period)
	}
	if l.Period%time.Microsecond != 0 {
		return fmt.Errorf("period %v is not a whole number of microseconds", l.Period)
	}
	if l.InBounds() {
		return nil
	}
	// Past the bounds: say which one.
	if l.periodMicros() > MaxExact {
		return fmt.Errorf("period %v %w", l.Period, errTooLong)
	}
	switch l.Algorithm {
	case FixedWindow:
		return errCountTooLarge(l.Count)
	case SlidingLog:
		return fmt.Errorf("sliding_log keeps one timestamp per unit, so its count is at most %d (got %d); use sliding_window for larger limits", MaxLogCount, l.Count)
	}
	return l.tooLarge()
}

// errCountTooLarge is the error for a fixed_window's count past MaxExact.
func errCountTooLarge(count int64) error {
	return fmt.Errorf("count %d is too large (at most 2^52, %d)", count, int64(MaxExact))
}

// tooLarge is Validate's error for a limit of an algorithm that weighs
// time against counts whose count or burst, or both, times its period in
// µs passes MaxExact, for a period that does not. It names the numbers
// that do, since the user may have written either, and the most they may
// be at that period. It advises a fixed_window and a shorter period only
// where they would be accepted: a fixed_window takes a count up to 2^52
// whatever its period, and a shorter period fits where a microsecond
// holds at most 2^52 units of the rate.
func (l Limit) tooLarge() error {
	t := l.periodMicros()
	most := MaxExact / t
	var b strings.Builder
	switch {
	case l.Count > most && l.Burst > most:
		fmt.Fprintf(&b, "count %d and burst %d are too large", l.Count, l.Burst)
	case l.Count > most:
		fmt.Fprintf(&b, "count %d is too large", l.Count)
	default:
		fmt.Fprintf(&b, "burst %d is too large", l.Burst)
	}
	bound := "count and burst"
	if !l.Algorithm.HasBurst() {
		bound = "its count"
	}
	fmt.Fprintf(&b, " for %s with a period of %s: %s times the period in microseconds (%d) must be at most 2^52, for exact arithmetic, so ",
		l.Algorithm, formatPeriod(l.Period), bound, t)
	switch {
	case l.Count > most && l.Burst > most:
		fmt.Fprintf(&b, "each is at most %d", most)
	case l.Count > most:
		fmt.Fprintf(&b, "the count is at most %d", most)
	default:
		fmt.Fprintf(&b, "the burst is at most %d", most)
	}
	if l.Count > most {
		if quota := (Limit{Algorithm: FixedWindow, Count: l.Count, Period: l.Period}); quota.Validate() == nil {
			fmt.Fprintf(&b, "; for a quota, use %s", quota)
		}
		if t > 1 && l.Count/t <= MaxExact {
			fmt.Fprintf(&b, "; for a rate, state it over a shorter period (this one is %.4g per second)", float64(l.Count)/l.Period.Seconds())
		}
	}
	return errors.New(b.String())
}

// InBounds reports whether the numbers of l are within the bounds
// Validate puts on them: Count and Burst times the period in µs within
// MaxExact, for the algorithms that weigh time against counts; for the
// window algorithms, the period alone within MaxExact µs, a fixed_window's
// Count within MaxExact and a sliding_log's within MaxLogCount. Past them
// the steps' products wrap, so that a limit meant to admit refuses
// everything, and a sliding_log keeps a timestamp for each of millions of
// units a key.
//
// It is the part of Validate for stores that check the rest of a limit's
// form on every decision, cheaply (store/memory): it multiplies where
// Validate would divide, and is small enough to be inlined. It assumes the
// rest of l valid: a known algorithm, a burst only where it has one, no
// Calendar, and a positive whole number of microseconds.
func (l *Limit) InBounds() bool {
	// Period is a whole number of microseconds: n × Period in ns is within
	// MaxExact µs exactly when n × period in µs is.
	hi, lo := bits.Mul64(uint64(max(l.Count, l.Burst)), uint64(l.Period))
	return hi == 0 && lo <= maxExactNanos && (l.Algorithm != SlidingLog || l.Count <= MaxLogCount) ||
		uint64(l.Period) <= maxExactNanos &&
			(l.Algorithm == FixedWindow && l.Count <= MaxExact ||
				l.Algorithm == SlidingLog && l.Count <= MaxLogCount)
}

// maxExactNanos is MaxExact µs in ns.
const maxExactNanos = MaxExact * uint64(time.Microsecond)

// String returns l in the form ParseLimit reads, algorithm first:
// "gcra 20/s burst 40", "fixed_window 10000/month", "sliding_log 3 per 7s".
func (l Limit) String() string {
	return l.Algorithm.String() + " " + l.RateString()
}

// StateName names what a key's state under l means: two limits with one
// StateName read each other's states as their own, and limits with
// different ones must keep their states apart (sluice.Limiter keys them by it).
// A window algorithm's (fixed_window, calendar months included,
// sliding_window, sliding_log) is its algorithm and window, such as
// "fixed_window per 1d" or "fixed_window per month": its state is what
// its windows admitted, whatever the count, so a quota lowered from 10000
// to 5000 after 9000 were used refuses the rest of the window rather than
// grant 5000 more. A bucket's state (gcra's theoretical arrival time, a
// token or leaky bucket's level) is measured in its rate and burst, and
// means another thing under others: its StateName is the whole limit, as
// String writes it, with a Burst equal to its Count left out (see Same).
func (l Limit) StateName() string {
	if l.Algorithm.HasBurst() {
		if l.Burst == l.Count {
			l.Burst = 0
		}
		return l.String()
	}
	window := "month"
	if l.Calendar == NoCalendar {
		window = formatPeriod(l.Period)
	}
	return l.Algorithm.String() + " per " + window
}

// RateString returns l without its algorithm: "20/s burst 40",
// "10000/month", "3 per 7s".
func (l Limit) RateString() string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(l.Count, 10))
	switch {
	case l.Calendar == Month:
		b.WriteString("/month")
	case l.Period == time.Second:
		b.WriteString("/s")
	case l.Period == time.Minute:
		b.WriteString("/m")
	case l.Period == time.Hour:
		b.WriteString("/h")
	case l.Period == 24*time.Hour:
		b.WriteString("/d")
	default:
		b.WriteString(" per ")
		b.WriteString(formatPeriod(l.Period))
	}
	if l.Burst != 0 {
		b.WriteString(" burst ")
		b.WriteString(strconv.FormatInt(l.Burst, 10))
	}
	return b.String()
}

// formatPeriod writes whole days as "2d" and everything else as
// time.Duration does.
func formatPeriod(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	if d > day {
		return strconv.FormatInt(int64(d/day), 10) + "d" + (d % day).String()
	}
	return d.String()
}

// ErrSyntax is wrapped by every error ParseLimit returns for text it cannot
// read.
var ErrSyntax = errors.New("invalid limit")

// ParseLimit reads a limit as people write it:
//
//	10/s  100/m  1000/h  5000/d  10000/month
//	10 per 10s  3 per 7s  100 per 1m30s  5 per 2d
//	20/s burst 40
//	token_bucket 20/s burst 40
//
// An optional algorithm name comes first (default gcra). After "/" comes
// a unit: s, m (minute), h, d or month, also spelt sec, second, min,
// minute, hour, day, mo (and their plurals), or ms or us; or a duration
// that starts with its number, as after "per": 10/10s is 10 per 10s, but
// 10/h30m is an error. After "per" comes a duration such as 10s, 1m30s or
// 2d (days, then optionally a Go duration: 1d12h), written as one word,
// or a unit as after "/": 60 per minute. Counts and bursts are whole
// numbers written in digits, which single underscores may group (1_000).
// A monthly limit is a fixed_window over UTC calendar months:
// "10000/month" means fixed_window even without the name. So is a limit
// per whole days with no algorithm named and no burst, over UTC days (N
// days aligned to the Unix epoch): "1000/d" is a daily quota, as a policy
// file reads it; "gcra 1000/d" is the bucket. The result is validated.
func ParseLimit(s string) (Limit, error) {
	fields := strings.Fields(strings.ReplaceAll(s, "/", " / "))
	var l Limit
	fail := func(format string, args ...any) (Limit, error) {
		return Limit{}, fmt.Errorf("%w %q: %s", ErrSyntax, s, fmt.Sprintf(format, args...))
	}
	if len(fields) == 0 {
		return fail("empty; write e.g. 10/s, 10 per 10s or 20/s burst 40")
	}
	explicit := false
	if a, err := ParseAlgorithm(fields[0]); err == nil {
		l.Algorithm, explicit = a, true
		fields = fields[1:]
	} else if fields[0] != "" && (fields[0][0] < '0' || fields[0][0] > '9') && fields[0][0] != '-' {
		return fail("%q is neither a count nor an algorithm (write e.g. 10/s or token_bucket 10/s; algorithms: fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra)", fields[0])
	}
	if len(fields) < 3 {
		return fail("want COUNT/UNIT or COUNT per DURATION, e.g. 10/s or 10 per 10s")
	}
	count, err := parseCount(fields[0])
	if err != nil {
		return fail("count: %v", err)
	}
	l.Count = count
	switch u := fields[2]; fields[1] {
	case "/", "per":
		if isMonth(u) {
			l.Calendar = Month
			break
		}
		d, ok := unitDuration(u)
		switch {
		case ok:
		case isLetters(u):
			// A unit of Go's (10/ms is 10 per 1ms), but not one with a
			// number inside: 10/h30m is neither 10/h nor 10 per 1h30m.
			if d, err = parsePeriod("1" + u); err != nil {
				return fail("unknown unit %q (want s, m, h, d, month or a duration like 10s)", u)
			}
		default:
			if d, err = parsePeriod(u); err != nil {
				if len(fields) > 3 && isDigits(u) && isLetters(fields[3]) {
					// 10 per 2 seconds: the number and its unit apart.
					return fail("period %q: write the number and its unit as one word, e.g. %s per %s%s", strings.Join(fields[2:4], " "), fields[0], u, shortUnit(fields[3]))
				}
				if fields[1] == "/" && !errors.Is(err, errTooLong) {
					return fail("unknown unit %q (want s, m, h, d, month or a duration like 10s)", u)
				}
				return fail("period: %v", err)
			}
		}
		l.Period = d
	default:
		return fail("want / or per after the count, got %q", fields[1])
	}
	rest := fields[3:]
	if len(rest) > 0 {
		if rest[0] != "burst" || len(rest) != 2 {
			return fail("unexpected %q; only \"burst N\" may follow the rate", strings.Join(rest, " "))
		}
		b, err := parseCount(rest[1])
		if err != nil {
			return fail("burst: %v", err)
		}
		if b < 1 {
			return fail("burst must be at least 1, got %d", b)
		}
		l.Burst = b
	}
	const day = 24 * time.Hour
	switch {
	case explicit:
	case l.Calendar == Month:
		l.Algorithm = FixedWindow
	case l.Burst == 0 && l.Period >= day && l.Period%day == 0:
		// A quota per day, or per N days: a window, not a bucket that
		// refills a unit every 86.4s of a thousand a day.
		l.Algorithm = FixedWindow
	}
	if err := l.Validate(); err != nil {
		return Limit{}, fmt.Errorf("%w %q: %w", ErrSyntax, s, err)
	}
	return l, nil
}

// MustParseLimit is ParseLimit for limits written in a program's source,
// in package-level variables and tests: it panics if s does not parse.
func MustParseLimit(s string) Limit {
	l, err := ParseLimit(s)
	if err != nil {
		panic("rate: MustParseLimit: " + err.Error())
	}
	return l
}

// parseCount reads a count or a burst: digits, which single underscores
// may group (1_000), or a negative number, refused as below 1.
func parseCount(s string) (int64, error) {
	if !validCount(s) {
		return 0, fmt.Errorf("%q is not a whole number", s)
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return 0, fmt.Errorf("%s is too large", s)
		}
		return 0, fmt.Errorf("%q is not a whole number", s)
	}
	if n < 1 {
		return 0, fmt.Errorf("must be at least 1, got %d", n)
	}
	return n, nil
}

// validCount reports whether s is digits, with an optional leading minus,
// where every underscore stands between two digits.
func validCount(s string) bool {
	s = strings.TrimPrefix(s, "-")
	for i := range len(s) {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
		case c == '_' && i > 0 && i < len(s)-1 && s[i-1] != '_' && s[i+1] != '_':
		default:
			return false
		}
	}
	return s != ""
}

// isMonth reports whether u names a calendar month.
func isMonth(u string) bool { return u == "month" || u == "months" || u == "mo" }

// isLetters reports whether u is letters only (a unit such as ms or µs).
func isLetters(u string) bool {
	for _, r := range u {
		if !unicode.IsLetter(r) {
			return false
		}
	}
	return u != ""
}

// shortUnit returns the letter that abbreviates unit u, or s if u is none
// of s, m, h and d.
func shortUnit(u string) string {
	switch d, _ := unitDuration(u); d {
	case time.Minute:
		return "m"
	case time.Hour:
		return "h"
	case 24 * time.Hour:
		return "d"
	}
	return "s"
}

// isDigits reports whether u is ASCII digits only.
func isDigits(u string) bool {
	for i := range len(u) {
		if u[i] < '0' || u[i] > '9' {
			return false
		}
	}
	return u != ""
}

func unitDuration(u string) (time.Duration, bool) {
	switch u {
	case "s", "sec", "secs", "second", "seconds":
		return time.Second, true
	case "m", "min", "mins", "minute", "minutes":
		return time.Minute, true
	case "h", "hr", "hrs", "hour", "hours":
		return time.Hour, true
	case "d", "day", "days":
		return 24 * time.Hour, true
	}
	return 0, false
}

// errTooLong is parsePeriod's error for a period past the longest a limit
// may have, MaxExact µs (2^52 µs, a little over 52124 days).
var errTooLong = errors.New("is too long (at most 2^52µs, about 52124d)")

// parsePeriod reads a Go duration that may also use d for days: 10s, 1m30s,
// 2d, 1d12h.
func parsePeriod(text string) (time.Duration, error) {
	s := text
	var days int64
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("invalid duration %q", text)
		}
		if n > int64(MaxExact/(24*time.Hour/time.Microsecond)) {
			return 0, fmt.Errorf("%s %w", text, errTooLong)
		}
		days, s = n, s[i+1:]
		if s == "" {
			return time.Duration(days) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	// After the days, a negative duration (1d-12h) is refused, as
	// ParseDuration refuses 1h-30m, and so is a sum past the largest
	// Duration, which would wrap.
	if err != nil || days > 0 && d < 0 {
		return 0, fmt.Errorf("invalid duration %q", text)
	}
	if days > 0 && d > math.MaxInt64-time.Duration(days)*24*time.Hour {
		return 0, fmt.Errorf("%s %w", text, errTooLong)
	}
	return time.Duration(days)*24*time.Hour + d, nil
}
