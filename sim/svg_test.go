package sim

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/chart"
	"github.com/sluicehq/sluice/rate"
)

// svgRow is what a parsed picture draws for one row.
type svgRow struct {
	alg, setup             string
	passed, refused        int // the row's data attributes
	colPassed, colRefused  int // summed over its columns' data attributes
	rectPassed, rectRefued float64
	cols                   map[int][2]int
}

// parseSVG decodes a whole SVG document with encoding/xml, failing on any
// malformed XML, and returns its rows and its scale (pixels per request).
func parseSVG(t *testing.T, doc []byte) ([]*svgRow, float64) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var (
		rows    []*svgRow
		cur     *svgRow
		colT    int
		unit    float64
		sawRoot bool
	)
	get := func(se xml.StartElement, name string) string {
		for _, a := range se.Attr {
			if a.Name.Local == name {
				return a.Value
			}
		}
		return ""
	}
	num := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("attribute %q is not a number", s)
		}
		return n
	}
	flt := func(s string) float64 {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("attribute %q is not a number", s)
		}
		return f
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("invalid XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		switch {
		case se.Name.Local == "svg":
			sawRoot = true
			if se.Name.Space != "http://www.w3.org/2000/svg" {
				t.Errorf("root namespace %q", se.Name.Space)
			}
			unit = flt(get(se, "data-unit"))
		case se.Name.Local == "g" && get(se, "class") == "row":
			cur = &svgRow{alg: get(se, "data-algorithm"), setup: get(se, "data-setup"),
				passed: num(get(se, "data-passed")), refused: num(get(se, "data-refused")), cols: map[int][2]int{}}
			rows = append(rows, cur)
		case se.Name.Local == "g" && get(se, "class") == "col":
			colT = num(get(se, "data-t"))
			p, r := num(get(se, "data-passed")), num(get(se, "data-refused"))
			cur.colPassed += p
			cur.colRefused += r
			cur.cols[colT] = [2]int{p, r}
		case se.Name.Local == "rect" && get(se, "class") == "passed":
			cur.rectPassed += flt(get(se, "height"))
		case se.Name.Local == "rect" && get(se, "class") == "refused":
			cur.rectRefued += flt(get(se, "height"))
		}
	}
	if !sawRoot {
		t.Fatal("no <svg> element")
	}
	return rows, unit
}

// checkSVG draws r and checks that the picture shows exactly r: one row
// per result row, in order, with its counts, and bars whose heights are
// the counts at one scale.
func checkSVG(t *testing.T, r Result) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteSVG(&b, r); err != nil {
		t.Fatal(err)
	}
	rows, unit := parseSVG(t, b.Bytes())
	if len(rows) != len(r.Rows) {
		t.Fatalf("%d rows drawn, want %d", len(rows), len(r.Rows))
	}
	if unit <= 0 {
		t.Fatalf("scale %v", unit)
	}
	for i, got := range rows {
		want := r.Rows[i]
		name := want.Algorithm.String() + "/" + want.Setup.String()
		if got.alg != want.Algorithm.String() || got.setup != want.Setup.String() {
			t.Errorf("row %d is %s/%s, want %s", i, got.alg, got.setup, name)
		}
		if got.passed != want.Passed || got.refused != want.Refused {
			t.Errorf("%s: row says %d/%d, want %d/%d", name, got.passed, got.refused, want.Passed, want.Refused)
		}
		if got.colPassed != want.Passed || got.colRefused != want.Refused {
			t.Errorf("%s: columns add up to %d/%d, want %d/%d", name, got.colPassed, got.colRefused, want.Passed, want.Refused)
		}
		if math.Abs(got.rectPassed-float64(want.Passed)*unit) > 0.01*float64(len(got.cols)+1) ||
			math.Abs(got.rectRefued-float64(want.Refused)*unit) > 0.01*float64(len(got.cols)+1) {
			t.Errorf("%s: bars are %.2f and %.2f px high, want %d and %d requests at %.4f px", name, got.rectPassed, got.rectRefued, want.Passed, want.Refused, unit)
		}
	}
	// What was held back and what cost more than the capacity, on the
	// same scale.
	for i, got := range parseMarks(t, b.Bytes()).rows {
		want := r.Rows[i]
		if got.held != fmt.Sprint(want.Held) || got.colsHeld != want.Held || got.over != fmt.Sprint(want.OverCapacity) ||
			math.Abs(got.rectHeld-float64(want.Held)*unit) > 0.01*float64(len(want.PerSecond)+1) {
			t.Errorf("%s/%s: held %s (columns %d, %.2f px), over capacity %s; want %d held, %d over",
				want.Algorithm, want.Setup, got.held, got.colsHeld, got.rectHeld, got.over, want.Held, want.OverCapacity)
		}
	}
	return b.Bytes()
}

