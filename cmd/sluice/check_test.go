package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A file that loads with a warning: the warning on stderr with its
// file:line:col, the summary counting it, exit 0; 1 with --strict.
func TestCheckWarning(t *testing.T) {
	f := filepath.Join(t.TempDir(), "login.yaml")
	err := os.WriteFile(f, []byte(`policies:
  - name: login
    match: "POST /login"
    key: form:username
    limits: ["5/m"]
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
	}{
		{[]string{"check", f}, 0},
		{[]string{"check", f, "--strict"}, 1},
		{[]string{"check", "--strict", f}, 1},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCLI(t, tt.args...)
		if code != tt.code {
			t.Errorf("%q: exit %d, want %d", tt.args, code, tt.code)
		}
		want := f + `:4:10: warning: policy "login" does not limit requests without form:username`
		if lines := strings.Split(strings.TrimSpace(stderr), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
			t.Errorf("%q: stderr %q, want one line starting %q", tt.args, stderr, want)
		}
		if want := f + ": OK: 1 policy, 1 limit, store: memory, 1 warning\n"; stdout != want {
			t.Errorf("%q: stdout %q, want %q", tt.args, stdout, want)
		}
	}
	// Without warnings, --strict changes nothing.
	if code, _, stderr := runCLI(t, "check", "--strict", "../../examples/sluice.yaml"); code != 0 || stderr != "" {
		t.Errorf("examples/sluice.yaml --strict: exit %d, stderr %q", code, stderr)
	}
}

// A login limited per account and per address with limits of each its
// own, in two policies on one route, is no mistake: the policy keyed by
// ip limits the requests without the account field, so check does not
// warn, and --strict passes. Without that policy, it warns still.
func TestCheckLoginByAccountAndAddress(t *testing.T) {
	dir := t.TempDir()
	const account = `policies:
  - name: login-account
    match: "POST /login"
    key: form:username
    limits: ["5/15m"]
`
	both := filepath.Join(dir, "both.yaml")
	alone := filepath.Join(dir, "alone.yaml")
	os.WriteFile(both, []byte(account+`  - name: login-ip
    match: "POST /login"
    key: ip
    limits: ["20/15m"]
`), 0o644)
	os.WriteFile(alone, []byte(account), 0o644)
	code, stdout, stderr := runCLI(t, "check", "--strict", both)
	if code != 0 || stderr != "" || stdout != both+": OK: 2 policies, 2 limits, store: memory\n" {
		t.Errorf("by account and by address: exit %d, stdout %q, stderr %q; want 0, no warning", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, "check", "--strict", alone)
	if want := alone + `:4:10: warning: policy "login-account" does not limit requests without form:username`; code != 1 || !strings.HasPrefix(stderr, want) {
		t.Errorf("by account alone: exit %d, stderr %q; want 1 and a warning starting %q", code, stderr, want)
	}
}

// The summary counts the limits as the file writes them: a policy's
// limits, its limits per plan and its overrides'.
func TestCheckCountsLimits(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"per plan only", `plans:
  names: [free, pro]
  default: free
policies:
  - name: api
    plans: {free: ["10/m"], pro: ["100/m", "5000/d"]}
`, "1 policy, 3 limits"},
		{"default, per plan and overrides", `plans:
  names: [free, pro]
  default: free
policies:
  - name: api
    limits: &std ["10/m"]
    plans:
      pro: ["100/m", "5000/d"]
  - name: partner
    match: {headers: [{name: X-API-Key, present: true}]}
    key: "header:X-API-Key"
    limits: *std
    overrides:
      - when: {"header:x-api-key": acme}
        limits: "1000/m"
`, "2 policies, 5 limits"},
		{"priority only", `policies:
  - name: api
    limits: ["10/m"]
  - name: analytics
    match: /analytics/
    priority: low
`, "2 policies, 1 limit"},
	} {
		f := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
		os.WriteFile(f, []byte(tt.yaml), 0o644)
		code, stdout, stderr := runCLI(t, "check", f)
		if want := f + ": OK: " + tt.want + ", store: memory\n"; code != 0 || stdout != want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %q", tt.name, code, stdout, stderr, want)
		}
	}
	// From standard input too.
	var stdout string
	withStdin(t, "plans: {names: [free], default: free}\npolicies:\n  - {name: api, plans: {free: [\"1/s\", \"10/m\"]}}\n", func() {
		_, stdout, _ = runCLI(t, "check", "-")
	})
	if want := "<stdin>: OK: 1 policy, 2 limits, store: memory\n"; stdout != want {
		t.Errorf("from standard input: stdout %q, want %q", stdout, want)
	}
}

// A policy on the user with no user section loads, with a warning that
// holds under sluice serve alone (an application may name the user
// itself): printed as such, and left out of --strict.
func TestCheckServeWarning(t *testing.T) {
	f := filepath.Join(t.TempDir(), "users.yaml")
	err := os.WriteFile(f, []byte(`policies:
  - name: signed-in
    match: {authenticated: true}
    key: user
    limits: ["10/s"]
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", f}, {"check", "--strict", f}} {
		code, stdout, stderr := runCLI(t, args...)
		if code != 0 {
			t.Errorf("%q: exit %d, want 0", args, code)
		}
		if want := f + ":1:1: warning (sluice serve): policy \"signed-in\""; !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%q: stderr %q, want one line starting %q", args, stderr, want)
		}
		if !strings.HasSuffix(stdout, ", 1 warning\n") {
			t.Errorf("%q: stdout %q, want the warning counted", args, stdout)
		}
	}
}

