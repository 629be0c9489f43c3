package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// jsonSchema validates JSON values against examples/sluice.schema.json,
// for the keywords that file uses. Go's standard library has no JSON
// Schema validator and sluice takes no dependency for one; a keyword this
// one does not know fails the test, so the schema cannot come to lean on
// one that goes unchecked here.
type jsonSchema struct {
	t    testing.TB
	root map[string]any
	res  map[string]*regexp.Regexp
}

func loadSchema(t testing.TB) *jsonSchema {
	t.Helper()
	data, err := os.ReadFile("../examples/sluice.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	s := &jsonSchema{t: t, res: map[string]*regexp.Regexp{}}
	if err := json.Unmarshal(data, &s.root); err != nil {
		t.Fatal(err)
	}
	return s
}

// at returns the subschema at a JSON pointer, such as /$defs/limit.
func (s *jsonSchema) at(ptr string) any {
	s.t.Helper()
	var cur any = s.root
	if ptr == "" {
		return cur
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch c := cur.(type) {
		case map[string]any:
			var ok bool
			if cur, ok = c[tok]; !ok {
				s.t.Fatalf("schema has no %s", ptr)
			}
		case []any:
			var i int
			if _, err := fmt.Sscan(tok, &i); err != nil || i < 0 || i >= len(c) {
				s.t.Fatalf("schema has no %s", ptr)
			}
			cur = c[i]
		default:
			s.t.Fatalf("schema has no %s", ptr)
		}
	}
	return cur
}

// with returns s reporting to t, as a fuzz target must.
func (s *jsonSchema) with(t testing.TB) *jsonSchema {
	c := *s
	c.t = t
	return &c
}

// pattern returns the string at ptr, a pattern.
func (s *jsonSchema) pattern(ptr string) string {
	s.t.Helper()
	p, ok := s.at(ptr).(string)
	if !ok {
		s.t.Fatalf("%s is not a string", ptr)
	}
	return p
}

// valid reports whether v, a value as encoding/json decodes it, is valid
// under the subschema sch.
func (s *jsonSchema) valid(sch, v any) bool {
	s.t.Helper()
	switch sch := sch.(type) {
	case bool:
		return sch
	case map[string]any:
		for k, arg := range sch {
			if !s.keyword(sch, k, arg, v) {
				return false
			}
		}
		return true
	}
	s.t.Fatalf("schema %v is neither an object nor a boolean", sch)
	return false
}

func (s *jsonSchema) keyword(sch map[string]any, k string, arg, v any) bool {
	s.t.Helper()
	obj, isObj := v.(map[string]any)
	arr, isArr := v.([]any)
	str, isStr := v.(string)
	num, isNum := v.(float64)
	switch k {
	case "$schema", "$id", "title", "description", "$comment", "$defs", "default", "examples":
		return true
	case "$ref":
		ref, _ := arg.(string)
		if !strings.HasPrefix(ref, "#/") {
			s.t.Fatalf("$ref %q: only references within the file are read here", ref)
		}
		return s.valid(s.at(ref[1:]), v)
	case "type":
		types, ok := arg.([]any)
		if !ok {
			types = []any{arg}
		}
		return slices.ContainsFunc(types, func(t any) bool { return hasType(v, t.(string)) })
	case "enum":
		return slices.ContainsFunc(arg.([]any), func(e any) bool { return reflect.DeepEqual(e, v) })
	case "const":
		return reflect.DeepEqual(arg, v)
	case "pattern":
		return !isStr || s.regexp(arg.(string)).MatchString(str)
	case "minLength":
		return !isStr || float64(utf8.RuneCountInString(str)) >= arg.(float64)
	case "maxLength":
		return !isStr || float64(utf8.RuneCountInString(str)) <= arg.(float64)
	case "minimum":
		return !isNum || num >= arg.(float64)
	case "maximum":
		return !isNum || num <= arg.(float64)
	case "items":
		return !isArr || !slices.ContainsFunc(arr, func(e any) bool { return !s.valid(arg, e) })
	case "minItems":
		return !isArr || float64(len(arr)) >= arg.(float64)
	case "maxItems":
		return !isArr || float64(len(arr)) <= arg.(float64)
	case "properties":
		for name, sub := range arg.(map[string]any) {
			if e, ok := obj[name]; isObj && ok && !s.valid(sub, e) {
				return false
			}
		}
		return true
	case "additionalProperties":
		props, _ := sch["properties"].(map[string]any)
		for name, e := range obj {
			if _, ok := props[name]; !ok && !s.valid(arg, e) {
				return false
			}
		}
		return true
	case "propertyNames":
		for name := range obj {
			if !s.valid(arg, name) {
				return false
			}
		}
		return true
	case "required":
		return !isObj || !slices.ContainsFunc(arg.([]any), func(n any) bool { _, ok := obj[n.(string)]; return !ok })
	case "minProperties":
		return !isObj || float64(len(obj)) >= arg.(float64)
	case "dependentRequired":
		for name, needs := range arg.(map[string]any) {
			if _, ok := obj[name]; isObj && ok && !s.keyword(nil, "required", needs, v) {
				return false
			}
		}
		return true
	case "not":
		return !s.valid(arg, v)
	case "allOf":
		return !slices.ContainsFunc(arg.([]any), func(sub any) bool { return !s.valid(sub, v) })
	case "anyOf":
		return slices.ContainsFunc(arg.([]any), func(sub any) bool { return s.valid(sub, v) })
	case "oneOf":
		n := 0
		for _, sub := range arg.([]any) {
			if s.valid(sub, v) {
				n++
			}
		}
		return n == 1
	}
	s.t.Fatalf("the schema uses keyword %q, which this test does not read: teach it to jsonSchema.keyword", k)
	return false
}

func hasType(v any, t string) bool {
	switch v := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case string:
		return t == "string"
	case float64:
		return t == "number" || t == "integer" && v == math.Trunc(v)
	case []any:
		return t == "array"
	case map[string]any:
		return t == "object"
	}
	return false
}