func TestSVGBuiltins(t *testing.T) {
	for _, sc := range Builtins(Params{}) {
		t.Run(sc.Name, func(t *testing.T) {
			r, err := Run(context.Background(), sc)
			if err != nil {
				t.Fatal(err)
			}
			doc := checkSVG(t, r)
			rows, _ := parseSVG(t, doc)
			// One column per second here: each column is that second.
			for i, row := range rows {
				for tt, c := range row.cols {
					s := r.Rows[i].PerSecond[tt]
					if c != [2]int{s.Passed, s.Refused} {
						t.Errorf("%s second %d drawn as %v, want %+v", row.alg, tt, c, s)
					}
				}
			}
			if !bytes.Contains(doc, []byte("limit "+describeLimit(sc.Limit))) {
				t.Error("the title does not say the limit")
			}
		})
	}
}

// TestSVGEscapes: names and keys from a user (a CSV file's name, its keys)
// cannot break the document.
func TestSVGEscapes(t *testing.T) {
	sc := Scenario{
		Name:    `<script>&"x"`,
		Summary: "a <b> & c",
		Limit:   tenPer10s,
		Events:  append(Burst(`k<&>"'`, 0, 12), Burst("]]>", time.Second, 3)...),
	}
	r, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	doc := checkSVG(t, r)
	if bytes.Contains(doc, []byte("<script>")) || bytes.Contains(doc, []byte("<b>")) {
		t.Error("unescaped text in the picture")
	}
}

// TestSVGLong: a long scenario gets several seconds per column, and the
// picture still adds up.
func TestSVGLong(t *testing.T) {
	sc := Scenario{Name: "long", Limit: rate.Limit{Count: 100, Period: time.Minute},
		Events: Steady("k", 0, MaxSeconds*time.Second, 700*time.Millisecond)}
	r, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	doc := checkSVG(t, r)
	if !bytes.Contains(doc, []byte("one column per ")) && !bytes.Contains(doc, []byte("One column per ")) {
		t.Error("no word on the column width")
	}
	if bytes.Contains(doc, []byte("One column per second")) {
		t.Error("3600 one-second columns in 578 px")
	}
	if n := bytes.Count(doc, []byte(`class="col"`)); n*chart.MinColumn > chart.PlotWidth*len(r.Rows) {
		t.Errorf("%d columns for %d rows: narrower than %d px", n, len(r.Rows), chart.MinColumn)
	}
}

