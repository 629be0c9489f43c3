package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/dashboard"
)

// TestSimListsAgreeWithPlayground: the same lists of algorithms and
// setups, given to "sluice sim" as flags and to the dashboard's
// playground as a form or as JSON, run the same rows or are refused by
// both. "all" anywhere stands for every name; no names at all mean the
// default (every algorithm, the scenario's setups).
func TestSimListsAgreeWithPlayground(t *testing.T) {
	every := []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "leaky_bucket", "gcra"}
	floods := []string{"own-counters", "shared-counter"} // the flood scenario's own
	rows := func(algs, setups []string) string {
		var out []string
		for _, a := range algs {
			for _, s := range setups {
				out = append(out, a+"/"+s)
			}
		}
		return strings.Join(out, " ")
	}
	const refused = "refused"
	for _, tt := range []struct {
		algorithms, setups string
		want               string // the rows run, or refused
	}{
		{"all", "", rows(every, floods)},
		{"fixed_window,all", "", rows(every, floods)},
		{"", "", rows(every, floods)},
		{",", "", rows(every, floods)},
		{" gcra , gcra,fixed_window", "", rows([]string{"gcra", "fixed_window"}, floods)},
		{"gcra", "all,single", rows([]string{"gcra"}, []string{"single", "own-counters", "shared-counter"})},
		{"gcra", "single, ", rows([]string{"gcra"}, []string{"single"})},
		{"leaky", "", refused},
		{"all,leaky", "", refused},
		{"gcra", "all,cluster", refused},
	} {
		cli := func() string {
			code, stdout, stderr := runCLI(t, "sim", "--scenario", "flood", "--json", "--algorithms", tt.algorithms, "--setup", tt.setups)
			if code != 0 {
				if code != 2 {
					t.Errorf("%q %q: CLI exit %d, want 0 or 2: %s", tt.algorithms, tt.setups, code, stderr)
				}
				return refused
			}
			var got []string
			for _, r := range decodeStrict(t, stdout).Results {
				got = append(got, r.Algorithm+"/"+r.Setup)
			}
			return strings.Join(got, " ")
		}()
		d := dashboard.New(dashboard.Options{})
		playground := func(contentType, body string) string {
			req := httptest.NewRequest("POST", "/api/sim", strings.NewReader(body))
			req.Header.Set("Content-Type", contentType)
			rec := httptest.NewRecorder()
			d.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				if rec.Code != http.StatusBadRequest {
					t.Errorf("%q %q: playground status %d, want 200 or 400: %s", tt.algorithms, tt.setups, rec.Code, rec.Body)
				}
				return refused
			}
			var res dashboard.SimResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range res.Results {
				got = append(got, r.Algorithm.String()+"/"+r.Setup.String())
			}
			return strings.Join(got, " ")
		}
		form := playground("application/x-www-form-urlencoded",
			url.Values{"scenario": {"flood"}, "algorithms": {tt.algorithms}, "setups": {tt.setups}}.Encode())
		// In JSON, a list is an array of names; the empty list leaves
		// the field out.
		elems := func(list string) []string {
			if list == "" {
				return nil
			}
			return strings.Split(list, ",")
		}
		b, err := json.Marshal(dashboard.SimRequest{Scenario: "flood", Algorithms: elems(tt.algorithms), Setups: elems(tt.setups)})
		if err != nil {
			t.Fatal(err)
		}
		asJSON := playground("application/json", string(b))
		if cli != tt.want || form != tt.want || asJSON != tt.want {
			t.Errorf("algorithms %q, setups %q: want %s\n sluice sim:      %s\n playground form: %s\n playground JSON: %s",
				tt.algorithms, tt.setups, tt.want, cli, form, asJSON)
		}
	}
}
