package dashboard_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/dashboard"
)

// do serves one request and returns the recorded response.
func do(t *testing.T, h http.Handler, method, target, contentType string, body io.Reader) *httptest.ResponseRecorder {
	t.Helper()
	return serve(h, httptestRequest(method, target, contentType, body))
}

// httptestRequest returns a request for a handler, with a Content-Type
// unless it is empty.
func httptestRequest(method, target, contentType string, body io.Reader) *http.Request {
	req := httptest.NewRequest(method, target, body)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req
}

// serve serves req and returns the recorded response.
func serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// decode decodes a JSON response of the given status and Content-Type.
func decode[T any](t *testing.T, rec *httptest.ResponseRecorder, status int, contentType string) T {
	t.Helper()
	var v T
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != contentType {
		t.Fatalf("Content-Type %q, want %q", ct, contentType)
	}
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %s: %v", rec.Body, err)
	}
	return v
}

// problemOf decodes a problem+json response of the given status.
func problemOf(t *testing.T, rec *httptest.ResponseRecorder, status int) dashboard.Problem {
	t.Helper()
	p := decode[dashboard.Problem](t, rec, status, "application/problem+json")
	if p.Status != status || p.Title != http.StatusText(status) || p.Type != "about:blank" || p.Detail == "" {
		t.Fatalf("problem %+v, want status %d with its title and a detail", p, status)
	}
	return p
}

// svgRow is one row of a picture: its data-* attributes, and its columns'
// counts summed.
type svgRow struct {
	Attrs                    map[string]string
	ColPassed, ColRefused    int
	Cols                     int
	RectPassed, RectsRefused int
}

// parseSVG decodes a whole SVG document with encoding/xml, failing on any
// malformed XML, and returns its root's attributes and its rows (the <g
// class="row"> elements).
func parseSVG(t *testing.T, doc []byte) (map[string]string, []*svgRow) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var (
		root  map[string]string
		rows  []*svgRow
		cur   *svgRow
		depth int
		rowAt int
	)
	attrs := func(se xml.StartElement) map[string]string {
		m := map[string]string{}
		for _, a := range se.Attr {
			m[a.Name.Local] = a.Value
		}
		return m
	}
	num := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("attribute %q is not a number", s)
		}
		return n
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v\n%s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			depth++
			a := attrs(tok)
			switch {
			case root == nil:
				if tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("root element %v, want svg in the SVG namespace", tok.Name)
				}
				root = a
			case tok.Name.Local == "g" && a["class"] == "row":
				cur = &svgRow{Attrs: a}
				rowAt = depth
				rows = append(rows, cur)
			case tok.Name.Local == "g" && a["class"] == "col" && cur != nil:
				cur.Cols++
				cur.ColPassed += num(a["data-passed"])
				cur.ColRefused += num(a["data-refused"])
			case tok.Name.Local == "rect" && cur != nil && a["class"] == "passed":
				cur.RectPassed++
			case tok.Name.Local == "rect" && cur != nil && a["class"] == "refused":
				cur.RectsRefused++
			}
		case xml.EndElement:
			if cur != nil && depth == rowAt {
				cur = nil
			}
			depth--
		}
	}
	if root == nil {
		t.Fatalf("no SVG in %q", doc)
	}
	return root, rows
}

// form encodes key-value pairs, keys possibly repeated, as a form body.
func form(kv ...string) io.Reader {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return strings.NewReader(v.Encode())
}
