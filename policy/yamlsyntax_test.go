package policy

import (
	"errors"
	"strings"
	"testing"
)

// A YAML syntax error names the line and column of the mistake, as
// yamlpos places it (its tests cover the kinds of mistake): not the line
// where the block around it starts, nor the first line when the parser
// names none.
func TestLoadPlacesYAMLSyntaxErrors(t *testing.T) {
	tests := []struct {
		name      string
		yaml      string
		line, col int
		msg       string
	}{
		{"key indented off its list item", "policies:\n  - name: a\n    limits: [1/s]\n   bad: x\n", 4, 4, "did not find expected '-' indicator"},
		{"mapping value in a pattern", "policies:\n  - name: a\n    match: GET /x: y\n", 3, 18, "mapping values are not allowed in this context"},
		{"unknown anchor", "policies:\n  - &a name\n  - *b\n", 3, 6, "unknown anchor 'b' referenced"},
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
		{"an invalid second document after a directive", "%YAML 1.1\n---\n" + one + "---\npolicies: [\n", 6, "a second YAML document begins here, and is invalid"},
		{"an invalid second document, CR line breaks", strings.ReplaceAll(one+"---\npolicies: [\n", "\n", "\r"), 4, "a second YAML document begins here, and is invalid"},
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
