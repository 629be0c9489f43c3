package dashboard_test

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/rate/ratetest"
)

// t0 is a whole second, the start of the live tests' clocks.
var t0 = time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)

// sec returns the second of t0 plus n seconds, as Live counts them.
func sec(n int64) int64 { return t0.Unix() + n }

// TestLiveWindow steps a fake clock through a 5-second window: each step
// moves the clock, records decisions, and checks what GET api/live says.
// Seconds count from the second they fall in; old ones drop out.
func TestLiveWindow(t *testing.T) {
	clock := ratetest.NewClock(t0)
	d := dashboard.New(dashboard.Options{Clock: clock, Window: 5 * time.Second})
	type rec struct {
		policy  string
		allowed bool
		n       int
	}
	type want struct {
		policy          string
		passed, refused int64
		per             [5][2]int64 // oldest first, passed and refused
	}
	steps := []struct {
		at   time.Duration // clock, from t0
		rec  []rec
		want []want
	}{
		{0, nil, nil}, // nothing recorded: no policy
		{0, []rec{{"api", true, 3}, {"api", false, 1}}, []want{
			{"api", 3, 1, [5][2]int64{{}, {}, {}, {}, {3, 1}}},
		}},
		{999 * time.Millisecond, []rec{{"api", true, 1}, {"auth", false, 2}}, []want{
			{"api", 4, 1, [5][2]int64{{}, {}, {}, {}, {4, 1}}},
			{"auth", 0, 2, [5][2]int64{{}, {}, {}, {}, {0, 2}}},
		}},
		{time.Second, []rec{{"api", true, 2}}, []want{
			{"api", 6, 1, [5][2]int64{{}, {}, {}, {4, 1}, {2, 0}}},
			{"auth", 0, 2, [5][2]int64{{}, {}, {}, {0, 2}, {}}},
		}},
		{4 * time.Second, nil, []want{ // second 0 is the oldest of the window
			{"api", 6, 1, [5][2]int64{{4, 1}, {2, 0}, {}, {}, {}}},
			{"auth", 0, 2, [5][2]int64{{0, 2}, {}, {}, {}, {}}},
		}},
		{5 * time.Second, []rec{{"api", false, 1}}, []want{ // second 0 drops out, auth with it
			{"api", 2, 1, [5][2]int64{{2, 0}, {}, {}, {}, {0, 1}}},
		}},
		{9*time.Second + 500*time.Millisecond, []rec{{"api", true, 7}}, []want{ // second 9 in slot 4, seconds 6 to 8 empty
			{"api", 7, 1, [5][2]int64{{0, 1}, {}, {}, {}, {7, 0}}},
		}},
		{time.Minute, nil, nil}, // all gone
	}
	for i, st := range steps {
		clock.Set(t0.Add(st.at))
		for _, r := range st.rec {
			for range r.n {
				d.Record(r.policy, r.allowed)
			}
		}
		lv := decode[dashboard.Live](t, do(t, d, "GET", "/api/live", "", nil), http.StatusOK, "application/json")
		now := sec(int64(st.at / time.Second))
		if lv.Now != now || lv.Seconds != 5 {
			t.Fatalf("step %d: now %d, seconds %d; want %d, 5", i, lv.Now, lv.Seconds, now)
		}
		if len(lv.Policies) != len(st.want) {
			t.Fatalf("step %d: %d policies %+v, want %d", i, len(lv.Policies), lv.Policies, len(st.want))
		}
		for j, w := range st.want {
			p := lv.Policies[j]
			if p.Policy != w.policy || p.Passed != w.passed || p.Refused != w.refused || len(p.PerSecond) != 5 {
				t.Fatalf("step %d: policy %d is %+v, want %+v", i, j, p, w)
			}
			for k, s := range p.PerSecond {
				if s.T != now-4+int64(k) || s.Passed != w.per[k][0] || s.Refused != w.per[k][1] {
					t.Errorf("step %d: %s second %d is %+v, want t=%d %v", i, w.policy, k, s, now-4+int64(k), w.per[k])
				}
			}
		}
	}
}

// TestLiveSeconds asks for fewer seconds than the window, and refuses
// what is not a number of seconds within it.
func TestLiveSeconds(t *testing.T) {
	clock := ratetest.NewClock(t0)
	d := dashboard.New(dashboard.Options{Clock: clock})
	d.Record("api", true)
	clock.Advance(2 * time.Second)
	d.Record("api", false)

	lv := decode[dashboard.Live](t, do(t, d, "GET", "/api/live?seconds=2", "", nil), http.StatusOK, "application/json")
	if lv.Seconds != 2 || len(lv.Policies) != 1 || lv.Policies[0].Passed != 0 || lv.Policies[0].Refused != 1 {
		t.Errorf("the last 2 seconds: %+v, want only the refusal", lv)
	}
	full := decode[dashboard.Live](t, do(t, d, "GET", "/api/live", "", nil), http.StatusOK, "application/json")
	if full.Seconds != int(dashboard.DefaultWindow/time.Second) || full.Policies[0].Passed != 1 || full.Policies[0].Refused != 1 {
		t.Errorf("the whole window: %d seconds, %+v; want %v and both decisions", full.Seconds, full.Policies, dashboard.DefaultWindow)
	}
	for _, q := range []string{"0", "-1", "301", "x", "1.5"} {
		p := problemOf(t, do(t, d, "GET", "/api/live?seconds="+q, "", nil), http.StatusBadRequest)
		if p.Field != "seconds" {
			t.Errorf("seconds=%s: field %q, want seconds", q, p.Field)
		}
	}
}

