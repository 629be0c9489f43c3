package retry

import (
	"math"
	"net/http"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// rfc850GMT is the layout of an rfc850-date as RFC 9110 §5.6.7 writes it:
// time.RFC850 writes the zone's name, "UTC" for a UTC time, where the RFC
// allows only GMT.
const rfc850GMT = "Monday, 02-Jan-06 15:04:05 GMT"

func TestParseRetryAfter(t *testing.T) {
	now := testStart
	cases := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"120", 120 * time.Second, true},
		{"0", 0, true},
		{"007", 7 * time.Second, true},
		{" 5\t", 5 * time.Second, true}, // surrounding whitespace is allowed
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true}, // past: retry now
		{now.Add(45 * time.Second).Format(rfc850GMT), 45 * time.Second, true},
		{now.Add(45 * time.Second).Format(time.RFC850), 0, false}, // "... UTC": only GMT in the obsolete forms
		{now.Add(30 * time.Second).Format(time.ANSIC), 30 * time.Second, true},
		// IMF-fixdate with a zone other than GMT that means the same, as
		// time.RFC1123 and time.RFC1123Z write a UTC time: RFC 9110
		// §5.6.7 asks recipients to read dates robustly.
		{now.Add(time.Hour).Format(time.RFC1123), time.Hour, true},  // "... UTC"
		{now.Add(time.Hour).Format(time.RFC1123Z), time.Hour, true}, // "... +0000"
		{"Tue, 01 Jan 2030 01:00:00 UT", time.Hour, true},
		{"Tue, 01 Jan 2030 01:00:00 -0000", time.Hour, true},
		{"Tue, 01 Jan 2030 01:00:00 +0100", 0, false}, // another offset: not guessed at
		{"Tue, 01 Jan 2030 01:00:00 EST", 0, false},
		{"Tue, 01 Jan 2030 01:00:00", 0, false},
		{"Tue, 01 Jan 2030 01:00:00 utc", 0, false},
		{"9223372036", 9223372036 * time.Second, true},         // the largest whole-second Duration
		{"9223372037", math.MaxInt64, true},                    // one more saturates
		{"99999999999999999999999999999", math.MaxInt64, true}, // beyond int64 saturates too
		// Decimal seconds are not in the RFC, but their meaning is plain:
		// read as garbage, they would send the client back too early.
		{"1.5", 1500 * time.Millisecond, true},
		{"0.25", 250 * time.Millisecond, true},
		{"2.000", 2 * time.Second, true},
		{"0.0000000001", time.Nanosecond, true},         // below a nanosecond: rounded up, never down
		{"9223372036.854775807", math.MaxInt64, true},   // the largest Duration, exactly
		{"9223372036.854775808", math.MaxInt64, true},   // and past it saturates
		{"99999999999999999999.5", math.MaxInt64, true}, // as does a huge whole part
		{"", 0, false},
		{"   ", 0, false},
		{"-5", 0, false},
		{"+5", 0, false},
		{"1.", 0, false},
		{".5", 0, false},
		{"1.5.2", 0, false},
		{"-1.5", 0, false},
		{"1,5", 0, false},
		{"1.5s", 0, false},
		{"1e3", 0, false},
		{"0x10", 0, false},
		{"5 s", 0, false},
		{"soon", 0, false},
		{"Mon, 32 Foo 2030 99:99:99 GMT", 0, false},
		{"\u0661\u0662", 0, false}, // non-ASCII digits
	}
	for _, tc := range cases {
		got, ok := ParseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
}