func TestWriteText(t *testing.T) {
	sc, _ := Builtin("calm-burst", Params{})
	out := textOf(t, sc)
	for _, want := range []string{
		"calm-burst: limit 10 per 10s",
		"token_bucket, leaky_bucket, gcra: burst 10, refilled 1 every 1s",
		"one limiter — each cell: passed ✕refused\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The lines for second 4, the totals and the calm client, column by
	// column in the order of rate.Algorithms. leaky_bucket passes what
	// gcra does, but holds back 9 of the burst (its first goes at once)
	// and the calm requests of 6, 9, 12, 15 and 18 s, which arrive while
	// the burst's queue, drained until 14.5 s and then behind each calm
	// request, is not empty: 14 held.
	for label, want := range map[string][]string{
		"4":    {"8", "✕7", "8", "✕7", "8", "✕7", "10", "✕5", "10", "(9", "held)", "✕5", "10", "✕5"},
		"all":  {"16", "✕9", "16", "✕9", "16", "✕9", "20", "✕5", "20", "(14", "held)", "✕5", "20", "✕5"},
		"calm": {"8", "✕2", "8", "✕2", "8", "✕2", "10", "10", "(5", "held)", "10"},
	} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			head, cells, ok := strings.Cut(line, "│")
			if ok && strings.TrimSpace(head) == label {
				found = true
				if got := strings.Fields(cells); strings.Join(got, " ") != strings.Join(want, " ") {
					t.Errorf("line %q: cells %q, want %q", label, got, want)
				}
			}
		}
		if !found {
			t.Errorf("no line %q in:\n%s", label, out)
		}
	}
}

// TestWriteTextAligned: the seconds column is as wide as its widest
// label, so a scenario of 1000 seconds or more keeps its table straight.
func TestWriteTextAligned(t *testing.T) {
	sc, _ := Builtin("steady", Params{Seconds: 1001})
	sc.Algorithms = []rate.Algorithm{rate.FixedWindow}
	text := textOf(t, sc)
	want := -1
	rules := 0                    // the lines across the table, ─┼─
	rows := make(map[string]bool) // the labels of the lines with a │
	for _, line := range strings.Split(text, "\n") {
		head, _, ok := strings.Cut(line, "│")
		if ok {
			rows[strings.TrimSpace(head)] = true
		} else if head, _, ok = strings.Cut(line, "┼"); ok {
			rules++
		} else {
			continue
		}
		n := utf8.RuneCountInString(head)
		if want < 0 {
			want = n
		}
		if n != want {
			t.Errorf("line %q: rule at column %d, want %d", line, n, want)
		}
	}
	// The lines compared must be the table's: its head, the rules under
	// it and over its total, the seconds of three digits and of four.
	var missing []string
	for _, label := range []string{"sec", "999", "1000", "all"} {
		if !rows[label] {
			missing = append(missing, label)
		}
	}
	if rules != 2 || len(missing) > 0 {
		t.Errorf("%d lines across the table, want 2, under its head and over its total; lines %q lack their rule │; in:\n%s",
			rules, missing, text)
	}
}

// TestBucketNoteFineRefill: a bucket that refills faster than once a
// microsecond says its rate, not a refill "every 0s".
func TestBucketNoteFineRefill(t *testing.T) {
	sc := Scenario{Name: "fast", Limit: rate.Limit{Count: 3_000_000, Period: sec},
		Algorithms: []rate.Algorithm{rate.GCRA}, Events: []Event{{Key: "k"}}}
	text := textOf(t, sc)
	if want := "gcra: burst 3000000, refilled 3000000 every 1s\n"; !strings.Contains(text, want) {
		t.Errorf("output lacks %q:\n%s", want, text)
	}
}

