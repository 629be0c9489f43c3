package policy

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/sluicehq/sluice/clientip"
)

// A key is built from parts, each a property of the request:
//
//	ip             the client address, grouped (see clientip)
//	user           the authenticated user (WithUser, or the transport's hook)
//	method         the request method
//	global         nothing: one value, and one counter, for every request
//	header:NAME    a header's value (gRPC: a metadata key's)
//	path:NAME      a wildcard of the policy's path pattern, such as {id}
//	form:NAME      a form field's value (see form.go)
//
// A header or a form field given more than once has no one value that
// every server reads (see Request.header, form.go): such a part is
// manyValues, one value for all these requests, which no client can
// choose or vary.
//
// global is a key alone: combined with other parts it would add nothing
// to the key they make, and load refuses it there (see loader.key). Its
// stored key, {prefix:policy:global=}:tag, is the one key whose parts
// begin with that label, so it meets no other part's key. Of a policy
// with limits per plan, its value is the plan whose limits apply
// (global=pro; see appendPart), a total per plan.
//
// The stored key is {prefix:policy:part=value|part=value}:tag, where tag
// changes when what the limit's state means changes (see stateTag), so a
// reload keeps the counters of a limit whose state still means the same
// and starts the others afresh. The braces are a Redis Cluster hash tag:
// a key's limits share a slot, and are decided in one script call. A
// value never holds a brace (appendValue), so no client moves its key to
// another slot.
type partKind uint8

const (
	partIP partKind = iota
	partUser
	partMethod
	partGlobal
	partHeader
	partPath
	partForm
)

type part struct {
	kind  partKind
	label string // as written in keys: ip, header:x-api-key, path:id
	name  string // header (canonical), wildcard or form field
	lower string // header in lower case, for gRPC metadata
	index int    // path: the wildcard's index in the policy's list
	fold  bool   // the policy's fold_key, on a part a client spells (see foldValue)
}

// partKinds lists the part names for error messages.
const partKinds = "ip, user, method, global, header:NAME, path:NAME, form:NAME"

// parsePart reads a key part as written in the policy file.
func parsePart(s string) (part, error) {
	kind, arg, hasArg := strings.Cut(s, ":")
	switch kind {
	case "ip", "user", "method", "global":
		if hasArg {
			return part{}, fmt.Errorf("key part %q takes no argument", kind)
		}
		k := map[string]partKind{"ip": partIP, "user": partUser, "method": partMethod, "global": partGlobal}[kind]
		return part{kind: k, label: kind}, nil
	case "header", "path", "form":
		if arg == "" {
			return part{}, fmt.Errorf("key part %q needs a name, as in %s:NAME", kind, kind)
		}
		if !validToken(arg) && (kind != "form" || !validToken(strings.NewReplacer("[", "", "]", "").Replace(arg))) {
			return part{}, fmt.Errorf("invalid name %q in key part %q", arg, s)
		}
		switch kind {
		case "header":
			c := textproto.CanonicalMIMEHeaderKey(arg)
			if c == "Host" {
				return part{}, fmt.Errorf("key part %q would never apply: %s", s, hostNotHeader)
			}
			return part{kind: partHeader, label: "header:" + strings.ToLower(arg), name: c, lower: strings.ToLower(arg)}, nil
		case "path":
			return part{kind: partPath, label: s, name: arg}, nil
		default:
			return part{kind: partForm, label: s, name: arg}, nil
		}
	}
	msg := fmt.Sprintf("unknown key part %q", s)
	if d := suggest(kind, []string{"ip", "user", "method", "global", "header", "path", "form"}); d != "" {
		msg += fmt.Sprintf("; did you mean %q?", d)
	}
	return part{}, fmt.Errorf("%s (want one of %s)", msg, partKinds)
}

// keyMethod returns method as a method key part holds it: in upper case,
// as the policies match it (see methodIn), since post and POST are one
// method to the applications that serve them; and HEAD as GET, as a
// policy on GET matches HEAD: a HEAD is a GET whose body the server
// leaves out, and a client alternating the two would otherwise have
// twice the limit.
func keyMethod(method string) string {
	if strings.IndexFunc(method, func(c rune) bool { return 'a' <= c && c <= 'z' }) >= 0 {
		method = strings.ToUpper(method)
	}
	if method == http.MethodHead {
		return http.MethodGet
	}
	return method
}

// hostNotHeader says why no policy reads a Host header: net/http moves
// it out of the request's header fields into Request.Host, and HTTP/2
// and gRPC send the host as :authority.
const hostNotHeader = "no request has a Host header field to read (net/http moves it to Request.Host; HTTP/2 and gRPC send :authority); match a host with match: {host: NAME}"

