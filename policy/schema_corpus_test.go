package policy

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/rate"
)

func regexpMust(t testing.TB, p string) *regexp.Regexp {
	t.Helper()
	re, err := regexp.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return re
}

// piece is part of a string in a generated corpus; a loose piece is one
// the schema may pass though the loader refuses it (a number past a
// bound, a period that is not a whole number of µs).
type piece struct {
	s     string
	loose bool
}

func exact(ss ...string) []piece {
	out := make([]piece, len(ss))
	for i, s := range ss {
		out[i] = piece{s: s}
	}
	return out
}

func loosely(ss ...string) []piece {
	out := exact(ss...)
	for i := range out {
		out[i].loose = true
	}
	return out
}

// limitPieces are the parts of a limit, in order: algorithm, count,
// separator, unit, burst, end.
func limitPieces(t testing.TB) [][]piece {
	g := buildGrammar(t)
	var algs, units []piece
	algs = append(algs, exact("", "GCRA ", "bucket ", "gcra", "gcra/")...)
	for _, a := range g.algs {
		algs = append(algs, exact(a+" ", a+"\t\u00a0")...)
	}
	for _, u := range slices.Concat(funcStrings(t, "../rate/limit.go", "isMonth", "unitDuration"), goUnits) {
		units = append(units, exact(u, strings.ToUpper(u), u+"s", u+".")...)
	}
	units = append(units, exact("w", "week", "weeks", "y", "yr", "year", "mon", "monthly", "2month", "2mo", "1month", "per",
		"10s", "1m30s", "1.5s", ".5s", "1.s", "2d", "1d12h", "+5s", "-5s", "1000ns", "1d-12h", "1d+12h", "1d0", "1d+0", "1d-0",
		"1d-0s", "1d-0.5ns", "-0d1s", "+1d", "-1d", "1h1d", "1.5d", "d5s", "10", "h30m", "1m30", "1m 30s", "1µs", "1μs", "1e3s",
		"5_0s", "0x10s", "1d1d", "")...)
	units = append(units, loosely("0s", "0d", "1ns", "0.5us", "999999d", "1d-0.0000000009s", "0.0000001s", "99999999999999h")...)
	return [][]piece{
		algs,
		append(exact("1", "10", "1_000", "007", "0_1", "0", "00", "-1", "1__0", "_1", "1_", "1.5", "1e3", "+1", "١٠"),
			loosely("99999999999999999999", "4503599627370497")...),
		exact("/", " / ", "/ ", " /", " per ", "\u00a0per\u2003", "per", " per", "//", " Per ", "\u200bper "),
		units,
		exact("", " burst 5", " burst 0", " burst 1_0", " burst", " burst 5 6", " Burst 5", "\tburst\n5", " burst -1", " burst 05",
			"burst 5", " burst 5x"),
		exact("", " ", "\n", "\u3000", ",", "\u0085", "\ufeff", "\u200b"),
	}
}

// checkLimit compares the schema's verdict on a limit with ParseLimit's,
// which is the whole of what the loader asks of one.
func checkLimit(t *testing.T, s *jsonSchema, l string, loose bool) {
	t.Helper()
	_, err := rate.ParseLimit(l)
	ok := s.valid(s.at("/$defs/limit"), l)
	switch {
	case err == nil && !ok:
		t.Errorf("the schema refuses limit %q, which ParseLimit reads", l)
	case err != nil && ok && !loose:
		t.Errorf("the schema passes limit %q: %v", l, err)
	}
}

func TestSchemaLimits(t *testing.T) {
	s := loadSchema(t)
	pieces := limitPieces(t)
	base := []int{0, 1, 0, 0, 0, 0} // "10/s"
	pieces[3] = append([]piece{{s: "s"}}, pieces[3]...)
	combo := func(idx []int) {
		var b strings.Builder
		loose := false
		for i, j := range idx {
			b.WriteString(pieces[i][j].s)
			loose = loose || pieces[i][j].loose
		}
		checkLimit(t, s, b.String(), loose)
	}
	// Each piece in the place of the base's.
	for i := range pieces {
		for j := range pieces[i] {
			idx := slices.Clone(base)
			idx[i] = j
			combo(idx)
		}
	}
	// Algorithms, units and bursts together, for the rules that tie them.
	for a := range pieces[0] {
		for u := range pieces[3] {
			for b := range pieces[4] {
				combo([]int{a, 1, 0, u, b, 0})
			}
		}
	}
	// And any piece with any other.
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		idx := make([]int, len(pieces))
		for i := range idx {
			idx[i] = r.IntN(len(pieces[i]))
		}
		combo(idx)
	}
}

