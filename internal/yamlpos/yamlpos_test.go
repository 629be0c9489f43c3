package yamlpos

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"testing"
	"unicode/utf16"

	"go.yaml.in/yaml/v3"
)

// Each row is a document with one mistake, and where a reader should be
// sent: the library names no line, the line before the block around the
// mistake, or a line past the end for most of them.
func TestLocate(t *testing.T) {
	tests := []struct {
		name      string
		doc       string
		line, col int
		msg       string
	}{
		{"key indented off its list item", "policies:\n  - name: a\n    limit: 1/s\n   bad: x\n", 4, 4, "did not find expected '-' indicator"},
		{"key indented off its mapping", "a:\n  b: 1\n c: 2\n", 3, 2, "did not find expected key"},
		{"key under a block scalar", "a: |\n  x\n y: 1\n", 3, 2, "did not find expected key"},
		{"list item in a mapping", "a:\n  - b\n  c: d\n", 3, 4, "did not find expected '-' indicator"},
		{"mistake after comments and blank lines", "a: 1\n\n# c\n\n  b: 2\n", 5, 3, "did not find expected key"},
		{"unclosed flow list", "policies:\n  - [a\n", 2, 6, "did not find expected ',' or ']'"},
		{"unclosed flow mapping", "a: {x: 1\nb: 2\n", 2, 2, "did not find expected ',' or '}'"},
		// Cut after an item, the text fails with one message, cut after
		// a comma with another: the place is the last item, after which
		// the bracket is missing, not whichever item a search lands on.
		{"unclosed flow list of many items", "a: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16\n", 1, 56, "did not find expected ',' or ']'"},
		{"unclosed flow list ending in a comma", "policies:\n  - name: a\n    limits: [1/s, 2/m, 3/h, 4/d,\n", 3, 32, "did not find expected node content"},
		{"unclosed flow list of quoted items", "a: ['x, y', \"[z, w\", 'it''s', v\n", 1, 31, "did not find expected ',' or ']'"},
		{"unclosed flow list before a comment", "a: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16  # the limits\n", 1, 56, "did not find expected ',' or ']'"},
		// Inside a flow collection, cut before a mistake, the text fails
		// too, with the collection left open: the mistake is still the
		// place.
		{"unknown escape in a flow mapping", "policies:\n  - name: a\n    match: {path: \"/a\\q\", methods: [GET]}\n", 3, 23, "found unknown escape character"},
		{"flow collections too deep", strings.Repeat("[", 10001) + "\n", 1, 10001, "exceeded max depth of 10000"},
		{"unclosed flow mapping around a list", "policies:\n  - name: a\n    match: {path: /x, methods: [GET, POST]\n", 3, 42, "did not find expected ',' or '}'"},
		// Closed by the wrong bracket, the collection is not left open:
		// the mistake is the bracket.
		{"flow list closed by a brace", "a: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}\n", 1, 58, "did not find expected ',' or ']'"},
		// The key below a mapping left open is read into it: the text
		// fails from where the brace is missing, after the list.
		{"unclosed flow mapping before a key", "policies:\n  - name: a\n    match: {path: /x, methods: [GET, POST]\n    key: ip\n", 3, 42, "did not find expected ',' or '}'"},
		{"extra closing bracket", "a: [1, 2]]\n", 1, 10, "did not find expected key"},
		{"mapping value in a plain scalar", "a: b: c\n", 1, 5, "mapping values are not allowed in this context"},
		{"scalar with no colon", "a: 1\nb: 2\nc\nd: 3\n", 3, 1, "could not find expected ':'"},
		{"unknown anchor", "policies:\n  - &a name\n  - *b\n", 3, 6, "unknown anchor 'b' referenced"},
		{"unknown directive", "%FOO\n---\na: 1\n", 1, 2, "found unknown directive name"},
		{"control character", "policies:\n  - name: a\x01\n", 2, 12, "control characters are not allowed"},
		{"NUL", "a: 1\nb: \x00\n", 2, 4, "control characters are not allowed"},
		{"invalid UTF-8", "policies:\n  - name: a\xff\n", 2, 12, "invalid leading UTF-8 octet"},
		{"UTF-8 cut short at the end", "a: 1\nb: \xe2\x82", 2, 4, "incomplete UTF-8 octet sequence"},
		{"control character after a byte order mark", "\ufeffa: \x01\n", 1, 4, "control characters are not allowed"},
		{"tab as indentation", "policies:\n  - name: a\n\tlimits: [1/s]\n", 3, 1, "found a tab character that violates indentation"},
		{"tab before a list item", "a:\n\t- b\n", 2, 1, "found character that cannot start any token"},
		{"unterminated double quote", "policies:\n  - name: \"a\n    limits: [1/s]\n", 2, 11, "found unexpected end of stream"},
		{"unterminated quote on the first line", "prefix: 'abc\npolicies: []\n", 1, 9, "found unexpected end of stream"},
		// The quote opened on line 3 closes at the apostrophe on line 5,
		// where the parser gives up.
		{"stray quote running over lines", "policies:\n  - name: a\n    limits: [1/s]  '# a comment\n  - name: b\n    note: it's\n", 3, 20, "did not find expected key"},
		{"unknown escape", "a: \"x\\q\"\n", 1, 7, "found unknown escape character"},
		{"last line without a line break", "policies:\n  - name: a\n   limits: x", 3, 4, "did not find expected '-' indicator"},
		{"CRLF", "policies:\r\n  - name: a\r\n    limit: 1/s\r\n   bad: x\r\n", 4, 4, "did not find expected '-' indicator"},
		{"CR", "a: 1\rb: c: d\r", 2, 5, "mapping values are not allowed in this context"},
		{"LS", "a: 1\u2028b: c: d\n", 2, 5, "mapping values are not allowed in this context"},
		// The reader decodes ahead of the parser, but not the whole file:
		// a control character far below a mistake is not what fails.
		{"mistake before a control character", "a: b: c\n" + strings.Repeat("# padding\n", 100) + "\x01\n", 1, 5, "mapping values are not allowed in this context"},
		{"control character after a mistake", "policies:\n  - name: a\n   limits: x\n# \x01\n", 4, 3, "control characters are not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := unmarshal([]byte(tt.doc))
			if err == nil {
				t.Fatalf("%q parses", tt.doc)
			}
			got := Locate([]byte(tt.doc), err)
			want := Pos{tt.line, tt.col, tt.msg}
			if got != want {
				t.Errorf("Locate(%q, %q) = %+v, want %+v", tt.doc, err, got, want)
			}
		})
	}
}

