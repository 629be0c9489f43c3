package server

import (
	"context"
	"strings"
	"testing"
)

// A reload that brings a max_delay beyond the shutdown timeout warns of
// it, as a start does: warned at start alone, the policy added later went
// unnoticed.
func TestReloadWarnsOfLongHolds(t *testing.T) {
	ts := startServer(t, "policies:\n  - {name: quick, limits: [\"10/s\"]}\n", Options{})
	if strings.Contains(ts.logs.String(), "max_delay exceeds the shutdown timeout") {
		t.Fatal("a warning with no max_delay in the file")
	}
	writeFile(t, ts.dir, "sluice.yaml", slowPolicy)
	if err := ts.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ts.logs.String(), "policy=slow max_delay=1m0s shutdown_timeout=15s") {
		t.Errorf("no warning on reload of max_delay beyond the shutdown timeout:\n%s", ts.logs.String())
	}
}