// validToken reports whether s is an RFC 9110 token, which header names
// and the names of wildcards and form fields all are here; a form field's
// may have brackets too, as Rails and PHP name nested fields
// (user[email]).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// maxValue bounds the length of a value kept as written in a key; longer
// ones, and ones with bytes that have a meaning in keys, are hashed.
const maxValue = 64

// appendValue appends v to a key: as written when it is short and made of
// printable ASCII other than | { } #, otherwise as # and a hash of it.
// Values come from clients: this bounds every key's length, keeps a
// client from forging a separator or a Redis hash tag, and never maps two
// different values to one key (a written value never starts with #).
func appendValue(dst []byte, v string) []byte {
	if len(v) <= maxValue && plain(v) {
		return append(dst, v...)
	}
	sum := sha256.Sum256([]byte(v))
	dst = append(dst, '#')
	return base64.RawURLEncoding.AppendEncode(dst, sum[:16])
}

func plain(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c >= 0x7f || c == '|' || c == '{' || c == '}' || c == '#' {
			return false
		}
	}
	return true
}

// manyValues is the value of a header:NAME or form:NAME part when the
// request gives the header or field more than once. A value written into
// a key never starts with # but as a hash of 22 characters (appendValue),
// so no client can send this one.
const manyValues = "#many"

// foldValue returns v as a policy with fold_key keys it: trimmed of
// leading and trailing white space (unicode.IsSpace) and in lower case
// (strings.ToLower, Unicode's simple lower-case mapping, not full case
// folding: ß and SS stay apart; invalid UTF-8 becomes U+FFFD). An
// application that looks accounts up ignoring case, or trims them, serves
// Victim@Example.com and " victim@example.com" as one account; keyed as
// written they would be counted apart, and a guesser would spread its
// attempts on one account over its spellings. Both functions return v
// itself when nothing changes, so a value already in this form costs no
// allocation.
func foldValue(v string) string { return strings.ToLower(strings.TrimSpace(v)) }

// foldable reports whether fold_key applies to parts of kind k: those a
// client spells. ip is grouped and method upper-cased already; global
// has no value.
func foldable(k partKind) bool {
	return k == partUser || k == partHeader || k == partPath || k == partForm
}

// escapeValue returns appendValue's form of v as a string, for values
// known at load (overrides).
func escapeValue(v string) string { return string(appendValue(nil, v)) }

// shortHash returns eight hex digits of the SHA-256 of s.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

// appendPart appends the value of p for r, and reports whether r has one.
// plan is the plan whose limits the key's counters hold, "" for the
// policy's defaults: a global part's value, so that a policy with limits
// per plan keeps a total per plan (every plan's limit of one window would
// otherwise share its state, one plan's traffic spending another's).
// A key whose part is missing (no such header, an anonymous user) does
// not apply to the request.
func appendPart(dst []byte, p *part, r *Request, pathVals []string, plan string) ([]byte, bool) {
	switch p.kind {
	case partIP:
		if !r.Client.IsValid() {
			return append(dst, "unknown"...), true
		}
		return clientip.AppendPrefix(dst, r.Client), true
	case partUser:
		if r.User == "" {
			return dst, false
		}
		return appendSpelt(dst, p, r.User), true
	case partMethod:
		if r.HTTP == nil {
			return dst, false
		}
		return appendValue(dst, keyMethod(r.HTTP.Method)), true
	case partGlobal:
		return appendValue(dst, plan), true // every request has it
	case partHeader:
		vs := r.header(p.name, p.lower)
		switch {
		case len(vs) > 1:
			return append(dst, manyValues...), true
		case len(vs) == 0:
			return dst, false
		}
		v := ows(vs[0])
		if v == "" {
			return dst, false // blank: as present has it
		}
		return appendSpelt(dst, p, v), true
	case partPath:
		if p.index >= len(pathVals) || pathVals[p.index] == "" {
			return dst, false
		}
		return appendSpelt(dst, p, pathVals[p.index]), true
	case partForm:
		v, read := formValue(r.HTTP, p.name)
		switch {
		case read == formUnread:
			return append(dst, unreadForm...), true
		case read == formMany:
			return append(dst, manyValues...), true
		case v == "":
			return dst, false
		}
		return appendSpelt(dst, p, v), true
	}
	return dst, false
}

// appendSpelt appends v, a value of p the client spells, folded if p
// folds. A value that folds to nothing (white space alone, but for a
// header's spaces and tabs, which are no value: see blank) still keys, as
// the empty value: whether a key applies does not depend on folding.
func appendSpelt(dst []byte, p *part, v string) []byte {
	if p.fold {
		v = foldValue(v)
	}
	return appendValue(dst, v)
}
