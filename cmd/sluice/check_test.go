package main

import (
	"os"
	"path/filepath"
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