// policies returns a policy file of n policies, 3 lines each after the
// first: line 3i+2 names policy i, line 3i+4 gives its key.
func policies(n int) string {
	var b strings.Builder
	b.WriteString("policies:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: p%d\n    limits: [1/s]\n    key: ip\n", i)
	}
	return b.String()
}

// bound is the most parses Locate may make of a document of lines
// lines, none longer than chars characters: two to try the first
// character the reader refuses, one of the whole document, a search of
// the lines and one of a line for the error, and again, after one more
// parse, for a quoted scalar's, and two to try the last item of a flow
// collection.
func bound(lines, chars int) int {
	return 6 + 2*(bits.Len(uint(lines))+bits.Len(uint(chars)))
}

// A mistake near the end of a 5,000-line file costs a few parses, not
// one per line.
func TestLocateBounded(t *testing.T) {
	doc := policies(1666) // 4,999 lines
	// The quote opened on line 3,000 runs to the apostrophe on line
	// 4,501.
	stray := strings.Replace(doc, "p999\n    limits: [1/s]\n", "p999\n    limits: [1/s]  '\n", 1)
	stray = strings.Replace(stray, "p1500\n", "p1500  # it's\n", 1)
	tests := []struct {
		name      string
		doc       string
		line, col int
	}{
		{"indentation near the end", strings.Replace(doc, "p1664\n    limits: [1/s]\n    key", "p1664\n    limits: [1/s]\n   key", 1), 4996, 4},
		{"stray quote in the middle", stray, 3000, 20},
		{"control character near the end", doc[:len(doc)-3] + "\x01p\n", 4999, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.doc)
			err := unmarshal(data)
			if err == nil {
				t.Fatal("the document parses")
			}
			parses := 0
			got := locate(data, err, func(b []byte) error {
				parses++
				return unmarshal(b)
			})
			if got.Line != tt.line || got.Column != tt.col {
				t.Errorf("placed at %d:%d, want %d:%d", got.Line, got.Column, tt.line, tt.col)
			}
			t.Logf("%d parses", parses)
			lines := strings.Count(tt.doc, "\n")
			if max := bound(lines, 20); parses > max {
				t.Errorf("%d parses for %d lines, want at most %d", parses, lines, max)
			}
		})
	}
}