// TestParseRetryAfterObsoleteDatesOnlyInGMT checks that the obsolete date
// forms are read only as RFC 9110 §5.6.7 writes them: an RFC 850 date in
// GMT and an asctime date, which has no zone. An RFC 850 date in another
// zone is unreadable whatever the machine's zone: Go's parser would take
// an abbreviation it knows from the local zone (EST in New York, CET in
// Berlin) at its offset there, and one it does not at no offset at all, so
// the same field would ask for a different wait on every machine. Each
// value is read in several local zones, set through time.Local.
func TestParseRetryAfterObsoleteDatesOnlyInGMT(t *testing.T) {
	defer func(l *time.Location) { time.Local = l }(time.Local)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"Tuesday, 01-Dec-26 00:00:10 GMT", 10 * time.Second, true},
		{"Tue Dec  1 00:00:10 2026", 10 * time.Second, true},
		{"Tue Dec 01 00:00:10 2026", 10 * time.Second, true}, // date3 allows 2DIGIT too
		{"Tuesday, 01-Dec-26 00:00:10 EST", 0, false},
		{"Tuesday, 01-Dec-26 00:00:10 CET", 0, false},
		{"Tuesday, 01-Dec-26 00:00:10 UTC", 0, false},
		{"Tuesday, 01-Dec-26 00:00:10 XYZ", 0, false}, // a zone Go does not know
		{"Tuesday, 01-Dec-26 00:00:10 GMT+5", 0, false},
		{"Tuesday, 01-Dec-26 00:00:10 GMT-1", 0, false},
		{"Tue Dec  1 00:00:10 EST 2026", 0, false}, // time.UnixDate
		{"Tue, 01 Dec 2026 00:00:10 GMT", 10 * time.Second, true},
	}
	for _, local := range []*time.Location{
		time.UTC,
		time.FixedZone("EST", -5*60*60), // as America/New_York in winter
		time.FixedZone("CET", 60*60),    // as Europe/Berlin in winter
	} {
		time.Local = local
		for _, tc := range cases {
			got, ok := ParseRetryAfter(tc.in, now)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("local zone %v: ParseRetryAfter(%q) = %v, %v; want %v, %v", local, tc.in, got, ok, tc.want, tc.wantOK)
			}
		}
	}
}