// textOf runs sc and returns what WriteText writes of it.
func textOf(t *testing.T, sc Scenario) string {
	t.Helper()
	r, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestSVGTicksOverTheirSeconds: each label of the time axis stands over
// the column that holds its second, in short scenarios (a column a
// second) and long ones (several seconds a column) alike.
func TestSVGTicksOverTheirSeconds(t *testing.T) {
	for _, secs := range []int{20, 195, 1000, MaxSeconds} {
		sc := Scenario{Name: "ticks", Limit: rate.Limit{Count: 100, Period: time.Minute},
			Algorithms: []rate.Algorithm{rate.GCRA}, Seconds: secs,
			Events: Steady("k", 0, time.Duration(secs)*time.Second, 10*time.Second)}
		r, err := Run(context.Background(), sc)
		if err != nil {
			t.Fatal(err)
		}
		// checkSVG checks the rows and bars; here, the axis.
		doc := checkSVG(t, r)
		bin, _, colW := chart.Bins(secs)
		dec := xml.NewDecoder(bytes.NewReader(doc))
		var x float64
		inTick, ticks := false, 0
		for {
			tok, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("invalid XML: %v", err)
			}
			switch tok := tok.(type) {
			case xml.StartElement:
				inTick = false
				if tok.Name.Local != "text" {
					continue
				}
				var size string
				for _, a := range tok.Attr {
					switch a.Name.Local {
					case "font-size":
						size = a.Value
					case "x":
						x, _ = strconv.ParseFloat(a.Value, 64)
					}
				}
				inTick = size == "10.5"
			case xml.CharData:
				sec, err := strconv.Atoi(string(tok))
				if !inTick || err != nil {
					continue
				}
				ticks++
				col := int(math.Floor((x - chart.PlotLeft) / colW))
				if col != sec/bin {
					t.Errorf("%d s: label %d at x %.1f, over column %d (seconds %d–%d), want column %d", secs, sec, x, col, col*bin, col*bin+bin-1, sec/bin)
				}
			case xml.EndElement:
				inTick = false
			}
		}
		if ticks < 2 {
			t.Errorf("%d s: %d labels on the time axis", secs, ticks)
		}
	}
}

// svgCol is one column of a parsed picture: where its bar is and the
// labels drawn with it.
type svgCol struct {
	t        int
	x, width float64 // the bar's
	passedAt float64 // the x of its pass count under the baseline, if drawn
	passed   string
}

// svgColumns returns the columns of the first row of a picture.
func svgColumns(t *testing.T, doc []byte) []svgCol {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var cols []svgCol
	rows, inLabel, depth, colDepth := 0, false, 0, 0 // colDepth: the depth of the column open, or 0
	shift := []float64{0}                            // the x translation at each depth
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("invalid XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			depth++
			a := map[string]string{}
			for _, at := range tok.Attr {
				a[at.Name.Local] = at.Value
			}
			dx := 0.0
			if tr := a["transform"]; tr != "" {
				if _, err := fmt.Sscanf(tr, "translate(%g 0)", &dx); err != nil {
					t.Fatalf("transform %q: %v", tr, err)
				}
			}
			shift = append(shift, shift[len(shift)-1]+dx)
			x := func(name string) float64 {
				v, _ := strconv.ParseFloat(a[name], 64)
				return v + shift[len(shift)-1]
			}
			inLabel = false
			switch {
			case tok.Name.Local == "g" && a["class"] == "row":
				rows++
			case rows != 1:
			case tok.Name.Local == "g" && a["class"] == "col":
				n, _ := strconv.Atoi(a["data-t"])
				cols = append(cols, svgCol{t: n})
				colDepth = depth
			case colDepth == 0:
			case tok.Name.Local == "rect" && a["class"] == "passed":
				c := &cols[len(cols)-1]
				c.x = x("x")
				c.width, _ = strconv.ParseFloat(a["width"], 64)
			case tok.Name.Local == "text" && a["fill"] == chart.Green:
				c := &cols[len(cols)-1]
				c.passedAt = x("x")
				inLabel = true
			}
		case xml.CharData:
			if inLabel {
				cols[len(cols)-1].passed = string(tok)
			}
		case xml.EndElement:
			inLabel = false
			if depth == colDepth {
				colDepth = 0
			}
			depth--
			shift = shift[:len(shift)-1]
		}
	}
	return cols
}

