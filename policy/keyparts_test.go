package policy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// A key combines up to maxKeyParts parts, and an override may name any of
// them, the last in the key's order included: the Enforcer keeps the
// value span of each for overrides. One more part is refused at load.
func TestKeyPartsBound(t *testing.T) {
	// Keyed parts in order: header:x-a, header:x-b, ip, method.
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	e := generation(t, `
policies:
  - name: api
    key: [ip, method, "header:X-A", "header:X-B"]
    limits: ["1/m"]
    overrides:
      - when: {method: POST}
        limits: ["3/m"]
`, memory.New(memory.Options{Clock: clock}), clock, Options{})
	var got []Verdict
	for range 4 {
		got = append(got, sendFrom(e, "POST", "/", "192.0.2.1", "X-A", "a", "X-B", "b"))
	}
	if want := []Verdict{Allow, Allow, Allow, Refuse}; !slices.Equal(got, want) {
		t.Errorf("POSTs under the override on the key's last part: %v, want %v", got, want)
	}
	if v := sendFrom(e, "GET", "/", "192.0.2.1", "X-A", "a", "X-B", "b"); v != Allow {
		t.Errorf("a GET: %v, want allow (its own 1/m)", v)
	}

	_, err := Load("test.yaml", []byte(`
policies:
  - name: api
    key: [ip, method, user, "header:X-A", "header:X-B"]
    limits: ["1/m"]
`))
	if err == nil || !strings.Contains(err.Error(), "a key combines at most 4 parts, not 5") {
		t.Errorf("a key of 5 parts: %v, want refused, at most 4", err)
	}
}
