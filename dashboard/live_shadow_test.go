package dashboard_test

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/rate/ratetest"
)

// TestLiveShadow steps a fake clock through a 3-second window, recording
// the decisions of an enforcing policy and of a shadow one. A shadow
// policy's would-be refusals passed: they count among Passed, and apart
// in ShadowRefused, never in Refused, which stays what clients got.
func TestLiveShadow(t *testing.T) {
	clock := ratetest.NewClock(t0)
	d := dashboard.New(dashboard.Options{Clock: clock, Window: 3 * time.Second})
	type rec struct {
		policy  string
		shadow  bool
		allowed bool
		n       int
	}
	// passed, refused, shadow refused
	type counts [3]int64
	type want struct {
		policy string
		total  counts
		per    [3]counts // oldest first
	}
	steps := []struct {
		at   time.Duration
		rec  []rec
		want []want
	}{
		{0, []rec{{"trial", true, true, 2}, {"trial", true, false, 4}}, []want{
			{"trial", counts{6, 0, 4}, [3]counts{{}, {}, {6, 0, 4}}},
		}},
		{time.Second, []rec{{"api", false, true, 1}, {"api", false, false, 2}, {"trial", true, false, 1}}, []want{
			{"api", counts{1, 2, 0}, [3]counts{{}, {}, {1, 2, 0}}},
			{"trial", counts{7, 0, 5}, [3]counts{{}, {6, 0, 4}, {1, 0, 1}}},
		}},
		{3 * time.Second, []rec{{"trial", true, true, 1}}, []want{ // second 0 drops out
			{"api", counts{1, 2, 0}, [3]counts{{1, 2, 0}, {}, {}}},
			{"trial", counts{2, 0, 1}, [3]counts{{1, 0, 1}, {}, {1, 0, 0}}},
		}},
	}
	for i, st := range steps {
		clock.Set(t0.Add(st.at))
		for _, r := range st.rec {
			for range r.n {
				if r.shadow {
					d.RecordShadow(r.policy, r.allowed)
				} else {
					d.Record(r.policy, r.allowed)
				}
			}
		}
		lv := decode[dashboard.Live](t, do(t, d, "GET", "/api/live", "", nil), http.StatusOK, "application/json")
		if len(lv.Policies) != len(st.want) {
			t.Fatalf("step %d: policies %+v, want %d", i, lv.Policies, len(st.want))
		}
		for j, w := range st.want {
			p := lv.Policies[j]
			if got := (counts{p.Passed, p.Refused, p.ShadowRefused}); p.Policy != w.policy || got != w.total {
				t.Errorf("step %d: %s passed, refused, shadow refused %v; want %s %v", i, p.Policy, got, w.policy, w.total)
			}
			for k, s := range p.PerSecond {
				if got := (counts{s.Passed, s.Refused, s.ShadowRefused}); got != w.per[k] {
					t.Errorf("step %d: %s second %d: %v, want %v", i, w.policy, k, got, w.per[k])
				}
			}
		}
	}
}

// TestLiveShadowJSON: GET api/live names the shadow refusals
// shadow_refused, per policy and per second.
func TestLiveShadowJSON(t *testing.T) {
	clock := ratetest.NewClock(t0)
	d := dashboard.New(dashboard.Options{Clock: clock, Window: 2 * time.Second})
	d.RecordShadow("trial", true)
	d.RecordShadow("trial", false)
	body := do(t, d, "GET", "/api/live", "", nil).Body.String()
	want := fmt.Sprintf(`{"policy":"trial","passed":2,"refused":0,"shadow_refused":1,"per_second":[{"t":%d,"passed":0,"refused":0,"shadow_refused":0},{"t":%d,"passed":2,"refused":0,"shadow_refused":1}]}`, sec(-1), sec(0))
	if !strings.Contains(body, want) {
		t.Errorf("api/live: %s\nwant it to hold %s", body, want)
	}
}

// TestLiveSVGShadow draws a shadow policy's would-be refusals as their own
// shade, on top of the green they are part of: the row and each column say
// how many, the row's refused share stays 0%, and an enforcing policy's
// row has none.
func TestLiveSVGShadow(t *testing.T) {
	clock := ratetest.NewClock(t0)
	d := dashboard.New(dashboard.Options{Clock: clock})
	for i := range 6 {
		d.RecordShadow("trial", i < 2)
		d.Record("api", true)
	}
	clock.Advance(time.Second)
	d.RecordShadow("trial", false)
	d.Record("api", false)

	rec := do(t, d, "GET", "/api/live.svg?seconds=60", "", nil)
	_, rows := parseSVG(t, rec.Body.Bytes())
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	shadow := shadowCounts(t, rec.Body.Bytes())
	for _, w := range []struct {
		policy                        string
		passed, refused, shadow, cols int
		rects                         int // shadow-refused rects
	}{
		{"api", 6, 1, 0, 2, 0},
		{"trial", 7, 0, 5, 2, 2},
	} {
		var r *svgRow
		for _, row := range rows {
			if row.Attrs["data-policy"] == w.policy {
				r = row
			}
		}
		if r == nil {
			t.Fatalf("no row for %s", w.policy)
		}
		if r.Attrs["data-passed"] != fmt.Sprint(w.passed) || r.Attrs["data-refused"] != fmt.Sprint(w.refused) || r.Attrs["data-shadow-refused"] != fmt.Sprint(w.shadow) {
			t.Errorf("%s: row %v, want %d passed, %d refused, %d shadow refused", w.policy, r.Attrs, w.passed, w.refused, w.shadow)
		}
		if r.Cols != w.cols || r.ColPassed != w.passed || r.ColRefused != w.refused {
			t.Errorf("%s: %d columns of %d passed, %d refused; want %d of %d, %d", w.policy, r.Cols, r.ColPassed, r.ColRefused, w.cols, w.passed, w.refused)
		}
		if got := shadow[w.policy]; got != [2]int{w.shadow, w.rects} {
			t.Errorf("%s: columns' shadow refusals and their rects %v, want %v", w.policy, got, [2]int{w.shadow, w.rects})
		}
	}
	svg := rec.Body.String()
	for _, want := range []string{
		"5 would refuse",
		"0% refused", // trial's: its refusals refused nothing
		"14% refused",
		"6 allowed, 0 refused; would refuse 4 of the allowed (shadow)", // trial's first second
		"would refuse</tspan> (shadow",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("the picture lacks %q", want)
		}
	}
}

// shadowCounts returns, per row's policy, the sum of its columns'
// data-shadow-refused and how many rects of class shadow-refused it has.
func shadowCounts(t *testing.T, doc []byte) map[string][2]int {
	t.Helper()
	out := map[string][2]int{}
	dec := xml.NewDecoder(bytes.NewReader(doc))
	policy := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		a := map[string]string{}
		for _, at := range se.Attr {
			a[at.Name.Local] = at.Value
		}
		switch {
		case se.Name.Local == "g" && a["class"] == "row":
			policy = a["data-policy"]
		case se.Name.Local == "g" && a["class"] == "col":
			var n int
			if _, err := fmt.Sscan(a["data-shadow-refused"], &n); err != nil {
				t.Fatalf("%s: a column's data-shadow-refused %q", policy, a["data-shadow-refused"])
			}
			c := out[policy]
			c[0] += n
			out[policy] = c
		case se.Name.Local == "rect" && a["class"] == "shadow-refused":
			c := out[policy]
			c[1]++
			out[policy] = c
		}
	}
}