// Files that do not load: each problem on stderr, with what to do about
// it, nothing on stdout, exit 1. A Redis URL the policy package reads as
// a URL, but whose database number sluice serve's Redis client refuses
// at start, is one: check said OK to a file serve would not start with.
// So is a file of the other format, and a directory given as the policy
// file.
func TestCheckDoesNotLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		f := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	const limits = "policies:\n  - name: a\n    key: ip\n    limits: [\"5/m\"]\n"
	badDB := write("db.yaml", "store:\n  redis: \"redis://127.0.0.1:6379/zero\"\n"+limits)
	badQuery := write("query.yaml", "store: {redis: \"redis://127.0.0.1:6379/0?dial_timeout=soon\"}\n"+limits)
	envoyFile := write("envoy/edge.yaml", "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	policyFile := write("policy/sluice.yaml", limits)
	empty := write("empty.yaml", "")
	missing := filepath.Join(dir, "missing.yaml")
	tests := []struct {
		args []string
		// want are the last lines of stderr, in order.
		want []string
	}{
		{[]string{badDB}, []string{badDB + `:2:10: store.redis: invalid database number: "zero" (want redis://[user:pass@]host:6379/0, or rediss:// for TLS)`}},
		{[]string{badQuery}, []string{badQuery + `:1:16: store.redis: invalid dial timeout: "soon" (want redis://[user:pass@]host:6379/0, or rediss:// for TLS)`}},
		{[]string{envoyFile}, []string{envoyFile + ": this is an Envoy rate limit configuration (domain, descriptors), not a policy file: check it with --envoy " + envoyFile}},
		{[]string{"--envoy", policyFile}, []string{policyFile + ": this is a sluice policy file (it has a policies list), not an Envoy configuration: check it without --envoy"}},
		{[]string{"--envoy", filepath.Dir(policyFile)}, []string{policyFile + ": this is a sluice policy file (it has a policies list), not an Envoy configuration: check it without --envoy"}},
		{[]string{filepath.Dir(envoyFile)}, []string{"sluice check: " + filepath.Dir(envoyFile) + " is a directory: name the policy file in it, or check Envoy configurations with --envoy " + filepath.Dir(envoyFile)}},
		{[]string{empty}, []string{empty + ":1:1: the file is empty; it needs at least a policies list"}},
		{[]string{missing}, []string{"sluice check: open " + missing + ": no such file or directory"}},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCLI(t, append([]string{"check"}, tt.args...)...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if code != 1 || stdout != "" || len(lines) < len(tt.want) || !slices.Equal(lines[len(lines)-len(tt.want):], tt.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit 1, no stdout, stderr ending:\n%s", tt.args, code, stdout, stderr, strings.Join(tt.want, "\n"))
		}
	}
	// Each file is reported: a policy file that loads says so on stdout
	// even when an Envoy file beside it does not, and the exit code is 1.
	code, stdout, stderr := runCLI(t, "check", policyFile, "--envoy", policyFile)
	if code != 1 || stdout != policyFile+": OK: 1 policy, 1 limit, store: memory\n" || !strings.Contains(stderr, policyFile+":1: unknown key \"policies\"") {
		t.Errorf("a policy file and a bad Envoy file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestCheckCommand(t *testing.T) {
	code, stdout, stderr := runCLI(t, "check", "../../examples/sluice.yaml")
	if code != 0 || !strings.HasPrefix(stdout, "../../examples/sluice.yaml: OK: 9 policies (1 shadow), 11 limits") || stderr != "" {
		t.Errorf("examples/sluice.yaml: exit %d, %q %q", code, stdout, stderr)
	}
	// sluice serve's name for the flag works too, and adds to the list.
	for _, flag := range []string{"--envoy", "--envoy-config"} {
		code, stdout, _ = runCLI(t, "check", flag, "../../examples/envoy/config", "--envoy", "../../rls/testdata/edge.yaml")
		if code != 1 {
			t.Errorf("%s and --envoy with two files of domain edge should conflict (exit 1): exit %d, %q", flag, code, stdout)
		}
		code, stdout, _ = runCLI(t, "check", flag, "../../examples/envoy/config")
		if code != 0 || !strings.Contains(stdout, "OK: 1 domain (edge)") {
			t.Errorf("%s examples/envoy/config: exit %d %q", flag, code, stdout)
		}
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("policies:\n  - name: a\n    limts: [\"1/s\"]\n  - name: b\n    limits: [\"1/fortnight\"]\n"), 0o644)
	code, stdout, stderr = runCLI(t, "check", bad)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code != 1 || stdout != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], bad+":3:5: ") || !strings.HasPrefix(lines[1], bad+":5:14: ") {
		t.Errorf("bad file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, _ := runCLI(t, "check"); code != 2 {
		t.Errorf("no file: exit %d, want 2", code)
	}
}

// withStdin runs f with data on standard input.
func withStdin(t *testing.T, data string, f func()) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.WriteString(data)
		w.Close()
	}()
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old; r.Close() }()
	f()
}

