// Package urlpath gives request paths the form in which the servers
// behind a policy read them, so that a policy decides /a/../login,
// //login, /./login and /%2e/login as the /login they mean.
//
// Cleaning is net/http's ServeMux's: a leading slash, no empty, . or ..
// segments, the trailing slash kept. ServeMux answers an unclean path with
// a redirect to the clean one, which matches no policy; a reverse proxy, a
// gateway, a gRPC server's unknown-service handler or an application that
// cleans paths itself would serve the request as the clean path.
//
// Before cleaning, percent-encoded unreserved characters (RFC 3986 §2.3:
// letters, digits, - . _ ~) are decoded, which RFC 3986 §6.2.2.2 makes
// equivalent to the characters themselves, as NGINX, Apache and Tomcat do
// before they resolve dot segments: /x/%2e%2e/login is /login to them.
// Here alone the form differs from ServeMux's, which cleans the path as it
// is escaped and matches %2e%2e as a segment named "..": a pattern with a
// wildcard there (/x/{seg}/login) matches it in ServeMux, and not here.
// (Other escaped unreserved characters change nothing ServeMux matches:
// it unescapes each segment.) Reserved characters stay encoded (%2F is no
// /, %3B no ;): decoding one changes the path's meaning to ServeMux.
//
// [Options] adds what some servers read beyond that: ASCII letters in
// either case (Express, ASP.NET Core), segments' ;parameters (Tomcat,
// Jetty) and escaped slashes (NGINX, gorilla/mux, gin).
package urlpath

import (
	"net/url"
	"path"
	"strings"
)

// Clean returns the canonical path for p as ServeMux computes it: a
// leading slash, no empty, . or .. segments, and the trailing slash of p
// kept. It returns p itself, without allocating, when p is clean.
func Clean(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		// Keep the trailing slash: /api/ is a subtree, /api is not.
		if len(p) == len(np)+1 && strings.HasPrefix(p, np) {
			return p
		}
		return np + "/"
	}
	return np
}

// Options say how the application reads paths beyond what every path gets
// (decoding unreserved characters, cleaning). The zero value adds nothing.
type Options struct {
	// FoldCase writes ASCII letters in lower case: /LOGIN is /login, as
	// Express's default router and ASP.NET Core's routing match it. An
	// escaped non-ASCII character (%C3%89, É) stays as it is.
	FoldCase bool
	// StripParams cuts each segment's parameters, from a ; to the next
	// /, before dot segments are resolved: /login;jsessionid=1 is /login
	// and /x/..;/login is /login, as Tomcat and Jetty (so Spring) read
	// them. An encoded %3B is no parameter to them, nor here.
	StripParams bool
	// DecodeSlash reads an escaped slash (%2F, %2f) as a slash, before
	// dot segments are resolved: /api%2Fsecret is /api/secret and
	// /x%2F..%2Flogin is /login, as NGINX serves them, and gorilla/mux
	// (without UseEncodedPath) and gin (without UseRawPath) route them,
	// on the decoded path. An escaped %252F is no slash.
	DecodeSlash bool
}

// CleanURL returns u with its path as o reads it: escaped slashes decoded
// (if o.DecodeSlash), parameters cut (if o.StripParams), unreserved
// characters decoded, cleaned (see Clean), ASCII letters in lower case
// (if o.FoldCase). As in ServeMux, the escaped path is cleaned: a %2F
// stays within its segment, unless o.DecodeSlash. It returns u itself,
// allocating nothing beyond u.EscapedPath, when the path is so already,
// and when the result does not parse.
func CleanURL(u *url.URL, o Options) *url.URL {
	escaped := u.EscapedPath()
	p := escaped
	if o.DecodeSlash {
		p = decodeSlash(p)
	}
	if o.StripParams {
		p = stripParams(p)
	}
	p = Clean(decodeUnreserved(p))
	if o.FoldCase {
		p = lowerASCII(p)
	}
	if p == escaped {
		return u
	}
	c, err := url.ParseRequestURI(p)
	if err != nil {
		return u
	}
	out := *u
	out.Path, out.RawPath = c.Path, c.RawPath
	return &out
}

// decodeSlash returns p with every %2F or %2f a slash, and p itself,
// without allocating, when it has none.
func decodeSlash(p string) string {
	if !strings.Contains(p, "%2F") && !strings.Contains(p, "%2f") {
		return p
	}
	return slashes.Replace(p)
}

// slashes decodes escaped slashes; made once, not per path.
var slashes = strings.NewReplacer("%2F", "/", "%2f", "/")

// decodeUnreserved returns p with every percent-encoded unreserved
// character decoded, and p itself when it has none.
func decodeUnreserved(p string) string {
	i := strings.IndexByte(p, '%')
	if i < 0 {
		return p
	}
	var b []byte
	last := 0 // p[last:i] is yet to be copied to b
	for ; i+2 < len(p); i++ {
		if p[i] != '%' {
			continue
		}
		c, ok := Unhex(p[i+1], p[i+2])
		if !ok || !unreserved(c) {
			continue
		}
		if b == nil {
			b = make([]byte, 0, len(p))
		}
		b = append(append(b, p[last:i]...), c)
		last = i + 3
		i += 2
	}
	if b == nil {
		return p
	}
	return string(append(b, p[last:]...))
}

// Unhex returns the byte the two hex digits h and l of a percent-escape
// spell, and whether both are hex digits.
func Unhex(h, l byte) (byte, bool) {
	hv, ok1 := hexVal(h)
	lv, ok2 := hexVal(l)
	return hv<<4 | lv, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// unreserved reports whether c is an RFC 3986 unreserved character.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// stripParams returns p without the parameters of its segments (from a ;
// to the next /), and p itself when it has none.
func stripParams(p string) string {
	i := strings.IndexByte(p, ';')
	if i < 0 {
		return p
	}
	b := make([]byte, 0, len(p))
	for i >= 0 {
		b = append(b, p[:i]...)
		p = p[i:]
		j := strings.IndexByte(p, '/')
		if j < 0 {
			return string(b)
		}
		p = p[j:]
		i = strings.IndexByte(p, ';')
	}
	return string(append(b, p...))
}

// lowerASCII returns p with ASCII letters in lower case, escapes aside
// (%C3 is %C3, as é is é), and p itself when it has none in upper case.
func lowerASCII(p string) string {
	var b []byte
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '%':
			i += 2
		case 'A' <= c && c <= 'Z':
			if b == nil {
				b = []byte(p)
			}
			b[i] = c + 'a' - 'A'
		}
	}
	if b == nil {
		return p
	}
	return string(b)
}
