package rate

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in   string
		want Limit
		str  string
	}{
		{"10/s", Limit{Count: 10, Period: time.Second}, "gcra 10/s"},
		{"100/m", Limit{Count: 100, Period: time.Minute}, "gcra 100/m"},
		{"1000/h", Limit{Count: 1000, Period: time.Hour}, "gcra 1000/h"},
		{"5000/d", Limit{Algorithm: FixedWindow, Count: 5000, Period: 24 * time.Hour}, "fixed_window 5000/d"},
		{"gcra 5000/d", Limit{Count: 5000, Period: 24 * time.Hour}, "gcra 5000/d"},
		{"10000/month", Limit{Algorithm: FixedWindow, Count: 10000, Calendar: Month}, "fixed_window 10000/month"},
		{"10 per 10s", Limit{Count: 10, Period: 10 * time.Second}, "gcra 10 per 10s"},
		{"3 per 7s", Limit{Count: 3, Period: 7 * time.Second}, "gcra 3 per 7s"},
		{"5 per 2d", Limit{Algorithm: FixedWindow, Count: 5, Period: 48 * time.Hour}, "fixed_window 5 per 2d"},
		{"5 per 1d12h", Limit{Count: 5, Period: 36 * time.Hour}, "gcra 5 per 1d12h0m0s"},
		{"100 per 1m30s", Limit{Count: 100, Period: 90 * time.Second}, "gcra 100 per 1m30s"},
		{"20/s burst 40", Limit{Count: 20, Period: time.Second, Burst: 40}, "gcra 20/s burst 40"},
		{"token_bucket 20/s burst 40", Limit{Algorithm: TokenBucket, Count: 20, Period: time.Second, Burst: 40}, "token_bucket 20/s burst 40"},
		{"sliding_log 3 per 7s", Limit{Algorithm: SlidingLog, Count: 3, Period: 7 * time.Second}, "sliding_log 3 per 7s"},
		{"  10 / second ", Limit{Count: 10, Period: time.Second}, "gcra 10/s"},
		{"60 per minute", Limit{Count: 60, Period: time.Minute}, "gcra 60/m"},
		{"10/10s", Limit{Count: 10, Period: 10 * time.Second}, "gcra 10 per 10s"},
		{"1_000/h", Limit{Count: 1000, Period: time.Hour}, "gcra 1000/h"},
		{"5/ms", Limit{Count: 5, Period: time.Millisecond}, "gcra 5 per 1ms"},
		{"10/2d", Limit{Algorithm: FixedWindow, Count: 10, Period: 48 * time.Hour}, "fixed_window 10 per 2d"},
		{"10 per mo", Limit{Algorithm: FixedWindow, Count: 10, Calendar: Month}, "fixed_window 10/month"},
		{"10/mo", Limit{Algorithm: FixedWindow, Count: 10, Calendar: Month}, "fixed_window 10/month"},
		{"10 per months", Limit{Algorithm: FixedWindow, Count: 10, Calendar: Month}, "fixed_window 10/month"},
		{"10 per ms", Limit{Count: 10, Period: time.Millisecond}, "gcra 10 per 1ms"},
		{"1_000_000/h", Limit{Count: 1_000_000, Period: time.Hour}, "gcra 1000000/h"},
		{"gcra 1 per 52124d", Limit{Count: 1, Period: 52124 * 24 * time.Hour}, "gcra 1 per 52124d"},
	}
	for _, tt := range tests {
		got, err := ParseLimit(tt.in)
		if err != nil {
			t.Errorf("ParseLimit(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseLimit(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
		if got.String() != tt.str {
			t.Errorf("ParseLimit(%q).String() = %q, want %q", tt.in, got.String(), tt.str)
		}
		again, err := ParseLimit(got.String())
		if err != nil || again != got {
			t.Errorf("round trip of %q: %v, %v", got.String(), again, err)
		}
	}
}

func TestParseLimitErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty"},
		{"0/s", "at least 1"},
		{"-5/s", "at least 1"},
		{"10/fortnight", "unknown unit"},
		{"10 per 0s", "period must be positive"},
		{"10 per -1s", "period must be positive"},
		{"10 per 1ns", "whole number of microseconds"},
		// Days and a duration that together pass time.Duration's
		// 292 years, and a negative duration after the days.
		{"1 per 52124d2562047h", "is too long"},
		{"10 per 1d-12h", "invalid duration"},
		{"ten/s", "neither a count nor an algorithm"},
		{"10/s burst 0", "burst: must be at least 1"},
		{"10/s burst", "only \"burst N\""},
		{"10/s bust 4", "only \"burst N\""},
		{"fixed_window 10/s burst 4", "has no burst"},
		{"gcra 10/month", "need fixed_window"},
		{"99999999999999999999/s", "too large"},
		{"gcra 1000000/d", "too large for gcra"},
		{"sliding_log 100000/h", "at most 65536"},
		{"10 fish", "want COUNT/UNIT"},
		{"10 x s", "want / or per"},
		// "/" takes a unit or a duration that starts with its number: a
		// unit followed by more is neither.
		{"10/h30m", "unknown unit \"h30m\""},
		{"10/2month", "unknown unit"},
		// A period's number and unit are one word.
		{"10 per 2 seconds", "write the number and its unit as one word, e.g. 10 per 2s"},
		{"10 per 10 s", "e.g. 10 per 10s"},
		{"10 per 3 minutes", "e.g. 10 per 3m"},
		// Underscores only between digits, and no plus sign.
		{"1__0/s", "not a whole number"},
		{"10_/s", "not a whole number"},
		{"_10/s", "neither a count nor an algorithm"},
		{"10/s burst +5", "burst: \"+5\" is not a whole number"},
		{"10/s burst 1__0", "burst: \"1__0\" is not a whole number"},
		{"1 per 52125d", "52125d is too long"},
	}
	for _, tt := range tests {
		_, err := ParseLimit(tt.in)
		if err == nil {
			t.Errorf("ParseLimit(%q): no error, want one containing %q", tt.in, tt.want)
			continue
		}
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseLimit(%q): %v does not wrap ErrSyntax", tt.in, err)
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseLimit(%q) = %q, want it to contain %q", tt.in, err, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	bad := []Limit{
		{},
		{Count: 1},
		{Count: 1, Period: time.Second, Burst: -1},
		{Algorithm: 99, Count: 1, Period: time.Second},
		{Count: 1, Period: time.Second, Calendar: 7},
		{Algorithm: FixedWindow, Count: 1, Period: time.Second, Calendar: Month},
		{Count: MaxExact, Period: time.Second},
		{Algorithm: FixedWindow, Count: MaxExact + 1, Period: time.Second},
	}
	for _, l := range bad {
		if err := l.Validate(); err == nil {
			t.Errorf("%#v: valid, want an error", l)
		}
	}
	good := []Limit{
		{Count: 1, Period: time.Microsecond},
		{Algorithm: FixedWindow, Count: MaxExact, Period: 24 * time.Hour},
		{Algorithm: SlidingWindow, Count: 52_000, Period: 24 * time.Hour},
		{Algorithm: SlidingLog, Count: MaxLogCount, Period: time.Hour},
	}
	for _, l := range good {
		if err := l.Validate(); err != nil {
			t.Errorf("%#v: %v", l, err)
		}
	}
}

