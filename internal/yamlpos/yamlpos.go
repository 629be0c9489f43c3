// Package yamlpos places the syntax errors of go.yaml.in/yaml/v3 in their
// document, for loaders whose messages name file:line:column. The library
// names no line for many of its errors (a control character, an unknown
// anchor, any mistake on the first line) and, for most others, the line
// where the block around the mistake starts, or the one before it: a
// message built on it sends the reader to the wrong place, often many
// lines above the mistake, sometimes past the end of the file.
//
// Locate asks the library itself where its error starts: it parses the
// document cut short at a line, then at a character, and bisects for the
// first place where the cut text fails with the same error. That costs a
// few parses, on the error path only: about log2 of the lines plus log2
// of the line's length, twice that when a quoted scalar runs over lines.
package yamlpos

import (
	"bytes"
	"cmp"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Pos is where in its document a YAML syntax error is, and what it is.
// The zero value places nothing.
type Pos struct {
	// Line is the 1-based line of the mistake, or 0 when it could not be
	// placed. It is never past the last line of the document.
	Line int
	// Column is the 1-based column of the mistake, in characters as
	// yaml.Node.Column counts them, or 0 when it is not known.
	Column int
	// Message is what the library says is wrong, without its "yaml: "
	// prefix and without the line it names.
	Message string
}

// Locate places err, the error yaml.Unmarshal returned for data decoded
// into a yaml.Node. Lines end where the library ends them: at LF, CRLF,
// CR, NEL, LS and PS.
//
// The place is the first character at which data fails with err: data
// up to and including it, with the lines after it left empty, fails with
// the very error err; data up to the character before does not. If that
// data fails in another way, the character may be only where the
// message changes. In a flow collection left open, it changes from one
// item to the next: the place is the last item of a flow collection on
// the character's line, after which the bracket is missing, if data
// starts to fail with err there. When the character closes a quoted
// scalar, the place is where the scalar opens: a quote mark too many or
// too few there is the likely mistake, and the scalar may run over many
// lines to the next quote mark. When data does not fail with err at
// all, or is UTF-16, the line is the one the library names, if any, and
// Column is 0.
//
// A *yaml.TypeError is not placed: its messages carry their own lines.
func Locate(data []byte, err error) Pos {
	return locate(data, err, unmarshal)
}

func unmarshal(data []byte) error {
	var n yaml.Node
	return yaml.Unmarshal(data, &n)
}

// locate is Locate with the parse it makes of each cut text as a
// parameter, for tests to count them.
func locate(data []byte, err error, parse func([]byte) error) Pos {
	if err == nil {
		return Pos{}
	}
	want := err.Error()
	libLine, msg := split(want)
	p := Pos{Message: msg}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return p
	}
	d := newDoc(data)
	if len(d.lines) == 0 || utf16BOM(data) {
		return d.libraryLine(p, libLine)
	}
	fails := failsWith(parse, want)
	// The library's reader refuses a character wherever the parser is:
	// the first one refused is the mistake, if the text before it does
	// not fail already.
	if k, i, ok := d.refused(); ok && fails(d.cut(k, i)) && !fails(d.cut(k, i-1)) {
		p.Line, p.Column = k, d.column(k, i)
		return p
	}
	if !fails(data) {
		return d.libraryLine(p, libLine)
	}
	n := len(d.lines)
	k, i := d.first(fails, n, d.lines[n-1].chars)
	// The search finds where the text starts to fail with err. When the
	// text just before fails too, in another way, that is only where the
	// message changes, and the mistake may lie before it.
	if e := parse(d.cut(k, i-1)); e != nil {
		// A flow collection left open fails with one message cut after
		// an item and with another cut after a comma: the search lands
		// on any of its items, or on a quote mark of one. The place is
		// the last item on line k, after which the bracket is missing
		// (or the comma, after which an item is), if the text starts to
		// fail with err there. After a mistake, the text fails with err
		// all along, and does not start to.
		if j := d.lastItem(k); j > 0 && fails(d.cut(k, j)) && !fails(d.cut(k, j-1)) {
			p.Line, p.Column = k, d.column(k, j)
			return p
		}
		// A quoted scalar runs over lines to the next quote mark of its
		// kind, an apostrophe in a comment for one: when the text fails
		// at that mark, the text just before it fails with the quote
		// left open. If that other error starts at a quote mark of the
		// same kind, the scalar opens there.
		if q := d.char(k, i); q == '\'' || q == '"' {
			if qk, qi := d.first(failsWith(parse, e.Error()), k, i-1); d.char(qk, qi) == q {
				k, i = qk, qi
			}
		}
	}
	p.Line, p.Column = k, d.column(k, i)
	return p
}

