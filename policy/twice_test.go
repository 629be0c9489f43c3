package policy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// keysOf returns an Enforcer on config and a function that decides a
// request and returns its verdict and, by policy, the key decided.
func keysOf(t *testing.T, config string) func(*Request) (Verdict, map[string]string) {
	t.Helper()
	set, err := Load("test.yaml", []byte(config))
	if err != nil {
		t.Fatal(err)
	}
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rec := &keyRecorder{}
	e := NewEnforcer(set, memory.New(memory.Options{Clock: clock}), Options{Clock: clock, Observer: rec})
	return func(r *Request) (Verdict, map[string]string) {
		rec.events = rec.events[:0]
		out := e.Enforce(context.Background(), r)
		out.Done()
		keys := map[string]string{}
		for _, ev := range rec.events {
			keys[ev.Policy.Name] = untag(ev.Key)
		}
		return out.Verdict, keys
	}
}

// untag returns a store key {prefix:policy:parts}:tag as prefix:policy:parts.
func untag(key string) string {
	if i := strings.LastIndex(key, "}:"); strings.HasPrefix(key, "{") && i > 0 {
		return key[1:i]
	}
	return key
}

// A form field given more than once has no one value every server reads:
// Go's FormValue the first (for a multipart body, the query string's
// before the body's), Django, PHP and Rails the last, PHP's $_POST,
// Django's request.POST and multer the body's alone; Rack before 3 also
// splits on ;, which Go does not. Every such request is keyed by one
// value, #many, that no client can vary: each row sends two logins, with
// different decoys, and the second must be refused (1/m).
func TestFormFieldGivenTwice(t *testing.T) {
	mp := func(t *testing.T, target string, parts ...formPart) func(*testing.T) *http.Request {
		return func(t *testing.T) *http.Request {
			body, ct := multipartBody(t, parts...)
			r := httptest.NewRequest("POST", target, strings.NewReader(string(body)))
			r.Header.Set("Content-Type", ct)
			return r
		}
	}
	ue := func(method, target, body string) func(*testing.T) *http.Request {
		return func(*testing.T) *http.Request {
			r := httptest.NewRequest(method, target, strings.NewReader(body))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return r
		}
	}
	for _, tt := range []struct {
		name string
		req  func(t *testing.T, decoy string) func(*testing.T) *http.Request
	}{
		{"twice in a url-encoded body", func(t *testing.T, d string) func(*testing.T) *http.Request {
			return ue("POST", "/login", "username="+d+"&username=victim&password=x")
		}},
		{"in the query and a url-encoded body", func(t *testing.T, d string) func(*testing.T) *http.Request {
			return ue("POST", "/login?username="+d, "username=victim&password=x")
		}},
		{"twice in the query", func(t *testing.T, d string) func(*testing.T) *http.Request {
			return ue("POST", "/login?username="+d+"&username=victim", "password=x")
		}},
		{"empty, then the account", func(t *testing.T, d string) func(*testing.T) *http.Request {
			return ue("POST", "/login?x="+d, "username=&username=victim")
		}},
		{"after a ; (Rack 2 splits there, Go drops the pair)", func(t *testing.T, d string) func(*testing.T) *http.Request {
			return ue("POST", "/login", "username="+d+"&x=1;username=victim")
		}},
		{"only after a ;", func(t *testing.T, d string) func(*testing.T) *http.Request {
			return ue("POST", "/login", "x="+d+";username=victim")
		}},
		{"in the query and a multipart body", func(t *testing.T, d string) func(*testing.T) *http.Request {
			return mp(t, "/login?username="+d, formPart{name: "username", value: "victim"}, formPart{name: "password", value: "x"})
		}},
		{"twice in a multipart body", func(t *testing.T, d string) func(*testing.T) *http.Request {
			return mp(t, "/login", formPart{name: "username", value: d}, formPart{name: "username", value: "victim"})
		}},
		{"again after a file", func(t *testing.T, d string) func(*testing.T) *http.Request {
			return mp(t, "/login", formPart{name: "username", value: d}, formPart{name: "f", file: "f.bin", value: strings.Repeat("f", 100<<10)}, formPart{name: "username", value: "victim"})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			decide := keysOf(t, loginByAccount)
			for i, want := range []Verdict{Allow, Refuse} {
				r := tt.req(t, fmt.Sprintf("decoy%d", i))(t)
				v, keys := decide(&Request{HTTP: r, Header: r.Header})
				if !strings.HasSuffix(keys["login"], ":form:username=#many") {
					t.Errorf("login %d: key %q, want form:username=#many", i, keys["login"])
				}
				if v != want {
					t.Errorf("login %d: %v, want %v", i, v, want)
				}
			}
		})
	}

	// Given once, anywhere, the field keys as its value.
	decide := keysOf(t, loginByAccount)
	for _, r := range []*http.Request{
		ue("POST", "/login?x=1", "username=victim&password=a")(t),
		ue("POST", "/login?username=victim", "password=a")(t),
		mp(t, "/login?x=1", formPart{name: "username", value: "victim"}, formPart{name: "username", file: "u.txt", value: "file"})(t),
	} {
		if _, keys := decide(&Request{HTTP: r, Header: r.Header}); !strings.HasSuffix(keys["login"], ":form:username=victim") {
			t.Errorf("%s %s: key %q, want form:username=victim", r.Method, r.URL, keys["login"])
		}
	}
}