// TestLiveOther bounds the policies: beyond MaxPolicies they share the row
// Other, listed last; a policy idle for the whole window gives its place
// up to a new one.
func TestLiveOther(t *testing.T) {
	clock := ratetest.NewClock(t0)
	d := dashboard.New(dashboard.Options{Clock: clock, Window: 10 * time.Second, MaxPolicies: 3})
	for _, p := range []string{"b", "a", "c", "d", "a", "zzz"} {
		d.Record(p, true)
	}
	got := names(d.Live(0))
	if want := "a:2 b:1 other:3"; got != want {
		t.Errorf("policies %s, want %s", got, want)
	}
	// "a" stays busy, "b" falls idle. At 9 s "b"'s second 0 is still in
	// the window of 10 s, and "e" goes to other; at 10 s it is not, "b"
	// is forgotten and "f" takes its place.
	clock.Advance(6 * time.Second)
	d.Record("a", true)
	clock.Advance(3 * time.Second)
	d.Record("e", false)
	if got, want := names(d.Live(0)), "a:3 b:1 other:4"; got != want {
		t.Errorf("at 9 s: policies %s, want %s", got, want)
	}
	clock.Advance(time.Second)
	d.Record("f", false)
	if got, want := names(d.Live(0)), "a:1 f:1 other:1"; got != want {
		t.Errorf("at 10 s: policies %s, want %s", got, want)
	}
}

// names lists a snapshot's policies and their decisions: "a:2 b:1".
func names(lv dashboard.Live) string {
	var parts []string
	for _, p := range lv.Policies {
		parts = append(parts, fmt.Sprintf("%s:%d", p.Policy, p.Passed+p.Refused))
	}
	return strings.Join(parts, " ")
}

// TestLiveClockBackwards: a clock that steps back more than the window
// records nowhere (the ring's slot holds a later second) and hides
// nothing once it is back.
func TestLiveClockBackwards(t *testing.T) {
	clock := ratetest.NewClock(t0)
	d := dashboard.New(dashboard.Options{Clock: clock, Window: 10 * time.Second})
	d.Record("api", true)
	clock.Advance(-20 * time.Second)
	d.Record("api", true)
	if got := names(d.Live(0)); got != "" {
		t.Errorf("20 s before: policies %q, want none", got)
	}
	clock.Set(t0)
	if got := names(d.Live(0)); got != "api:1" {
		t.Errorf("back at t0: policies %q, want api:1", got)
	}
}

// TestRecordConcurrent records from many goroutines while others take
// snapshots: not one decision is lost. Run it with -race.
func TestRecordConcurrent(t *testing.T) {
	clock := ratetest.NewClock(t0)
	d := dashboard.New(dashboard.Options{Clock: clock, MaxPolicies: 4})
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				d.Record(fmt.Sprintf("p%d", (w+i)%6), i%3 != 0)
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = d.Live(10)
			}
		}
	})
	wg.Wait()
	close(stop)
	readers.Wait()

	var passed, refused int64
	lv := d.Live(0)
	for _, p := range lv.Policies {
		passed += p.Passed
		refused += p.Refused
	}
	wantRefused := int64(workers * ((each + 2) / 3))
	if passed+refused != workers*each || refused != wantRefused {
		t.Errorf("%d passed, %d refused; want %d in all, %d refused", passed, refused, workers*each, wantRefused)
	}
	if len(lv.Policies) != 4 || lv.Policies[3].Policy != dashboard.Other {
		t.Errorf("policies %s, want 3 of their own and other", names(lv))
	}
}