// TestSVGPassLabelsApart: the pass counts under narrow columns keep at
// least a character's gap between them, so that "2 4 8" never reads as
// 248; those that do not fit are left out.
func TestSVGPassLabelsApart(t *testing.T) {
	const digit = 6.36 // DejaVu Sans's digits are 0.636 em wide; the labels are 10 px
	for _, secs := range []int{30, 45, 60, 90, 194} {
		sc := Scenario{Name: "labels", Limit: rate.Limit{Count: 1000, Period: time.Second},
			Algorithms: []rate.Algorithm{rate.GCRA}, Seconds: secs}
		for s := range secs {
			sc.Events = append(sc.Events, Burst("k", time.Duration(s)*time.Second, 1+s%9)...)
		}
		r, err := Run(context.Background(), sc)
		if err != nil {
			t.Fatal(err)
		}
		var labels []svgCol
		for _, c := range svgColumns(t, checkSVG(t, r)) {
			if c.passed != "" {
				labels = append(labels, c)
			}
		}
		// A label wider than its column is left out; the others, at
		// worst every third, fit.
		if _, cols, colW := chart.Bins(secs); colW >= 6.5 && len(labels) < cols/3 {
			t.Errorf("%d s: %d labels under %d columns %.1f px wide, want at least %d", secs, len(labels), cols, colW, cols/3)
		}
		for i := 1; i < len(labels); i++ {
			a, b := labels[i-1], labels[i]
			gap := b.passedAt - a.passedAt - digit*float64(len(a.passed)+len(b.passed))/2
			if gap < digit {
				t.Errorf("%d s: labels %q at %.1f and %q at %.1f are %.1f px apart, want at least %.2f", secs, a.passed, a.passedAt, b.passed, b.passedAt, gap, digit)
			}
		}
	}
}

// TestSVGShortLastColumn: when the scenario's length is not a multiple
// of a column's seconds, the last column covers fewer seconds: it is
// drawn narrower in proportion, on the time scale of the others, and
// the header says so.
func TestSVGShortLastColumn(t *testing.T) {
	const secs = 195 // 2 s a column: 97 of 2 s and one of 1 s
	sc := Scenario{Name: "short", Limit: rate.Limit{Count: 1000, Period: time.Second},
		Algorithms: []rate.Algorithm{rate.GCRA}, Seconds: secs,
		Events: Steady("k", 0, secs*time.Second, time.Second)}
	r, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	doc := checkSVG(t, r)
	bin, cols, colW := chart.Bins(secs)
	if bin != 2 || cols != 98 {
		t.Fatalf("Bins(%d) = %d, %d: the test wants 98 columns of 2 s", secs, bin, cols)
	}
	got := svgColumns(t, doc)
	if len(got) != cols {
		t.Fatalf("%d columns drawn, want %d", len(got), cols)
	}
	full, last := got[0], got[len(got)-1]
	if math.Abs(last.width-full.width/2) > 0.02 {
		t.Errorf("the last column, 1 s, is %.2f px wide; the others, 2 s, %.2f", last.width, full.width)
	}
	// It stands where its second is on the time scale: in the first
	// half of its slot.
	left := float64(chart.PlotLeft) + float64(cols-1)*colW
	if last.x < left || last.x+last.width > left+colW/2+0.01 {
		t.Errorf("the last column spans %.2f–%.2f px, want within %.2f–%.2f", last.x, last.x+last.width, left, left+colW/2)
	}
	if !bytes.Contains(doc, []byte("One column per 2 seconds (last: 1 s):")) {
		t.Error("the header does not say the last column is narrower")
	}

	// A length that is a multiple draws every column alike, and says
	// nothing of the last.
	sc.Seconds, sc.Events = 196, Steady("k", 0, 196*time.Second, time.Second)
	if r, err = Run(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	doc = checkSVG(t, r)
	got = svgColumns(t, doc)
	if w := got[len(got)-1].width; math.Abs(w-got[0].width) > 0.001 || bytes.Contains(doc, []byte("(last: ")) {
		t.Errorf("196 s: the last column %.2f px wide, the first %.2f", w, got[0].width)
	}
}
