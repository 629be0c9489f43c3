package policy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/store/memory"
)

// BenchmarkEnforce decides requests against a few policies: most paths
// are clean and matched as they are; a form key parses the body.
func BenchmarkEnforce(b *testing.B) {
	set, err := Load("bench.yaml", []byte(`
policies:
  - name: login
    match: "POST /login"
    keys: [ip, form:username]
    limits: ["1000000/s"]
  - name: items
    match: "GET /items/{id}"
    key: [ip, path:id]
    limits: ["1000000/s"]
  - name: api
    match: "/api/"
    key: "header:X-API-Key"
    limits: ["1000000/s"]
`))
	if err != nil {
		b.Fatal(err)
	}
	e := NewEnforcer(set, memory.New(memory.Options{}), Options{})
	for _, bb := range []struct {
		name, method, target, body string
	}{
		{"clean", "GET", "/items/1", ""},
		{"unclean", "GET", "//items/./1", ""},
		{"header", "GET", "/api/v1/orders", ""},
		{"form", "POST", "/login", "username=alice&password=secret"},
	} {
		b.Run(bb.name, func(b *testing.B) {
			r := httptest.NewRequest(bb.method, bb.target, nil)
			r.Header.Set("X-API-Key", "k1")
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			body := strings.NewReader(bb.body)
			b.ReportAllocs()
			for b.Loop() {
				body.Reset(bb.body)
				r.Body, r.Form, r.PostForm = io.NopCloser(body), nil, nil
				if bb.body == "" {
					r.Body = http.NoBody
				}
				out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
				out.Done()
			}
		})
	}
}
