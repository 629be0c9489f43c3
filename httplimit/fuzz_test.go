package httplimit

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
)

// FuzzServeHTTP sends arbitrary requests (method, host, path, headers,
// remote address, body) through policies that read every part of them.
// It checks that the middleware never panics and that every answer it
// writes itself has a body of valid JSON.
func FuzzServeHTTP(f *testing.F) {
	set, err := policy.Load("f.yaml", []byte(`
client_ip: {trusted_proxies: [0.0.0.0/0, "::/0"], header: X-Forwarded-For}
plans: {names: [free, pro], default: free, header: X-Plan}
policies:
  - {name: a, match: "/things/{id}", key: [ip, "header:X-API-Key", "path:id", method], limits: ["2/m"]}
  - {name: b, match: "api.example.com/", key: ["header:X-K", "form:f"], limits: ["2/m"], max_delay: 1s}
  - {name: c, key: [ip], limits: ["3/m"], plans: {pro: ["5/m"]}}
`))
	if err != nil {
		f.Fatal(err)
	}
	h := Middleware(set, memory.New(memory.Options{}), Options{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	f.Add("GET", "api.example.com", "/things/1", "k", "1.2.3.4", "1.2.3.4:5", "f=1", "application/x-www-form-urlencoded")
	f.Add("post", "[::1", "//things/../x", "\x00", "", "@", "--b\r\n", "multipart/form-data; boundary=b")
	f.Fuzz(func(t *testing.T, method, host, path, key, xff, remote, body, ctype string) {
		r := &http.Request{
			Method: method, Host: host, URL: &url.URL{Path: path}, RemoteAddr: remote, Body: http.NoBody,
			Header: http.Header{"X-Api-Key": {key}, "X-K": {key}, "X-Forwarded-For": {xff, key}, "X-Plan": {key}, "Content-Type": {ctype}},
		}
		for range 4 { // so that the limits refuse some
			if body != "" {
				r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r.Clone(t.Context()))
			if w.Code != http.StatusOK && method != http.MethodHead && !json.Valid(w.Body.Bytes()) {
				t.Fatalf("%d: body %q is not JSON", w.Code, w.Body)
			}
		}
	})
}

// FuzzAppendJSONString checks appendJSONString against encoding/json: the
// string it writes is valid JSON, in UTF-8 (which encoding/json does not
// check when it reads), and reads back as the string encoding/json
// writes, stray bytes of invalid UTF-8 replaced alike.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"about:blank", `a "quoted" \ name`, "\x00\x1f\x7f", "é€😀", "\xff", "a\xe2\x82", "\xed\xa0\x80", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendJSONString(nil, s)
		if !utf8.Valid(b) {
			t.Fatalf("appendJSONString(%q) = %q, not UTF-8", s, b)
		}
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("appendJSONString(%q) = %s: %v", s, b, err)
		}
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var wantS string
		if err := json.Unmarshal(want, &wantS); err != nil {
			t.Fatal(err)
		}
		if got != wantS {
			t.Errorf("appendJSONString(%q) = %s, reads as %q; encoding/json's reads as %q", s, b, got, wantS)
		}
	})
}
