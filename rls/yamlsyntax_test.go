package rls

import "testing"

// A YAML syntax error names the line of the mistake, as yamlpos places
// it (its tests cover the kinds of mistake): not the line where the block
// around it starts, nor none.
func TestParsePlacesYAMLSyntaxErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"key indented off its list item", "domain: d\ndescriptors:\n  - key: a\n    value: b\n   rate_limit: x\n", "test.yaml:5: invalid YAML: did not find expected '-' indicator"},
		{"unknown anchor", "domain: d\ndescriptors:\n  - key: *k\n", "test.yaml:3: invalid YAML: unknown anchor 'k' referenced"},
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