// TestValidateBounds: at each bound Validate puts on a limit's numbers
// the limit is valid, and a unit past it the error names that bound.
func TestValidateBounds(t *testing.T) {
	const us = time.Microsecond
	hour := int64(time.Hour / us)
	tests := []struct {
		l    Limit
		want string // "" for valid
	}{
		{Limit{Count: MaxExact / hour, Period: time.Hour}, ""},
		{Limit{Count: MaxExact/hour + 1, Period: time.Hour}, "too large for gcra"},
		{Limit{Count: 1 << 40, Period: 1 << 24 * us}, "too large for gcra"}, // the product wraps to 0
		{Limit{Algorithm: TokenBucket, Count: 1, Burst: MaxExact / hour, Period: time.Hour}, ""},
		{Limit{Algorithm: TokenBucket, Count: 1, Burst: MaxExact/hour + 1, Period: time.Hour}, "too large for token_bucket"},
		{Limit{Algorithm: SlidingWindow, Count: 1, Period: MaxExact * us}, ""},
		{Limit{Algorithm: SlidingWindow, Count: 2, Period: MaxExact * us}, "too large for sliding_window"},
		{Limit{Algorithm: SlidingWindow, Count: 1, Period: (MaxExact + 1) * us}, "period"},
		{Limit{Algorithm: FixedWindow, Count: MaxExact, Period: MaxExact * us}, ""},
		{Limit{Algorithm: FixedWindow, Count: MaxExact + 1, Period: time.Second}, "count"},
		{Limit{Algorithm: FixedWindow, Count: 1, Period: (MaxExact + 1) * us}, "period"},
		{Limit{Algorithm: SlidingLog, Count: MaxLogCount, Period: MaxExact * us}, ""},
		{Limit{Algorithm: SlidingLog, Count: MaxLogCount + 1, Period: time.Second}, "sliding_log keeps"},
		{Limit{Algorithm: SlidingLog, Count: 1, Period: (MaxExact + 1) * us}, "period"},
		{Limit{Algorithm: FixedWindow, Count: MaxExact, Calendar: Month}, ""},
		{Limit{Algorithm: FixedWindow, Count: MaxExact + 1, Calendar: Month}, "count"},
	}
	for _, tt := range tests {
		err := tt.l.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%v: %v, want valid", tt.l, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%v: %v, want an error about %q", tt.l, err, tt.want)
		}
		if tt.l.Calendar == NoCalendar && tt.l.InBounds() != (err == nil) {
			t.Errorf("%v: InBounds() = %v, Validate() = %v", tt.l, tt.l.InBounds(), err)
		}
	}
}

