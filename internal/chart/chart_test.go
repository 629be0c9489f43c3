package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestBins(t *testing.T) {
	// PlotWidth is 582 px: 194 columns of MinColumn px at the most.
	for _, tc := range []struct {
		seconds, bin, cols int
	}{
		{0, 1, 1}, // as 1 second
		{1, 1, 1},
		{60, 1, 60},
		{194, 1, 194},
		{195, 2, 98},
		{388, 2, 194},
		{389, 3, 130},
		{3600, 19, 190}, // 3600/18 = 200 columns would be too many
	} {
		bin, cols, colW := Bins(tc.seconds)
		if bin != tc.bin || cols != tc.cols {
			t.Errorf("Bins(%d) = %d, %d: want bin %d, %d columns", tc.seconds, bin, cols, tc.bin, tc.cols)
		}
		if want := float64(PlotWidth) / float64(tc.cols); colW != want {
			t.Errorf("Bins(%d): column %g px wide, want %g", tc.seconds, colW, want)
		}
	}
	// For every span: columns cover it, none is narrower than MinColumn,
	// and one second less per column would make them too narrow.
	for s := 1; s <= 4000; s++ {
		bin, cols, colW := Bins(s)
		if cols*bin < s || (cols-1)*bin >= s {
			t.Fatalf("Bins(%d): %d columns of %d s do not just cover it", s, cols, bin)
		}
		if colW < MinColumn {
			t.Fatalf("Bins(%d): columns %g px wide", s, colW)
		}
		if bin > 1 && (s+bin-2)/(bin-1)*MinColumn <= PlotWidth {
			t.Fatalf("Bins(%d): bin %d where %d would do", s, bin, bin-1)
		}
	}
}

func TestTickStep(t *testing.T) {
	for _, tc := range []struct {
		bin  int
		colW float64
		gap  float64
		want int
	}{
		{1, 30, 24, 1},  // 30 px a second
		{1, 9.7, 24, 5}, // 2 s = 19.4 px, 5 s = 48.5 px
		{1, 9.7, 44, 5},
		{1, 3, 44, 15},      // 10 s = 30 px, 15 s = 45 px
		{19, 3.06, 24, 300}, // 120 s = 19.3 px, 300 s = 48.3 px
		{60, 0.01, 24, 1800},
	} {
		if got := TickStep(tc.bin, tc.colW, tc.gap); got != tc.want {
			t.Errorf("TickStep(%d, %g, %g) = %d, want %d", tc.bin, tc.colW, tc.gap, got, tc.want)
		}
	}
}

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"plain — ✕ ünïcode", "plain — ✕ ünïcode"},
		{`a<b>&c`, "a&lt;b&gt;&amp;c"},
		{`say "hi" 'there'`, "say &#34;hi&#34; &#39;there&#39;"},
		{"</text><script>", "&lt;/text&gt;&lt;script&gt;"},
	} {
		if got := Text(tc.in); got != tc.want {
			t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := Attr(tc.in); got != tc.want {
			t.Errorf("Attr(%q) = %q, want %q", tc.in, got, tc.want)
		}
		// Whatever the input, an attribute and its text parse back to it.
		var e struct {
			A string `xml:"a,attr"`
			T string `xml:",chardata"`
		}
		doc := fmt.Sprintf(`<e a="%s">%s</e>`, Attr(tc.in), Text(tc.in))
		if err := xml.Unmarshal([]byte(doc), &e); err != nil || e.A != tc.in || e.T != tc.in {
			t.Errorf("%s parses as %q, %q, %v", doc, e.A, e.T, err)
		}
	}
}

