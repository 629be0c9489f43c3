package dashboard_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/rate/ratetest"
)

// TestLiveSVGSaysAllowedByThePolicy: a row counts its own policy's
// decisions, and a request is refused whole, so a row's green is what its
// policy allowed, some of which another policy may have refused. With
// sluice's demo policies, 6 requests to /search and 12 to /hello from
// one client, "api" (10/m) allows 13 and refuses 5 while its clients got
// 10 answers and 8 429s: the picture must not say that api passed 13 in a
// second, which reads as a limit of 10 letting 13 through.
func TestLiveSVGSaysAllowedByThePolicy(t *testing.T) {
	clock := ratetest.NewClock(t0)
	d := dashboard.New(dashboard.Options{Clock: clock})
	for i := range 18 {
		d.Record("api", i < 13)
	}
	for i := range 6 {
		d.Record("search", i < 3)
	}
	rec := do(t, d, "GET", "/api/live.svg?seconds=60", "", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	parseSVG(t, rec.Body.Bytes()) // well-formed
	svg := rec.Body.String()
	for _, want := range []string{
		"13 allowed",
		"✕ 5 refused",
		"28% refused",
		"allowed</tspan> by the row’s policy",
		"a request that one policy allowed may have been refused by another",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("the picture lacks %q", want)
		}
	}
	// The row's totals say "allowed", as its columns' tooltips do.
	if strings.Contains(svg, "13 passed</text>") {
		t.Error(`the picture says api "13 passed": its clients got 10 answers, the 3 others a 429 from search`)
	}
}