// A header given more than once is read differently by the servers
// behind a policy (Go the first, Node and Rack all of them joined, others
// the last): a header:NAME key reads it as #many, a plan header names no
// plan, and a match condition holds if it holds for one of the values.
// In HTTP and in gRPC metadata.
func TestHeaderGivenTwice(t *testing.T) {
	const config = `
plans:
  names: [free, pro]
  default: free
  api_key_header: X-API-Key
  api_keys: {k-pro: pro}
policies:
  - name: anonymous
    match: {path: /, headers: [{name: X-API-Key, present: false}]}
    key: ip
    limits: ["1/m"]
  - name: partner
    match: {path: /, headers: [{name: X-API-Key, present: true}]}
    key: "header:X-API-Key"
    plans:
      free: ["1/m"]
      pro: ["100/m"]
  - name: tenant
    match: {path: /, headers: [{name: X-Tenant, equals: acme}]}
    key: ip
    limits: ["1/m"]
`
	viaHTTP := func(h map[string][]string) *Request {
		r := httptest.NewRequest("GET", "/", nil)
		for k, vs := range h {
			r.Header[k] = vs
		}
		return &Request{HTTP: r, Header: r.Header}
	}
	viaGRPC := func(h map[string][]string) *Request {
		r := httptest.NewRequest("POST", "/", nil)
		md := map[string][]string{}
		for k, vs := range h {
			md[strings.ToLower(k)] = vs
		}
		return &Request{HTTP: r, Metadata: md}
	}
	for _, tr := range []struct {
		name string
		req  func(map[string][]string) *Request
	}{{"HTTP", viaHTTP}, {"gRPC", viaGRPC}} {
		decide := keysOf(t, config)
		for _, tt := range []struct {
			header  map[string][]string
			want    map[string]string // by policy, how its key ends
			verdict Verdict
		}{
			{map[string][]string{"X-Api-Key": {"k-pro"}}, map[string]string{"partner": "=k-pro"}, Allow},
			// One counter for every request that gives the key twice, at
			// the default plan's limit (1/m): the second is refused.
			{map[string][]string{"X-Api-Key": {"k-pro", "victim"}}, map[string]string{"partner": "=#many"}, Allow},
			{map[string][]string{"X-Api-Key": {"k-pro", "other"}}, map[string]string{"partner": "=#many"}, Refuse},
			{map[string][]string{"X-Api-Key": {"", "victim"}}, map[string]string{"partner": "=#many"}, Refuse},
			{map[string][]string{"X-Tenant": {"other", "acme"}, "X-Api-Key": {"k-pro"}}, map[string]string{"partner": "=k-pro", "tenant": ""}, Allow},
		} {
			v, keys := decide(tr.req(tt.header))
			for p, end := range tt.want {
				if k, ok := keys[p]; !ok || !strings.HasSuffix(k, end) {
					t.Errorf("%s %v: policy %s key %q (decided: %v), want one ending %q", tr.name, tt.header, p, k, ok, end)
				}
			}
			if _, ok := keys["anonymous"]; ok {
				t.Errorf("%s %v: decided by the anonymous policy, for a request that carries the header", tr.name, tt.header)
			}
			if v != tt.verdict {
				t.Errorf("%s %v: %v, want %v", tr.name, tt.header, v, tt.verdict)
			}
		}
	}
}

// A multipart body that net/http cannot read to its end may give the
// field again past the part it stops at, to a server that reads on (PHP's
// parser skips what it cannot read): the key does not know the field, and
// every such request shares one value, #unread.
func TestFormKeyMalformedMultipart(t *testing.T) {
	decide := keysOf(t, loginByAccount)
	for _, body := range []string{
		"--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\ndecoy\r\n--B\r\nnot a header line\r\n\r\nx\r\n--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nvictim\r\n--B--\r\n",
		"--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\ndecoy\r\n--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nvic", // cut short
	} {
		r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		r.Header.Set("Content-Type", "multipart/form-data; boundary=B")
		if _, keys := decide(&Request{HTTP: r, Header: r.Header}); !strings.HasSuffix(keys["login"], ":form:username=#unread") {
			t.Errorf("%q: key %q, want form:username=#unread", body, keys["login"])
		}
		if got, _ := io.ReadAll(r.Body); string(got) != body {
			t.Errorf("%q: after the key, the handler reads %q", body, got)
		}
	}
}
