package dashboard

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// stalledWriter is the ResponseWriter of a client that reads nothing of
// its answer: a write blocks until the write deadline, which it reports
// at once as passed; with no deadline set, the write would block for as
// long as the client keeps its connection open, which it reports as
// errForever instead of blocking the test.
type stalledWriter struct {
	*httptest.ResponseRecorder
	readDeadlines []time.Time
	writeDeadline time.Time
	writes        int
	forever       int // writes that would have blocked for good
}

func (w *stalledWriter) SetReadDeadline(t time.Time) error {
	w.readDeadlines = append(w.readDeadlines, t)
	return nil
}

func (w *stalledWriter) SetWriteDeadline(t time.Time) error {
	w.writeDeadline = t
	return nil
}

func (w *stalledWriter) Write(b []byte) (int, error) {
	w.writes++
	if w.writeDeadline.IsZero() {
		w.forever++
	}
	return 0, os.ErrDeadlineExceeded
}

// TestSimStalledReader: a client that takes none of its answer keeps its
// place among MaxRunning only until a write deadline Timeout away, not
// for as long as it keeps the connection open; then the place is free
// for the next simulation.
func TestSimStalledReader(t *testing.T) {
	d := New(Options{MaxRunning: 1, Timeout: time.Minute})
	for _, accept := range []string{"application/json", "image/svg+xml"} {
		req := httptest.NewRequest("POST", "/api/sim", strings.NewReader(`{"scenario": "flood", "svg": true}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", accept)
		w := &stalledWriter{ResponseRecorder: httptest.NewRecorder()}
		before := time.Now()
		d.ServeHTTP(w, req)
		after := time.Now()
		if w.writes == 0 {
			t.Fatalf("Accept %s: nothing written", accept)
		}
		if w.forever > 0 {
			t.Errorf("Accept %s: %d of %d writes had no deadline, and would block while the client keeps its connection", accept, w.forever, w.writes)
		}
		// Set at some moment of the run to that moment and Timeout.
		if w.writeDeadline.Before(before.Add(time.Minute)) || w.writeDeadline.After(after.Add(time.Minute)) {
			t.Errorf("Accept %s: write deadline %v, want a minute after a moment of the run, between %v and %v",
				accept, w.writeDeadline, before.Add(time.Minute), after.Add(time.Minute))
		}
		if len(d.running) != 0 {
			t.Errorf("Accept %s: %d simulations still counted as running", accept, len(d.running))
		}
	}
}

// timeoutBody is a body that stops arriving: its read deadline passes.
type timeoutBody struct{ sent bool }

func (b *timeoutBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, `{"scenario": "fl`), nil
	}
	return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
}

// TestSimSlowBody: the body must arrive within Timeout; a body cut by the
// read deadline is answered 408, and the deadline stays for net/http's
// reading the rest of the body before it answers. Once a body is read,
// the deadline is lifted, or it would cut the simulation short.
func TestSimSlowBody(t *testing.T) {
	d := New(Options{Timeout: time.Minute})
	req := httptest.NewRequest("POST", "/api/sim", io.NopCloser(&timeoutBody{}))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	w := &deadlineRecorder{ResponseRecorder: rec}
	before := time.Now()
	d.ServeHTTP(w, req)
	after := time.Now()
	if rec.Code != http.StatusRequestTimeout || !strings.Contains(rec.Body.String(), "longer than 1m0s") {
		t.Errorf("status %d, %s; want 408", rec.Code, rec.Body)
	}
	if len(w.readDeadlines) != 1 || w.readDeadlines[0].Before(before.Add(time.Minute)) || w.readDeadlines[0].After(after.Add(time.Minute)) {
		t.Errorf("read deadlines %v, want one a minute away, kept: between %v and %v",
			w.readDeadlines, before.Add(time.Minute), after.Add(time.Minute))
	}

	req = httptest.NewRequest("POST", "/api/sim", strings.NewReader(`{"scenario": "flood"}`))
	req.Header.Set("Content-Type", "application/json")
	rec = httptest.NewRecorder()
	w = &deadlineRecorder{ResponseRecorder: rec}
	d.ServeHTTP(w, req)
	if rec.Code != http.StatusOK {
		t.Errorf("status %d, %s; want 200", rec.Code, rec.Body)
	}
	if len(w.readDeadlines) != 2 || w.readDeadlines[0].IsZero() || !w.readDeadlines[1].IsZero() {
		t.Errorf("read deadlines %v, want one, then none once the body is read", w.readDeadlines)
	}
}

// deadlineRecorder records the read deadlines set on it.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	readDeadlines []time.Time
}

func (w *deadlineRecorder) SetReadDeadline(t time.Time) error {
	w.readDeadlines = append(w.readDeadlines, t)
	return nil
}