func (s *jsonSchema) regexp(p string) *regexp.Regexp {
	s.t.Helper()
	if re, ok := s.res[p]; ok {
		return re
	}
	re, err := regexp.Compile(p)
	if err != nil {
		s.t.Fatalf("pattern %q: %v", p, err)
	}
	s.res[p] = re
	return re
}

// portablePattern returns why a schema pattern, which editors read as an
// ECMA-262 regular expression (with or without the u flag), might match
// otherwise there than under Go's RE2, which checks it here; or nil. It
// allows what both read alike: literals in the Basic Multilingual Plane,
// classes, groups without flags, quantifiers, ^ and $, and the escapes
// of syntax characters, \d and \t \n \v \f \r. It refuses ., \s, \w and
// \b (which differ on non-ASCII characters, \r and \v), flags such as
// (?i), and braces that are not a repetition.
func portablePattern(p string) error {
	inClass := false
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRuneInString(p[i:])
		switch {
		case r > 0xFFFF:
			return fmt.Errorf("%q at byte %d is outside the Basic Multilingual Plane, two characters to ECMA-262", r, i)
		case r == '\\':
			if i+1 >= len(p) || !strings.ContainsRune(`\.+*?()[]{}|^$/dtnvfr`, rune(p[i+1])) {
				return fmt.Errorf("escape at byte %d: only syntax characters, \\d and \\t \\n \\v \\f \\r read alike", i)
			}
			n = 2
		case inClass && r == ']':
			inClass = false
		case inClass && r == '[' && strings.HasPrefix(p[i:], "[:"):
			return fmt.Errorf("[: at byte %d starts a POSIX class in RE2 only", i)
		case inClass:
		case r == '[':
			inClass = true
			if strings.HasPrefix(p[i:], "[]") || strings.HasPrefix(p[i:], "[^]") {
				return fmt.Errorf("class at byte %d: an unescaped ] first is a literal in RE2, the class's end in ECMA-262", i)
			}
			if strings.HasPrefix(p[i:], "[^") {
				n = 2
			}
		case r == '.':
			return fmt.Errorf(". at byte %d matches other line ends in ECMA-262 than in RE2; write the class meant", i)
		case r == '(' && strings.HasPrefix(p[i:], "(?"):
			return fmt.Errorf("(? at byte %d: groups with flags or names differ", i)
		case r == '{':
			if !regexp.MustCompile(`^\{[0-9]+(,[0-9]*)?\}`).MatchString(p[i:]) {
				return fmt.Errorf("{ at byte %d is not a repetition", i)
			}
		}
		i += n
	}
	if inClass {
		return fmt.Errorf("unterminated class")
	}
	return nil
}

