package rls

import (
	"fmt"
	"strings"
	"testing"
)

// A YAML syntax error names the line of the mistake: not the line where
// the block around it starts, nor none.
func TestParsePlacesYAMLSyntaxErrors(t *testing.T) {
	// 1,666 descriptors of 3 lines after the first two: 5,000 lines.
	// Descriptor 1,664's rate_limit, on line 4,997, is indented one
	// space too few.
	var long strings.Builder
	long.WriteString("domain: d\ndescriptors:\n")
	for i := range 1666 {
		indent := "    "
		if i == 1664 {
			indent = "   "
		}
		fmt.Fprintf(&long, "  - key: k\n    value: v%d\n%srate_limit: {unit: second, requests_per_unit: 1}\n", i, indent)
	}
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"key indented off its list item", "domain: d\ndescriptors:\n  - key: a\n    value: b\n   rate_limit: x\n", "test.yaml:5: invalid YAML: did not find expected '-' indicator"},
		{"unclosed flow mapping", "domain: d\ndescriptors: [{key: a\n", "test.yaml:2: invalid YAML: did not find expected ',' or '}'"},
		{"mapping value on the first line", "domain: d: e\n", "test.yaml:1: invalid YAML: mapping values are not allowed in this context"},
		{"unknown anchor", "domain: d\ndescriptors:\n  - key: *k\n", "test.yaml:3: invalid YAML: unknown anchor 'k' referenced"},
		{"control character", "domain: d\ndescriptors:\n  - key: a\x01\n", "test.yaml:3: invalid YAML: control characters are not allowed"},
		{"invalid UTF-8", "domain: d\ndescriptors:\n  - key: a\xff\n", "test.yaml:3: invalid YAML: invalid leading UTF-8 octet"},
		{"tab as indentation", "domain: d\ndescriptors:\n  - key: a\n\t  value: b\n", "test.yaml:4: invalid YAML: found a tab character that violates indentation"},
		{"unterminated quote on the first line", "domain: 'd\ndescriptors: []\n", "test.yaml:1: invalid YAML: found unexpected end of stream"},
		{"stray quote running over lines", "domain: d\ndescriptors:\n  - key: a\n    value: [b] \"\n  - key: c\n    value: \"d\"\n", "test.yaml:4: invalid YAML: did not find expected key"},
		{"last line without a line break", "domain: d\ndescriptors:\n  - key: a\n   value: b", "test.yaml:4: invalid YAML: did not find expected '-' indicator"},
		{"CRLF", "domain: d\r\ndescriptors:\r\n  - key: a\r\n    value: b\r\n   rate_limit: x\r\n", "test.yaml:5: invalid YAML: did not find expected '-' indicator"},
		{"deep in a long file", long.String(), "test.yaml:4997: invalid YAML: did not find expected '-' indicator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(File{Name: "test.yaml", Data: []byte(tt.yaml)})
			if err == nil || err.Error() != tt.want {
				t.Errorf("Parse = %v, want %s", err, tt.want)
			}
		})
	}
}
