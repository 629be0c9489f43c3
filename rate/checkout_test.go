package rate_test

import (
	"testing"

	"github.com/sluicehq/sluice/rate"
)

// CheckOut's text is the one every store reports a short out with, so
// its rows pin it.
func TestCheckOut(t *testing.T) {
	for _, tt := range []struct {
		reqs, out int
		want      string // "" for no error
	}{
		{0, 0, ""},
		{1, 1, ""},
		{1, 3, ""},
		{1, 0, "out is shorter than reqs (0 < 1)"},
		{3, 2, "out is shorter than reqs (2 < 3)"},
	} {
		err := rate.CheckOut(make([]rate.Request, tt.reqs), make([]rate.Decision, tt.out))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%d requests, out of %d: %q, want %q", tt.reqs, tt.out, got, tt.want)
		}
	}
}
