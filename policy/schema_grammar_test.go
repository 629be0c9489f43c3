package policy

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/rate"
)

// schemaGrammar holds the pieces the schema's longer patterns are built
// from, each taken from the loader's own tables and rules (rate's
// algorithms and units, clientip's headers, unicode.IsSpace), so that a
// table that grows fails TestSchemaPatternsBuilt with the patterns to
// write. The patterns are plain regular expressions: JSON Schema has no
// way to name a piece and use it twice.
type schemaGrammar struct {
	// ws is a class of the characters strings.Fields splits at and
	// strings.TrimSpace trims: unicode.IsSpace's.
	ws string
	// count is a count or a burst as rate's parseCount reads it, at least
	// 1: digits that single underscores may group.
	count string
	// comp is one number and unit of a Go duration (time.ParseDuration);
	// zero is one whose digits are all 0; tiny is one under 1ns, which
	// ParseDuration truncates to nothing (a few just above it too: a
	// minute with ten zeros after the point may still be 5ns).
	comp, zero, tiny string
	// units are the words ParseLimit reads as a unit after / or per, from
	// rate's table and Go's letters; months those of a calendar month.
	units, months []string
	// algs are rate's algorithms; windows those without a burst; monthly
	// those a calendar month may be written with.
	algs, windows, monthly []string
	// headers are the forwarding headers client_ip reads; credentials
	// those user.header and plans.header may not be.
	headers, credentials []string
}

// goUnits are time.ParseDuration's units: time keeps its table
// unexported, and TestSchemaGoUnits checks this copy against it.
var goUnits = []string{"ns", "us", "µs", "μs", "ms", "s", "m", "h"}

func buildGrammar(t testing.TB) schemaGrammar {
	t.Helper()
	var g schemaGrammar
	g.ws = spaceClass()
	g.count = `(0+_)*0*[1-9][0-9]*(_[0-9]+)*`
	num := `([0-9]+(\.[0-9]*)?|\.[0-9]+)`
	g.comp = "(" + num + "(" + strings.Join(goUnits, "|") + "))"
	g.zero = `((0+(\.0*)?|\.0+)(` + strings.Join(goUnits, "|") + "))"
	// Under a unit of u ns, 0.F truncates to 0ns when 0.F < 1/u: then F
	// starts with at least k = ⌊log10 u⌋ zeros. F is either shorter and
	// all zeros, or k zeros and any digits: the two never match the same
	// text, so that an editor's backtracking matcher, on a duration that
	// fails, does not try each component both ways.
	var tiny []string
	for _, us := range [][]string{{"ns"}, {"us", "µs", "μs"}, {"ms"}, {"s"}, {"m"}, {"h"}} {
		d, _ := time.ParseDuration("1" + us[0])
		k := 0
		for p := time.Duration(10); p <= d; p *= 10 {
			k++
		}
		frac, lead := `[0-9]*`, `[0-9]+` // F, and F after no integer digits
		if k > 0 {
			kz := fmt.Sprintf("0{%d}[0-9]*", k)
			frac = fmt.Sprintf("(0{0,%d}|%s)", k-1, kz)
			lead = fmt.Sprintf("(0{1,%d}|%s)", k-1, kz)
		}
		u := us[0]
		if len(us) > 1 {
			u = "(" + strings.Join(us, "|") + ")"
		}
		tiny = append(tiny, `(0+(\.`+frac+`)?|\.`+lead+`)`+u)
	}
	g.tiny = "(" + strings.Join(tiny, "|") + ")"

	// Go's units are read after / too, but for ns: a period is whole µs.
	words := funcStrings(t, "../rate/limit.go", "isMonth", "unitDuration")
	for _, w := range append(words, goUnits...) {
		l, err := rate.ParseLimit("1/" + w)
		if err != nil || slices.Contains(g.units, w) {
			continue
		}
		g.units = append(g.units, w)
		if l.Calendar == rate.Month {
			g.months = append(g.months, w)
		}
	}
	for _, a := range rate.Algorithms() {
		g.algs = append(g.algs, a.String())
		if !a.HasBurst() {
			g.windows = append(g.windows, a.String())
		}
		if _, err := rate.ParseLimit(a.String() + " 1/" + g.months[0]); err == nil {
			g.monthly = append(g.monthly, a.String())
		}
	}
	for _, h := range packageStrings(t, "../clientip") {
		if _, err := clientip.New(clientip.Options{Header: h}); err == nil && h != "" {
			g.headers = append(g.headers, h)
		}
	}
	g.credentials = funcStrings(t, "load.go", "credential")
	return g
}