// "sluice check -" reads the policy file from standard input, naming it
// <stdin> in its problems, warnings and summary.
func TestCheckStdin(t *testing.T) {
	tests := []struct {
		name, data string
		code       int
		stdout     string
		stderr     []string
	}{
		{"loads", "policies:\n  - {name: api, match: /, key: ip, limits: [\"10/s\"]}\n", 0,
			"<stdin>: OK: 1 policy, 1 limit, store: memory\n", nil},
		{"warning", "policies:\n  - name: login\n    match: \"POST /login\"\n    key: form:username\n    limits: [\"5/m\"]\n", 0,
			"<stdin>: OK: 1 policy, 1 limit, store: memory, 1 warning\n",
			[]string{`<stdin>:4:10: warning: policy "login" does not limit requests without form:username`}},
		{"problem", "policies:\n  - name: api\n    match: /\n    key: ip\n    limits: [\"0/s\"]\n", 1, "",
			[]string{"<stdin>:5:14: "}},
		{"envoy", "domain: api\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1}\n", 1, "",
			[]string{`<stdin>:1:1: unknown field "domain"`, "<stdin>:1:1: the policy file has no policies list", `<stdin>:2:1: unknown field "descriptors"`,
				"<stdin>: this is an Envoy rate limit configuration (domain, descriptors), not a policy file: check it with --envoy FILE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var code int
			var stdout, stderr string
			withStdin(t, tt.data, func() { code, stdout, stderr = runCLI(t, "check", "-") })
			if code != tt.code || stdout != tt.stdout {
				t.Errorf("exit %d, stdout %q; want %d, %q (stderr %q)", code, stdout, tt.code, tt.stdout, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if stderr == "" {
				lines = nil
			}
			if len(lines) != len(tt.stderr) {
				t.Fatalf("stderr %q, want %d lines starting %q", stderr, len(tt.stderr), tt.stderr)
			}
			for i, want := range tt.stderr {
				if !strings.HasPrefix(lines[i], want) {
					t.Errorf("stderr line %d %q, want it to start %q", i+1, lines[i], want)
				}
			}
		})
	}
}

// An Envoy file of several YAML documents loads its first, as the
// reference reads it, and check warns of the rest; --strict makes the
// warning fail. A --- that ends the file with nothing after it is no
// second document.
func TestCheckEnvoySecondDocument(t *testing.T) {
	dir := t.TempDir()
	doc := func(domain string) string {
		return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	}
	two := filepath.Join(dir, "two.yaml")
	trailing := filepath.Join(dir, "trailing.yaml")
	os.WriteFile(two, []byte(doc("a")+"---\n# the next domain\n"+doc("b")), 0o644)
	os.WriteFile(trailing, []byte(doc("c")+"---\n"), 0o644)
	code, stdout, stderr := runCLI(t, "check", "--envoy", two)
	want := two + ":7: warning: this is a second YAML document"
	if code != 0 || !strings.Contains(stdout, "OK: 1 domain (a)") || !strings.HasPrefix(stderr, want) {
		t.Errorf("two documents: exit %d, %q %q; want 0, domain a, and a warning starting %q", code, stdout, stderr, want)
	}
	if code, _, _ := runCLI(t, "check", "--strict", "--envoy", two); code != 1 {
		t.Errorf("two documents, --strict: exit %d, want 1", code)
	}
	if code, _, stderr := runCLI(t, "check", "--strict", "--envoy", trailing); code != 0 || stderr != "" {
		t.Errorf("a trailing ---: exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
}