func TestAlgorithmNames(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range Algorithms() {
		name := a.String()
		if seen[name] {
			t.Fatalf("duplicate name %q", name)
		}
		seen[name] = true
		var b Algorithm
		text, err := a.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.UnmarshalText(text); err != nil || b != a {
			t.Fatalf("%v: round trip gave %v, %v", a, b, err)
		}
	}
	if len(seen) != numAlgorithms {
		t.Fatalf("Algorithms() lists %d of %d", len(seen), numAlgorithms)
	}
	var a Algorithm
	if err := a.UnmarshalText([]byte("token-bucket")); err == nil {
		t.Fatal("token-bucket accepted")
	}
	if a != GCRA {
		t.Fatalf("zero Algorithm is %v, want gcra", a)
	}
}

func TestRequestCheck(t *testing.T) {
	l := Limit{Count: 1, Period: time.Second, Burst: 5}
	if err := (Request{Limit: l, Cost: 5}).Check(); err != nil {
		t.Fatal(err)
	}
	if err := (Request{Limit: l, Cost: 6}).Check(); !errors.Is(err, ErrCostExceedsCapacity) {
		t.Fatalf("cost 6 of 5: %v", err)
	}
	if err := (Request{Limit: l, Cost: -1}).Check(); !errors.Is(err, ErrNegativeCost) {
		t.Fatalf("cost -1: %v", err)
	}
	w := Limit{Algorithm: FixedWindow, Count: 3, Period: time.Second}
	if err := (Request{Limit: w, Cost: 4}).Check(); !errors.Is(err, ErrCostExceedsCapacity) {
		t.Fatalf("window cost 4 of 3: %v", err)
	}
	// The steps need a valid limit: the zero Limit would divide by zero.
	for _, bad := range []Limit{{}, {Count: 1, Period: time.Nanosecond}, {Algorithm: FixedWindow, Count: 3, Period: time.Second, Burst: 5}} {
		err := (Request{Key: "k", Limit: bad}).Check()
		if err == nil || !strings.Contains(err.Error(), "invalid limit") {
			t.Errorf("limit %+v: err = %v, want invalid limit", bad, err)
		}
	}
}

func TestCombine(t *testing.T) {
	perSecond := Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: 100 * time.Millisecond}
	perDay := Decision{Allowed: true, Limit: 1000, Remaining: 3, ResetAfter: time.Hour}
	got := Combine([]Decision{perSecond, perDay})
	if !got.Allowed || got.Remaining != 3 || got.Limit != 1000 || got.ResetAfter != time.Hour {
		t.Fatalf("both allow: %v, want the daily limit reported", got)
	}
	refusedShort := Decision{Limit: 10, RetryAfter: time.Second}
	refusedLong := Decision{Limit: 5, RetryAfter: time.Minute}
	got = Combine([]Decision{perDay, refusedShort, refusedLong})
	if got.Allowed || got.RetryAfter != time.Minute || got.Limit != 5 {
		t.Fatalf("two refusals: %v, want the longer wait", got)
	}
	if i := MostRestrictive([]Decision{perDay, refusedShort}); i != 1 {
		t.Fatalf("MostRestrictive = %d, want the refusal", i)
	}
	if got := Combine(nil); !got.Allowed {
		t.Fatalf("Combine(nil) = %v", got)
	}
	delayed := Decision{Allowed: true, Limit: 4, Delay: 2 * time.Second}
	if got := Combine([]Decision{perSecond, delayed}); got.Delay != 2*time.Second {
		t.Fatalf("delay lost: %v", got)
	}
}