// When data does not fail with err, or is UTF-16, the line is the one
// the library names, kept within the document.
func TestLocateFallsBack(t *testing.T) {
	le := func(s string) []byte {
		b := []byte{0xff, 0xfe}
		for _, u := range utf16.Encode([]rune(s)) {
			b = append(b, byte(u), byte(u>>8))
		}
		return b
	}
	tests := []struct {
		name string
		doc  []byte
		err  error
		want Pos
	}{
		{"another document's error", []byte("a: 1\nb: 2\n"), errors.New("yaml: line 7: did not find expected key"), Pos{2, 0, "did not find expected key"}},
		{"valid document, no line", []byte("a: 1\n"), errors.New("yaml: unknown anchor 'x' referenced"), Pos{0, 0, "unknown anchor 'x' referenced"}},
		{"UTF-16", le("a: 1\nb: c: d\n"), nil, Pos{2, 0, "mapping values are not allowed in this context"}},
		{"type error", []byte("a: 1\n"), &yaml.TypeError{Errors: []string{"line 1: cannot unmarshal"}}, Pos{0, 0, "unmarshal errors:\n  line 1: cannot unmarshal"}},
		{"no error", []byte("a: 1\n"), nil, Pos{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.err
			if err == nil {
				err = unmarshal(tt.doc)
			}
			if got := Locate(tt.doc, err); got != tt.want {
				t.Errorf("Locate = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// SecondDocument finds the marker that begins a second document, not
// one that begins the first, whatever the line breaks.
func TestSecondDocument(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		line int
	}{
		{"one document", "a: 1\n", 0},
		{"one document with its markers", "---\na: 1\n...\n", 0},
		{"a second document", "a: 1\n---\nb: 2\n", 2},
		{"a marker with a comment", "a: 1\n--- # b\nb: 2\n", 2},
		{"after a first marker", "# c\n\n---\na: 1\n---\nb: 2\n", 5},
		{"after a directive", "%YAML 1.2\n---\na: 1\n---\nb: [\n", 4},
		{"after an empty document", "---\n---\nb: 2\n", 2},
		{"after a document end and a directive", "a: 1\n...\n%YAML 1.2\n---\nb: 2\n", 4},
		{"after a byte order mark", "\ufeff---\na: 1\n---\n", 3},
		{"CR", "a: 1\r---\rb: 2\r", 2},
		{"CRLF", "a: 1\r\n---\r\nb: 2\r\n", 2},
		{"not a marker", "a: 1\n---b\n", 0},
	}
	for _, tt := range tests {
		if got := SecondDocument([]byte(tt.doc)); got != tt.line {
			t.Errorf("%s: SecondDocument(%q) = %d, want %d", tt.name, tt.doc, got, tt.line)
		}
	}
}

// FuzzLocate: whatever the document, Locate places its error on one of
// its lines, in a column of that line, within the bound of parses.
func FuzzLocate(f *testing.F) {
	for _, s := range []string{
		"policies:\n  - name: a\n    limit: 1/s\n   bad: x\n",
		"policies:\n  - [a\n",
		"a: b: c\n",
		"policies:\n  - &a name\n  - *b\n",
		"policies:\n  - name: a\x01\n",
		"policies:\n  - name: a\n    limits: [1/s]  '# a comment\n  - name: b\n    note: it's\n",
		"a: {x: [1,\n 2}\r\n\u2028'b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := unmarshal(data)
		if err == nil || utf16BOM(data) {
			return
		}
		parses := 0
		got := locate(data, err, func(b []byte) error {
			parses++
			return unmarshal(b)
		})
		d := newDoc(data)
		if got.Line < 1 || got.Line > len(d.lines) {
			t.Fatalf("%q: line %d of %d (%v)", data, got.Line, len(d.lines), err)
		}
		chars := 0
		for _, l := range d.lines {
			chars = max(chars, l.chars)
		}
		if got.Column < 0 || got.Column > d.lines[got.Line-1].chars {
			t.Fatalf("%q: column %d of line %d, which has %d characters", data, got.Column, got.Line, d.lines[got.Line-1].chars)
		}
		if max := bound(len(d.lines), chars); parses > max {
			t.Fatalf("%q: %d parses, want at most %d", data, parses, max)
		}
	})
}
