package policy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"reflect"
	"strings"
)

// Form fields, for form:NAME key parts.
//
// A key part must read the field the handler will read, or a client could
// name one account to the handler and another (or none) to the limiter: a
// per-account login limit would then count nothing. Where a field is
// given once, every server reads it alike; where it is given more than
// once, they differ. Go's r.FormValue reads the first value, in this
// order:
//
//   - for a url-encoded body (POST, PUT, PATCH): the body's fields, then
//     the query string's;
//   - for a multipart/form-data body (any method): the query string's
//     fields, then the body's value parts (parts without a file name);
//   - otherwise the query string's.
//
// Django, PHP and Rails read the last value instead, and PHP's $_POST,
// Django's request.POST and multer read a form's fields from its body
// alone; Rack before 3 (Rails), and PHP if so configured, also take a ;
// for a separator, where Go drops the pair that holds one. So a key part
// takes the field's value only when it is given once, and one value for
// all requests that give it more than once (manyValues), in the body, the
// query string or both, or that give it in a pair one parser reads and Go
// drops (looseCount): no client can then choose the account it is counted
// against, nor spread its attempts over fresh ones.
//
// The handler must still get the body whole, whether it parses the form
// or reads the raw bytes (to check a signature, say), and a proxy must
// forward it whole: what the key reads is kept and given again before the
// rest (formBody). A url-encoded form is parsed by Request.ParseForm, so
// the handler finds it parsed (net/http reads at most 10 MB of it, or all
// of it under http.MaxBytesReader). A multipart body is read to its end,
// to know the field is given once, file parts read past and kept, up to
// maxFormScan.
//
// Past one of net/http's default bounds (10 MB of url-encoded body or
// multipart body, maxFormFields fields in it, maxFormParts parts, a part's
// header lines), or past a part net/http cannot read, the field is
// unknown, not missing: an upstream behind sluice serve may lift the bound
// (http.MaxBytesReader, GODEBUG multipartmaxparts, urlmaxqueryparams,
// multipartmaxheaders, or an older go line in its go.mod), or read on
// where net/http stops, and find the field, or find it again. Such a key
// part takes one value for all these requests (unreadForm) rather than let
// them through unlimited.
//
// So does a form body of which net/http reads none, or less, than other
// servers do (formSkipped, partUnread): one in a content coding (Express
// inflates it), a url-encoded one of a method spelt in lower case
// (Werkzeug and Django serve post as POST; ParseForm reads no body of
// it), one under several Content-Types (Go reads the first, Werkzeug the
// last) or parameters mime.ParseMediaType refuses, and a multipart one
// with a part that may name a field net/http does not read (an
// attachment's name, which Werkzeug and busboy read, a disposition mime
// refuses, two dispositions or two names).
//
// A request described rather than received (WithoutBody: a gateway asks
// about it with its headers alone) has no body to read. A field of a
// request whose body a key would read (see formInBody) may be in it, and
// the query string may name another: such a key part takes unreadForm
// too, never the query string's value, which the client would choose
// while it tries the accounts it names in the body.

// bodyAbsentKey is the context key of WithoutBody.
type bodyAbsentKey struct{}

// WithoutBody returns a context that says the request it goes with is
// described without its body: a gateway asked about the request with its
// method, URI and header fields alone, as NGINX's auth_request does and
// Traefik's forwardAuth without forwardBody (sluice serve's check
// endpoints call it for a check that brings no body). A form:NAME key
// part then reads nothing of the request's Body. Where the body would give
// form fields (a url-encoded POST, PUT or PATCH, the method in any case,
// or a multipart/form-data request of any method, as any of its
// Content-Types says: the requests whose body a key reads, or keys as
// #unread, when it has it), it keys as #unread, one value for all such
// requests, since the field may be in that body; for any other request it
// reads the query string, as it would with the body at hand.
func WithoutBody(ctx context.Context) context.Context {
	return context.WithValue(ctx, bodyAbsentKey{}, true)
}

// bodyAbsent reports whether r's context says its body is absent (see
// WithoutBody).
func bodyAbsent(r *http.Request) bool {
	absent, _ := r.Context().Value(bodyAbsentKey{}).(bool)
	return absent
}

