package policy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
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
		{"account in the query", "POST", "/login?username=victim", []formPart{{name: "password", value: "b"}}},
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
			if v, _ := postForm(e, "/login", "username=victim&password=a"); v != Allow {
				t.Fatalf("first login: %v, want allow", v)
			}

			body, ct := multipartBody(t, tt.parts...)
			v, r := send(e, tt.method, tt.target, ct, body)
			got, err := io.ReadAll(r.Body)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("the handler reads %d bytes (%v), want the %d sent", len(got), err, len(body))
			}
			r.Body = io.NopCloser(bytes.NewReader(got))
			if user := r.FormValue("username"); user != "victim" {
				t.Fatalf("the handler sees username %q, want victim", user)
			}
			if v != Refuse {
				t.Errorf("%v, want refuse: the handler tries account victim a second time in the minute", v)
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
		v, r := send(e, "POST", "/login", ct, body)
		if got := r.FormValue("username"); got != user {
			t.Fatalf("the handler sees username %q, want %q", got, user)
		}
		return v
	}
	if v := login("alice"); v != Allow {
		t.Fatalf("first padded login: %v, want allow", v)
	}
	if v := login("bob"); v != Refuse {
		t.Fatalf("second padded login, another account: %v, want refuse (one key for fields not read)", v)
	}
}

// A request described without its body (WithoutBody: a gateway's check)
// keys a form field as #unread where its body would give form fields,
// whatever its query string says, and reads nothing of its Body. Each
// step is one login, in order, against 1 a minute per account.
func TestFormKeyWithoutBody(t *testing.T) {
	e := newTestEnforcer(t, `
policies:
  - name: login
    match: /login
    key: form:username
    limits: ["1/m burst 1"]
`)
	for i, step := range []struct {
		method, target, ct, body string
		want                     Verdict
	}{
		{"POST", "/login?username=a", "application/x-www-form-urlencoded", "username=x", Allow}, // #unread
		{"POST", "/login?username=b", "multipart/form-data; boundary=zz", "", Refuse},           // #unread
		{"GET", "/login?username=c", "multipart/form-data; boundary=zz", "", Refuse},            // any method
		{"PUT", "/login?username=d", "application/x-www-form-urlencoded; charset=utf-8", "", Refuse},
		// Bodies that give no form fields: the query string.
		{"GET", "/login?username=e", "application/x-www-form-urlencoded", "username=y", Allow},
		{"POST", "/login?username=e", "application/json", `{"username":"z"}`, Refuse},
		{"POST", "/login?username=f", "multipart/form-data", "", Allow}, // no boundary: net/http reads no part
		// A url-encoded body of a method in lower case, which net/http
		// does not read and Werkzeug does: #unread.
		{"post", "/login?username=g", "application/x-www-form-urlencoded", "", Refuse},
	} {
		r := httptest.NewRequest(step.method, step.target, strings.NewReader(step.body))
		r = r.WithContext(WithoutBody(r.Context()))
		r.Header.Set("Content-Type", step.ct)
		out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
		out.Done()
		if out.Verdict != step.want {
			t.Errorf("step %d: %s %s (%s): %v, want %v", i+1, step.method, step.target, step.ct, out.Verdict, step.want)
		}
		if b, err := io.ReadAll(r.Body); err != nil || string(b) != step.body {
			t.Errorf("step %d: the body reads %q (%v) after the key, want %q untouched", i+1, b, err, step.body)
		}
	}
}

