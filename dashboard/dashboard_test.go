package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/sim"
)

// TestPage serves the page and its assets with a Content-Security-Policy
// that allows nothing from elsewhere; the page lists every built-in
// scenario and links only relatively, so that it works under a prefix.
func TestPage(t *testing.T) {
	d := dashboard.New(dashboard.Options{})
	rec := do(t, d, "GET", "/", "", nil)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /: status %d, %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	csp := rec.Header().Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy %q allows something unsafe", csp)
	}
	page := rec.Body.String()
	for _, sc := range sim.Builtins(sim.Params{}) {
		if !strings.Contains(page, `<option value="`+sc.Name+`"`) {
			t.Errorf("the page does not offer the scenario %s", sc.Name)
		}
	}
	for _, bad := range []string{`src="/`, `href="/`, `src="http`, `href="http`, " style=", " onclick=", "<script>"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page holds %q: an absolute link, an inline style, handler or script", bad)
		}
	}

	for path, ct := range map[string]string{
		"/static/app.js":      "text/javascript; charset=utf-8",
		"/static/style.css":   "text/css; charset=utf-8",
		"/static/favicon.svg": "image/svg+xml",
	} {
		rec := do(t, d, "GET", path, "", nil)
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != ct || rec.Body.Len() == 0 {
			t.Errorf("GET %s: status %d, %q, %d bytes; want 200, %q", path, rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len(), ct)
		}
	}
	if rec := do(t, d, "GET", "/static/", "", nil); rec.Code == http.StatusOK && strings.Contains(rec.Body.String(), "app.js") {
		t.Error("GET /static/ lists the folder")
	}
	if rec := do(t, d, "GET", "/nothing", "", nil); rec.Code != http.StatusNotFound {
		t.Errorf("GET /nothing: status %d, want 404", rec.Code)
	}

	infos := decode[[]dashboard.ScenarioInfo](t, do(t, d, "GET", "/api/scenarios", "", nil), http.StatusOK, "application/json")
	if len(infos) != len(sim.Builtins(sim.Params{})) || infos[2].Name != "flood" || infos[2].Limit != "10 per 10s" ||
		strings.Join(infos[2].Setups, ",") != "own-counters,shared-counter" || infos[0].Setups[0] != "single" {
		t.Errorf("scenarios %+v", infos)
	}
}

// TestPrefix mounts the dashboard under a prefix, as an admin listener
// with other handlers would.
func TestPrefix(t *testing.T) {
	clock := ratetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := dashboard.New(dashboard.Options{Clock: clock})
	d.Record("api", true)
	mux := http.NewServeMux()
	mux.Handle("/dashboard/", http.StripPrefix("/dashboard", d))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, path := range []string{"/dashboard/", "/dashboard/static/app.js", "/dashboard/api/live?seconds=1"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: status %d", path, resp.StatusCode)
		}
	}
}