// patterns returns every pattern in the schema, by where it is.
func (s *jsonSchema) patterns() map[string]string {
	out := map[string]string{}
	var walk func(ptr string, v any)
	walk = func(ptr string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if p, ok := e.(string); ok && k == "pattern" {
					out[ptr+"/pattern"] = p
					continue
				}
				walk(ptr+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k), e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s/%d", ptr, i), e)
			}
		}
	}
	walk("", s.root)
	return out
}

// Every pattern of the schema must read alike in ECMA-262 and RE2, so
// that what the tests here check under RE2 holds in editors.
func TestSchemaPatternsPortable(t *testing.T) {
	s := loadSchema(t)
	for ptr, p := range s.patterns() {
		if err := portablePattern(p); err != nil {
			t.Errorf("%s: %v", ptr, err)
		}
		if _, err := regexp.Compile(p); err != nil {
			t.Errorf("%s: %v", ptr, err)
		}
	}
}

func TestPortablePattern(t *testing.T) {
	for _, tt := range []struct {
		p  string
		ok bool
	}{
		{`^[a-z0-9][a-z0-9_-]*$`, true},
		{`^\+?[0-9]{1,3}(\.[0-9]*)?$`, true},
		{"^[\t-\r \u00a0]$", true},
		{`^a.b$`, false},
		{`^\s$`, false},
		{`^\w+$`, false},
		{`(?i)abc`, false},
		{`^[]a]$`, false},
		{`^[[:alpha:]]$`, false},
		{`^a{b$`, false},
		{`^\x41$`, false},
		{"^\U0001F600$", false},
	} {
		if err := portablePattern(tt.p); (err == nil) != tt.ok {
			t.Errorf("portablePattern(%q) = %v, want ok %v", tt.p, err, tt.ok)
		}
	}
}

// language returns every string a regular expression without repetition
// matches, as anchored with ^ and $, or an error if it has repetition or
// more than limit strings.
func language(p string, limit int) ([]string, error) {
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return nil, err
	}
	var lang func(re *syntax.Regexp) ([]string, error)
	lang = func(re *syntax.Regexp) ([]string, error) {
		out := []string{""}
		cross := func(alts []string) error {
			var next []string
			for _, a := range out {
				for _, b := range alts {
					next = append(next, a+b)
				}
			}
			if out = next; len(out) > limit {
				return fmt.Errorf("more than %d strings", limit)
			}
			return nil
		}
		switch re.Op {
		case syntax.OpEmptyMatch, syntax.OpBeginText, syntax.OpEndText:
		case syntax.OpLiteral:
			for _, r := range re.Rune {
				alts := []string{string(r)}
				if re.Flags&syntax.FoldCase != 0 {
					for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
						alts = append(alts, string(f))
					}
				}
				if err := cross(alts); err != nil {
					return nil, err
				}
			}
		case syntax.OpCharClass:
			var alts []string
			for i := 0; i+1 < len(re.Rune); i += 2 {
				for r := re.Rune[i]; r <= re.Rune[i+1]; r++ {
					alts = append(alts, string(r))
				}
			}
			if err := cross(alts); err != nil {
				return nil, err
			}
		case syntax.OpCapture, syntax.OpConcat:
			for _, sub := range re.Sub {
				alts, err := lang(sub)
				if err != nil {
					return nil, err
				}
				if err := cross(alts); err != nil {
					return nil, err
				}
			}
		case syntax.OpAlternate, syntax.OpQuest:
			out = nil
			if re.Op == syntax.OpQuest {
				out = []string{""}
			}
			for _, sub := range re.Sub {
				alts, err := lang(sub)
				if err != nil {
					return nil, err
				}
				if out = append(out, alts...); len(out) > limit {
					return nil, fmt.Errorf("more than %d strings", limit)
				}
			}
		default:
			return nil, fmt.Errorf("%v is not a finite language", re)
		}
		return out, nil
	}
	return lang(re)
}