// A form body that net/http reads none of, or reads otherwise, where
// other servers read its fields keys as #unread: never as missing, nor as
// the query string's value, which the client chooses. Express inflates a
// gzip body; Werkzeug and Django serve post as POST; Werkzeug reads the
// last Content-Type, and with busboy reads parameters and part
// dispositions mime refuses, and an attachment's name. Each row sends two
// logins on account victim, already counted in the minute, with other
// decoys in the query string: the first takes #unread's one login, the
// second is refused. The handler gets the body whole.
func TestFormKeyBodiesOthersRead(t *testing.T) {
	const (
		ue    = "application/x-www-form-urlencoded"
		login = "username=victim&password=x"
	)
	mp, mpType := multipartBody(t, formPart{name: "username", value: "victim"}, formPart{name: "password", value: "x"})
	// coded returns s in content coding c, gzip (with a header comment)
	// or deflate.
	coded := func(c, comment string, s []byte) []byte {
		var b bytes.Buffer
		var w io.WriteCloser = zlib.NewWriter(&b)
		if c == "gzip" {
			gw := gzip.NewWriter(&b)
			gw.Comment = comment
			w = gw
		}
		if _, err := w.Write(s); err != nil || w.Close() != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	// part returns a multipart body of boundary B: a part with the
	// Content-Disposition lines cd, holding victim.
	part := func(cd ...string) []byte {
		var b strings.Builder
		b.WriteString("--B\r\n")
		for _, v := range cd {
			b.WriteString("Content-Disposition: " + v + "\r\n")
		}
		b.WriteString("\r\nvictim\r\n--B--\r\n")
		return []byte(b.String())
	}
	type header = http.Header
	for _, tt := range []struct {
		name, method string
		header       header
		body         []byte
	}{
		// Content codings, which Go decodes none of.
		{"gzip, url-encoded", "POST", header{"Content-Type": {ue}, "Content-Encoding": {"gzip"}}, coded("gzip", "", []byte(login))},
		{"deflate, multipart", "POST", header{"Content-Type": {mpType}, "Content-Encoding": {"deflate"}}, coded("deflate", "", mp)},
		{"identity, GZIP", "POST", header{"Content-Type": {ue}, "Content-Encoding": {"identity, GZIP"}}, coded("gzip", "", []byte(login))},
		{"gzip on a second line", "POST", header{"Content-Type": {ue}, "Content-Encoding": {"identity", "gzip"}}, coded("gzip", "", []byte(login))},
		// Read as it is sent, the gzip header's comment is a whole
		// multipart body, of another account.
		{"gzip, multipart, a form in the gzip header", "POST", header{"Content-Type": {"multipart/form-data; boundary=B"}, "Content-Encoding": {"gzip"}},
			coded("gzip", "\r\n--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nother\r\n--B--\r\n", part(`form-data; name="username"`))},
		// A method in lower case: ParseForm reads no url-encoded body.
		{"post", "post", header{"Content-Type": {ue}}, []byte(login)},
		{"Post", "Post", header{"Content-Type": {ue}}, []byte(login)},
		// Several Content-Types: Go reads the first, Werkzeug the last.
		{"text/plain, then url-encoded", "POST", header{"Content-Type": {"text/plain", ue}}, []byte(login)},
		{"text/plain, then multipart", "POST", header{"Content-Type": {"text/plain", mpType}}, mp},
		{"url-encoded, then text/plain", "POST", header{"Content-Type": {ue, "text/plain"}}, []byte(login)},
		// Parameters mime.ParseMediaType refuses.
		{"a bare token after the boundary", "POST", header{"Content-Type": {"multipart/form-data; boundary=B; foo"}}, part(`form-data; name="username"`)},
		{"an empty charset", "POST", header{"Content-Type": {"Multipart/Form-Data ; boundary=B; charset="}}, part(`form-data; name="username"`)},
		{"the boundary twice", "POST", header{"Content-Type": {"multipart/form-data; boundary=B; boundary=C"}}, part(`form-data; name="username"`)},
		{"url-encoded, two charsets", "POST", header{"Content-Type": {ue + "; charset=utf-8; charset=latin1"}}, []byte(login)},
		// Parts the multipart reader skips, or reads one of two
		// dispositions of.
		{"a disposition mime refuses", "POST", header{"Content-Type": {"multipart/form-data; boundary=B"}}, part(`form-data; name="username"; x`)},
		{"an attachment", "POST", header{"Content-Type": {"multipart/form-data; boundary=B"}}, part(`attachment; name="username"`)},
		{"two dispositions", "POST", header{"Content-Type": {"multipart/form-data; boundary=B"}}, part(`form-data; name="pad"`, `form-data; name="username"`)},
		{"two names, the extended one read", "POST", header{"Content-Type": {"multipart/form-data; boundary=B"}}, part(`form-data; name*=utf-8''pad; name="username"`)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			decide := keysOf(t, loginByAccount)
			r := httptest.NewRequest("POST", "/login", strings.NewReader(login))
			r.Header.Set("Content-Type", ue)
			if v, _ := decide(&Request{HTTP: r, Header: r.Header}); v != Allow {
				t.Fatalf("first login: %v, want allow", v)
			}
			for i, want := range []Verdict{Allow, Refuse} {
				r := httptest.NewRequest(tt.method, fmt.Sprintf("/login?username=decoy%d", i), bytes.NewReader(tt.body))
				r.Header = tt.header.Clone()
				v, keys := decide(&Request{HTTP: r, Header: r.Header})
				if !strings.HasSuffix(keys["login"], ":form:username=#unread") {
					t.Errorf("login %d: key %q, want form:username=#unread", i, keys["login"])
				}
				if v != want {
					t.Errorf("login %d: %v, want %v", i, v, want)
				}
				if got, err := io.ReadAll(r.Body); err != nil || !bytes.Equal(got, tt.body) {
					t.Errorf("login %d: the handler reads %q (%v), want the %q sent", i, got, err, tt.body)
				}
			}
		})
	}

	// Bodies net/http reads as other servers do key as their field.
	decide := keysOf(t, loginByAccount)
	for _, tt := range []struct {
		name, method string
		header       header
		body         []byte
	}{
		{"identity", "POST", header{"Content-Type": {ue}, "Content-Encoding": {"identity"}}, []byte(login)},
		{"multipart, post", "post", header{"Content-Type": {mpType}}, mp},
		{"url-encoded, a bare token", "POST", header{"Content-Type": {ue + "; bad"}}, []byte(login)},
		{"after parts of no name", "POST", header{"Content-Type": {"multipart/form-data; boundary=B"}},
			[]byte("--B\r\nContent-Disposition: inline\r\n\r\nx\r\n--B\r\nContent-Disposition: form-data; filename=\"name.txt\"\r\n\r\nx\r\n--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nvictim\r\n--B--\r\n")},
	} {
		r := httptest.NewRequest(tt.method, "/login", bytes.NewReader(tt.body))
		r.Header = tt.header.Clone()
		if _, keys := decide(&Request{HTTP: r, Header: r.Header}); !strings.HasSuffix(keys["login"], ":form:username=victim") {
			t.Errorf("%s: key %q, want form:username=victim", tt.name, keys["login"])
		}
		if got, _ := io.ReadAll(r.Body); !bytes.Equal(got, tt.body) {
			t.Errorf("%s: the handler reads %q, want the %q sent", tt.name, got, tt.body)
		}
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
	v, r := postForm(e, "/hook", body)
	if v != Allow {
		t.Fatalf("%v, want allow", v)
	}
	if r.PostFormValue("team") != "T1" {
		t.Errorf("the handler's PostForm lost the field: %q", r.PostFormValue("team"))
	}
	got, err := io.ReadAll(r.Body)
	if err != nil || string(got) != body {
		t.Fatalf("the handler reads %d bytes of the body (%v), want the %d sent", len(got), err, len(body))
	}
}

// checkFormKey returns what is wrong with a key that read field name as
// v, read, or "". handler is the request as net/http gives it to a
// handler that called ParseMultipartForm, which returned mpErr; body is
// the request's. The key reads the one value the handler's r.Form holds,
// and manyValues where it holds more than one, or where a parser that
// splits on ; too (looseRef) counts more than it does. Where net/http
// refuses a multipart body (the handler sees the query string alone),
// the key may also not know the field (it may lie past what net/http
// reads), or read one the handler never sees: never another value than
// the handler's. Past a bound (bounded), or in a body another server
// may read fields of that net/http does not (skipsForm), it may not know
// it either.
func checkFormKey(v string, read formRead, handler *http.Request, mpErr error, name string, body []byte, bounded bool) string {
	vs := handler.Form[name]
	loose := looseRef(handler.URL.RawQuery, name)
	if mt, _, _ := mime.ParseMediaType(handler.Header.Get("Content-Type")); mt == "application/x-www-form-urlencoded" &&
		(handler.Method == "POST" || handler.Method == "PUT" || handler.Method == "PATCH") {
		loose += looseRef(string(body), name)
	}
	many := len(vs) > 1 || loose > 1 || loose > len(vs)
	refused := mpErr != nil && mpErr != http.ErrNotMultipart && handler.MultipartForm == nil
	switch read {
	case formUnread:
		if !refused && !bounded && !skipsForm(handler, body) {
			return fmt.Sprintf("%s unread in a %d-byte body", name, len(body))
		}
	case formMany:
		if !many && !refused {
			return fmt.Sprintf("%s many, the handler sees %q, a loose parser %d", name, vs, loose)
		}
	default:
		switch {
		case many && !refused:
			return fmt.Sprintf("the key reads %s=%q, the handler sees %q, a loose parser %d", name, v, vs, loose)
		case len(vs) == 1 && v != vs[0], len(vs) == 0 && v != "" && !refused:
			return fmt.Sprintf("the key reads %s=%q, the handler sees %q (parse: %v)", name, v, vs, mpErr)
		}
	}
	return ""
}

// skipsForm reports whether a more lenient server than net/http may read
// form fields in r's body, which holds body, that net/http does not: r
// has several Content-Types, a content coding, a method not in upper
// case, a Content-Type mime refuses, or a multipart part whose
// Content-Disposition net/http does not read whole (two of them; a name,
// not a file name, it reads none of, or another besides the one it
// reads).
func skipsForm(r *http.Request, body []byte) bool {
	h := r.Header
	for _, c := range h.Values("Content-Encoding") {
		if !strings.EqualFold(c, "identity") {
			return true
		}
	}
	mt, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if len(h.Values("Content-Type")) > 1 || r.Method != strings.ToUpper(r.Method) || err != nil {
		return true
	}
	if mt != "multipart/form-data" {
		return false
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := mr.NextPart()
		if err != nil {
			return false
		}
		cd := strings.ReplaceAll(strings.ToLower(p.Header.Get("Content-Disposition")), "filename", "")
		read := strings.Count(strings.ToLower(p.FormName()), "name")
		if p.FormName() != "" {
			read++ // the parameter's own
		}
		if len(p.Header.Values("Content-Disposition")) > 1 || strings.Count(cd, "name") > read {
			return true
		}
	}
}

// looseRef counts the fields named name in raw, split on & and ;.
func looseRef(raw, name string) int {
	n := 0
	for _, pair := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
		k, _, _ := strings.Cut(pair, "=")
		if u, err := url.QueryUnescape(k); k == name || err == nil && u == name {
			n++
		}
	}
	return n
}