// formInBody reports whether r's body, were it at hand, is one a key
// reads fields from (what parseForm and multipartBoundary read, less the
// body itself), or one other servers read fields from as such where
// net/http does not (formSkipped): by any of its Content-Types' media
// types, and its method in any case.
func formInBody(r *http.Request) bool {
	for _, ct := range r.Header.Values("Content-Type") {
		switch mediaType(ct) {
		case "multipart/form-data":
			// With no boundary, no server reads a part.
			if _, params, err := mime.ParseMediaType(ct); err != nil || params["boundary"] != "" {
				return true
			}
		case "application/x-www-form-urlencoded":
			if m := strings.ToUpper(r.Method); m == http.MethodPost || m == http.MethodPut || m == http.MethodPatch {
				return true
			}
		}
	}
	return false
}

// formSkipped reports whether r's form body (formInBody) is one net/http
// reads none of, or reads otherwise, where other servers read its fields:
// see the comment at the top. Its parts are read in formBody.readParts.
func formSkipped(r *http.Request) bool {
	cts := r.Header.Values("Content-Type")
	if len(cts) > 1 {
		return true // Go reads the first, Werkzeug the last
	}
	for _, v := range r.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return true
			}
		}
	}
	// A type with no parameter reads the same to mime as leniently, and
	// costs no map.
	mt, err := mediaType(cts[0]), error(nil)
	if strings.Contains(cts[0], ";") {
		mt, _, err = mime.ParseMediaType(cts[0])
	}
	if mediaType(cts[0]) == "multipart/form-data" {
		return err != nil // net/http reads no part then
	}
	// ParseForm reads a url-encoded body under any parameters it parses
	// the media type past, for methods spelt in upper case alone.
	return mt != "application/x-www-form-urlencoded" || r.Method != strings.ToUpper(r.Method)
}

// mediaType returns the media type of Content-Type ct as a lenient
// parser reads it: before any parameter, in lower case.
func mediaType(ct string) string {
	base, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(base))
}

// maxFormScan bounds how much of a multipart body a key reads and keeps
// to find a field: net/http's bound on a url-encoded form.
const maxFormScan = 10 << 20

// maxFormParts is net/http's default bound on the parts of a multipart
// form (GODEBUG multipartmaxparts).
const maxFormParts = 1000

// maxFormFields is net/url's default bound on the fields of a query
// (GODEBUG urlmaxqueryparams): ParseQuery reads none of a longer one.
const maxFormFields = 10000

// maxBytesReader is the type of http.MaxBytesReader's bodies, of which
// ParseForm reads a url-encoded form whole.
var maxBytesReader = reflect.TypeOf(http.MaxBytesReader(nil, nil, 0))

// unreadForm is the value of a form:NAME part when the field may be in a
// body past a bound. A value written into a key never starts with # but
// as a hash of 22 characters (appendValue), so no client can send this
// one.
const unreadForm = "#unread"

// formRead says what a key part found of a form field.
type formRead uint8

const (
	formOnce   formRead = iota // the field's value, "" when it is not given
	formMany                   // more than once: manyValues
	formUnread                 // maybe past a bound: unreadForm
)

// formValue returns the form field name of r when it is given once, as
// every server reads it: r.FormValue among them, for the handler.
func formValue(r *http.Request, name string) (string, formRead) {
	if r == nil {
		return "", formOnce
	}
	if formInBody(r) && (bodyAbsent(r) || formSkipped(r)) {
		return "", formUnread // the body, not here or not read, may give it
	}
	if b, ok := r.Body.(*formBody); ok {
		switch {
		case b.mr != nil:
			return b.value(r, name)
		case b.cut:
			return "", formUnread // the body may give it past the bound
		case r.Form != nil:
			// parseForm read a url-encoded body.
			return once(r.Form[name], looseCount(b.form, name)+looseCount(r.URL.RawQuery, name))
		}
	}
	if r.MultipartForm == nil {
		// Left unparsed: r.Form must stay nil, or the handler's FormValue
		// would take it for parsed and never read the body.
		if boundary := multipartBoundary(r); boundary != "" {
			b := &formBody{body: r.Body}
			b.mr = multipart.NewReader(&formScan{b}, boundary)
			r.Body = b
			return b.value(r, name)
		}
	}
	if r.Form == nil {
		if !parseForm(r) {
			return "", formUnread
		}
		if b, ok := r.Body.(*formBody); ok {
			return once(r.Form[name], looseCount(b.form, name)+looseCount(r.URL.RawQuery, name))
		}
	}
	// The query string alone, or a form a middleware before the limiter
	// parsed: what the handler reads.
	return once(r.Form[name], looseCount(r.URL.RawQuery, name))
}