// SecondDocument returns the line of the "---" that begins the second
// document of data, or 0 if it has none, counting lines as Locate does.
// A marker begins the first document when nothing but blank lines,
// comments and directives ("%YAML 1.2") comes before it, and a later
// one once anything has: content, or a marker before it. It reads only
// the lines' first characters: call it on data the library found to
// hold a second document.
func SecondDocument(data []byte) int {
	d := newDoc(data)
	started := false // a document has begun
	for k, l := range d.lines {
		text := d.data[l.start:l.end]
		if k == 0 {
			text = bytes.TrimPrefix(text, []byte("\ufeff"))
		}
		if rest, ok := bytes.CutPrefix(text, []byte("---")); ok && (len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t') {
			if started {
				return k + 1
			}
			started = true
			continue
		}
		if t := bytes.TrimLeft(text, " \t"); len(t) > 0 && t[0] != '#' && t[0] != '%' {
			started = true
		}
	}
	return 0
}

// failsWith returns a test of whether a text fails to parse with the
// error whose message is want.
func failsWith(parse func([]byte) error, want string) func([]byte) bool {
	return func(text []byte) bool {
		err := parse(text)
		return err != nil && err.Error() == want
	}
}

// split returns the line the library names in msg, or 0, and msg without
// the "yaml: " prefix and without the line.
func split(msg string) (line int, rest string) {
	msg = strings.TrimPrefix(msg, "yaml: ")
	if s, ok := strings.CutPrefix(msg, "line "); ok {
		if num, after, ok := strings.Cut(s, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil && n > 0 {
				return n, after
			}
		}
	}
	return 0, msg
}

// utf16BOM reports whether data starts with a UTF-16 byte order mark: the
// library then reads it as UTF-16, whose lines doc does not find.
func utf16BOM(data []byte) bool {
	return bytes.HasPrefix(data, []byte{0xff, 0xfe}) || bytes.HasPrefix(data, []byte{0xfe, 0xff})
}

// doc is a document cut into lines.
type doc struct {
	data  []byte
	lines []line
}

// line is one line of a doc: data[start:end] is its text, of chars
// characters, and data[end:next] its line break, empty for a last line
// without one.
type line struct {
	start, end, next int
	chars            int
}

func newDoc(data []byte) *doc {
	d := &doc{data: data}
	start, chars := 0, 0
	for i := 0; i < len(data); {
		if w := lineBreak(data[i:]); w > 0 {
			d.lines = append(d.lines, line{start, i, i + w, chars})
			i += w
			start, chars = i, 0
			continue
		}
		_, w := utf8.DecodeRune(data[i:])
		i += w
		chars++
	}
	if start < len(data) {
		d.lines = append(d.lines, line{start, len(data), len(data), chars})
	}
	return d
}

// lineBreak returns the length of the line break b starts with, or 0.
func lineBreak(b []byte) int {
	switch {
	case bytes.HasPrefix(b, []byte("\r\n")):
		return 2
	case len(b) > 0 && (b[0] == '\n' || b[0] == '\r'):
		return 1
	case bytes.HasPrefix(b, []byte("\u0085")):
		return 2
	case bytes.HasPrefix(b, []byte("\u2028")), bytes.HasPrefix(b, []byte("\u2029")):
		return 3
	}
	return 0
}

// libraryLine returns p with the line the library named, kept within d:
// the library may name the line after the last.
func (d *doc) libraryLine(p Pos, libLine int) Pos {
	p.Line = min(libLine, len(d.lines))
	return p
}

// cut returns the text of d up to the i-th character of line k: the
// lines before k, the first i characters of line k, and the line breaks
// of every line from k on. Keeping the lines after the cut as empty lines
// keeps the end of the text on the last line of d: some errors are found
// at the end, and their message names its line.
func (d *doc) cut(k, i int) []byte {
	if k == 0 {
		return d.breaks(0)
	}
	l := d.lines[k-1]
	end := l.start
	for ; i > 0 && end < l.end; i-- {
		_, w := utf8.DecodeRune(d.data[end:l.end])
		end += w
	}
	rest := d.breaks(k)
	out := make([]byte, 0, end+l.next-l.end+len(rest))
	out = append(out, d.data[:end]...)
	out = append(out, d.data[l.end:l.next]...)
	return append(out, rest...)
}

// breaks returns the line breaks of the lines after the first k.
func (d *doc) breaks(k int) []byte {
	var out []byte
	for _, l := range d.lines[k:] {
		out = append(out, d.data[l.end:l.next]...)
	}
	return out
}