// TestLiveSVG draws the live rows: well-formed XML, one row per policy
// with the snapshot's counts, every column's counts adding up to them, and
// a policy name that looks like markup escaped.
func TestLiveSVG(t *testing.T) {
	clock := ratetest.NewClock(t0)
	d := dashboard.New(dashboard.Options{Clock: clock})

	rec := do(t, d, "GET", "/api/live.svg?seconds=60", "", nil)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "image/svg+xml; charset=utf-8" {
		t.Fatalf("status %d, Content-Type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	root, rows := parseSVG(t, rec.Body.Bytes())
	if len(rows) != 0 || root["data-policies"] != "0" || !strings.Contains(rec.Body.String(), "No decisions in the last minute") {
		t.Errorf("with no decisions: %d rows, %q", len(rows), rec.Body)
	}

	const hostile = `</text><script>alert(1)</script>&amp;"'`
	for i := range 90 {
		clock.Set(t0.Add(time.Duration(i) * time.Second))
		for range i % 4 {
			d.Record("api", true)
		}
		if i%10 == 0 {
			d.Record("api", false)
			d.Record(hostile, false)
		}
	}
	for _, span := range []struct {
		seconds, bin int
	}{{60, 1}, {300, 2}} {
		rec = do(t, d, "GET", fmt.Sprintf("/api/live.svg?seconds=%d", span.seconds), "", nil)
		root, rows = parseSVG(t, rec.Body.Bytes())
		lv := d.Live(span.seconds)
		if root["data-bin"] != fmt.Sprint(span.bin) || root["data-seconds"] != fmt.Sprint(span.seconds) {
			t.Errorf("%d s: bin %s, seconds %s; want %d", span.seconds, root["data-bin"], root["data-seconds"], span.bin)
		}
		if len(rows) != len(lv.Policies) || len(rows) != 2 {
			t.Fatalf("%d s: %d rows, want 2", span.seconds, len(rows))
		}
		for i, p := range lv.Policies {
			r := rows[i]
			if r.Attrs["data-policy"] != p.Policy || r.Attrs["data-passed"] != fmt.Sprint(p.Passed) || r.Attrs["data-refused"] != fmt.Sprint(p.Refused) {
				t.Errorf("%d s: row %d %v, want %+v", span.seconds, i, r.Attrs, p)
			}
			if int64(r.ColPassed) != p.Passed || int64(r.ColRefused) != p.Refused {
				t.Errorf("%d s: %s's columns add up to %d passed, %d refused; want %d, %d", span.seconds, p.Policy, r.ColPassed, r.ColRefused, p.Passed, p.Refused)
			}
		}
	}
	if strings.Contains(rec.Body.String(), "<script>") {
		t.Error("a policy name was drawn unescaped")
	}
}

// TestLiveSVGNewestColumn: over an hour, columns of 19 seconds, the
// newest column holds only the last 9 seconds, and its tooltip names those
// and no second still to come.
func TestLiveSVGNewestColumn(t *testing.T) {
	clock := ratetest.NewClock(t0)
	d := dashboard.New(dashboard.Options{Clock: clock, Window: time.Hour})
	d.Record("api", true)
	clock.Set(t0.Add(-40 * time.Second))
	d.Record("api", true)
	clock.Set(t0)

	rec := do(t, d, "GET", "/api/live.svg?seconds=3600", "", nil)
	root, _ := parseSVG(t, rec.Body.Bytes())
	if root["data-bin"] != "19" {
		t.Fatalf("bin %s, want 19 seconds per column", root["data-bin"])
	}
	got := colTitles(t, rec.Body.Bytes())
	want := map[int64]string{
		sec(-8):  "11:59:52–12:00:00 UTC, 8 s ago: 1 allowed, 0 refused",  // the newest: 9 s
		sec(-46): "11:59:14–11:59:32 UTC, 46 s ago: 1 allowed, 0 refused", // a whole column
	}
	if len(got) != len(want) {
		t.Errorf("columns %v, want %v", got, want)
	}
	for at, w := range want {
		if got[at] != w {
			t.Errorf("column at %d: tooltip %q, want %q", at, got[at], w)
		}
	}
}

// colTitles returns the tooltip of each column of a picture, by its
// data-t.
func colTitles(t *testing.T, doc []byte) map[int64]string {
	t.Helper()
	out := map[int64]string{}
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var col *xml.StartElement
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		switch {
		case ok && se.Name.Local == "g":
			col = nil
			for _, a := range se.Attr {
				if a.Name.Local == "class" && a.Value == "col" {
					col = &se
				}
			}
		case ok && se.Name.Local == "title" && col != nil:
			var title string
			if err := dec.DecodeElement(&title, &se); err != nil {
				t.Fatal(err)
			}
			for _, a := range col.Attr {
				if a.Name.Local == "data-t" {
					var at int64
					fmt.Sscan(a.Value, &at)
					out[at] = title
				}
			}
			col = nil
		}
	}
}

// BenchmarkRecord measures Record as a server calls it: from every core
// at once, on a few policies, with the system clock.
func BenchmarkRecord(b *testing.B) {
	d := dashboard.New(dashboard.Options{})
	policies := []string{"api", "login", "search", "upload"}
	for _, p := range policies {
		d.Record(p, true) // the first decision of a policy allocates its ring
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			d.Record(policies[i%len(policies)], i%8 != 0)
			i++
		}
	})
}

// BenchmarkRecordDuringLive measures Record while another goroutine takes
// live snapshots back to back, of the largest window and many policies:
// what a server's decisions pay while a dashboard is watched.
func BenchmarkRecordDuringLive(b *testing.B) {
	d := dashboard.New(dashboard.Options{Window: dashboard.MaxWindow, MaxPolicies: 256})
	policies := make([]string, 255)
	for i := range policies {
		policies[i] = fmt.Sprintf("policy-%03d", i)
		d.Record(policies[i], true)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				d.Live(0)
			}
		}
	}()
	for i := 0; b.Loop(); i++ {
		d.Record(policies[i%len(policies)], true)
	}
	close(stop)
	<-done
}
