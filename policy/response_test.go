package policy

import (
	"errors"
	"strings"
	"testing"
)

// responsePolicies ends every file of these tests: the response section
// alone does not load.
const responsePolicies = "policies: [{name: a, limits: [\"1/s\"]}]\n"

// Each row is a response section and the Response it loads as.
func TestResponseValues(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		want       Response
	}{
		{"no section", "", Response{}},
		{"empty section", "response:\n", Response{}},
		{"both families", "response: {headers: [draft, legacy]}\n", Response{}},
		{"both, the other order", "response: {headers: [legacy, draft]}\n", Response{}},
		{"draft only", "response: {headers: [draft]}\n", Response{NoLegacyHeaders: true}},
		{"legacy only", "response: {headers: [legacy]}\n", Response{NoDraftHeaders: true}},
		{"one family, not a list", "response: {headers: legacy}\n", Response{NoDraftHeaders: true}},
		{"none", "response: {headers: []}\n", Response{NoDraftHeaders: true, NoLegacyHeaders: true}},
		{"https type", "response:\n  problem_type: https://example.com/problems/rate-limited\n",
			Response{ProblemType: "https://example.com/problems/rate-limited"}},
		{"http type with a fragment", "response: {problem_type: \"http://example.com/problems#rate-limited\"}\n",
			Response{ProblemType: "http://example.com/problems#rate-limited"}},
		{"about:blank written", "response: {problem_type: about:blank}\n", Response{ProblemType: "about:blank"}},
		{"a tag URI", "response: {problem_type: \"tag:example.com,2026:rate-limited\"}\n",
			Response{ProblemType: "tag:example.com,2026:rate-limited"}},
		{"a URN", "response: {problem_type: \"urn:example:problem:rate-limited\"}\n",
			Response{ProblemType: "urn:example:problem:rate-limited"}},
		{"escapes, a port, a query", "response: {problem_type: \"https://example.com:8443/p%C3%A9/x?v=1\"}\n",
			Response{ProblemType: "https://example.com:8443/p%C3%A9/x?v=1"}},
		{"an IPv6 host", "response: {problem_type: \"https://[2001:db8::1]/problems/x\"}\n",
			Response{ProblemType: "https://[2001:db8::1]/problems/x"}},
		{"Kong's hide_client_headers", "response:\n  headers: []\n  problem_type: https://example.com/problems/rate-limited\n",
			Response{NoDraftHeaders: true, NoLegacyHeaders: true, ProblemType: "https://example.com/problems/rate-limited"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Load("sluice.yaml", []byte(tt.yaml+responsePolicies))
			if err != nil {
				t.Fatal(err)
			}
			if got := set.Response(); got != tt.want {
				t.Errorf("Response() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Each case is a response section with one mistake, and where the one
// problem it reports is and the words it must have.
func TestResponseErrors(t *testing.T) {
	for _, tt := range []struct {
		name      string
		yaml      string
		line, col int
		want      []string
	}{
		{"unknown field", "response:\n  header: []\n", 2, 3,
			[]string{`unknown field "header" in response`, `did you mean "headers"?`, "allowed: headers, problem_type"}},
		{"Kong's name", "response:\n  hide_client_headers: true\n", 2, 3,
			[]string{`unknown field "hide_client_headers" in response`}},
		{"misspelt problem_type", "response:\n  problemtype: about:blank\n", 2, 3,
			[]string{`did you mean "problem_type"?`}},
		{"not a mapping", "response: [draft]\n", 1, 11, []string{"response must be a mapping"}},
		{"unknown family", "response:\n  headers: [draft, legacyy]\n", 2, 20,
			[]string{`unknown header family "legacyy"`, `did you mean "legacy"?`, "draft", "legacy"}},
		{"family in capitals", "response:\n  headers: [Draft]\n", 2, 13, []string{`did you mean "draft"?`}},
		{"a header's name", "response:\n  headers: [X-RateLimit-Limit]\n", 2, 13, []string{`unknown header family "X-RateLimit-Limit"`}},
		{"repeated family", "response:\n  headers:\n    - draft\n    - legacy\n    - draft\n", 5, 7,
			[]string{`header family "draft" repeated`, "first at line 3"}},
		{"headers left empty", "response:\n  headers:\n", 2, 3, []string{"[]", "leave headers out"}},
		{"headers a mapping", "response:\n  headers: {draft: true}\n", 2, 12, []string{"headers must be a list"}},
		{"a family not a string", "response:\n  headers: [[draft]]\n", 2, 13, []string{"must be a string"}},
		{"type empty", "response:\n  problem_type: \"\"\n", 2, 17, []string{"problem_type is empty", "about:blank"}},
		{"type left empty", "response:\n  problem_type:\n", 2, 16, []string{"must be a string"}},
		{"type relative", "response:\n  problem_type: /problems/rate-limited\n", 2, 17,
			[]string{"not an absolute URI", "resolve", "https://"}},
		{"type without a scheme", "response:\n  problem_type: example.com/problems/rate-limited\n", 2, 17,
			[]string{"not an absolute URI"}},
		{"type with a space", "response:\n  problem_type: \"https://example.com/rate limited\"\n", 2, 17,
			[]string{"space", "%20"}},
		{"type with a tab", "response:\n  problem_type: \"https://example.com/rate\\tlimited\"\n", 2, 17,
			[]string{"control character"}},
		{"type with a newline", "response:\n  problem_type: \"https://example.com/\\n\"\n", 2, 17,
			[]string{"control character"}},
		{"type with a DEL", "response:\n  problem_type: \"https://example.com/\\x7f\"\n", 2, 17,
			[]string{"control character"}},
		{"type not ASCII", "response:\n  problem_type: https://example.com/pé\n", 2, 17,
			[]string{"not ASCII", "https://example.com/p%C3%A9"}},
		{"type with a quote", "response:\n  problem_type: 'https://example.com/\"x\"'\n", 2, 17,
			[]string{`'"'`, "percent-encode"}},
		{"type with a bad escape", "response:\n  problem_type: https://example.com/%zz\n", 2, 17,
			[]string{"%", "two hexadecimal digits"}},
		{"type with a bracket in its path", "response:\n  problem_type: \"https://example.com/a[1]\"\n", 2, 17,
			[]string{"[ or ]", "%5B"}},
		{"type with two fragments", "response:\n  problem_type: \"https://example.com/a#b#c\"\n", 2, 17,
			[]string{"more than one #", "%23"}},
		{"http without a host", "response:\n  problem_type: \"https:///problems\"\n", 2, 17,
			[]string{"host"}},
		{"http with a bad port", "response:\n  problem_type: \"https://example.com:x/p\"\n", 2, 17,
			[]string{"not a URI"}},
		{"about: misspelt", "response:\n  problem_type: about:blnak\n", 2, 17,
			[]string{"about:blank", `"about:blnak"`}},
		{"a number", "response:\n  problem_type: 404\n", 2, 17, []string{"not an absolute URI"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("sluice.yaml", []byte(tt.yaml+responsePolicies))
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("Load = %v, want an *Error", err)
			}
			if len(perr.Problems) != 1 {
				t.Errorf("%d problems, want 1:\n%v", len(perr.Problems), err)
			}
			wantFirstProblem(t, tt.yaml+responsePolicies, tt.line, tt.col, tt.want)
		})
	}
}

// Every problem of the section is reported, not the first alone.
func TestResponseReportsEveryProblem(t *testing.T) {
	_, err := Load("sluice.yaml", []byte("response:\n  headers: [drafts, legacy, legacy]\n  problem_type: /x\n"+responsePolicies))
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("Load = %v, want an *Error", err)
	}
	var got []string
	for _, p := range perr.Problems {
		got = append(got, p.String())
	}
	if len(got) != 3 || !strings.HasPrefix(got[0], "sluice.yaml:2:13:") || !strings.HasPrefix(got[1], "sluice.yaml:2:29:") ||
		!strings.HasPrefix(got[2], "sluice.yaml:3:17:") {
		t.Errorf("problems:\n%s\nwant 2:13 (drafts), 2:29 (legacy repeated), 3:17 (relative type)", strings.Join(got, "\n"))
	}
}
