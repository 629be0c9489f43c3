package policy

import (
	"bytes"
	"errors"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"reflect"
)

// Form fields, for form:NAME key parts.
//
// A key part must read the field the handler will read, or a client could
// name one account to the handler and another (or none) to the limiter: a
// per-account login limit would then count nothing. The handler's
// r.FormValue reads, in this order:
//
//   - for a url-encoded body (POST, PUT, PATCH): the body's fields, then
//     the query string's;
//   - for a multipart/form-data body (any method): the query string's
//     fields, then the body's value parts (parts without a file name);
//   - otherwise the query string's.
//
// The handler must still get the body whole, whether it parses the form
// or reads the raw bytes (to check a signature, say), and a proxy must
// forward it whole: what the key reads is kept and given again before the
// rest (formBody). A url-encoded form is parsed by Request.ParseForm, so
// the handler finds it parsed (net/http reads at most 10 MB of it, or all
// of it under http.MaxBytesReader). A multipart body is read only as far
// as the field: a file part before it is read past, and kept, up to
// maxFormScan.
//
// Past one of net/http's default bounds (10 MB of url-encoded body,
// maxFormFields fields in it, maxFormParts parts, a part's header lines)
// the field is unknown, not missing: an upstream behind sluice serve may
// lift the bound (http.MaxBytesReader, GODEBUG multipartmaxparts,
// urlmaxqueryparams, multipartmaxheaders, or an older go line in its
// go.mod) and read the field. Such a key part takes one value for all
// these requests (unreadForm) rather than let them through unlimited.

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

// formValue returns the form field name of r as r.FormValue would return
// it to the handler, and reports whether it could tell: false when the
// field may be in a body past a bound.
func formValue(r *http.Request, name string) (string, bool) {
	if r == nil {
		return "", true
	}
	if b, ok := r.Body.(*formBody); ok {
		switch {
		case b.mr != nil:
			return b.value(r, name)
		case b.cut:
			return "", false // the body's fields come before the query's
		case r.Form != nil:
			return r.Form.Get(name), true // parseForm read a url-encoded body
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
			return "", false
		}
	}
	return r.Form.Get(name), true
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
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return ""
	}
	return params["boundary"]
}

// formBody is a request body of which a key has read the start. It gives
// what was read (kept) again before the rest, so that the handler, or the
// upstream, gets the body whole. For a multipart body it also holds the
// reader of its parts, to read further when another field is asked for.
type formBody struct {
	body io.ReadCloser // the rest of the request's body
	kept []byte        // read from body by a key, not yet given again
	gave bool          // the body has been read from since the key's reads

	mr     *multipart.Reader // reads kept, then body, through formScan
	query  url.Values        // the query string, parsed
	fields map[string]string // the first value of each field read so far
	parts  int               // parts read so far
	end    bool              // no more fields: the end, an error, or a bound
	eof    bool              // body has ended
	cut    bool              // stopped by a bound: fields past it are unknown
}

// Read gives the kept bytes, then the rest of the body.
func (b *formBody) Read(p []byte) (int, error) {
	b.gave = true
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

// value returns the field name of a multipart request as FormValue does:
// from what ParseForm puts in r.Form first (r.PostForm if another handler
// set it, and the query string; or r.Form, if one parsed it), then from
// the body.
func (b *formBody) value(r *http.Request, name string) (string, bool) {
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
	if v := q[name]; len(v) > 0 {
		return v[0], true
	}
	return b.field(name)
}

// field reads the parts of a multipart body until the first value part
// named name, and returns its value; false means it may lie past
// maxFormScan.
func (b *formBody) field(name string) (string, bool) {
	if v, ok := b.fields[name]; ok {
		return v, true
	}
	for !b.end {
		p, err := b.mr.NextPart()
		if err != nil {
			b.end = true
			// Too many header lines in a part.
			b.cut = b.cut || errors.Is(err, multipart.ErrMessageTooLarge)
			break
		}
		if b.parts++; b.parts > maxFormParts {
			b.end, b.cut = true, true
			break
		}
		n := p.FormName()
		if n == "" || p.FileName() != "" {
			continue // NextPart reads past what is left of it
		}
		v, err := io.ReadAll(p)
		if err != nil {
			b.end = true
			break
		}
		if _, ok := b.fields[n]; !ok {
			if b.fields == nil {
				b.fields = make(map[string]string)
			}
			b.fields[n] = string(v)
		}
		if n == name {
			return b.fields[n], true
		}
	}
	if b.cut {
		return "", false
	}
	return "", true
}