// formValue agrees with what the handler's FormValue sees (checkFormKey),
// on random requests: url-encoded and multipart bodies, the field in the
// query string, in the body, in both, repeated, empty, in file parts,
// quoted-printable, after other fields, in malformed bodies. The handler
// reading after the key sees what it would have seen without it, and
// reads the body whole.
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
			v, read := formValue(keyed, name)
			if msg := checkFormKey(v, read, handler, mpErr, name, body, false); msg != "" {
				t.Fatalf("case %d (%s %s, %q, %q): %s", i, method, target, ct, body, msg)
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

// Past one of net/http's default bounds a form key does not know the
// field, for the handler (an upstream behind sluice serve, built with
// other GODEBUG settings or an older go line, or that reads its body
// under http.MaxBytesReader) may lift the bound and read it: the key must
// not then read another value, nor none. Each row is a login on account
// victim, with a decoy in the query string where the body comes first.
func TestFormKeyPastBounds(t *testing.T) {
	headers := func(n int) ([]byte, string) {
		var b bytes.Buffer
		b.WriteString("--B\r\nContent-Disposition: form-data; name=\"pad\"\r\n")
		for i := range n {
			fmt.Fprintf(&b, "X-Pad-%d: p\r\n", i)
		}
		b.WriteString("\r\np\r\n--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nvictim\r\n--B--\r\n")
		return b.Bytes(), "multipart/form-data; boundary=B"
	}
	parts := func(n int) ([]byte, string) {
		ps := make([]formPart, n, n+1)
		for i := range ps {
			ps[i] = formPart{name: "pad", value: "p"}
		}
		return multipartBody(t, append(ps, formPart{name: "username", value: "victim"})...)
	}
	urlEncoded := func(body string) func(int) ([]byte, string) {
		return func(int) ([]byte, string) { return []byte(body), "application/x-www-form-urlencoded" }
	}
	for _, tt := range []struct {
		name, target string
		body         func(n int) ([]byte, string)
		n            int
		godebug      string // the handler's
		limit        int64  // the handler's http.MaxBytesReader, if not 0
	}{
		{"1001 parts, multipartmaxparts=2000", "/login", parts, maxFormParts, "multipartmaxparts=2000", 0},
		{"10001 header lines, multipartmaxheaders=20000", "/login", headers, 10001, "multipartmaxheaders=20000", 0},
		{"10 MB url-encoded, MaxBytesReader", "/login?username=decoy", urlEncoded("username=victim&pad=" + strings.Repeat("p", maxFormScan)), 0, "", 64 << 20},
		{"10001 url-encoded fields, urlmaxqueryparams=0", "/login?username=decoy", urlEncoded("username=victim" + strings.Repeat("&", maxFormFields)), 0, "urlmaxqueryparams=0", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GODEBUG", "")
			body, ct := tt.body(tt.n)
			newReq := func() *http.Request {
				r := httptest.NewRequest("POST", tt.target, bytes.NewReader(body))
				r.Header.Set("Content-Type", ct)
				return r
			}
			keyed := newReq()
			v, read := formValue(keyed, "username")

			t.Setenv("GODEBUG", tt.godebug)
			handler := newReq()
			if tt.limit > 0 {
				handler.Body = http.MaxBytesReader(nil, handler.Body, tt.limit)
			}
			if want := handler.FormValue("username"); want != "victim" {
				t.Fatalf("the handler reads username %q, want victim", want)
			}
			if read == formOnce && v != "victim" {
				t.Errorf("the key reads username %q, the handler victim", v)
			}
			if got, _ := io.ReadAll(keyed.Body); !bytes.Equal(got, body) {
				t.Errorf("after the key, the handler reads %d bytes, want the %d sent", len(got), len(body))
			}
		})
	}
}

