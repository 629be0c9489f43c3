package policy

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/urlpath"
)

// Response is the file's response section: what `sluice serve` tells the
// clients its policies decide, in the meaning of the httplimit.Options
// fields of the same names. Its zero value, a file's without the
// section, is httplimit's default: both vocabularies of rate limit
// headers, and 429 problem bodies of type about:blank.
//
//	response:
//	  headers: [draft, legacy]  # the default; [draft] or [legacy] for one family, [] for none
//	  problem_type: https://example.com/problems/rate-limited  # default about:blank
//
// No setting takes Retry-After away: it is HTTP's own field, not a rate
// limit vocabulary, and every refusal has it, for clients to know when
// to try again. Libraries ignore the section unless told to read it, as
// in httplimit.Options{NoDraftHeaders: r.NoDraftHeaders, NoLegacyHeaders:
// r.NoLegacyHeaders, ProblemType: r.ProblemType}.
type Response struct {
	// NoDraftHeaders turns off the RateLimit and RateLimit-Policy fields
	// (headers without draft).
	NoDraftHeaders bool
	// NoLegacyHeaders turns off X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset (headers without legacy).
	NoLegacyHeaders bool
	// ProblemType is the "type" member of the problem body of a 429 (RFC
	// 9457): an absolute URI, as the file wrote it. Empty means
	// about:blank. 503 bodies stay about:blank whatever it is: a shed
	// request or a store down is no problem of the client's quota.
	ProblemType string
}

// responseFields are the fields of the response section.
var responseFields = []string{"headers", "problem_type"}

// Header families, the values of response.headers.
const (
	familyDraft  = "draft"
	familyLegacy = "legacy"
)

// response reads the response section.
func (ld *loader) response(f field) Response {
	var r Response
	if f.val == nil {
		return r
	}
	m := ld.fields(f.val, "response", responseFields...)
	if v, ok := m["headers"]; ok {
		r.NoDraftHeaders, r.NoLegacyHeaders = ld.headerFamilies(v)
	}
	if v, ok := m["problem_type"]; ok {
		if s, ok := ld.str(v.val, "response.problem_type"); ok {
			if err := checkProblemType(s); err != nil {
				ld.errf(v.val, "response.problem_type %v", err)
			} else {
				r.ProblemType = s
			}
		}
	}
	return r
}

// headerFamilies reads response.headers and returns which families it
// leaves out.
func (ld *loader) headerFamilies(v field) (noDraft, noLegacy bool) {
	if isNull(v.val) {
		// Left empty, as by a template: "none" and "the default" are both
		// likely meanings, and they are opposite.
		ld.errf(v.key, "response.headers has no value: write [] to send no rate limit headers, or leave headers out for both families (%s and %s)", familyDraft, familyLegacy)
		return false, false
	}
	families := []string{familyDraft, familyLegacy}
	seen := map[string]int{} // family to its line
	for _, n := range ld.list(v.val, "response.headers") {
		s, ok := ld.str(n, "a header family")
		if !ok {
			continue
		}
		if !slices.Contains(families, s) {
			ld.errf(n, "unknown header family %q in response.headers%s (families: %s, the RateLimit and RateLimit-Policy fields; %s, X-RateLimit-Limit, -Remaining and -Reset)",
				s, didYouMean(s, families), familyDraft, familyLegacy)
			continue
		}
		if line, dup := seen[s]; dup {
			ld.errf(n, "header family %q repeated in response.headers (first at line %d)", s, line)
			continue
		}
		seen[s] = n.Line
	}
	_, draft := seen[familyDraft]
	_, legacy := seen[familyLegacy]
	return !draft, !legacy
}

// checkProblemType says what keeps s from being a problem type, or
// returns nil. RFC 9457 takes any URI reference, a relative one resolved
// against the response's URL; Load asks for an absolute URI (RFC 3986),
// as the RFC recommends: sluice answers for many hosts and paths, and a
// relative type would name as many problem types, none a client could
// compare with the one it knows. Only the characters a URI may hold are
// taken, each % beginning an escape: the type is what clients compare
// with, byte for byte, so a value they would read otherwise (a space
// cut, an IRI encoded) must not load.
func checkProblemType(s string) error {
	if s == "" {
		return errors.New("is empty; leave it out for about:blank, whose title is the status phrase")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ':
			return errors.New("has a space, which a URI cannot hold; write it as %20")
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("has a control character (%q), which a URI cannot hold", c)
		case c >= 0x80:
			return fmt.Errorf("is not ASCII, as a URI must be (RFC 3986); percent-encode its UTF-8, as in %q", percentEncode(s))
		case c == '%':
			ok := i+2 < len(s)
			if ok {
				_, ok = urlpath.Unhex(s[i+1], s[i+2])
			}
			if !ok {
				return errors.New("has a % not followed by two hexadecimal digits; write a % itself as %25")
			}
		case !uriChar(c):
			return fmt.Errorf("has %q, which a URI cannot hold; percent-encode it, as %%%02X", rune(c), c)
		}
	}
	colon := strings.IndexByte(s, ':')
	if colon <= 0 || !validScheme(s[:colon]) {
		return fmt.Errorf("%q is not an absolute URI: RFC 9457 lets a relative one stand, resolved against each refused request's URL, so that it would name a problem type per host and path; write it whole, as in https://example.com/problems/rate-limited", s)
	}
	u, err := url.Parse(s)
	if err != nil {
		// A *url.Error, which quotes the value: say what it wraps.
		return fmt.Errorf("is not a URI: %w", errors.Unwrap(err))
	}
	rest := s[colon+1:] // the URI after its scheme, less its authority
	if strings.HasPrefix(rest, "//") {
		end := strings.IndexAny(rest[2:], "/?#")
		if end < 0 {
			end = len(rest) - 2
		}
		rest = rest[2+end:]
	}
	if strings.ContainsAny(rest, "[]") {
		return errors.New("has [ or ] outside a host's IPv6 address; percent-encode them, as %5B and %5D")
	}
	if strings.Count(rest, "#") > 1 {
		return errors.New("has more than one #; percent-encode the ones after the first, as %23")
	}
	switch scheme := strings.ToLower(u.Scheme); {
	case (scheme == "http" || scheme == "https") && u.Host == "":
		return fmt.Errorf("%q names no host, which an %s URI needs, as in %s://example.com/problems/rate-limited", s, scheme, scheme)
	case scheme == "about" && s != "about:blank":
		return fmt.Errorf("%q names no problem type: the one about: URI RFC 9457 gives a meaning is about:blank, the default", s)
	}
	return nil
}

// uriChar reports whether c may stand in a URI as itself (RFC 3986's
// unreserved and reserved characters); % is read apart.
func uriChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("-._~:/?#[]@!$&'()*+,;=", c) >= 0
}

// validScheme reports whether s is a URI scheme: a letter, then letters,
// digits, +, - and . (RFC 3986).
func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isLetter(c) && (i == 0 || !('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return s != ""
}

// percentEncode returns s with each byte outside ASCII percent-encoded:
// an IRI as the URI it maps to.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x80 {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}
