package rate

import (
	"strings"
	"testing"
)

// TestParseLimitTooLarge: a limit past the bounds of exact arithmetic is
// refused with a message that names the number that is too large (the
// count or the burst, not one for the other), gives the most it may be,
// and advises only what would be accepted: fixed_window where its count
// fits, a shorter period where there is one that fits. Limits at the
// bounds still parse.
func TestParseLimitTooLarge(t *testing.T) {
	tests := []struct {
		in      string
		want    []string // each in the error; none for a limit that parses
		notWant []string // none of these in it
	}{
		{
			in: "gcra 10/s burst 999999999999",
			want: []string{"burst 999999999999 is too large for gcra with a period of 1s",
				"at most 2^52", "the burst is at most 4503599627"},
			notWant: []string{"999999999999 per", "count 999999999999", "fixed_window", "below"},
		},
		{
			in:      "1/us burst 4503599627370497",
			want:    []string{"burst 4503599627370497 is too large", "the burst is at most 4503599627370496"},
			notWant: []string{"4503599627370497 per", "fixed_window", "shorter period"},
		},
		{
			// No fixed_window takes a count past 2^52, and no period is
			// shorter than 1µs.
			in:      "4503599627370497/us",
			want:    []string{"count 4503599627370497 is too large for gcra with a period of 1µs", "the count is at most 4503599627370496"},
			notWant: []string{"fixed_window", "shorter period", "below"},
		},
		{
			// Over 1µs the rate fits, but no fixed_window's count does.
			in:      "9223372036854775807/s",
			want:    []string{"count 9223372036854775807 is too large", "the count is at most 4503599627", "shorter period"},
			notWant: []string{"fixed_window"},
		},
		{
			// More than 2^52 units a microsecond fit no period.
			in:      "9223372036854775807 per 2us",
			want:    []string{"count 9223372036854775807 is too large", "the count is at most 2251799813685248"},
			notWant: []string{"fixed_window", "shorter period"},
		},
		{
			in:      "gcra 1000000/d",
			want:    []string{"count 1000000 is too large for gcra with a period of 1d", "the count is at most 52124", "use fixed_window 1000000/d", "shorter period"},
			notWant: []string{"24h0m0s"},
		},
		{
			in:   "gcra 4503599627370497/us burst 4503599627370498",
			want: []string{"count 4503599627370497 and burst 4503599627370498 are too large", "each is at most 4503599627370496"},
		},
		{
			in:   "sliding_window 2 per 52124d",
			want: []string{"count 2 is too large for sliding_window", "the count is at most 1", "use fixed_window 2 per 52124d"},
		},
		{
			in:   "leaky_bucket 1 per 2562047h",
			want: []string{"period 2562047h0m0s is too long (at most 2^52µs, about 52124d)"},
		},
		{
			in:   "fixed_window 4503599627370497/s",
			want: []string{"count 4503599627370497 is too large (at most 2^52, 4503599627370496)"},
		},
		{
			in:   "4503599627370497/month",
			want: []string{"count 4503599627370497 is too large (at most 2^52, 4503599627370496)"},
		},
		// At the bounds: valid.
		{in: "4503599627370496/us"},
		{in: "1/us burst 4503599627370496"},
		{in: "gcra 10/s burst 4503599627"},
		{in: "gcra 52124/d"},
		{in: "leaky_bucket 1 per 52124d"},
		{in: "fixed_window 4503599627370496/s"},
	}
	for _, tt := range tests {
		_, err := ParseLimit(tt.in)
		if len(tt.want) == 0 {
			if err != nil {
				t.Errorf("ParseLimit(%q): %v, want it valid", tt.in, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("ParseLimit(%q): valid, want an error", tt.in)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParseLimit(%q) = %q, want it to contain %q", tt.in, err, w)
			}
		}
		for _, w := range tt.notWant {
			if strings.Contains(err.Error(), w) {
				t.Errorf("ParseLimit(%q) = %q, want no %q", tt.in, err, w)
			}
		}
	}
}

// TestValidateAdviceParses: the fixed_window Validate advises for a limit
// too large parses, and is valid.
func TestValidateAdviceParses(t *testing.T) {
	for _, in := range []string{"gcra 1000000/d", "token_bucket 2000000/h", "sliding_window 2 per 52124d", "leaky_bucket 9000000000 per 1000s"} {
		_, err := ParseLimit(in)
		if err == nil {
			t.Errorf("ParseLimit(%q): valid, want an error", in)
			continue
		}
		msg := err.Error()
		i := strings.Index(msg, "use fixed_window ")
		if i < 0 {
			t.Errorf("ParseLimit(%q) = %q, want advice to use fixed_window", in, msg)
			continue
		}
		advice := msg[i+len("use "):]
		if j := strings.IndexByte(advice, ';'); j >= 0 {
			advice = advice[:j]
		}
		if _, err := ParseLimit(advice); err != nil {
			t.Errorf("ParseLimit(%q) advises %q, which does not parse: %v", in, advice, err)
		}
	}
}