// The words the schema reads as a limit's unit are rate's.
func TestSchemaLimitUnits(t *testing.T) {
	s := loadSchema(t)
	words := slices.Concat(funcStrings(t, "../rate/limit.go", "isMonth", "unitDuration"), goUnits,
		[]string{"w", "wk", "week", "weeks", "y", "yr", "year", "years", "mon", "mth", "fortnight", "millisecond", "msec", "µ", "us."})
	for _, w := range words {
		for _, v := range []string{w, strings.ToUpper(w), strings.ToUpper(w[:1]) + w[1:]} {
			for _, sep := range []string{"/", " per "} {
				checkLimit(t, s, "10"+sep+v, false)
			}
		}
	}
	// The words the built pattern lists are all ParseLimit's.
	lang, err := language("^("+strings.Join(buildGrammar(t).units, "|")+")$", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range lang {
		checkLimit(t, s, "1/"+w, false)
	}
}

// FuzzSchemaLimit checks that the schema passes every limit ParseLimit
// reads.
func FuzzSchemaLimit(f *testing.F) {
	for _, l := range []string{"10/s", "20/s burst 40", "1000/d", "10000/month", "sliding_window 100/m", "leaky_bucket 5/s burst 10",
		"10 per 1m30s", "10/1.5s", "10/μs", "3 per 7s", "5 per 2d", "1 per 1d12h", " gcra\u00a01_000 / 10s burst 2_000\n"} {
		f.Add(l)
	}
	s := loadSchema(f)
	limit := s.at("/$defs/limit")
	f.Fuzz(func(t *testing.T, l string) {
		if _, err := rate.ParseLimit(l); err == nil && !s.with(t).valid(limit, l) {
			t.Errorf("the schema refuses limit %q, which ParseLimit reads", l)
		}
	})
}

// loaderDuration is what the loader's duration reads: "0", or a Go
// duration not below zero.
func loaderDuration(s string) (time.Duration, bool) {
	if s == "0" {
		return 0, true
	}
	d, err := time.ParseDuration(s)
	return d, err == nil && d >= 0
}

func TestSchemaDurations(t *testing.T) {
	s := loadSchema(t)
	duration, positive := s.at("/$defs/duration"), s.at("/$defs/positiveDuration")
	nums := []string{"0", "1", "10", "1.5", ".5", "1.", "0.0", "00", ".", "0.5", "0.0001", "0.001", "0.000001", "0.0000001",
		"0.000000001", "0.0000000009", "0.0000000001", "0.00000000009", "0.0000000000001", "0.000000000001", "1e3", "-1", "١"}
	units := slices.Concat(goUnits, []string{"d", "", "S", "sec", "Ms", "µ"})
	var corpus []string
	for _, n := range nums {
		for _, u := range units {
			corpus = append(corpus, n+u)
		}
	}
	for _, c := range slices.Clone(corpus) {
		corpus = append(corpus, c+"1s", "1s"+c, c+c)
	}
	for _, c := range slices.Clone(corpus) {
		corpus = append(corpus, "+"+c, "-"+c, " "+c, c+" ")
	}
	corpus = append(corpus, "0", "-0", "+0", "", "+", "-", "--1s", "+-1s", "9223372036854775807ns", "9223372036854775808ns")
	overflow := regexp.MustCompile(`[0-9]{19}`)
	for _, c := range corpus {
		d, ok := loaderDuration(c)
		if got := s.valid(duration, c); got != ok {
			// A negative duration under 1µs may be one the schema takes
			// for one under 1ns, which ParseDuration truncates to zero;
			// and the schema does not bound numbers.
			if !(got && (d < 0 && d > -time.Microsecond || overflow.MatchString(c))) {
				t.Errorf("the schema's duration passes %q: %v; the loader: %v", c, got, ok)
			}
		}
		// store.timeout must be above zero.
		if got := s.valid(positive, c); got != (ok && d > 0) {
			// One under 1ns, not written as zero, is zero.
			if !(got && (ok && d == 0 && strings.ContainsAny(c, "123456789") || overflow.MatchString(c))) {
				t.Errorf("the schema's positive duration passes %q: %v; the loader: %v", c, got, ok && d > 0)
			}
		}
	}
}

// client_ip.header names the headers clientip reads, in any letter
// case, and no other.
func TestSchemaClientIPHeader(t *testing.T) {
	s := loadSchema(t)
	p := s.pattern("/properties/client_ip/properties/header/pattern")
	lang, err := language(p, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range lang {
		if _, err := clientip.New(clientip.Options{Header: h}); err != nil {
			t.Errorf("the schema's client_ip.header passes %q: %v", h, err)
		}
	}
	re := regexpMust(t, p)
	for _, h := range packageStrings(t, "../clientip") {
		if _, err := clientip.New(clientip.Options{Header: h}); err != nil {
			continue
		}
		for _, v := range caseVariants(h) {
			if !re.MatchString(v) {
				t.Errorf("the schema's client_ip.header refuses %q, which clientip reads", v)
			}
		}
	}
}

// caseVariants returns s in every letter case.
func caseVariants(s string) []string {
	out := []string{""}
	for _, r := range s {
		alts := []string{string(r)}
		if u, l := unicode.ToUpper(r), unicode.ToLower(r); u != l {
			alts = []string{string(u), string(l)}
		}
		var next []string
		for _, o := range out {
			for _, a := range alts {
				next = append(next, o+a)
			}
		}
		out = next
	}
	return out
}

// The enums are what the loader's tables accept.
func TestSchemaEnums(t *testing.T) {
	s := loadSchema(t)
	var modes []string
	for m := range sluice.FailureMode(16) {
		modes = append(modes, m.String())
	}
	modes = append(modes, "open", "closed", "Open", "fail-open", "")
	for _, tt := range []struct {
		ptr        string
		candidates []string
		loads      func(string) bool
	}{
		{"/$defs/policy/properties/on_store_error", modes, func(v string) bool {
			m, err := sluice.ParseFailureMode(v)
			return err == nil && m != sluice.FailError
		}},
		{"/$defs/policy/properties/priority", append(priorityNames[:], "high", "Low", ""), func(v string) bool {
			return slices.Contains(priorityNames[:], v)
		}},
	} {
		sch := s.at(tt.ptr)
		enum, _ := s.at(tt.ptr + "/enum").([]any)
		for _, e := range enum {
			tt.candidates = append(tt.candidates, e.(string))
		}
		for _, c := range tt.candidates {
			if got, want := s.valid(sch, c), tt.loads(c); got != want {
				t.Errorf("%s passes %q: %v; the loader: %v", tt.ptr, c, got, want)
			}
		}
	}
}