// patterns returns the patterns built from g, by where they are in the
// schema.
func (g schemaGrammar) patterns() map[string]string {
	ws, alt := g.ws, func(s []string) string { return "(" + strings.Join(s, "|") + ")" }
	// After days (1d12h), the rest is a Go duration, which a sign may
	// start; the sum must not be negative.
	period := `((\+?[0-9]+|-0+)d(\+?(0|` + g.comp + `+)|-(0|` + g.tiny + `+))?|\+?` + g.comp + `+)`
	limit := "^" + ws + "*(" + alt(g.algs) + ws + "+)?" + g.count +
		"(" + ws + "*/" + ws + "*|" + ws + "+per" + ws + "+)" +
		"(" + strings.Join(g.units, "|") + "|" + period + ")" +
		"(" + ws + "+burst" + ws + "+" + g.count + ")?" + ws + "*$"
	burst := ws + "burst" + ws
	month := "(/" + ws + "*|" + ws + "per" + ws + "+)" + alt(g.months) + "(" + ws + "|$)"
	var notMonthly []string
	for _, a := range g.algs {
		if !slices.Contains(g.monthly, a) {
			notMonthly = append(notMonthly, a)
		}
	}
	return map[string]string{
		"/$defs/limit/pattern":                            limit,
		"/$defs/limit/not/anyOf/0/allOf/0/pattern":        "^" + ws + "*" + alt(g.windows) + ws,
		"/$defs/limit/not/anyOf/0/allOf/1/pattern":        burst,
		"/$defs/limit/not/anyOf/1/allOf/0/pattern":        month,
		"/$defs/limit/not/anyOf/1/allOf/1/pattern":        burst,
		"/$defs/limit/not/anyOf/2/allOf/0/pattern":        month,
		"/$defs/limit/not/anyOf/2/allOf/1/pattern":        "^" + ws + "*" + alt(notMonthly) + ws,
		"/$defs/duration/anyOf/0/pattern":                 `^(\+?` + g.comp + `+|[+-]?0|-` + g.tiny + `+)$`,
		"/$defs/positiveDuration/pattern":                 `^\+?` + g.comp + `+$`,
		"/$defs/positiveDuration/not/pattern":             `^\+?` + g.zero + `+$`,
		"/$defs/percent/pattern":                          "^" + ws + `*\+?0*([1-9][0-9]?|100)%?` + ws + "*$",
		"/properties/client_ip/properties/header/pattern": "^(|" + strings.Join(anyCase(g.headers), "|") + ")$",
		"/$defs/proxyHeader/not/pattern":                  "^" + alt(anyCase(g.credentials)) + "$",
	}
}

// anyCase returns each of ss as a pattern of it in any letter case:
// JSON Schema patterns have no flags.
func anyCase(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		var b strings.Builder
		for _, r := range s {
			if u, l := unicode.ToUpper(r), unicode.ToLower(r); u != l {
				b.WriteString("[" + string(u) + string(l) + "]")
			} else {
				b.WriteRune(r)
			}
		}
		out[i] = b.String()
	}
	return out
}

// spaceClass returns a class of the characters unicode.IsSpace reports.
func spaceClass() string {
	var b strings.Builder
	b.WriteByte('[')
	for lo := rune(0); lo <= unicode.MaxRune; lo++ {
		if !unicode.IsSpace(lo) {
			continue
		}
		hi := lo
		for unicode.IsSpace(hi + 1) {
			hi++
		}
		b.WriteString(classRune(lo))
		if hi > lo+1 {
			b.WriteByte('-')
		}
		if hi > lo {
			b.WriteString(classRune(hi))
		}
		lo = hi
	}
	b.WriteByte(']')
	return b.String()
}

func classRune(r rune) string {
	if i := strings.IndexRune("\t\n\v\f\r", r); i >= 0 {
		return `\` + "tnvfr"[i:i+1]
	}
	return string(r)
}

// jsonPattern quotes a pattern as the schema file writes it: JSON, with
// every character that does not show for itself escaped.
func jsonPattern(p string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range p {
		switch {
		case r == '"' || r == '\\':
			b.WriteString(`\` + string(r))
		case r < 0x20 || r > 0x7e && (unicode.IsSpace(r) || !unicode.IsPrint(r)):
			b.WriteString(`\u` + strconv.FormatUint(uint64(r)|0x10000, 16)[1:])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// funcStrings returns the string literals in the named functions of a Go
// file, in order.
func funcStrings(t testing.TB, file string, funcs ...string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && slices.Contains(funcs, fd.Name.Name) {
			out = append(out, stringLits(t, fd)...)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no strings in %v of %s", funcs, file)
	}
	return out
}

// packageStrings returns the string constants of a package's non-test
// files.
func packageStrings(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.CONST {
				out = append(out, stringLits(t, gd)...)
			}
		}
	}
	return out
}

func stringLits(t testing.TB, n ast.Node) []string {
	var out []string
	ast.Inspect(n, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return true
	})
	return out
}

// The schema's longer patterns are the ones built from the loader's
// tables: one written by hand drifts from them unseen.
func TestSchemaPatternsBuilt(t *testing.T) {
	s := loadSchema(t)
	for ptr, want := range buildGrammar(t).patterns() {
		if got := s.pattern(ptr); got != want {
			t.Errorf("%s is not the pattern built from the loader's tables; write\n%s", ptr, jsonPattern(want))
		}
	}
}

// spaceClass is exactly unicode.IsSpace, which has nothing outside the
// Basic Multilingual Plane.
func TestSchemaSpaceClass(t *testing.T) {
	class := spaceClass()
	if err := portablePattern(class); err != nil {
		t.Fatal(err)
	}
	re := regexpMust(t, "^"+class+"$")
	for r := rune(0); r <= 0xFFFF; r++ {
		if got := re.MatchString(string(r)); got != unicode.IsSpace(r) {
			t.Errorf("%s matches %U: %v, unicode.IsSpace: %v", class, r, got, !got)
		}
	}
	for r := rune(0x10000); r <= unicode.MaxRune; r++ {
		if unicode.IsSpace(r) {
			t.Errorf("unicode.IsSpace(%U) outside the Basic Multilingual Plane, which an ECMA-262 class cannot hold", r)
		}
	}
}

// goUnits are the units time.ParseDuration reads.
func TestSchemaGoUnits(t *testing.T) {
	for _, u := range goUnits {
		if _, err := time.ParseDuration("1" + u); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	for _, u := range []string{"d", "w", "y", "sec", "S", "MS", "Ms", "µ", "μ", "u", "n", "hr", "min", "mo", "us.", "ss"} {
		if _, err := time.ParseDuration("1" + u); err == nil {
			t.Errorf("time.ParseDuration reads unit %q, which goUnits lacks", u)
		}
	}
}