// The longest refusal need not have the least left: Combine's Remaining
// is what passes under every limit.
func TestCombineRemaining(t *testing.T) {
	window := Limit{Algorithm: FixedWindow, Count: 10, Period: time.Minute}
	bucket := Limit{Algorithm: GCRA, Count: 1, Period: time.Second, Burst: 1}
	now := int64(1_700_000_040) * sec // the start of a minute
	sw, _ := window.Step(State{}, now, 7)
	sb, _ := bucket.Step(State{}, now, 1)
	_, dw := window.Step(sw, now, 5) // 7 + 5 > 10: refused until the minute ends
	_, db := bucket.Step(sb, now, 1) // empty: refused for a second
	got := Combine([]Decision{dw, db})
	want := Decision{Limit: 10, Remaining: 0, ResetAfter: time.Minute, RetryAfter: time.Minute}
	if dw.Remaining != 3 || db.Remaining != 0 || got != want {
		t.Fatalf("window %v, bucket %v: combined %v, want %v", dw, db, got, want)
	}
}

func TestCheckGroup(t *testing.T) {
	gcra := Limit{Algorithm: GCRA, Count: 1, Period: time.Second, Burst: 1}
	window := Limit{Algorithm: FixedWindow, Count: 3, Period: time.Hour}
	bucket := Limit{Algorithm: GCRA, Count: 4, Period: time.Second}
	tests := []struct {
		name  string
		reqs  []Request
		never bool
	}{
		{"one key, 1 + 1 of 1", []Request{{Key: "k", Limit: gcra, Cost: 1}, {Key: "k", Limit: gcra, Cost: 1}}, true},
		{"one key, 2 + 2 of 3", []Request{{Key: "w", Limit: window, Cost: 2}, {Key: "w", Limit: window, Cost: 2}}, true},
		{"one key among others, 2 + 2 of 3", []Request{{Key: "w", Limit: window, Cost: 2}, {Key: "b", Limit: bucket, Cost: 1}, {Key: "w", Limit: window, Cost: 2}}, true},
		{"burst 0 is burst 4: 2 + 3 of 4", []Request{{Key: "b", Limit: bucket, Cost: 2}, {Key: "b", Limit: Limit{Count: 4, Period: time.Second, Burst: 4}, Cost: 3}}, true},
		{"one key, 1 + 2 of 3", []Request{{Key: "w", Limit: window, Cost: 1}, {Key: "w", Limit: window, Cost: 2}}, false},
		{"one key, 1 + 1 + 1 + 1 of 4", []Request{{Key: "b", Limit: bucket, Cost: 1}, {Key: "b", Limit: bucket, Cost: 1}, {Key: "b", Limit: bucket, Cost: 1}, {Key: "b", Limit: bucket, Cost: 1}}, false},
		{"two keys, 1 + 1 of 1 each", []Request{{Key: "a", Limit: gcra, Cost: 1}, {Key: "b", Limit: gcra, Cost: 1}}, false},
		{"one key, two limits", []Request{{Key: "k", Limit: gcra, Cost: 1}, {Key: "k", Limit: window, Cost: 3}}, false},
		{"looks", []Request{{Key: "k", Limit: gcra, Cost: 1}, {Key: "k", Limit: gcra}, {Key: "k", Limit: gcra}}, false},
		{"none", nil, false},
	}
	for _, tt := range tests {
		err := CheckGroup(tt.reqs)
		if tt.never && !errors.Is(err, ErrCostExceedsCapacity) {
			t.Errorf("%s: %v, want ErrCostExceedsCapacity", tt.name, err)
		}
		if !tt.never && err != nil {
			t.Errorf("%s: %v, want nil", tt.name, err)
		}
	}
}

