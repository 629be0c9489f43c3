package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A YAML syntax error names the line and column of the mistake: not the
// line where the block around it starts, nor the first line when the
// parser names none.
func TestLoadPlacesYAMLSyntaxErrors(t *testing.T) {
	// 1,666 policies of 3 lines after the first: 4,999 lines. Policy
	// 1,664's key, on line 4,996, is indented one space too few.
	var long strings.Builder
	long.WriteString("policies:\n")
	for i := range 1666 {
		indent := "    "
		if i == 1664 {
			indent = "   "
		}
		fmt.Fprintf(&long, "  - name: p%d\n    limits: [1/s]\n%skey: ip\n", i, indent)
	}
	tests := []struct {
		name      string
		yaml      string
		line, col int
		msg       string
	}{
		{"key indented off its list item", "policies:\n  - name: a\n    limits: [1/s]\n   bad: x\n", 4, 4, "did not find expected '-' indicator"},
		{"unclosed flow list", "policies:\n  - [a\n", 2, 6, "did not find expected ',' or ']'"},
		{"mapping value in a plain scalar", "a: b: c\n", 1, 5, "mapping values are not allowed in this context"},
		{"mapping value in a pattern", "policies:\n  - name: a\n    match: GET /x: y\n", 3, 18, "mapping values are not allowed in this context"},
		{"unknown anchor", "policies:\n  - &a name\n  - *b\n", 3, 6, "unknown anchor 'b' referenced"},
		{"control character", "policies:\n  - name: a\x01\n", 2, 12, "control characters are not allowed"},
		{"invalid UTF-8", "policies:\n  - name: a\xff\n", 2, 12, "invalid leading UTF-8 octet"},
		{"tab as indentation", "policies:\n  - name: a\n\tlimits: [1/s]\n", 3, 1, "found a tab character that violates indentation"},
		{"unterminated quote", "policies:\n  - name: \"a\n    limits: [1/s]\n", 2, 11, "found unexpected end of stream"},
		{"unterminated quote on the first line", "prefix: 'abc\npolicies: []\n", 1, 9, "found unexpected end of stream"},
		{"stray quote running over lines", "policies:\n  - name: a\n    limits: [1/s]  '# a comment\n  - name: b\n    limits: [1/s]  # it's\n", 3, 20, "did not find expected key"},
		{"last line without a line break", "policies:\n  - name: a\n   limits: x", 3, 4, "did not find expected '-' indicator"},
		{"CRLF", "policies:\r\n  - name: a\r\n    limits: [1/s]\r\n   bad: x\r\n", 4, 4, "did not find expected '-' indicator"},
		{"deep in a long file", long.String(), 4996, 4, "did not find expected '-' indicator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("f.yaml", []byte(tt.yaml))
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("Load = %v, want an *Error", err)
			}
			want := Problem{File: "f.yaml", Line: tt.line, Column: tt.col, Message: "invalid YAML: " + tt.msg}
			if len(perr.Problems) != 1 || perr.Problems[0] != want {
				t.Errorf("Load = %v, want %v", err, want)
			}
		})
	}
}

// A file of more than one YAML document is refused: only the first would
// be read, and the policies after a "---" dropped without a word.
func TestLoadRefusesSecondDocument(t *testing.T) {
	const one = "policies:\n  - name: a\n    limits: [1/s]\n"
	for _, tt := range []struct {
		name, yaml string
		line       int
		msg        string
	}{
		{"a second document", one + "---\npolicies:\n  - name: b\n    limits: [1/s]\n", 4, "a second YAML document begins here"},
		{"an invalid second document", "---\n" + one + "--- # more\npolicies: [\n", 5, "a second YAML document begins here, and is invalid"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("f.yaml", []byte(tt.yaml))
			var perr *Error
			if !errors.As(err, &perr) || len(perr.Problems) != 1 {
				t.Fatalf("Load = %v, want one problem", err)
			}
			if p := perr.Problems[0]; p.Line != tt.line || !strings.Contains(p.Message, tt.msg) {
				t.Errorf("Load = %v, want line %d and %q", err, tt.line, tt.msg)
			}
		})
	}
	// One document, with or without its markers, loads.
	for _, y := range []string{one, "---\n" + one, "---\n" + one + "...\n", one + "# a comment\n"} {
		if _, err := Load("f.yaml", []byte(y)); err != nil {
			t.Errorf("Load(%q) = %v", y, err)
		}
	}
}
