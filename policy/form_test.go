package policy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"
)

// loginByAccount is a policy file that allows one login a minute per
// account, keyed by the form field username.
const loginByAccount = `
policies:
  - name: login
    match: "POST /login"
    key: form:username
    limits: ["1/m burst 1"]
`

// formPart is one part of a multipart body for the tests.
type formPart struct {
	name, file, value string
	qp                bool // sent quoted-printable
}

// multipartBody returns a multipart/form-data body of parts and its
// Content-Type.
func multipartBody(t testing.TB, parts ...formPart) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		d := "form-data"
		if p.name != "" {
			d += fmt.Sprintf("; name=%q", p.name)
		}
		if p.file != "" {
			d += fmt.Sprintf("; filename=%q", p.file)
			h.Set("Content-Type", "application/octet-stream")
		}
		h.Set("Content-Disposition", d)
		value := p.value
		if p.qp {
			h.Set("Content-Transfer-Encoding", "quoted-printable")
			var b strings.Builder
			for i := 0; i < len(value); i++ {
				fmt.Fprintf(&b, "=%02X", value[i])
			}
			value = b.String()
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(pw, value); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), w.FormDataContentType()
}

// A login sent as multipart/form-data (what a browser's fetch sends for
// a FormData) is keyed by the account its handler's FormValue sees, and
// the handler still gets the body whole. Each case is the second attempt
// on account victim in the minute, after a url-encoded one.
func TestFormKeyReadsMultipart(t *testing.T) {
	for _, tt := range []struct {
		name, method, target string
		parts                []formPart
	}{
		{"account in the body", "POST", "/login", []formPart{{name: "username", value: "victim"}, {name: "password", value: "b"}}},
		{"password first", "POST", "/login", []formPart{{name: "password", value: "b"}, {name: "username", value: "victim"}}},
		{"after a file", "POST", "/login", []formPart{{name: "avatar", file: "a.png", value: strings.Repeat("x", 100<<10)}, {name: "username", value: "victim"}}},
		{"after a nameless part", "POST", "/login", []formPart{{value: "stray"}, {name: "username", value: "victim"}}},
		{"quoted-printable", "POST", "/login", []formPart{{name: "username", value: "victim", qp: true}}},
		// For a multipart body FormValue reads the query string first.
		{"account in the query", "POST", "/login?username=victim", []formPart{{name: "username", value: "someone-else"}}},
		// A file part of the name is a file, not the field.
		{"a file of the field's name first", "POST", "/login", []formPart{{name: "username", file: "u.txt", value: "someone-else"}, {name: "username", value: "victim"}}},
		// FormValue reads a multipart body whatever the method.
		{"PUT", "PUT", "/login", []formPart{{name: "username", value: "victim"}}},
		{"GET with a body", "GET", "/login", []formPart{{name: "username", value: "victim"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnforcer(t, `
policies:
  - name: login
    match: /login
    key: form:username
    limits: ["1/m burst 1"]
`)
			first := httptest.NewRequest("POST", "/login", strings.NewReader("username=victim&password=a"))
			first.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			out := e.Enforce(context.Background(), &Request{HTTP: first, Header: first.Header})
			out.Done()
			if out.Verdict != Allow {
				t.Fatalf("first login: %v, want allow", out.Verdict)
			}

			body, ct := multipartBody(t, tt.parts...)
			r := httptest.NewRequest(tt.method, tt.target, bytes.NewReader(body))
			r.Header.Set("Content-Type", ct)
			out = e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
			out.Done()
			got, err := io.ReadAll(r.Body)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("the handler reads %d bytes (%v), want the %d sent", len(got), err, len(body))
			}
			r.Body = io.NopCloser(bytes.NewReader(got))
			if user := r.FormValue("username"); user != "victim" {
				t.Fatalf("the handler sees username %q, want victim", user)
			}
			if out.Verdict != Refuse {
				t.Errorf("%v, want refuse: the handler tries account victim a second time in the minute", out.Verdict)
			}
		})
	}
}

// A field that may lie past the part of a multipart body a key reads
// (behind a file of more than 10 MB) is not known: every such request
// shares one key rather than pass unlimited. The body reaches the handler
// whole.
func TestFormKeyUnreadMultipart(t *testing.T) {
	e := newTestEnforcer(t, loginByAccount)
	login := func(user string) Verdict {
		t.Helper()
		body, ct := multipartBody(t, formPart{name: "pad", file: "pad.bin", value: strings.Repeat("p", maxFormScan)}, formPart{name: "username", value: user})
		r := httptest.NewRequest("POST", "/login", bytes.NewReader(body))
		r.Header.Set("Content-Type", ct)
		out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
		out.Done()
		if got := r.FormValue("username"); got != user {
			t.Fatalf("the handler sees username %q, want %q", got, user)
		}
		return out.Verdict
	}
	if v := login("alice"); v != Allow {
		t.Fatalf("first padded login: %v, want allow", v)
	}
	if v := login("bob"); v != Refuse {
		t.Fatalf("second padded login, another account: %v, want refuse (one key for fields not read)", v)
	}
}