// A url-encoded body that an application put under http.MaxBytesReader
// before the limiter is read whole, as ParseForm reads it: a form of more
// than 10 MB keeps its fields, for the key and for the handler.
func TestFormKeyMaxBytesReader(t *testing.T) {
	body := "username=victim&pad=" + strings.Repeat("p", maxFormScan)
	r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Body = http.MaxBytesReader(nil, r.Body, 64<<20)
	if v, read := formValue(r, "username"); read != formOnce || v != "victim" {
		t.Errorf("the key reads username %q (%v), want victim", v, read)
	}
	if v := r.FormValue("username"); v != "victim" {
		t.Errorf("after the key, the handler reads username %q, want victim", v)
	}
	if got, _ := io.ReadAll(r.Body); string(got) != body {
		t.Errorf("after the key, the handler reads %d bytes, want the %d sent", len(got), len(body))
	}
}

// A middleware before the limiter may have filled r.PostForm or r.Form
// of a multipart request: the key reads what the handler's
// ParseMultipartForm and FormValue then read.
func TestFormKeyAfterMiddlewareParsed(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  func(r *http.Request)
		want string // the key's value, or manyValues
	}{
		{"PostForm set", func(r *http.Request) { r.PostForm = url.Values{"username": {"victim"}} }, manyValues},
		{"Form set, the field empty", func(r *http.Request) { r.Form = url.Values{"username": {}} }, "victim"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body, ct := multipartBody(t, formPart{name: "username", value: "victim"})
			newReq := func() *http.Request {
				r := httptest.NewRequest("POST", "/login", bytes.NewReader(body))
				r.Header.Set("Content-Type", ct)
				tt.set(r)
				return r
			}
			handler := newReq()
			mpErr := handler.ParseMultipartForm(32 << 20)
			if mpErr != nil {
				t.Fatal(mpErr)
			}
			keyed := newReq()
			v, read := formValue(keyed, "username")
			if msg := checkFormKey(v, read, handler, mpErr, "username", body, false); msg != "" {
				t.Error(msg)
			}
			if read == formMany {
				v = manyValues
			}
			if v != tt.want {
				t.Errorf("the key reads %q, want %q", v, tt.want)
			}
			if got, want := keyed.FormValue("username"), newReq().FormValue("username"); got != want {
				t.Errorf("after the key, the handler reads username %q, want %q", got, want)
			}
		})
	}
}