// once returns the value of a field Go's parsers found as vs, of which a
// looser parser (see looseCount) found loose, when both find it once (or
// neither does); loose may count less, where the raw form is gone.
func once(vs []string, loose int) (string, formRead) {
	switch {
	case len(vs) > 1 || loose > 1 || loose > len(vs):
		return "", formMany
	case len(vs) == 1:
		return vs[0], formOnce
	}
	return "", formOnce
}

// looseCount returns how many fields of a query or url-encoded form raw
// name the parsers that split it on ; as well as & (Rack before 3, PHP
// with arg_separator.input, Python before 3.9.2) find, keys that do not
// unescape compared as written. It finds every field url.ParseQuery
// finds, and also the ones ParseQuery drops: those that hold a ; or a bad
// escape.
func looseCount[S string | []byte](raw S, name string) int {
	n := 0
	for len(raw) > 0 {
		pair := raw
		if i := indexAny(raw); i >= 0 {
			pair, raw = raw[:i], raw[i+1:]
		} else {
			raw = raw[:0]
		}
		key := pair
		if i := index(pair, '='); i >= 0 {
			key = pair[:i]
		}
		switch {
		case string(key) == name:
			n++
		case len(key) >= len(name) && (index(key, '%') >= 0 || index(key, '+') >= 0):
			if k, err := url.QueryUnescape(string(key)); err == nil && k == name {
				n++
			}
		}
	}
	return n
}

func index[S string | []byte](s S, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func indexAny[S string | []byte](s S) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '&' || s[i] == ';' {
			return i
		}
	}
	return -1
}

// parseForm parses r's url-encoded body (if any) and query string into
// r.Form, as Request.ParseForm does, keeping the bytes it reads for the
// handler. It reports false when the body is past a bound (see the
// comment at the top), and its fields unknown.
func parseForm(r *http.Request) bool {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		_ = r.ParseForm() // the query string only
		return true
	}
	if r.Body == nil || r.Body == http.NoBody {
		_ = r.ParseForm()
		return true
	}
	b := &formBody{body: r.Body}
	uncut := reflect.TypeOf(r.Body) == maxBytesReader
	if uncut {
		// ParseForm reads such a body whole, not 10 MB of it; wrapped, it
		// would not know it for one.
		r.Body = http.MaxBytesReader(nil, &formScan{b}, math.MaxInt64)
	} else {
		r.Body = &formScan{b}
	}
	// r.Form holds every well-formed field whatever ParseForm returns (a
	// bad escape, a semicolon): the handler gets them, so the key does.
	_ = r.ParseForm()
	if len(b.kept) == 0 {
		r.Body = b.body // not a form: nothing read
		return true
	}
	r.Body = b
	b.form = b.kept
	b.cut = !uncut && len(b.kept) > maxFormScan ||
		bytes.Count(b.kept, []byte("&")) >= maxFormFields
	return !b.cut
}

// multipartBoundary returns the boundary of r's body if it is a
// multipart/form-data one that Request.ParseMultipartForm would read, or
// "".
func multipartBoundary(r *http.Request) string {
	if r.Body == nil || r.Body == http.NoBody {
		return ""
	}
	return formBoundary(r.Header.Get("Content-Type"))
}

// formBoundary returns the boundary of Content-Type ct if it is a
// multipart/form-data one, or "".
func formBoundary(ct string) string {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" {
		return ""
	}
	return params["boundary"]
}

// formBody is a request body of which a key has read the start. It gives
// what was read (kept) again before the rest, so that the handler, or the
// upstream, gets the body whole. For a multipart body it also holds the
// reader of its parts and the fields they gave.
type formBody struct {
	body io.ReadCloser // the rest of the request's body
	kept []byte        // read from body by a key, not yet given again
	gave bool          // the body has been read from since the key's reads

	form []byte // a url-encoded body as read, for looseCount, until given

	mr     *multipart.Reader    // reads kept, then body, through formScan
	query  url.Values           // the query string, parsed
	fields map[string]partField // the value parts, by name
	end    bool                 // every part read, or cut
	eof    bool                 // body has ended
	cut    bool                 // stopped by a bound or partUnread: fields are unknown
}

// partField is what a multipart body gives of one field.
type partField struct {
	value string // the first
	n     int    // how many value parts have the name
}