// A handler that reads the raw body of a url-encoded form (to check a
// signature over it, say) gets it whole after a form key has parsed it,
// as does one that reads the parsed form.
func TestFormKeyKeepsURLEncodedBody(t *testing.T) {
	e := newTestEnforcer(t, `
policies:
  - name: hook
    match: "POST /hook"
    key: form:team
    limits: ["10/m"]
`)
	body := "team=T1&text=" + strings.Repeat("s", 64<<10)
	r := httptest.NewRequest("POST", "/hook", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
	out.Done()
	if out.Verdict != Allow {
		t.Fatalf("%v, want allow", out.Verdict)
	}
	if r.PostFormValue("team") != "T1" {
		t.Errorf("the handler's PostForm lost the field: %q", r.PostFormValue("team"))
	}
	got, err := io.ReadAll(r.Body)
	if err != nil || string(got) != body {
		t.Fatalf("the handler reads %d bytes of the body (%v), want the %d sent", len(got), err, len(body))
	}
}

// formValue agrees with what the handler's FormValue sees, on random
// requests: url-encoded and multipart bodies, the field in the query
// string, in the body, in both, repeated, empty, in file parts, quoted-
// printable, after other fields, in malformed bodies. Where net/http
// refuses the multipart form, the handler sees only the query string,
// and the key may have read a field the handler never sees: then the
// handler must see nothing, never another value. The handler reading
// after the key sees what it would have seen without it, and reads the
// body whole.
func TestFormValueAgreesWithFormValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"username", "tenant"}
	values := []string{"alice", "bob", "", "c%20d", "x+y"}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	for i := range 3000 {
		method := pick([]string{"POST", "PUT", "PATCH", "GET", "DELETE"})
		var q []string
		for range rng.IntN(3) {
			q = append(q, pick(append(names, "other"))+"="+pick(values))
		}
		target := "/f"
		if len(q) > 0 || rng.IntN(4) == 0 {
			target += "?" + strings.Join(q, "&")
		}
		var body []byte
		var ct string
		switch rng.IntN(4) {
		case 0: // url-encoded
			var f []string
			for range rng.IntN(4) {
				f = append(f, pick(append(names, "other", "%zz"))+"="+pick(values))
			}
			body, ct = []byte(strings.Join(f, pick([]string{"&", "&", ";"}))), "application/x-www-form-urlencoded"
		case 1, 2: // multipart
			var parts []formPart
			for range rng.IntN(5) {
				p := formPart{name: pick(append(names, "other", "")), value: pick(values), qp: rng.IntN(5) == 0}
				if rng.IntN(4) == 0 {
					p.file = "f.txt"
				}
				parts = append(parts, p)
			}
			body, ct = multipartBody(t, parts...)
			switch rng.IntN(8) {
			case 0: // cut short
				body = body[:rng.IntN(len(body)+1)]
			case 1: // a wrong boundary
				ct = "multipart/form-data; boundary=nope"
			}
		default:
			body, ct = []byte("username=plain"), pick([]string{"text/plain", ""})
		}
		order := names
		if rng.IntN(2) == 0 {
			order = []string{names[1], names[0]}
		}

		newReq := func() *http.Request {
			r := httptest.NewRequest(method, target, bytes.NewReader(body))
			if ct != "" {
				r.Header.Set("Content-Type", ct)
			}
			return r
		}
		handler := newReq()
		mpErr := handler.ParseMultipartForm(32 << 20)
		keyed := newReq()
		for _, name := range order {
			v, ok := formValue(keyed, name)
			want := handler.FormValue(name)
			switch {
			case !ok:
				t.Fatalf("case %d (%s %s, %q, %q): %s unread in a %d-byte body", i, method, target, ct, body, name, len(body))
			case v != want && (want != "" || mpErr == nil || mpErr == http.ErrNotMultipart):
				t.Fatalf("case %d (%s %s, %q, %q): the key reads %s=%q, the handler %q (parse: %v)", i, method, target, ct, body, name, v, want, mpErr)
			}
		}
		for _, name := range names {
			if got, want := keyed.FormValue(name), handler.FormValue(name); got != want {
				t.Fatalf("case %d (%s %s, %q, %q): after the key, the handler sees %s=%q, want %q", i, method, target, ct, body, name, got, want)
			}
		}
		raw := newReq()
		for _, name := range order {
			formValue(raw, name)
		}
		if got, _ := io.ReadAll(raw.Body); !bytes.Equal(got, body) {
			t.Fatalf("case %d: after the key, the handler reads %q, want %q", i, got, body)
		}
	}
}
