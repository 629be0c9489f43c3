package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With --log-format json, a configuration that does not load is logged
// as JSON too, one record per problem with its place as attributes, so
// that a log pipeline reading JSON does not drop the reason sluice would
// not start; still exit 3. In text it stays the lines a person reads.
func TestServeLoadFailureLogFormat(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("policies:\n  - name: a\n    limts: [\"1/s\"]\n  - name: b\n    limits: [\"1/fortnight\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	edge := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(edge, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "tls.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	off := []string{"serve", "--listen", "off", "--check-listen", "off", "--admin-listen", "off", "--grpc-listen", "127.0.0.1:0"}
	type record map[string]any
	for _, tt := range []struct {
		args []string
		want []record // each record's attributes but time and level
	}{
		{[]string{"--config", bad}, []record{
			{"msg": "the configuration does not load", "file": bad, "line": 3.0, "column": 5.0},
			{"msg": "the configuration does not load", "file": bad, "line": 5.0, "column": 14.0},
		}},
		{[]string{"--config", bad, "--envoy-config", edge}, []record{
			{"msg": "the configuration does not load", "file": bad, "line": 3.0, "column": 5.0},
			{"msg": "the configuration does not load", "file": bad, "line": 5.0, "column": 14.0},
			{"msg": "the configuration does not load", "file": edge, "line": 4.0},
		}},
		{[]string{"--tls-cert", notPEM, "--tls-key", notPEM}, []record{
			{"msg": "the configuration does not load"},
		}},
	} {
		args := append(append(append([]string{}, off...), "--log-format", "json"), tt.args...)
		code, _, stderr := runCLI(t, args...)
		if code != 3 {
			t.Errorf("%q: exit %d, want 3; stderr %q", tt.args, code, stderr)
			continue
		}
		var got []record
		for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
			var r record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Errorf("%q: a line that is not JSON: %q", tt.args, line)
				continue
			}
			if r["level"] == "ERROR" {
				got = append(got, r)
			}
		}
		if len(got) != len(tt.want) {
			t.Errorf("%q: %d error records, want %d:\n%s", tt.args, len(got), len(tt.want), stderr)
			continue
		}
		for i, w := range tt.want {
			for k, v := range w {
				if got[i][k] != v {
					t.Errorf("%q: record %d: %s is %v, want %v", tt.args, i, k, got[i][k], v)
				}
			}
			if e, _ := got[i]["error"].(string); e == "" || strings.Contains(e, "bad configuration") {
				t.Errorf("%q: record %d: error %q, want the problem alone", tt.args, i, e)
			}
			if _, ok := w["line"]; !ok {
				if _, has := got[i]["line"]; has {
					t.Errorf("%q: record %d has a line it cannot know: %v", tt.args, i, got[i])
				}
			}
		}
	}
	// The text format keeps its lines, each problem as file:line:col.
	code, _, stderr := runCLI(t, append(append([]string{}, off...), "--config", bad)...)
	want := "sluice serve: the configuration does not load:\n" + bad + ":3:5: unknown field \"limts\""
	if code != 3 || !strings.HasPrefix(stderr, want) || strings.Contains(stderr, "level=") {
		t.Errorf("text: exit %d, stderr %q; want 3 and a start of %q", code, stderr, want)
	}
}
