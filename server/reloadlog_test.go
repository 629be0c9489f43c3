package server

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// textRecords parses what slog's text handler wrote: one map of
// attributes (time, level and msg included) per record, quoted values
// unquoted, so that a test sees a multi-line value as one.
func textRecords(t *testing.T, logs string) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, line := range strings.Split(strings.TrimSuffix(logs, "\n"), "\n") {
		r := map[string]string{}
		for rest := line; rest != ""; {
			key, after, ok := strings.Cut(rest, "=")
			if !ok {
				t.Fatalf("a record that is not key=value: %q", line)
			}
			var val string
			if strings.HasPrefix(after, `"`) {
				q, err := strconv.QuotedPrefix(after)
				if err != nil {
					t.Fatalf("%q: %v", line, err)
				}
				val, _ = strconv.Unquote(q)
				after = after[len(q):]
			} else {
				val, after, _ = strings.Cut(after, " ")
				after = " " + after
			}
			r[key] = val
			rest = strings.TrimPrefix(after, " ")
		}
		out = append(out, r)
	}
	return out
}

// A reload that does not load is logged as a start that does not load
// is: one record per problem, its place as attributes, then the one
// record saying the previous configuration keeps serving; no value
// spans lines, as a JSON log pipeline or a query on file= would trip on.
func TestReloadFailureLogsEachProblem(t *testing.T) {
	const edgeOK = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	dir := t.TempDir()
	edge := writeFile(t, dir, "edge.yaml", edgeOK)
	ts := startServer(t, "policies: [{name: api, key: ip, limits: [\"10/m\"]}]\n", Options{EnvoyConfigs: []string{edge}})
	bad := filepath.Join(ts.dir, "sluice.yaml")
	before := len(ts.logs.String())
	writeFile(t, ts.dir, "sluice.yaml", "policies:\n  - name: a\n    limts: [\"1/s\"]\n  - name: b\n    limits: [\"1/fortnight\"]\n")
	writeFile(t, dir, "edge.yaml", strings.Replace(edgeOK, "minute", "fortnight", 1))
	if err := ts.Reload(context.Background()); err == nil {
		t.Fatal("files that do not load reloaded")
	}
	want := []map[string]string{
		{"msg": "the configuration does not load", "file": bad, "line": "3", "column": "5"},
		{"msg": "the configuration does not load", "file": bad, "line": "5", "column": "14"},
		{"msg": "the configuration does not load", "file": edge, "line": "4"},
		{"msg": "reload failed; the previous configuration keeps serving"},
	}
	var got []map[string]string
	for _, r := range textRecords(t, ts.logs.String()[before:]) {
		for k, v := range r {
			if strings.Contains(v, "\n") {
				t.Errorf("%s spans lines: %q", k, v)
			}
		}
		if r["level"] == "ERROR" {
			got = append(got, r)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d error records, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		for k, v := range w {
			if got[i][k] != v {
				t.Errorf("record %d: %s is %q, want %q", i, k, got[i][k], v)
			}
		}
		if _, ok := w["file"]; !ok {
			continue
		}
		if e := got[i]["error"]; e == "" || strings.Contains(e, ErrConfig.Error()) || strings.Contains(e, "sluice.yaml:") {
			t.Errorf("record %d: error %q, want the problem alone", i, e)
		}
		if _, ok := w["column"]; !ok && got[i]["column"] != "" {
			t.Errorf("record %d has a column it cannot know: %v", i, got[i])
		}
	}
}

// A reload that changes the store section names, in its warning, what
// differs from the store in use (a password in a Redis URL hidden); one
// that puts the section back says that no restart is needed any more.
func TestReloadStoreChangeLogged(t *testing.T) {
	const policies = "policies: [{name: api, key: ip, limits: [\"10/m\"]}]\n"
	ts := startServer(t, "store: {max_keys: 64, timeout: 50ms}\n"+policies, Options{})
	reload := func(store string) []map[string]string {
		t.Helper()
		before := len(ts.logs.String())
		writeFile(t, ts.dir, "sluice.yaml", store+policies)
		if err := ts.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		return textRecords(t, ts.logs.String()[before:])
	}
	const warned = "the store section changed; a restart is needed for it to apply, the current store stays in use"
	const cleared = "the store section is back to the store in use; no restart is needed"
	for _, step := range []struct {
		store string
		msg   string // the record expected, with changed as its attribute
		// changed is what the warning names; "" when there is none.
		changed string
		hidden  string // what no record may show
	}{
		{store: "store: {max_keys: 128, timeout: 80ms, deny_cache: false}\n", msg: warned,
			changed: "timeout 50ms→80ms, deny_cache true→false, max_keys 64→128"},
		{store: "store: {max_keys: 64, timeout: 50ms}\n", msg: cleared},
		{store: "store: {max_keys: 64, timeout: 50ms}\n"},
		{store: "store: {redis: \"redis://:hunter2@127.0.0.1:1/0\", max_keys: 64, timeout: 50ms}\n", msg: warned,
			changed: "redis (none)→[127.0.0.1:1] (password hidden)", hidden: "hunter2"},
		{store: "store: {redis: \"redis://:other@127.0.0.1:1/0\", max_keys: 64, timeout: 50ms}\n", msg: warned,
			changed: "redis (none)→[127.0.0.1:1] (password hidden)", hidden: "other@"},
		{store: "store: {cluster: [\"10.0.0.1:6379\"], max_keys: 64, timeout: 50ms, tls: {ca: ca.pem}}\n", msg: warned,
			changed: "cluster (none)→[10.0.0.1:6379], tls.ca (none)→ca.pem"},
		{store: "store: {max_keys: 64}\n", msg: warned, changed: "timeout 50ms→(default)"},
		{store: "store: {max_keys: 64, timeout: 50ms}\n", msg: cleared},
	} {
		recs := reload(step.store)
		var found map[string]string
		for _, r := range recs {
			if step.hidden != "" {
				for k, v := range r {
					if strings.Contains(v, step.hidden) {
						t.Errorf("%q: %s shows %q: %q", step.store, k, step.hidden, v)
					}
				}
			}
			switch r["msg"] {
			case warned, cleared:
				if found != nil {
					t.Errorf("%q: two store records: %v and %v", step.store, found, r)
				}
				found = r
			}
		}
		switch {
		case step.msg == "" && found != nil:
			t.Errorf("%q: a store record where nothing changed: %v", step.store, found)
		case step.msg == "":
		case found == nil:
			t.Errorf("%q: no record %q", step.store, step.msg)
		case found["msg"] != step.msg || found["changed"] != step.changed:
			t.Errorf("%q: record %q changed=%q, want %q changed=%q", step.store, found["msg"], found["changed"], step.msg, step.changed)
		}
		if found != nil && step.msg == warned && found["level"] != "WARN" || step.msg == cleared && found != nil && found["level"] != "INFO" {
			t.Errorf("%q: level %s", step.store, found["level"])
		}
	}
}
