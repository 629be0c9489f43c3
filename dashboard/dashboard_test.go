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

// TestErrorsAreProblems: what the dashboard refuses, it refuses as
// application/problem+json, as its doc says: a path it does not serve
// (404), a method a path does not answer (405, with Allow naming the
// ones it does), and a POST from a page of another origin (403).
func TestErrorsAreProblems(t *testing.T) {
	d := dashboard.New(dashboard.Options{})
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/nothing", http.StatusNotFound, ""},
		{"GET", "/static/", http.StatusNotFound, ""},
		{"GET", "/static/nothing.js", http.StatusNotFound, ""},
		{"GET", "/api/", http.StatusNotFound, ""},
		{"POST", "/", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"PUT", "/static/app.js", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"DELETE", "/api/live", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"POST", "/api/live.svg", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"POST", "/api/scenarios", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"GET", "/api/sim", http.StatusMethodNotAllowed, "POST"},
		{"OPTIONS", "/api/sim", http.StatusMethodNotAllowed, "POST"},
	} {
		rec := do(t, d, c.method, c.path, "", nil)
		problemOf(t, rec, c.status)
		if got := rec.Header().Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
		if rec.Header().Get("Content-Security-Policy") == "" {
			t.Errorf("%s %s: no Content-Security-Policy", c.method, c.path)
		}
	}

	req := httptestRequest("POST", "/api/sim", "application/json", strings.NewReader(`{"scenario": "flood"}`))
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if p := problemOf(t, serve(d, req), http.StatusForbidden); !strings.Contains(p.Detail, "origin") {
		t.Errorf("cross-site POST: detail %q, want it to say why", p.Detail)
	}
}

// TestRevalidation: the page and its assets are revalidated at every
// load (Cache-Control: no-cache) and carry an ETag, so that revalidating
// costs a 304 rather than the whole file again.
func TestRevalidation(t *testing.T) {
	d := dashboard.New(dashboard.Options{})
	tags := map[string]string{}
	for _, path := range []string{"/", "/static/app.js", "/static/style.css", "/static/favicon.svg"} {
		rec := do(t, d, "GET", path, "", nil)
		tag := rec.Header().Get("ETag")
		if rec.Code != http.StatusOK || rec.Header().Get("Cache-Control") != "no-cache" || !strings.HasPrefix(tag, `"`) || !strings.HasSuffix(tag, `"`) || len(tag) < 3 {
			t.Fatalf("GET %s: status %d, Cache-Control %q, ETag %q; want 200, no-cache and a strong ETag", path, rec.Code, rec.Header().Get("Cache-Control"), tag)
		}
		for other, t2 := range tags {
			if t2 == tag {
				t.Errorf("%s and %s have the same ETag %s", path, other, tag)
			}
		}
		tags[path] = tag

		req := httptestRequest("GET", path, "", nil)
		req.Header.Set("If-None-Match", tag)
		if rec := serve(d, req); rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
			t.Errorf("GET %s, If-None-Match its ETag: status %d, %d bytes; want 304 and none", path, rec.Code, rec.Body.Len())
		}
		req = httptestRequest("GET", path, "", nil)
		req.Header.Set("If-None-Match", `"stale"`)
		if rec := serve(d, req); rec.Code != http.StatusOK || rec.Body.Len() == 0 {
			t.Errorf("GET %s, If-None-Match another ETag: status %d, %d bytes; want 200 and the file", path, rec.Code, rec.Body.Len())
		}
	}
	// The page depends on the options: another page, another ETag.
	off := dashboard.New(dashboard.Options{NoPlayground: true})
	if tag := do(t, off, "GET", "/", "", nil).Header().Get("ETag"); tag == tags["/"] {
		t.Errorf("the pages with and without the playground share the ETag %s", tag)
	}
}
