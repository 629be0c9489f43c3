package dashboard

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSimBusy: beyond MaxRunning simulations at once, a request is
// answered 429 with Retry-After, and served again once one ends.
func TestSimBusy(t *testing.T) {
	d := New(Options{MaxRunning: 1})
	post := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/api/sim", strings.NewReader(`{"scenario": "flood"}`))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, req)
		return rec
	}
	d.running <- struct{}{} // a simulation is running
	rec := post()
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("while busy: status %d, Retry-After %q, %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	<-d.running
	if rec := post(); rec.Code != http.StatusOK {
		t.Errorf("once free: status %d, %s", rec.Code, rec.Body)
	}
	if len(d.running) != 0 {
		t.Errorf("%d simulations still counted as running", len(d.running))
	}
}

// TestSimBusyBeforeParsing: traffic is read into requests only with a
// place among MaxRunning, since the requests take several times the
// memory of the body: while every place is taken, even traffic with an
// error is answered 429, unread.
func TestSimBusyBeforeParsing(t *testing.T) {
	d := New(Options{MaxRunning: 1})
	post := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/api/sim", strings.NewReader(`{"csv": "0.1,alice\nsoon,alice\n", "limit": "5/s"}`))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, req)
		return rec
	}
	d.running <- struct{}{}
	if rec := post(); rec.Code != http.StatusTooManyRequests {
		t.Errorf("while busy: status %d, want 429; %s", rec.Code, rec.Body)
	}
	<-d.running
	if rec := post(); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "line 2") {
		t.Errorf("once free: status %d, %s; want 400 naming line 2", rec.Code, rec.Body)
	}
}