func TestParseRateLimit(t *testing.T) {
	now := testStart
	unix := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	cases := []struct {
		name string
		kv   []string
		want []Quota
	}{
		{"none", nil, nil},
		{"one item", []string{"RateLimit", `"default";r=50;t=30`},
			[]Quota{{"default", 50, 30 * time.Second}}},
		{"several items", []string{"RateLimit", `"burst";r=5;t=1, "daily";r=900;t=3600`},
			[]Quota{{"burst", 5, time.Second}, {"daily", 900, time.Hour}}},
		{"several field lines", []string{"RateLimit", `"a";r=1;t=2`, "RateLimit", `"b";r=3;t=4`},
			[]Quota{{"a", 1, 2 * time.Second}, {"b", 3, 4 * time.Second}}},
		{"token names", []string{"RateLimit", `burst;r=5;t=1`},
			[]Quota{{"burst", 5, time.Second}}},
		{"reset from policy window", []string{"RateLimit", `"w";r=7`, "RateLimit-Policy", `"w";q=100;w=60`},
			[]Quota{{"w", 7, time.Minute}}},
		{"no reset known", []string{"RateLimit", `"w";r=7`}, nil},
		{"policy without q ignored", []string{"RateLimit", `"w";r=7`, "RateLimit-Policy", `"w";w=60`}, nil},
		{"other quota unit", []string{"RateLimit", `"bytes";r=7;t=1`, "RateLimit-Policy", `"bytes";q=1000;qu="content-bytes";w=1`}, nil},
		{"requests unit", []string{"RateLimit", `"r";r=7;t=1`, "RateLimit-Policy", `"r";q=10;qu="requests";w=1`},
			[]Quota{{"r", 7, time.Second}}},
		{"negative and missing r skipped", []string{"RateLimit", `"a";r=-1;t=5, "b";t=5, "c";r=2;t=5`},
			[]Quota{{"c", 2, 5 * time.Second}}},
		{"non-integer r skipped", []string{"RateLimit", `"a";r=1.5;t=5, "b";r="2";t=5`}, nil},
		{"other parameters and an inner list", []string{"RateLimit", `"a";r=5;t=10;pk=:YWJj:;x=?1, ("x" "y");q=1`},
			[]Quota{{"a", 5, 10 * time.Second}}},
		{"escaped name", []string{"RateLimit", `"a\"b";r=1;t=1`},
			[]Quota{{`a"b`, 1, time.Second}}},
		{"malformed field ignored whole", []string{"RateLimit", `"a";r=5;t=10, "b";r=`}, nil},
		{"trailing comma", []string{"RateLimit", `"a";r=5;t=10,`}, nil},
		{"unterminated string", []string{"RateLimit", `"a;r=5;t=10`}, nil},
		{"integer too long", []string{"RateLimit", `"a";r=1234567890123456;t=1`}, nil},
		{"huge t saturates", []string{"RateLimit", `"a";r=1;t=999999999999999`},
			[]Quota{{"a", 1, math.MaxInt64}}},
		{"legacy delta", []string{"X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "20"},
			[]Quota{{"", 3, 20 * time.Second}}},
		{"legacy unix time", []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unix(45 * time.Second)},
			[]Quota{{"", 0, 45 * time.Second}}},
		{"legacy unix time past", []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unix(-time.Hour)},
			[]Quota{{"", 0, 0}}},
		{"legacy huge", []string{"X-RateLimit-Remaining", "99999999999999999999", "X-RateLimit-Reset", "99999999999999999999"},
			[]Quota{{"", math.MaxInt64, math.MaxInt64}}},
		{"legacy garbage", []string{"X-RateLimit-Remaining", "-1", "X-RateLimit-Reset", "20"}, nil},
		{"legacy half", []string{"X-RateLimit-Remaining", "3"}, nil},
		{"both vocabularies", []string{"RateLimit", `"a";r=1;t=2`, "X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "4"},
			[]Quota{{"a", 1, 2 * time.Second}, {"", 3, 4 * time.Second}}},
	}
	for _, tc := range cases {
		h := http.Header{}
		for i := 0; i+1 < len(tc.kv); i += 2 {
			h.Add(tc.kv[i], tc.kv[i+1])
		}
		if got := ParseRateLimit(h, now); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: ParseRateLimit(%v) = %v, want %v", tc.name, h, got, tc.want)
		}
	}
}

// TestParseSFList checks the Structured Field parser on the RFC 9651
// types RateLimit fields do not use but may carry.
func TestParseSFList(t *testing.T) {
	cases := []struct {
		in     string
		items  int
		wantOK bool
	}{
		{``, 0, true},
		{`a, b`, 2, true},
		{`1, -2, 3.5, ?0, ?1, :aGk=:, @1700000000, %"caf%c3%a9"`, 8, true},
		{`("a" "b";x=1);y, c`, 2, true},
		{`*tok/en:x`, 1, true},
		{`a;b;c=?0`, 1, true},
		{`a,,b`, 0, false},
		{`a b`, 0, false},
		{`1.2345`, 0, false},
		{`1.`, 0, false},
		{`-`, 0, false},
		{`?2`, 0, false},
		{`:a*b:`, 0, false},
		{`"tab\there"`, 0, false},
		{`"\x"`, 0, false},
		{`a;B=1`, 0, false},
		{`("a"`, 0, false},
		{`@1.5`, 0, false},
		{`%"A%zz"`, 0, false},
		{`%x`, 0, false},
		{"\x00", 0, false},
		{`é`, 0, false},
	}
	for _, tc := range cases {
		items, ok := parseSFList(tc.in)
		if ok != tc.wantOK || len(items) != tc.items {
			t.Errorf("parseSFList(%q) = %d items, %v; want %d, %v", tc.in, len(items), ok, tc.items, tc.wantOK)
		}
	}
}