func TestCapitalize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"one column per second", "One column per second"},
		{"Already", "Already"},
		{"élan", "Élan"},
		{"1 limiter", "1 limiter"},
	} {
		if got := Capitalize(tc.in); got != tc.want {
			t.Errorf("Capitalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// failAfter accepts n writes, then fails.
type failAfter struct {
	n     int
	calls int
}

var errWrite = errors.New("disk full")

func (f *failAfter) Write(b []byte) (int, error) {
	f.calls++
	if f.calls > f.n {
		return 0, errWrite
	}
	return len(b), nil
}

func TestPrinterKeepsFirstError(t *testing.T) {
	var buf bytes.Buffer
	p := NewPrinter(&buf)
	p.Printf("<a>%d</a>", 1)
	if buf.Len() != 0 {
		t.Errorf("wrote %q before Flush", buf.String())
	}
	if err := p.Flush(); err != nil || buf.String() != "<a>1</a>" {
		t.Errorf("Flush: %v, wrote %q", err, buf.String())
	}

	w := &failAfter{}
	p = NewPrinter(w)
	big := strings.Repeat("x", 8192) // more than the buffer: writes through
	p.Printf("%s", big)
	p.Printf("%s", big)
	if err := p.Flush(); !errors.Is(err, errWrite) {
		t.Errorf("Flush after a failed write: %v, want %v", err, errWrite)
	}
	if w.calls != 1 {
		t.Errorf("%d writes: want none after the first failed", w.calls)
	}
}

func TestColumn(t *testing.T) {
	for _, tc := range []struct {
		name            string
		passed, refused int64
		rects           []string
	}{
		{"passed only", 3, 0, []string{"passed"}},
		{"refused only", 0, 2, []string{"refused"}},
		{"both", 4, 1, []string{"passed", "refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := NewPrinter(&buf)
			c := Column{Index: 2, Width: 10, Base: 60, Unit: 5, T: 42,
				Passed: tc.passed, Refused: tc.refused, Title: `0–1 s: <"a">`, Pattern: "hatch"}
			cx, top := p.Column(c)
			p.Printf("</g>")
			if err := p.Flush(); err != nil {
				t.Fatal(err)
			}
			if want := float64(PlotLeft) + 2.5*10; cx != want {
				t.Errorf("centre %g, want %g", cx, want)
			}
			if want := 60 - 5*float64(tc.passed+tc.refused); top != want {
				t.Errorf("top %g, want %g", top, want)
			}
			var g struct {
				Class   string `xml:"class,attr"`
				T       int64  `xml:"data-t,attr"`
				Passed  int64  `xml:"data-passed,attr"`
				Refused int64  `xml:"data-refused,attr"`
				Title   string `xml:"title"`
				Rects   []struct {
					Class  string  `xml:"class,attr"`
					X      float64 `xml:"x,attr"`
					Y      float64 `xml:"y,attr"`
					Width  float64 `xml:"width,attr"`
					Height float64 `xml:"height,attr"`
					Fill   string  `xml:"fill,attr"`
				} `xml:"rect"`
			}
			if err := xml.Unmarshal(buf.Bytes(), &g); err != nil {
				t.Fatalf("%v in %s", err, buf.String())
			}
			if g.Class != "col" || g.T != 42 || g.Passed != tc.passed || g.Refused != tc.refused || g.Title != c.Title {
				t.Errorf("group %+v", g)
			}
			if len(g.Rects) != len(tc.rects) {
				t.Fatalf("%d rects, want %d: %s", len(g.Rects), len(tc.rects), buf.String())
			}
			y := 60.0
			for i, r := range g.Rects {
				n, fill := tc.passed, Green
				if tc.rects[i] == "refused" {
					n, fill = tc.refused, "url(#hatch)"
				}
				// 72% of the column, centred; stacked from the baseline up.
				if r.Class != tc.rects[i] || r.Fill != fill || r.Width != 7.2 || r.X != float64(PlotLeft)+21.4 ||
					r.Height != 5*float64(n) || r.Y != y-r.Height {
					t.Errorf("rect %d: %+v", i, r)
				}
				y = r.Y
			}
		})
	}
}

func TestHatch(t *testing.T) {
	var buf bytes.Buffer
	p := NewPrinter(&buf)
	p.Hatch("live-refused")
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	var d struct {
		Pattern struct {
			ID string `xml:"id,attr"`
		} `xml:"pattern"`
	}
	if err := xml.Unmarshal(buf.Bytes(), &d); err != nil || d.Pattern.ID != "live-refused" {
		t.Errorf("%s: pattern %q, %v", buf.String(), d.Pattern.ID, err)
	}
}