// FuzzFormValue compares formValue with what net/http gives the handler
// (checkFormKey), on any method, Content-Type (one per line of ct),
// Content-Encoding, query string and body, and checks it leaves the
// handler the same form and the same bytes.
func FuzzFormValue(f *testing.F) {
	methods := []string{"POST", "PUT", "PATCH", "GET", "DELETE", "post", "Put"}
	mp := func(parts ...formPart) (string, []byte) {
		body, ct := multipartBody(f, parts...)
		return ct, body
	}
	ct, body := mp(formPart{name: "f", file: "a.png", value: "xx"}, formPart{name: "username", value: "victim", qp: true})
	f.Add(uint8(0), ct, "", "", body, "username", false)
	f.Add(uint8(3), ct, "", "username=q", body, "username", true)
	f.Add(uint8(0), ct, "gzip", "", body, "username", false)
	f.Add(uint8(0), "text/plain\n"+ct, "", "", body, "username", false)
	boundary := strings.TrimPrefix(ct, "multipart/form-data; boundary=")
	for _, ct := range []string{
		"Multipart/Form-Data; BOUNDARY=" + boundary,
		"multipart/mixed; boundary=" + boundary,
		"multipart/form-data; boundary=" + boundary + "; boundary=x",
		"multipart/form-data; boundary=\"\"",
		"multipart/form-data; boundary=" + boundary + "; charset=utf-8",
		"multipart/form-data",
		"multipart/form-data; boundary=" + boundary + "; foo",
	} {
		f.Add(uint8(0), ct, "", "", body, "username", false)
	}
	for _, cd := range []string{
		"form-data; name*=utf-8''user%6Eame",
		`form-data; name="username"; x`,
		`attachment; name="username"`,
		`form-data; name*=utf-8''pad; name="username"`,
		"form-data; name=pad\r\nContent-Disposition: form-data; name=username",
		`form-data; filename="name.txt"`,
	} {
		f.Add(uint8(0), "multipart/form-data; boundary=B", "", "",
			[]byte("--B\r\nContent-Disposition: "+cd+"\r\n\r\nvictim\r\n--B--\r\n"), "username", false)
	}
	f.Add(uint8(0), "multipart/form-data; boundary=B", "", "",
		[]byte("--B\r\nContent-Disposition: form-data; name=\"username\"; filename=\"\"\r\n\r\nvictim\r\n--B\r\nContent-Disposition: form-data; name=username\r\n\r\nother\r\n--B--"), "username", false)
	for _, ct := range []string{"application/x-www-form-urlencoded", "application/x-www-form-urlencoded; charset=utf-16", "application/x-www-form-urlencoded; bad", "text/plain", "", "text/plain\napplication/x-www-form-urlencoded"} {
		f.Add(uint8(0), ct, "", "username=q;x&username=r", []byte("a=%zz&username=victim;x=1&username=b"), "username", false)
	}
	f.Add(uint8(5), "application/x-www-form-urlencoded", "", "", []byte("username=victim"), "username", true)
	f.Add(uint8(0), "application/x-www-form-urlencoded", "identity, deflate", "", []byte("username=victim"), "username", false)
	f.Add(uint8(0), "application/x-www-form-urlencoded; a=1; a=2", "", "", []byte("username=victim"), "username", false)
	f.Fuzz(func(t *testing.T, m uint8, ct, coding, query string, body []byte, name string, limited bool) {
		if !validToken(name) {
			t.Skip("no form:NAME key part has this name: the policy file refuses it")
		}
		newReq := func() *http.Request {
			r := &http.Request{
				Method:        methods[int(m)%len(methods)],
				URL:           &url.URL{Path: "/f", RawQuery: query},
				Header:        http.Header{},
				Body:          io.NopCloser(bytes.NewReader(body)),
				ContentLength: int64(len(body)),
			}
			if limited {
				r.Body = http.MaxBytesReader(nil, r.Body, 1<<20)
			}
			if ct != "" {
				r.Header["Content-Type"] = strings.Split(ct, "\n")
			}
			if coding != "" {
				r.Header.Set("Content-Encoding", coding)
			}
			return r
		}
		handler := newReq()
		mpErr := handler.ParseMultipartForm(32 << 20)
		want := handler.FormValue(name)

		keyed := newReq()
		v, read := formValue(keyed, name)
		if msg := checkFormKey(v, read, handler, mpErr, name, body, len(body) >= 4<<10); msg != "" {
			t.Fatal(msg)
		}
		if got := keyed.FormValue(name); got != want {
			t.Fatalf("after the key, the handler reads %q, want %q", got, want)
		}

		keyed = newReq()
		formValue(keyed, name)
		if err := keyed.ParseMultipartForm(32 << 20); (err == nil) != (mpErr == nil) {
			t.Fatalf("after the key, ParseMultipartForm returns %v, want %v", err, mpErr)
		}
		keyed = newReq()
		formValue(keyed, name)
		if got, _ := io.ReadAll(keyed.Body); !bytes.Equal(got, body) {
			t.Fatalf("after the key, the handler reads %q, want %q", got, body)
		}

		// Described without its body, the request keys as #unread where
		// the body would give fields, else as the query string alone,
		// and its Body is not read.
		absent := newReq()
		absent = absent.WithContext(WithoutBody(absent.Context()))
		v, read = formValue(absent, name)
		bare := newReq()
		bare.Body = http.NoBody
		qv, qread := formValue(bare, name)
		if formInBody(absent) {
			qv, qread = "", formUnread
		}
		if v != qv || read != qread {
			t.Fatalf("without its body: %q, %d; want %q, %d", v, read, qv, qread)
		}
		if got, _ := io.ReadAll(absent.Body); !bytes.Equal(got, body) {
			t.Fatalf("without its body, the key read it: %q left of %q", got, body)
		}
	})
}