// Two requests on one key that cannot pass together, decided as the
// stores decide a group (each on the state the one before it left), are
// refused however long they wait: CheckGroup refuses them up front.
func TestCheckGroupNeverPasses(t *testing.T) {
	l := Limit{Algorithm: GCRA, Count: 1, Period: time.Second, Burst: 1}
	reqs := []Request{{Key: "k", Limit: l, Cost: 1}, {Key: "k", Limit: l, Cost: 1}}
	now := int64(1_700_000_000) * sec
	for range 3 {
		n1, d1 := l.Step(State{}, now, 1)
		_, d2 := l.Step(n1, now, 1)
		d := Combine([]Decision{d1, d2})
		if d.Allowed {
			t.Fatalf("1 + 1 of a burst of 1 passed: %v", d)
		}
		now += micros(d.RetryAfter)
	}
	if err := CheckGroup(reqs); !errors.Is(err, ErrCostExceedsCapacity) {
		t.Fatalf("CheckGroup: %v, want ErrCostExceedsCapacity", err)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tt := range []struct {
		d           time.Duration
		ceil, retry int64
	}{
		{-time.Second, 0, 1}, {0, 0, 1}, {time.Microsecond, 1, 1}, {time.Millisecond, 1, 1},
		{1000 * time.Millisecond, 1, 1}, {1001 * time.Millisecond, 2, 2}, {59*time.Second + time.Nanosecond, 60, 60},
		// The longest durations round up without wrapping.
		{math.MaxInt64, 9223372037, 9223372037}, {math.MaxInt64 - 854775807, 9223372036, 9223372036},
	} {
		if got := CeilSeconds(tt.d); got != tt.ceil {
			t.Errorf("CeilSeconds(%v) = %d, want %d", tt.d, got, tt.ceil)
		}
		if got := RetryAfterSeconds(tt.d); got != tt.retry {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tt.d, got, tt.retry)
		}
	}
}

// A limit per whole days with no algorithm named and no burst is a
// quota: a fixed_window over UTC days, as a monthly one is over months.
func TestDailyLimitIsFixedWindow(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Algorithm
	}{
		{"1000/d", FixedWindow},
		{"1000 per 2d", FixedWindow},
		{"100000/d", FixedWindow},
		{"gcra 1000/d", GCRA},
		{"sliding_window 1000/d", SlidingWindow},
		{"1000/d burst 10", GCRA},
		{"5 per 1d12h", GCRA},
		{"10/h", GCRA},
		{"10000/month", FixedWindow},
	} {
		l, err := ParseLimit(tt.in)
		if err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if l.Algorithm != tt.want {
			t.Errorf("%s: algorithm %v, want %v", tt.in, l.Algorithm, tt.want)
		}
	}
}

func TestMustParseLimit(t *testing.T) {
	if got, want := MustParseLimit("20/s burst 40"), (Limit{Algorithm: GCRA, Count: 20, Period: time.Second, Burst: 40}); got != want {
		t.Errorf("MustParseLimit = %+v, want %+v", got, want)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "0/s") {
			t.Errorf("MustParseLimit(\"0/s\") recovered %v, want a panic naming the limit", r)
		}
	}()
	MustParseLimit("0/s")
}

// StateName tells states apart by what they mean: a bucket by its whole
// limit, however written; a window by its algorithm and window alone.
func TestStateName(t *testing.T) {
	name := func(s string) string {
		l, err := ParseLimit(s)
		if err != nil {
			t.Fatal(err)
		}
		return l.StateName()
	}
	for _, tt := range []struct {
		a, b string
		same bool
	}{
		{"10/s", "10/s burst 10", true},
		{"10/s", "gcra 10 per 1s", true},
		{"10/s", "10/s burst 11", false},
		{"10/s", "token_bucket 10/s", false},
		{"10/s", "20 per 2s", false},
		{"fixed_window 10/m", "fixed_window 20/m", true},
		{"fixed_window 10000/month", "fixed_window 5000/month", true},
		{"fixed_window 10/m", "fixed_window 10 per 2m", false},
		{"fixed_window 10/m", "sliding_window 10/m", false},
		{"sliding_log 3 per 15m", "sliding_log 5 per 15m", true},
	} {
		if got := name(tt.a) == name(tt.b); got != tt.same {
			t.Errorf("%s (%q) and %s (%q): same state %v, want %v", tt.a, name(tt.a), tt.b, name(tt.b), got, tt.same)
		}
	}
	if got := name("fixed_window 10000/month"); got != "fixed_window per month" {
		t.Errorf("a monthly quota's state name %q", got)
	}
}
