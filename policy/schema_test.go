package policy

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// The JSON Schema editors use must name exactly the fields the loader
// accepts.
func TestSchemaMatchesLoader(t *testing.T) {
	data, err := os.ReadFile("../examples/sluice.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]json.RawMessage
		Defs       struct {
			Policy struct {
				Properties map[string]json.RawMessage
			}
		} `json:"$defs"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	check := func(what string, got map[string]json.RawMessage, want []string) {
		names := keys(got)
		w := slices.Clone(want)
		slices.Sort(w)
		if !slices.Equal(names, w) {
			t.Errorf("%s: schema has %v, loader accepts %v", what, names, w)
		}
	}
	var store struct{ Properties map[string]json.RawMessage }
	if err := json.Unmarshal(schema.Properties["store"], &store); err != nil {
		t.Fatal(err)
	}
	check("top level", schema.Properties, topFields)
	check("store", store.Properties, storeFields)
	var storeTLS struct{ Properties map[string]json.RawMessage }
	if err := json.Unmarshal(store.Properties["tls"], &storeTLS); err != nil {
		t.Fatal(err)
	}
	check("store.tls", storeTLS.Properties, storeTLSFields)
	check("policy", schema.Defs.Policy.Properties, policyFields)
}

// FuzzLoad feeds arbitrary files to Load: it must never panic, and must
// return either a Set or an *Error whose every problem has a position.
func FuzzLoad(f *testing.F) {
	if data, err := os.ReadFile("../examples/sluice.yaml"); err == nil {
		f.Add(string(data))
	}
	f.Add("policies:\n  - {name: a, match: \"GET /x/{id}\", key: [\"path:id\", ip], limits: [\"1/s\"]}\n")
	f.Add("policies: [{name: a, limits: 3}]")
	f.Add("{")
	f.Fuzz(func(t *testing.T, src string) {
		set, err := Load("f.yaml", []byte(src))
		if err == nil {
			if set == nil {
				t.Fatal("nil Set and nil error")
			}
			return
		}
		perr, ok := err.(*Error)
		if !ok {
			t.Fatalf("error %T: %v", err, err)
		}
		for _, p := range perr.Problems {
			if p.Line < 1 || p.Column < 1 || p.Message == "" {
				t.Fatalf("problem without a position or message: %+v", p)
			}
		}
	})
}