// Read gives the kept bytes, then the rest of the body.
func (b *formBody) Read(p []byte) (int, error) {
	b.gave, b.form = true, nil
	if len(b.kept) > 0 {
		n := copy(p, b.kept)
		b.kept = b.kept[n:]
		if len(b.kept) == 0 {
			b.kept = nil
		}
		return n, nil
	}
	return b.body.Read(p)
}

// Close closes the request's body.
func (b *formBody) Close() error { return b.body.Close() }

// errFormScan stops a multipart reader at maxFormScan.
var errFormScan = errors.New("policy: multipart body past the bound a form key reads")

// formScan reads b's body for a key, keeping what it reads.
type formScan struct{ b *formBody }

func (s *formScan) Read(p []byte) (int, error) {
	b := s.b
	switch {
	case b.eof:
		return 0, io.EOF
	case b.gave:
		return 0, io.ErrUnexpectedEOF // the handler reads now: no more fields
	}
	if room := maxFormScan - len(b.kept); b.mr != nil && len(p) > room {
		if room <= 0 {
			b.cut = true
			return 0, errFormScan
		}
		p = p[:room]
	}
	n, err := b.body.Read(p)
	b.kept = append(b.kept, p[:n]...)
	b.eof = err == io.EOF
	return n, err
}

func (s *formScan) Close() error { return s.b.body.Close() }

// value returns the field name of a multipart request when it is given
// once, from what ParseForm puts in r.Form first (r.PostForm if another
// handler set it, and the query string; or r.Form, if one parsed it) and
// the body's value parts.
func (b *formBody) value(r *http.Request, name string) (string, formRead) {
	q := r.Form
	if q == nil {
		if b.query == nil {
			// ParseForm on a copy, which leaves r.Form nil for the handler
			// and reads nothing of a multipart body.
			c := *r
			c.Body = http.NoBody
			_ = c.ParseForm()
			b.query = c.Form
		}
		q = b.query
	}
	b.readParts()
	if b.cut {
		return "", formUnread
	}
	f := b.fields[name]
	v, read := once(q[name], looseCount(r.URL.RawQuery, name))
	switch {
	case read != formOnce:
		return "", read
	case f.n == 0:
		return v, formOnce
	case f.n > 1 || len(q[name]) > 0:
		return "", formMany
	}
	return f.value, formOnce
}

// readParts reads the parts of a multipart body to its end, once, and
// records the value parts. Stopped short, by a bound or by what net/http
// cannot read, it sets cut: a server that reads on may find any field. So
// it does at a part another server may take for a field net/http does
// not read (see the comment at the top).
func (b *formBody) readParts() {
	for parts := 0; !b.end; {
		p, err := b.mr.NextPart()
		if err != nil {
			b.end = true
			b.cut = b.cut || err != io.EOF
			return
		}
		if parts++; parts > maxFormParts {
			b.end, b.cut = true, true
			return
		}
		n := p.FormName()
		if partUnread(p, n) {
			b.end, b.cut = true, true
			return
		}
		if n == "" || p.FileName() != "" {
			continue // NextPart reads past what is left of it
		}
		v, err := io.ReadAll(p)
		if err != nil {
			b.end, b.cut = true, true
			return
		}
		f, ok := b.fields[n]
		if !ok {
			if b.fields == nil {
				b.fields = make(map[string]partField)
			}
			f.value = string(v)
		}
		f.n++
		b.fields[n] = f
	}
}

// partUnread reports whether another server may take part p for a field
// net/http, which reads name n of it (FormName), does not: p has two
// Content-Disposition lines (net/http reads the first), or a name
// parameter where n is "" (an attachment's, which Werkzeug and busboy
// read, or one beside a parameter mime.ParseMediaType refuses), or two
// (net/http reads the extended one, name*; another server may read the
// other). The parameters are split on every ; and , as a lenient parser
// may split them.
func partUnread(p *multipart.Part, n string) bool {
	cd := p.Header.Values("Content-Disposition")
	if len(cd) != 1 {
		return len(cd) > 1
	}
	names := 0
	for param := range strings.FieldsFuncSeq(cd[0], func(r rune) bool { return r == ';' || r == ',' }) {
		k, _, _ := strings.Cut(param, "=")
		if k = strings.ToLower(strings.TrimSpace(k)); k == "name" || strings.HasPrefix(k, "name*") {
			names++
		}
	}
	return names > 1 || names == 1 && n == ""
}