// first returns the first place, the i-th character of line k, at which
// the text of d fails: fails(d.cut(k, i)) and not fails(d.cut(k, i-1)).
// The text up to the last-th character of line lastLine must fail. It
// bisects the lines, then the characters of line k: fails is called
// about log2(lastLine) + log2(characters of line k) times.
//
// Bisection needs the texts that fail to follow those that do not, and
// mostly they do: once the text holds a mistake, the parser fails at it
// whatever follows; a text cut before the mistake is well formed, or
// fails because a bracket or quote is left open at the cut, mostly with
// another message or one naming another line. Where they do not, the
// place found still is one where the text starts to fail, if not the
// first.
func (d *doc) first(fails func([]byte) bool, lastLine, last int) (k, i int) {
	chars := func(k int) int {
		if k == lastLine {
			return last
		}
		return d.lines[k-1].chars
	}
	// The text of hi lines fails; that of lo-1 lines does not: empty
	// lines do not fail.
	lo, hi := 1, lastLine
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if fails(d.cut(mid, chars(mid))) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	k = hi
	// Line k with none of its characters is the text of k-1 lines.
	lo, hi = 1, chars(k)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if fails(d.cut(k, mid)) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return k, hi
}

// lastItem returns the place of the first character of the last item of
// a flow collection on line k: the first that is not a space after the
// last comma or opening bracket, not counting those in a quoted scalar or
// a comment; or that separator's if no item follows it; or 0 if there is
// none. It reads the line as YAML's flow context does, as far as is
// needed to find that place; the library is asked whether it is the one.
func (d *doc) lastItem(k int) int {
	l := d.lines[k-1]
	after, item := 0, 0 // the last separator, the item after it
	var quote rune
	// Whether the character before is a space or a separator, or there
	// is none: a quote mark there opens a scalar, a # a comment.
	start := true
	for at, j := l.start, 1; at < l.end; j++ {
		r, w := utf8.DecodeRune(d.data[at:l.end])
		at += w
		switch {
		case quote == '"' && r == '\\':
			if at < l.end { // the escaped character
				_, w := utf8.DecodeRune(d.data[at:l.end])
				at += w
				j++
			}
		case quote != 0:
			if r == quote {
				quote = 0 // '' in a single-quoted scalar reopens it
			}
		case r == '#' && start:
			return cmp.Or(item, after)
		case r == ',' || r == '[' || r == '{':
			after, item = j, 0
		case r == ' ' || r == '\t':
		default:
			if after > 0 && item == 0 {
				item = j
			}
			if start && (r == '\'' || r == '"') {
				quote = r
			}
		}
		start = quote == 0 && strings.ContainsRune(" \t,[{", r)
	}
	return cmp.Or(item, after)
}

// char returns the i-th character of line k, or -1 if there is none.
func (d *doc) char(k, i int) rune {
	if k < 1 || k > len(d.lines) || i < 1 {
		return -1
	}
	l := d.lines[k-1]
	for at := l.start; at < l.end; i-- {
		r, w := utf8.DecodeRune(d.data[at:l.end])
		if i == 1 {
			return r
		}
		at += w
	}
	return -1
}

// column returns the column of the i-th character of line k, as the
// library counts: without the byte order mark that may start the
// document, which its reader drops.
func (d *doc) column(k, i int) int {
	if k == 1 && bytes.HasPrefix(d.data, []byte("\ufeff")) {
		i--
	}
	return max(i, 0)
}

// refused returns the first character the library's reader refuses, the
// i-th of line k: a byte that is not UTF-8, or a code point YAML does not
// allow (a control character other than tab, a surrogate, U+FFFE or
// U+FFFF).
func (d *doc) refused() (k, i int, ok bool) {
	for n, l := range d.lines {
		i := 1
		for at := l.start; at < l.end; i++ {
			r, w := utf8.DecodeRune(d.data[at:l.end])
			if r == utf8.RuneError && w == 1 || !allowed(r) {
				return n + 1, i, true
			}
			at += w
		}
	}
	return 0, 0, false
}

// allowed reports whether YAML allows r in a document, line breaks aside.
func allowed(r rune) bool {
	switch {
	case r == '\t':
		return true
	case r < 0x20 || r == 0x7f:
		return false
	case r < 0x80:
		return true
	}
	return r == 0x85 || r >= 0xa0 && r <= 0xd7ff || r >= 0xe000 && r <= 0xfffd || r >= 0x10000 && r <= 0x10ffff
}
