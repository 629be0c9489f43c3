package retry

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzParseRetryAfter checks that any Retry-After value parses without
// panicking into a non-negative wait, that invalid values carry no wait,
// that surrounding whitespace does not matter, and that every run of
// ASCII digits is accepted, with or without a decimal fraction.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", "", "-1", "1.5", "99999999999999999999", "Sun, 06 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 06 Nov 1994 08:49:37 +0000"} {
		f.Add(s)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseRetryAfter(v, now)
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, negative", v, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, false: a rejected value carries a wait", v, d)
		}
		if d2, ok2 := ParseRetryAfter(" "+v+"\t", now); d2 != d || ok2 != ok {
			t.Fatalf("whitespace changed the result for %q: %v,%v vs %v,%v", v, d, ok, d2, ok2)
		}
		digits := func(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
		if digits(v) && !ok {
			t.Fatalf("ParseRetryAfter(%q) rejected delta-seconds", v)
		}
		if whole, frac, found := strings.Cut(v, "."); found && digits(whole) && digits(frac) && !ok {
			t.Fatalf("ParseRetryAfter(%q) rejected decimal seconds", v)
		}
	})
}

// FuzzParseRateLimit checks that any combination of quota headers parses
// without panicking into non-negative quotas, no more than the fields
// could describe, and that the pacer digests them without panicking or
// asking for a wait beyond its bound.
func FuzzParseRateLimit(f *testing.F) {
	f.Add(`"default";r=50;t=30`, `"default";q=100;w=60`, "", "")
	f.Add(`"a";r=1, b;r=2;t=3`, `"a";q=1;w=10`, "5", "1700000000")
	f.Add("", "", "0", "20")
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, rateLimit, policy, remaining, reset string) {
		h := http.Header{}
		h.Set("RateLimit", rateLimit)
		h.Set("RateLimit-Policy", policy)
		h.Set("X-RateLimit-Remaining", remaining)
		h.Set("X-RateLimit-Reset", reset)
		quotas := ParseRateLimit(h, now)
		items, _ := parseSFList(rateLimit)
		if len(quotas) > len(items)+1 {
			t.Fatalf("%d quotas from %d RateLimit items and one legacy pair", len(quotas), len(items))
		}
		for _, q := range quotas {
			if q.Remaining < 0 || q.Reset < 0 {
				t.Fatalf("negative quota %+v", q)
			}
		}
		p := newPacer(DefaultPaceThreshold)
		p.observe("h", h, now, now)
		for range 3 {
			if w, ok := p.reserve("h", now, 0, time.Minute, true); ok && (w < 0 || w > time.Minute) {
				t.Fatalf("pacer wait %v outside [0, 1m]", w)
			}
		}
	})
}
