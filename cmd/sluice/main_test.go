package main

import (
	"strings"
	"testing"
)

func TestDispatch(t *testing.T) {
	tests := []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{nil, 2, "", "Commands:"},
		{[]string{"help"}, 0, "sim ", ""},
		{[]string{"--help"}, 0, "version ", ""},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"version"}, 0, "sluice ", ""},
		{[]string{"version", "x"}, 2, "", "takes no arguments"},
		{[]string{"help", "version"}, 0, "Usage: sluice version", ""},
		// help is listed as a command, so it explains itself.
		{[]string{"help", "help"}, 0, "Commands:", ""},
		{[]string{"--version"}, 0, "sluice ", ""},
		{[]string{"-version"}, 0, "sluice ", ""},
		{[]string{"--version", "x"}, 2, "", "takes no arguments"},
		// Flags before the command, as "docker run IMAGE --config …"
		// passes them: the message says where they go.
		{[]string{"--config", "sluice.yaml"}, 2, "", "Flags go after the command, as in: sluice serve --config sluice.yaml\n"},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCLI(t, tt.args...)
		if code != tt.code {
			t.Errorf("%q: exit %d, want %d", tt.args, code, tt.code)
		}
		if tt.stdout == "" && stdout != "" || !strings.Contains(stdout, tt.stdout) {
			t.Errorf("%q: stdout %q, want %q", tt.args, stdout, tt.stdout)
		}
		if tt.stderr == "" && stderr != "" || !strings.Contains(stderr, tt.stderr) {
			t.Errorf("%q: stderr %q, want %q", tt.args, stderr, tt.stderr)
		}
	}
	// Every command is listed.
	_, stdout, _ := runCLI(t, "help")
	for name := range commands() {
		if !strings.Contains(stdout, "  "+name+" ") {
			t.Errorf("help does not list %s", name)
		}
	}
}

// A version set at link time, as the Dockerfile sets it, is the one
// printed; without one, the module's.
func TestVersionAtLinkTime(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = ""
	if got := versionText(); !strings.HasPrefix(got, "sluice ") || strings.Contains(got, "v9.8.7") {
		t.Fatalf("versionText() = %q", got)
	}
	version = "v9.8.7"
	if got := versionText(); !strings.HasPrefix(got, "sluice v9.8.7") {
		t.Errorf("versionText() with version %q = %q", version, got)
	}
}
