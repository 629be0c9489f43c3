package retry

// A small parser for Structured Field Lists (RFC 9651 §4.2.1), enough for
// the RateLimit and RateLimit-Policy fields. It follows the RFC's rule that
// a field which fails to parse is ignored as a whole, and it never panics:
// every index is checked against the input length before use.

// sfKind tells which type of bare item an sfValue holds.
type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal
	sfString
	sfToken
	sfBytes
	sfBoolean
	sfDate
	sfDisplay
	sfInnerList
)

// sfValue is a bare item. Only integers keep their numeric value, in i;
// strings and tokens keep their text in s. Other kinds are checked for
// syntax and then only their kind is kept, which is all RateLimit needs.
type sfValue struct {
	kind sfKind
	i    int64
	s    string
}

// sfParam is one ";key=value" parameter.
type sfParam struct {
	key   string
	value sfValue
}

// sfItem is one list member: a bare item (or an inner list) and its
// parameters, in order of appearance.
type sfItem struct {
	value  sfValue
	params []sfParam
}

// param returns the last parameter named key; the RFC says a repeated key
// overwrites the earlier one.
func (it sfItem) param(key string) (sfValue, bool) {
	for i := len(it.params) - 1; i >= 0; i-- {
		if it.params[i].key == key {
			return it.params[i].value, true
		}
	}
	return sfValue{}, false
}

// name returns the item's bare value when it is a String or a Token. The
// draft asks for Strings; Tokens are accepted because servers send them.
func (it sfItem) name() (string, bool) {
	if it.value.kind == sfString || it.value.kind == sfToken {
		return it.value.s, true
	}
	return "", false
}

type sfParser struct {
	s string
	i int
}

// parseSFList parses a whole field value as a List. ok is false if any
// part of it is malformed.
func parseSFList(s string) (items []sfItem, ok bool) {
	p := sfParser{s: s}
	p.skipOWS()
	if p.eof() {
		return nil, true
	}
	for {
		it, ok := p.member()
		if !ok {
			return nil, false
		}
		items = append(items, it)
		p.skipOWS()
		if p.eof() {
			return items, true
		}
		if p.s[p.i] != ',' {
			return nil, false
		}
		p.i++
		p.skipOWS()
		if p.eof() {
			return nil, false // trailing comma
		}
	}
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }

func (p *sfParser) peek() byte {
	if p.eof() {
		return 0
	}
	return p.s[p.i]
}

func (p *sfParser) skipOWS() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) skipSP() {
	for !p.eof() && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) member() (sfItem, bool) {
	if p.peek() == '(' {
		return p.innerList()
	}
	return p.item()
}

func (p *sfParser) item() (sfItem, bool) {
	v, ok := p.bareItem()
	if !ok {
		return sfItem{}, false
	}
	params, ok := p.params()
	return sfItem{value: v, params: params}, ok
}

func (p *sfParser) innerList() (sfItem, bool) {
	p.i++ // '('
	for {
		p.skipSP()
		if p.eof() {
			return sfItem{}, false
		}
		if p.s[p.i] == ')' {
			p.i++
			params, ok := p.params()
			return sfItem{value: sfValue{kind: sfInnerList}, params: params}, ok
		}
		if _, ok := p.item(); !ok {
			return sfItem{}, false
		}
		if c := p.peek(); c != ' ' && c != ')' {
			return sfItem{}, false
		}
	}
}

func (p *sfParser) params() ([]sfParam, bool) {
	var params []sfParam
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		v := sfValue{kind: sfBoolean, i: 1}
		if p.peek() == '=' {
			p.i++
			if v, ok = p.bareItem(); !ok {
				return nil, false
			}
		}
		params = append(params, sfParam{key: key, value: v})
	}
	return params, true
}

func (p *sfParser) key() (string, bool) {
	start := p.i
	if c := p.peek(); !isLCAlpha(c) && c != '*' {
		return "", false
	}
	p.i++
	for !p.eof() {
		c := p.s[p.i]
		if !isLCAlpha(c) && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
		p.i++
	}
	return p.s[start:p.i], true
}

func (p *sfParser) bareItem() (sfValue, bool) {
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.token()
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	case c == '@':
		p.i++
		v, ok := p.number()
		if !ok || v.kind != sfInteger {
			return sfValue{}, false
		}
		return sfValue{kind: sfDate, i: v.i}, true
	case c == '%':
		return p.display()
	default:
		return sfValue{}, false
	}
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// integer and 3 fraction digits); those limits keep every value far from
// int64 overflow.
func (p *sfParser) number() (sfValue, bool) {
	neg := false
	if p.peek() == '-' {
		neg = true
		p.i++
	}
	if !isDigit(p.peek()) {
		return sfValue{}, false
	}
	var n int64
	digits := 0
	for !p.eof() && isDigit(p.s[p.i]) {
		n = n*10 + int64(p.s[p.i]-'0')
		digits++
		p.i++
		if digits > 15 {
			return sfValue{}, false
		}
	}
	if p.peek() != '.' {
		if neg {
			n = -n
		}
		return sfValue{kind: sfInteger, i: n}, true
	}
	if digits > 12 {
		return sfValue{}, false
	}
	p.i++
	frac := 0
	for !p.eof() && isDigit(p.s[p.i]) {
		frac++
		p.i++
	}
	if frac < 1 || frac > 3 {
		return sfValue{}, false
	}
	return sfValue{kind: sfDecimal}, true
}

func (p *sfParser) str() (sfValue, bool) {
	p.i++ // opening quote
	var b []byte
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.eof() {
				return sfValue{}, false
			}
			c = p.s[p.i]
			p.i++
			if c != '"' && c != '\\' {
				return sfValue{}, false
			}
			b = append(b, c)
		case c == '"':
			return sfValue{kind: sfString, s: string(b)}, true
		case c < 0x20 || c > 0x7e:
			return sfValue{}, false
		default:
			b = append(b, c)
		}
	}
	return sfValue{}, false // unterminated
}

func (p *sfParser) token() (sfValue, bool) {
	start := p.i
	p.i++ // first character already checked by bareItem
	for !p.eof() && (isTChar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
		p.i++
	}
	return sfValue{kind: sfToken, s: p.s[start:p.i]}, true
}

func (p *sfParser) bytes() (sfValue, bool) {
	p.i++ // opening colon
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		if c == ':' {
			return sfValue{kind: sfBytes}, true
		}
		if !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			return sfValue{}, false
		}
	}
	return sfValue{}, false
}

func (p *sfParser) boolean() (sfValue, bool) {
	p.i++ // '?'
	switch p.peek() {
	case '0':
		p.i++
		return sfValue{kind: sfBoolean, i: 0}, true
	case '1':
		p.i++
		return sfValue{kind: sfBoolean, i: 1}, true
	}
	return sfValue{}, false
}

// display checks a Display String (%"...") without decoding it.
func (p *sfParser) display() (sfValue, bool) {
	p.i++ // '%'
	if p.peek() != '"' {
		return sfValue{}, false
	}
	p.i++
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '"':
			return sfValue{kind: sfDisplay}, true
		case c == '%':
			if p.i+2 > len(p.s) || !isLCHex(p.s[p.i]) || !isLCHex(p.s[p.i+1]) {
				return sfValue{}, false
			}
			p.i += 2
		case c < 0x20 || c > 0x7e:
			return sfValue{}, false
		}
	}
	return sfValue{}, false
}

func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || ('A' <= c && c <= 'Z') }
func isLCHex(c byte) bool   { return isDigit(c) || ('a' <= c && c <= 'f') }

// isTChar reports whether c is a tchar (RFC 9110 §5.6.2).
func isTChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
