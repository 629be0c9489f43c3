package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/textproto"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/logpace"
	"github.com/sluicehq/sluice/internal/urlpath"
	"github.com/sluicehq/sluice/internal/yamlalias"
	"github.com/sluicehq/sluice/internal/yamlpos"
	"github.com/sluicehq/sluice/rate"
)

// Problem is one thing wrong in a policy file, with where it is: in an
// *Error, something that keeps the file from loading; in [Set.Warnings],
// something that loads but is likely not what the author meant.
type Problem struct {
	// File is the file's name: the path given to LoadFile, or the name
	// given to Load.
	File string
	// Line and Column place the problem, both counting from 1; Column
	// counts characters, not bytes, as yaml.Node.Column does.
	Line, Column int
	// Message says what is wrong and, where it can, what would be right.
	Message string
}

// String returns file:line:col: message.
func (p Problem) String() string {
	return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Column, p.Message)
}

// Error is every problem found in a policy file, in the order of the
// file. Load reports them all at once rather than stopping at the first.
type Error struct {
	// Problems holds at least one problem, sorted by line, then column.
	Problems []Problem
}

// Error returns one problem per line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// LoadFile reads, validates and compiles the policy file at path. It is
// the whole of `sluice check`: a nil error means the file is ready to
// serve, and the Set's Warnings say what in it is likely not meant. A
// non-nil error is an *Error listing every problem as path:line:col:
// message, or the error that kept the file from being read.
func LoadFile(path string) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return Load(path, data)
}

// Load validates and compiles a policy file's contents. name is used in
// error messages only, as the file's name. YAML aliases may stand for at
// most 65,536 nodes in all: aliases to anchors that hold aliases describe
// trees far larger than the file, which Load refuses to compile.
func Load(name string, data []byte) (*Set, error) {
	ld := &loader{file: name}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		ld.yamlError(data, err)
		return nil, ld.err()
	}
	if !ld.oneDocument(data) {
		return nil, ld.err()
	}
	if len(doc.Content) == 0 {
		ld.probs = append(ld.probs, Problem{File: name, Line: 1, Column: 1,
			Message: "the file is empty; it needs at least a policies list"})
		return nil, ld.err()
	}
	if !ld.aliases(&doc) {
		return nil, ld.err()
	}
	set := ld.file_(doc.Content[0])
	if err := ld.err(); err != nil {
		return nil, err
	}
	set.warnings = byPosition(ld.warns)
	return set, nil
}

// oneDocument reports, and returns false for, a file of more than one
// YAML document: yaml.Unmarshal reads the first and ignores the rest, so
// policies after a "---" (a second file appended, say), or a mistake
// there, would be dropped without a word.
func (ld *loader) oneDocument(data []byte) bool {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var first, second yaml.Node
	if dec.Decode(&first) != nil {
		return true // Unmarshal has read it; an empty file is reported after
	}
	switch err := dec.Decode(&second); {
	case errors.Is(err, io.EOF):
		return true
	case err != nil:
		ld.probs = append(ld.probs, Problem{File: ld.file, Line: max(yamlpos.SecondDocument(data), 1), Column: 1,
			Message: "a second YAML document begins here, and is invalid (" + strings.TrimPrefix(err.Error(), "yaml: ") +
				"): a policy file is one document"})
	default:
		ld.errf(&second, "a second YAML document begins here: a policy file is one document, and the lines after it would be ignored; merge them into the first")
	}
	return false
}

// loader walks the YAML tree, compiling as it goes and collecting every
// problem and warning with its position.
type loader struct {
	file  string
	probs []Problem
	warns []Problem
	// lacking holds keyWarnings' warnings of policies that let requests
	// without some key part through, until every policy is loaded: another
	// may limit those requests (see lackingWarnings).
	lacking []lackingKeys
	// userAt, planAt and keyHdrAt are where user.header, plans.header
	// and plans.api_key_header are written, when they load; reads, where
	// the policies read a header from every client. proxyHeaders checks
	// them against each other once every policy is loaded.
	userAt, planAt, keyHdrAt *yaml.Node
	reads                    []headerRead
}

// headerRead is a header a policy reads from every client, as a key part
// or a match condition, and where.
type headerRead struct {
	name   string // canonical
	policy string // as in messages: policy "api"
	at     *yaml.Node
}

func (ld *loader) errf(n *yaml.Node, format string, args ...any) {
	ld.probs = append(ld.probs, Problem{File: ld.file, Line: n.Line, Column: n.Column, Message: fmt.Sprintf(format, args...)})
}

// warnf records what loads but is likely not meant; see Set.Warnings.
func (ld *loader) warnf(n *yaml.Node, format string, args ...any) {
	ld.warns = append(ld.warns, Problem{File: ld.file, Line: n.Line, Column: n.Column, Message: fmt.Sprintf(format, args...)})
}

func (ld *loader) err() error {
	if len(ld.probs) == 0 {
		return nil
	}
	return &Error{Problems: byPosition(ld.probs)}
}

// byPosition sorts problems in the order of the file.
func byPosition(ps []Problem) []Problem {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
	return ps
}

// yamlError turns the YAML parser's error on data into a problem. The
// parser names no line for many syntax errors and, for others, a line
// above the mistake: yamlpos finds the mistake's line and column. Decoded
// into a yaml.Node, a document has no type errors, only syntax errors.
func (ld *loader) yamlError(data []byte, err error) {
	at := yamlpos.Locate(data, err)
	msg := at.Message
	if charAt(data, at.Line, at.Column) == '\t' {
		// The parser's "found character that cannot start any token"
		// names no character, and a tab looks like spaces in most editors.
		msg = "a tab, where YAML allows only spaces: indent with spaces"
	}
	ld.probs = append(ld.probs, Problem{File: ld.file, Line: max(at.Line, 1), Column: max(at.Column, 1), Message: "invalid YAML: " + msg})
}

// charAt returns the character of data at line and column (counting
// characters, from 1), or 0 if there is none.
func charAt(data []byte, line, col int) rune {
	for i := 1; i < line; i++ {
		j := bytes.IndexByte(data, '\n')
		if j < 0 {
			return 0
		}
		data = data[j+1:]
	}
	if j := bytes.IndexByte(data, '\n'); j >= 0 {
		data = data[:j]
	}
	for i := 1; len(data) > 0; i++ {
		r, n := utf8.DecodeRune(data)
		if i == col {
			return r
		}
		data = data[n:]
	}
	return 0
}

// maxAliased bounds how many nodes of a file may come from YAML aliases
// (see yamlalias): a file that shares a few limits or matches between
// policies is far below it.
const maxAliased = 1 << 16

// aliases reports, and returns false for, a document whose aliases
// expand to more than maxAliased nodes, or one with an alias inside the
// node it names. The loader follows aliases, so it must not walk such a
// document.
func (ld *loader) aliases(doc *yaml.Node) bool {
	at, cycle := yamlalias.Check(doc, maxAliased)
	switch {
	case at == nil:
		return true
	case cycle:
		ld.errf(at, "alias *%s is inside the node it names, which would have no end", at.Value)
	default:
		ld.errf(at, "aliases expand to more than %d nodes; write the file out, or share less through aliases", maxAliased)
	}
	return false
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// field is a mapping entry: its key node (for positions) and value.
type field struct {
	key, val *yaml.Node
}

// fields reads a mapping whose keys must be among allowed, refusing
// unknown and repeated keys. what names the mapping in messages.
func (ld *loader) fields(n *yaml.Node, what string, allowed ...string) map[string]field {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		if n.Tag == "!!null" {
			return map[string]field{}
		}
		ld.errf(n, "%s must be a mapping with fields %s", what, strings.Join(allowed, ", "))
		return nil
	}
	out := make(map[string]field, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			ld.errf(k, "%s: field names must be plain words", what)
			continue
		}
		name := k.Value
		if k.Tag == "!!merge" {
			// yaml.Node leaves merging to its reader, and a merged field
			// would hide which line a value came from.
			ld.errf(k, "merge keys (<<) are not supported in %s: repeat the fields here, or share a whole value through an alias, as in limits: *std", what)
			continue
		}
		if !slices.Contains(allowed, name) {
			msg := fmt.Sprintf("unknown field %q in %s", name, what)
			if s := suggest(name, allowed); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			ld.errf(k, "%s (allowed: %s)", msg, strings.Join(allowed, ", "))
			continue
		}
		if prev, dup := out[name]; dup {
			ld.errf(k, "field %q repeated in %s (first at line %d)", name, what, prev.key.Line)
			continue
		}
		out[name] = field{k, v}
	}
	return out
}

// str reads a scalar as a string.
func (ld *loader) str(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		ld.errf(n, "%s must be a string", what)
		return "", false
	}
	return n.Value, true
}

// integer reads a whole number between lo and hi.
func (ld *loader) integer(n *yaml.Node, what string, lo, hi int64) (int64, bool) {
	if n.Kind != yaml.ScalarNode {
		ld.errf(n, "%s must be a whole number", what)
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 10, 64)
	if err != nil {
		ld.errf(n, "%s must be a whole number, not %q", what, n.Value)
		return 0, false
	}
	if v < lo || v > hi {
		ld.errf(n, "%s must be between %d and %d, not %d", what, lo, hi, v)
		return 0, false
	}
	return v, true
}

func (ld *loader) boolean(n *yaml.Node, what string) (bool, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	}
	ld.errf(n, "%s must be true or false, not %q", what, n.Value)
	return false, false
}

func (ld *loader) duration(n *yaml.Node, what string) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode {
		ld.errf(n, "%s must be a duration such as 500ms or 2s", what)
		return 0, false
	}
	if n.Value == "0" {
		return 0, true
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil || d < 0 {
		ld.errf(n, "%s must be a duration such as 500ms or 2s, not %q", what, n.Value)
		return 0, false
	}
	return d, true
}

// noItems reports whether n is a list with nothing in it, as list reads
// one: an empty sequence or an empty value.
func noItems(n *yaml.Node) bool {
	return n.Kind == yaml.SequenceNode && len(n.Content) == 0 || isNull(n)
}

// isNull reports whether n is a value left out (key: or key: ~): unlike
// [], which says "none" on purpose, it says nothing.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// list reads a sequence, or a single scalar as a list of one.
func (ld *loader) list(n *yaml.Node, what string) []*yaml.Node {
	switch n.Kind {
	case yaml.SequenceNode:
		out := make([]*yaml.Node, len(n.Content))
		for i, c := range n.Content {
			out[i] = resolve(c)
		}
		return out
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return nil
		}
		return []*yaml.Node{n}
	}
	ld.errf(n, "%s must be a list", what)
	return nil
}

var topFields = []string{"prefix", "instances", "client_ip", "user", "plans", "concurrency", "store", "paths", "response", "policies"}

// file_ compiles the whole file.
func (ld *loader) file_(root *yaml.Node) *Set {
	set := &Set{file: ld.file, prefix: "sluice", instances: 1}
	f := ld.fields(root, "the policy file", topFields...)
	if f == nil {
		return set
	}
	if v, ok := f["prefix"]; ok {
		if s, ok := ld.str(v.val, "prefix"); ok {
			if !validName(s) {
				ld.errf(v.val, "prefix %q must be lower-case letters, digits, - and _", s)
			}
			set.prefix = s
		}
	}
	if v, ok := f["instances"]; ok {
		if n, ok := ld.integer(v.val, "instances", 1, 10000); ok {
			set.instances = int(n)
		}
	}
	set.resolver = ld.clientIP(f["client_ip"])
	ld.user(f["user"], set)
	set.plans = ld.plans(f["plans"], set.resolver)
	set.conc = ld.concurrency(f["concurrency"])
	set.store = ld.storeSection(f["store"])
	set.paths = ld.paths(f["paths"])
	set.response = ld.response(f["response"])
	pv, ok := f["policies"]
	if !ok {
		ld.errf(root, "the policy file has no policies list")
		return set
	}
	if noItems(pv.val) {
		// Left empty, as by a template: the file would limit nothing, and
		// a reload to it would lift every limit with no error to stop it.
		ld.errf(pv.key, "the policies list is empty, so every request would be unlimited; write at least one policy")
		return set
	}
	seen := map[string]*yaml.Node{}
	var userPolicies []string // policies that read the user
	for _, pn := range ld.list(pv.val, "policies") {
		p := ld.policy(pn, set)
		if p == nil {
			continue
		}
		if prev, dup := seen[p.Name]; dup {
			ld.errf(pn, "policy name %q is used twice (first at line %d)", p.Name, prev.Line)
			continue
		}
		seen[p.Name] = pn
		set.policies = append(set.policies, p)
		set.usesPlan = set.usesPlan || p.usesPlan
		reads := p.match.auth != 0
		for _, k := range p.keys {
			for _, pt := range k {
				reads = reads || pt.kind == partUser
				set.usesIP = set.usesIP || pt.kind == partIP
				if pt.kind == partHeader {
					set.readHeader(pt.name)
				}
			}
		}
		for _, c := range p.match.headers {
			set.readHeader(c.name)
		}
		if reads {
			set.usesUser = true
			userPolicies = append(userPolicies, fmt.Sprintf("%q", p.Name))
		}
	}
	if set.plans.keyHdr != "" {
		set.readHeader(set.plans.keyHdr)
	}
	ld.proxyHeaders(set)
	ld.lackingWarnings(set)
	ld.userWarnings(f, set, pv, userPolicies)
	if pf, ok := f["plans"]; ok && set.plans.names != nil && !set.usesPlan {
		// Plans only select limits in policies that list them: with none
		// that does, an API key mapped to pro gets what everyone gets.
		ld.warnf(pf.key, "no policy gives limits per plan (a plans mapping in the policy), so the plans section has no effect: every request gets the same limits whatever its plan")
	}
	return set
}

// user reads the user section: the header in which a trusted proxy (an
// authentication proxy, or a gateway that asked one) names the request's
// user. It is believed only from client_ip's trusted proxies, so the
// section needs some.
func (ld *loader) user(f field, set *Set) {
	if f.val == nil {
		return
	}
	before := len(ld.probs)
	m := ld.fields(f.val, "user", "header")
	v, ok := m["header"]
	if !ok {
		// A misspelt header is reported as such, not as missing too.
		if len(ld.probs) == before {
			ld.errf(f.key, "user needs header, the header your authentication proxy names the user in, e.g. header: X-Auth-Request-User")
		}
		return
	}
	s, ok := ld.str(v.val, "user.header")
	if !ok || !ld.headerName(v.val, s) {
		return
	}
	c := textproto.CanonicalMIMEHeaderKey(s)
	switch {
	case c == set.resolver.Header():
		ld.errf(v.val, "user.header %s is the header client_ip reads the client address from; name the header your authentication proxy sets, e.g. X-Auth-Request-User", s)
		return
	case !set.resolver.TrustsAny():
		ld.errf(v.val, "user.header %s is believed only from client_ip.trusted_proxies, and the file trusts no proxy, so no request would have a user; list the addresses of the proxy that sets it", s)
		return
	case credential(c):
		ld.errf(v.val, "user.header %s is a credential clients send: sluice serve believes user.header only from client_ip.trusted_proxies and removes it from every other peer's request, so no client's %s would reach the upstream; name the header your authentication proxy writes the user's name in (X-Auth-Request-User for oauth2-proxy), or key by header:%s to limit each client's own", s, s, strings.ToLower(s))
		return
	}
	set.userHeader, ld.userAt = c, v.val
}

// credential reports whether a header, canonical, carries a client's
// credentials: the client sends it, and no authentication proxy writes a
// user's name or a plan in it. sluice serve removes the user and plan
// headers from the requests of all but trusted proxies, which would take
// these from every client.
func credential(c string) bool {
	return c == "Authorization" || c == "Proxy-Authorization" || c == "Cookie"
}

// proxyHeaders refuses a user.header or plans.header that clients send
// too: plans.api_key_header, or a header a policy reads from every
// client. sluice serve believes the user and plan headers only from
// client_ip's trusted proxies and removes them from every other request
// (see Set.UserOf), so the upstream would never get a client's API key;
// and a policy that reads one from every client reads what a client
// likes, where the user or plan is believed only from a proxy.
func (ld *loader) proxyHeaders(set *Set) {
	for _, h := range []struct {
		field, name, proxy, example, instead string
		at                                   *yaml.Node
	}{
		{"user.header", set.userHeader, "authentication proxy", "X-Auth-Request-User", "key by user, or match authenticated, which read it as believed", ld.userAt},
		{"plans.header", set.plans.header, "gateway", "X-Plan", "give the policy limits per plan (a plans mapping), which reads it as believed", ld.planAt},
	} {
		if h.name == "" || h.at == nil {
			continue
		}
		if h.name == set.plans.keyHdr && ld.keyHdrAt != nil {
			ld.errf(h.at, "%s %s is also plans.api_key_header (line %d), which clients send: sluice serve believes %s only from client_ip.trusted_proxies and removes it from every other peer's request, so no client's %s would reach the upstream; name a header only your %s sets, e.g. %s",
				h.field, h.at.Value, ld.keyHdrAt.Line, h.field, h.at.Value, h.proxy, h.example)
			continue
		}
		if i := slices.IndexFunc(ld.reads, func(r headerRead) bool { return r.name == h.name }); i >= 0 {
			r := ld.reads[i]
			ld.errf(h.at, "%s %s is also read from every client by %s (line %d), and so takes any client's word for it: sluice serve believes %s only from client_ip.trusted_proxies and removes it from every other peer's request, so the upstream never sees what the policy read; %s",
				h.field, h.at.Value, r.policy, r.at.Line, h.field, h.instead)
		}
	}
}

// userWarnings warns of a user section no policy reads, and gives the
// policies that read the user a warning for sluice serve when nothing
// names the user there: every request it serves is anonymous.
func (ld *loader) userWarnings(f map[string]field, set *Set, pv field, readers []string) {
	if uf, ok := f["user"]; ok && set.userHeader != "" && len(readers) == 0 {
		ld.warnf(uf.key, "no policy keys by user or matches authenticated, so the user section has no effect")
	}
	if set.userHeader != "" || len(readers) == 0 {
		return
	}
	what := "policy " + readers[0] + " keys by user or matches authenticated"
	if len(readers) > 1 {
		what = "policies " + andList(readers) + " key by user or match authenticated"
	}
	set.serveWarnings = append(set.serveWarnings, Problem{File: ld.file, Line: pv.key.Line, Column: pv.key.Column,
		Message: what + ", but the file has no user section: under sluice serve every request is anonymous (authenticated: false matches all of them, user keys none); " +
			"add user: {header: NAME}, the header your authentication proxy names the user in (X-Auth-Request-User for oauth2-proxy), sent by a proxy in client_ip.trusted_proxies"})
}

func (ld *loader) clientIP(f field) *clientip.Resolver {
	var o clientip.Options
	var trustedAt []*yaml.Node // where each of o.TrustedProxies is written
	if f.val != nil {
		m := ld.fields(f.val, "client_ip", "trusted_proxies", "trust_unix_sockets", "header", "ipv4_prefix", "ipv6_prefix")
		if v, ok := m["trusted_proxies"]; ok {
			for _, n := range ld.list(v.val, "trusted_proxies") {
				s, ok := ld.str(n, "a trusted proxy")
				if !ok {
					continue
				}
				p, err := netip.ParsePrefix(s)
				if err != nil {
					a, aerr := netip.ParseAddr(s)
					if aerr != nil {
						ld.errf(n, "trusted proxy %q is neither a CIDR prefix (10.0.0.0/8) nor an address", s)
						continue
					}
					p = netip.PrefixFrom(a, a.BitLen())
				}
				if err := clientip.CheckTrusted(p); err != nil {
					ld.errf(n, "%v", err) // at its line, not the section's
					continue
				}
				o.TrustedProxies = append(o.TrustedProxies, p)
				trustedAt = append(trustedAt, n)
			}
		}
		if v, ok := m["trust_unix_sockets"]; ok {
			o.TrustNonIP, _ = ld.boolean(v.val, "trust_unix_sockets")
		}
		if v, ok := m["header"]; ok {
			o.Header, _ = ld.str(v.val, "header")
			// Placed here, at the header's line, rather than at the
			// section's when clientip.New refuses it.
			if _, err := clientip.New(clientip.Options{Header: o.Header}); err != nil {
				ld.errf(v.val, "client_ip.header: %v", err)
				o.Header = ""
			}
		}
		if v, ok := m["ipv4_prefix"]; ok {
			n, _ := ld.integer(v.val, "ipv4_prefix", 8, 32)
			o.IPv4Prefix = int(n)
		}
		if v, ok := m["ipv6_prefix"]; ok {
			n, _ := ld.integer(v.val, "ipv6_prefix", 16, 128)
			o.IPv6Prefix = int(n)
		}
	}
	r, err := clientip.New(o)
	if err != nil {
		ld.errf(f.val, "client_ip: %v", err)
		r, _ = clientip.New(clientip.Options{})
	}
	for i, p := range o.TrustedProxies {
		if broad(p) {
			ld.warnf(trustedAt[i], "trusted proxy %s spans much of the Internet: a client in it can send %s with any address and be counted as that one, a fresh ip key every request; list only your proxies' addresses", p, r.Header())
		}
	}
	return r
}

// broad reports whether a trusted proxy prefix spans more public
// addresses than any one operator's proxies hold: shorter than a /8 of
// IPv4 or a /16 of IPv6, and not private or link-local.
func broad(p netip.Prefix) bool {
	p = p.Masked()
	bits, a := p.Bits(), p.Addr()
	if a.Is4In6() && bits >= 96 {
		a, bits = a.Unmap(), bits-96
	}
	// Private or link-local from its first address to its last: a prefix
	// that starts in 10/8 and is wider (10.0.0.0/7) also holds the public
	// 11.0.0.0/8.
	last := lastAddr(a, bits)
	if a.IsPrivate() && last.IsPrivate() || a.IsLinkLocalUnicast() && last.IsLinkLocalUnicast() {
		return false
	}
	return a.Is4() && bits < 8 || !a.Is4() && bits < 16
}

// lastAddr returns the last address of the prefix of a (masked) of bits.
func lastAddr(a netip.Addr, bits int) netip.Addr {
	b := a.AsSlice()
	for i := range b {
		if keep := bits - 8*i; keep < 8 {
			b[i] |= byte(0xff >> max(keep, 0))
		}
	}
	last, _ := netip.AddrFromSlice(b)
	return last
}

// plans reads the plans section. Its header, like the user section's, is
// believed only from client_ip's trusted proxies (see Set.planOf), so it
// needs some; resolver is the file's client_ip.
func (ld *loader) plans(f field, resolver *clientip.Resolver) plans {
	var pl plans
	if f.val == nil {
		return pl
	}
	m := ld.fields(f.val, "plans", "names", "default", "header", "api_key_header", "api_keys")
	pl.names = map[string]bool{}
	names, ok := m["names"]
	if !ok {
		ld.errf(f.key, "plans needs a names list, e.g. names: [free, pro]")
	} else {
		for _, n := range ld.list(names.val, "plans.names") {
			if s, ok := ld.str(n, "a plan name"); ok {
				if !validName(s) {
					ld.errf(n, "plan name %q must be lower-case letters, digits, - and _", s)
				}
				if !pl.names[s] {
					pl.list = append(pl.list, s)
				}
				pl.names[s] = true
			}
		}
	}
	known := func(n *yaml.Node, what string) (string, bool) {
		s, ok := ld.str(n, what)
		if !ok {
			return "", false
		}
		if !pl.names[s] {
			ld.errf(n, "%s %q is not in plans.names%s", what, s, didYouMean(s, keys(pl.names)))
			return "", false
		}
		return s, true
	}
	if v, ok := m["default"]; ok {
		pl.fallback, _ = known(v.val, "default plan")
	}
	if v, ok := m["header"]; ok {
		if s, ok := ld.str(v.val, "plans.header"); ok && ld.headerName(v.val, s) {
			c := textproto.CanonicalMIMEHeaderKey(s)
			switch {
			case c == resolver.Header():
				ld.errf(v.val, "plans.header %s is the header client_ip reads the client address from; name the header your gateway names the plan in, e.g. X-Plan", s)
			case !resolver.TrustsAny():
				ld.errf(v.val, "plans.header %s is believed only from client_ip.trusted_proxies, and the file trusts no proxy, so no request would have a plan from it; list the addresses of the proxy that sets it", s)
			case credential(c):
				ld.errf(v.val, "plans.header %s is a credential clients send: sluice serve believes plans.header only from client_ip.trusted_proxies and removes it from every other peer's request, so no client's %s would reach the upstream; name the header your gateway writes the plan in, e.g. X-Plan, or choose plans by API key with plans.api_key_header and plans.api_keys", s, s)
			default:
				pl.header, pl.headerLower, ld.planAt = c, strings.ToLower(s), v.val
			}
		}
	}
	if v, ok := m["api_key_header"]; ok {
		if s, ok := ld.str(v.val, "plans.api_key_header"); ok && ld.headerName(v.val, s) {
			pl.keyHdr, pl.keyLower, ld.keyHdrAt = textproto.CanonicalMIMEHeaderKey(s), strings.ToLower(s), v.val
		}
	}
	if v, ok := m["api_keys"]; ok {
		if pl.keyHdr == "" {
			ld.errf(v.key, "plans.api_keys needs plans.api_key_header, the header that carries the key")
		}
		pl.keys = map[string]string{}
		km := resolve(v.val)
		if km.Kind != yaml.MappingNode {
			ld.errf(km, "plans.api_keys must map each API key to a plan")
		} else {
			seen := map[string]int{} // API key to its line
			for i := 0; i+1 < len(km.Content); i += 2 {
				k, _ := ld.str(km.Content[i], "an API key")
				// The key itself is a secret: say where, not what.
				if line, dup := seen[k]; dup {
					ld.errf(km.Content[i], "API key repeated (first at line %d)", line)
					continue
				}
				seen[k] = km.Content[i].Line
				if plan, ok := known(resolve(km.Content[i+1]), "plan"); ok {
					pl.keys[k] = plan
				}
			}
		}
	}
	return pl
}

// paths reads the paths section: which spellings of a path the
// application serves as the path itself.
func (ld *loader) paths(f field) pathForms {
	var o pathForms
	if f.val == nil {
		return o
	}
	m := ld.fields(f.val, "paths", "ignore_case", "ignore_trailing_slash", "ignore_path_parameters", "decode_slash")
	if v, ok := m["ignore_case"]; ok {
		o.FoldCase, _ = ld.boolean(v.val, "ignore_case")
	}
	if v, ok := m["ignore_trailing_slash"]; ok {
		o.trailingSlash, _ = ld.boolean(v.val, "ignore_trailing_slash")
	}
	if v, ok := m["ignore_path_parameters"]; ok {
		o.StripParams, _ = ld.boolean(v.val, "ignore_path_parameters")
	}
	if v, ok := m["decode_slash"]; ok {
		o.DecodeSlash, _ = ld.boolean(v.val, "decode_slash")
	}
	return o
}

func (ld *loader) headerName(n *yaml.Node, s string) bool {
	if !validToken(s) {
		ld.errf(n, "%q is not a valid header name", s)
		return false
	}
	return true
}

func (ld *loader) concurrency(f field) Concurrency {
	c := Concurrency{Shares: [numPriorities]int{50, 80, 100}, RetryAfter: time.Second}
	if f.val == nil {
		return c
	}
	m := ld.fields(f.val, "concurrency", "max_in_flight", "shares", "retry_after")
	if v, ok := m["max_in_flight"]; ok {
		n, _ := ld.integer(v.val, "max_in_flight", 1, 1<<30)
		c.MaxInFlight = int(n)
	} else {
		ld.errf(f.key, "concurrency needs max_in_flight, the number of requests that may be in flight at once")
	}
	if v, ok := m["retry_after"]; ok {
		if d, ok := ld.duration(v.val, "retry_after"); ok {
			c.RetryAfter = max(d, time.Second)
		}
	}
	if v, ok := m["shares"]; ok {
		sm := ld.fields(v.val, "concurrency.shares", priorityNames[:]...)
		for p, name := range priorityNames {
			sv, ok := sm[name]
			if !ok {
				continue
			}
			s := strings.TrimSuffix(strings.TrimSpace(sv.val.Value), "%")
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 100 {
				ld.errf(sv.val, "share of %s must be a percentage from 1%% to 100%%, not %q", name, sv.val.Value)
				continue
			}
			c.Shares[p] = n
		}
		for p := 1; p < len(c.Shares); p++ {
			if c.Shares[p] < c.Shares[p-1] {
				ld.errf(v.val, "shares must not decrease with priority: %s has %d%%, %s %d%%",
					priorityNames[p-1], c.Shares[p-1], priorityNames[p], c.Shares[p])
			}
		}
	}
	return c
}

var policyFields = []string{"name", "match", "key", "keys", "fold_key", "limits", "plans", "overrides", "cost", "shadow", "on_store_error", "max_delay", "priority"}

// policy compiles one policy, or returns nil if it has no usable name.
func (ld *loader) policy(n *yaml.Node, set *Set) *Policy {
	what := fmt.Sprintf("policy at line %d", n.Line)
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "name" {
				what = fmt.Sprintf("policy %q", resolve(n.Content[i+1]).Value)
			}
		}
	}
	before := len(ld.probs)
	f := ld.fields(n, what, policyFields...)
	if f == nil {
		return nil
	}
	// A misspelt field is reported as such; do not also report what its
	// absence leaves missing.
	misspelt := len(ld.probs) > before
	p := &Policy{Cost: 1, refusalLog: &logpace.Pacer{}}
	nv, ok := f["name"]
	if !ok {
		ld.errf(n, "%s has no name", what)
		return nil
	}
	if p.Name, ok = ld.str(nv.val, "name"); !ok {
		return nil
	}
	if !validName(p.Name) || len(p.Name) > 64 {
		ld.errf(nv.val, "policy name %q must be 1 to 64 lower-case letters, digits, - and _, starting with a letter or digit", p.Name)
	}
	p.keyHead = set.prefix + ":" + p.Name + ":"

	if v, ok := f["match"]; ok {
		p.match = ld.match(v.val, what, set.paths)
	}
	if v, ok := f["shadow"]; ok {
		p.Shadow, _ = ld.boolean(v.val, "shadow")
	}
	if v, ok := f["cost"]; ok {
		p.Cost, _ = ld.integer(v.val, "cost", 1, rate.MaxExact)
	}
	if v, ok := f["max_delay"]; ok {
		p.MaxDelay, _ = ld.duration(v.val, "max_delay")
	}
	if v, ok := f["on_store_error"]; ok {
		if s, ok := ld.str(v.val, "on_store_error"); ok {
			// fail_open and fail_closed, as sluice.FailureMode spells
			// them, are read too; error, which refuses nothing and
			// decides nothing, is no policy's.
			if m, err := sluice.ParseFailureMode(s); err == nil && m != sluice.FailError {
				p.OnStoreError = m
			} else {
				ld.errf(v.val, "on_store_error %q: want open, closed or local%s", s, didYouMean(s, []string{"open", "closed", "local"}))
			}
		}
	}
	if v, ok := f["priority"]; ok {
		if s, ok := ld.str(v.val, "priority"); ok {
			if i := slices.Index(priorityNames[:], s); i >= 0 {
				p.Priority, p.HasPriority = Priority(i), true
				if p.Shadow {
					ld.warnf(v.val, "%s is a shadow policy: its priority %s classifies nothing (a request's priority comes from the enforcing policies it matches); write the priority in an enforcing policy, which may have no limits", what, s)
				}
			} else {
				ld.errf(v.val, "priority %q: want low, normal or critical%s", s, didYouMean(s, priorityNames[:]))
			}
		}
	}

	if v, ok := f["fold_key"]; ok {
		p.foldKey, _ = ld.boolean(v.val, "fold_key")
	}

	keysAt, keyAt := ld.policyKeys(f, p, what)

	// Limits.
	if v, ok := f["limits"]; ok {
		p.limits = ld.limits(v.val, p, set)
	}
	if v, ok := f["plans"]; ok {
		ld.policyPlans(v, p, set, what)
	}
	if v, ok := f["overrides"]; ok {
		ld.policyOverrides(v, p, set, what)
	}
	_, hasLimits := f["limits"]
	_, hasPlans := f["plans"]
	_, hasOverrides := f["overrides"]
	if len(p.AllLimits()) == 0 {
		// Fields that are there but hold nothing (limits: [], plans and
		// overrides that are all [], or a template that left limits:
		// empty) leave the policy limiting nothing as surely as absent
		// ones, with no other problem to say so.
		empty := len(ld.probs) == before
		if !p.HasPriority && !misspelt && (!hasLimits && !hasPlans && !hasOverrides || empty) {
			ld.errf(n, "%s has no limits (write e.g. limits: [\"10/s burst 20\"]) and no priority", what)
		}
		p.keys = nil
	}
	if p.usesPath && p.match.mux == nil {
		ld.errf(n, "%s keys by a path wildcard but has no path pattern to take it from", what)
	}
	if len(p.keys) > 0 {
		ld.keyWarnings(p, what, keysAt, keyAt)
	}
	if fv, ok := f["fold_key"]; ok && p.foldKey && len(p.keys) > 0 && !slices.ContainsFunc(p.keys, func(k []part) bool {
		return slices.ContainsFunc(k, func(pt part) bool { return pt.fold })
	}) {
		ld.warnf(fv.key, "fold_key of %s has no effect: it folds user, header:, path: and form: parts, and its keys have none", what)
	}
	if pv, ok := f["plans"]; ok && len(p.plans) > 0 && len(p.limits) == 0 {
		ld.planWarnings(p, set, what, pv.key)
	}
	return p
}

// policyKeys compiles a policy's key, or its keys, into p.keys: by ip
// when it writes neither, as most policies mean. It returns where the keys
// are written (nil for that default) and where each is, for keyWarnings,
// which must wait for the policy's limits: a policy that limits nothing
// keeps no keys to warn of.
func (ld *loader) policyKeys(f map[string]field, p *Policy, what string) (at *yaml.Node, keyAt []*yaml.Node) {
	kv, hasKey := f["key"]
	ksv, hasKeys := f["keys"]
	switch {
	case hasKey && hasKeys:
		ld.errf(ksv.key, "%s has both key and keys; use key for one key, keys for several", what)
	case hasKeys:
		// A key listed twice would be decided twice on one counter, every
		// request taking its cost twice.
		seen := map[string]*yaml.Node{}
		if noItems(ksv.val) {
			ld.errf(ksv.key, "keys of %s lists no key, so the policy would decide nothing; write e.g. keys: [user, ip], or leave keys out to key by ip", what)
		}
		for _, kn := range ld.list(ksv.val, "keys") {
			if noItems(kn) {
				ld.errf(kn, "a key of %s has no parts, so it would decide nothing; write e.g. keys: [user, ip]", what)
				continue
			}
			k := ld.key(kn, p)
			if k == nil {
				continue
			}
			labels := make([]string, len(k))
			for i := range k {
				labels[i] = k[i].label
			}
			sig := strings.Join(labels, "|")
			if prev, dup := seen[sig]; dup {
				ld.errf(kn, "key [%s] repeated (first at line %d): it would count each request twice on one counter", strings.Join(labels, ", "), prev.Line)
				continue
			}
			seen[sig] = kn
			p.keys = append(p.keys, k)
			keyAt = append(keyAt, kn)
		}
	case hasKey:
		if noItems(kv.val) {
			// Left blank, as by a template: as surely as empty limits, the
			// policy would decide nothing.
			ld.errf(kv.key, "the key of %s has no parts, so the policy would decide nothing; write e.g. key: ip, or leave key out to key by ip", what)
		} else if k := ld.key(kv.val, p); k != nil {
			p.keys = append(p.keys, k)
			keyAt = append(keyAt, kv.val)
		}
	default:
		p.keys = [][]part{{{kind: partIP, label: "ip"}}}
	}
	if hasKeys {
		return ksv.key, keyAt
	}
	return kv.val, keyAt
}

// policyPlans compiles a policy's plans field, v, into p.plans: limits
// per plan, each plan checked against the file's plans section, which
// alone says where a request's plan comes from. A plan left empty is
// refused rather than read as unlimited, as only [] says that on purpose.
func (ld *loader) policyPlans(v field, p *Policy, set *Set, what string) {
	p.usesPlan = true
	if set.plans.names == nil {
		ld.errf(v.key, "%s gives limits per plan, but the file has no plans section to say where plans come from", what)
	}
	pm := resolve(v.val)
	if pm.Kind != yaml.MappingNode {
		ld.errf(pm, "plans of %s must map each plan to its limits", what)
		return
	}
	p.plans = map[string][]*Limit{}
	at := map[string]int{} // plan to its line
	for i := 0; i+1 < len(pm.Content); i += 2 {
		name, ok := ld.str(pm.Content[i], "a plan name")
		if !ok {
			continue
		}
		if line, dup := at[name]; dup {
			ld.errf(pm.Content[i], "plan %q repeated in %s (first at line %d)", name, what, line)
			continue
		}
		at[name] = pm.Content[i].Line
		if set.plans.names != nil && !set.plans.names[name] {
			ld.errf(pm.Content[i], "plan %q of %s is not in plans.names%s", name, what, didYouMean(name, keys(set.plans.names)))
		}
		ln := resolve(pm.Content[i+1])
		if isNull(ln) {
			// Left empty, as by a template: only [] says a plan is
			// meant to be unlimited.
			ld.errf(pm.Content[i], "plan %q of %s has no limits written: write its limits, or [] to leave the plan unlimited by this policy on purpose", name, what)
			continue
		}
		p.plans[name] = ld.limits(ln, p, set)
	}
}

// policyOverrides compiles a policy's overrides field, v, into
// p.overrides, in the order of the file: a key takes the limits of the
// first override that names it, so one that a previous override already
// covers would never apply, and is refused as a mistake.
func (ld *loader) policyOverrides(v field, p *Policy, set *Set, what string) {
	var at []*yaml.Node // where each of p.overrides is written
	// Each of p.overrides by its when (see whenKey), so that finding
	// the overrides o is within takes a look-up per subset of o's
	// parts, not a comparison with every earlier override.
	byWhen := map[string]int{}
	for _, on := range ld.list(v.val, "overrides") {
		o, ok := ld.override(on, p, set, what)
		if !ok {
			continue
		}
		// A key takes the limits of the first override that names it
		// (see limitsFor): one after an override that asks less of a
		// key, as a repeated one does, would never apply.
		if j := o.firstWithin(byWhen); j >= 0 {
			ld.errf(on, "override never applies: every key it names is named by the override at line %d, which comes first, with the same values as keys hold them; merge the two", at[j].Line)
			continue
		}
		byWhen[whenKey(o.when)] = len(p.overrides)
		p.overrides = append(p.overrides, o)
		at = append(at, on)
	}
}

// planWarnings warns of the requests a policy with limits per plan and no
// default limits leaves unlimited: those on a plan it does not list, and
// those with no plan when nothing gives them one (no plans.default). A
// plan listed with no limits (pro: []) is unlimited on purpose.
func (ld *loader) planWarnings(p *Policy, set *Set, what string, at *yaml.Node) {
	var gaps []string
	for _, name := range set.plans.list {
		if _, ok := p.plans[name]; ok {
			continue
		}
		g := fmt.Sprintf("plan %q", name)
		if name == set.plans.fallback {
			g += " (plans.default)"
		}
		gaps = append(gaps, g)
	}
	fixes := []string{"give it default limits (limits: beside plans)"}
	if len(gaps) > 0 {
		fixes = append(fixes, "list every plan (an empty list, [], leaves a plan unlimited on purpose)")
	}
	if set.plans.fallback == "" {
		gaps = append(gaps, "requests with no plan (plans has no default)")
		fixes = append(fixes, "set plans.default")
	}
	if len(gaps) == 0 {
		return
	}
	ld.warnf(at, "%s has no default limits and none for %s: those requests are not limited by it; %s", what, andList(gaps), strings.Join(fixes, ", or "))
}

// keyWarnings warns of the keys of a policy that may not apply to a
// request it matches. A key applies only when the request has every part
// of it (see appendPart): ip, method and global always, user when the
// match requires authenticated: true, header:NAME when the match requires
// the header present, path:NAME when the pattern's wildcard cannot be
// empty, and form:NAME never for sure. A key the match rules out never
// applies; a policy none of whose keys is sure to apply lets requests
// without their parts through unlimited, unless another policy limits
// them: that warning waits for lackingWarnings. at is where the keys are
// written, keyAt where each is.
func (ld *loader) keyWarnings(p *Policy, what string, at *yaml.Node, keyAt []*yaml.Node) {
	var lacking []string // per key that may not apply, the parts it needs
	var hints []string
	dead, sure := 0, false
	for i, k := range p.keys {
		var may []string
		never := ""
		for _, pt := range k {
			has, why := p.match.guarantees(pt)
			switch {
			case why != "":
				never = why
			case !has:
				may = append(may, pt.label)
				switch pt.kind {
				case partUser:
					hints = appendNew(hints, "match authenticated: true if only signed-in requests are meant")
				case partHeader:
					hints = appendNew(hints, fmt.Sprintf("match headers: [{name: %s, present: true}] if only requests that carry it are meant", pt.name))
				case partPath:
					hints = appendNew(hints, fmt.Sprintf("{%s...} is empty when the path ends where it begins", pt.name))
				}
			}
			if never != "" {
				break
			}
		}
		switch {
		case never != "":
			dead++
			msg := fmt.Sprintf("key %s of %s never applies: %s", keyLabel(k), what, never)
			if dead == len(p.keys) {
				msg += ", so the policy limits nothing"
			}
			ld.warnf(keyAt[i], "%s", msg)
		case len(may) == 0:
			sure = true // a key that always applies: every request is limited
		default:
			lacking = append(lacking, strings.Join(may, " or "))
		}
	}
	if sure || len(lacking) == 0 {
		return
	}
	labels := make([]string, len(p.keys))
	for i, k := range p.keys {
		labels[i] = keyLabel(k)
	}
	// keys: gives every key the policy's limits; a policy of its own
	// gives the address limits of its own (a login allowed 5 tries per
	// account and 20 per address).
	msg := fmt.Sprintf("%s does not limit requests without %s: a key with a part the request lacks does not apply, and its match does not guarantee the part; add an ip key beside it, as in keys: [%s, ip], for the same limits per address, or a policy keyed by ip that matches the same requests, for limits of its own",
		what, andList(lacking), strings.Join(labels, ", "))
	if len(hints) > 0 {
		msg += "; or " + strings.Join(hints, "; or ")
	}
	ld.lacking = append(ld.lacking, lackingKeys{p: p, at: at, msg: msg})
}

// lackingKeys is a warning of keyWarnings waiting for lackingWarnings.
type lackingKeys struct {
	p   *Policy
	at  *yaml.Node
	msg string
}

// lackingWarnings gives the warnings keyWarnings held, but for a policy
// whose requests another one limits, each of them: an enforcing policy
// with limits whatever the plan, whose match takes in every request the
// first matches, and with a key sure to apply to each (see limitsEvery).
// A login keyed by form:username beside a policy on the same route keyed
// by ip is limited both ways, each with limits of its own, and a request
// without the field is limited by ip.
func (ld *loader) lackingWarnings(set *Set) {
	for _, l := range ld.lacking {
		if !slices.ContainsFunc(set.policies, func(q *Policy) bool { return q != l.p && q.limitsEvery(l.p, set) }) {
			ld.warnf(l.at, "%s", l.msg)
		}
	}
	ld.lacking = nil
}

// limitsEvery reports whether q limits every request p matches, as far
// as the file shows it: it may say no of a policy that does (one whose
// path is a subtree of p's, say), never yes of one that does not. q must
// enforce (not shadow), have limits for every plan (default limits, or
// limits for each plan and a plans.default, none of them []), match every
// request p matches (every method, header condition and authentication
// it asks is one p asks too, and its host and path are p's or none), and
// have a key sure to apply, by q's match or p's.
func (q *Policy) limitsEvery(p *Policy, set *Set) bool {
	if q.Shadow || len(q.keys) == 0 {
		return false
	}
	for _, ls := range q.plans {
		if len(ls) == 0 {
			return false
		}
	}
	if len(q.limits) == 0 && (len(q.plans) == 0 || set.plans.fallback == "" ||
		slices.ContainsFunc(set.plans.list, func(name string) bool { _, ok := q.plans[name]; return !ok })) {
		return false
	}
	qm, pm := &q.match, &p.match
	if len(qm.methods) > 0 && (len(pm.methods) == 0 ||
		slices.ContainsFunc(pm.methods, func(m string) bool { return !methodIn(m, qm.methods) })) {
		return false
	}
	if qm.auth != 0 && qm.auth != pm.auth {
		return false
	}
	for _, qc := range qm.headers {
		if !slices.ContainsFunc(pm.headers, func(pc headerCond) bool {
			return pc.lower == qc.lower && pc.present == qc.present && (qc.equals == "" || pc.equals == qc.equals)
		}) {
			return false
		}
	}
	if qm.mux != nil && (pm.mux == nil || pm.pattern != qm.pattern) {
		return false
	}
	return slices.ContainsFunc(q.keys, func(k []part) bool {
		return !slices.ContainsFunc(k, func(pt part) bool {
			bq, _ := qm.guarantees(pt)
			bp, _ := pm.guarantees(pt)
			return !bq && !bp
		})
	})
}

// guarantees reports whether every request m matches has part pt, or why
// none does.
func (m *matcher) guarantees(pt part) (sure bool, never string) {
	switch pt.kind {
	case partUser:
		switch m.auth {
		case 1:
			return true, ""
		case -1:
			return false, "the policy matches only anonymous requests (authenticated: false), which have no user"
		}
	case partHeader:
		for _, c := range m.headers {
			if c.lower != pt.lower {
				continue
			}
			if !c.present {
				return false, fmt.Sprintf("the policy matches only requests without %s (present: false)", c.name)
			}
			return true, ""
		}
	case partPath:
		// ServeMux gives {name} a segment of at least one byte, and
		// {name...} the rest of the path, which may be empty.
		return !strings.Contains(m.pattern, "{"+pt.name+"...}"), ""
	case partForm:
	default: // ip, method and global: every request has them
		return true, ""
	}
	return false, ""
}

// keyLabel writes a key as in the file: a part, or [a, b] for several.
func keyLabel(k []part) string {
	if len(k) == 1 {
		return k[0].label
	}
	labels := make([]string, len(k))
	for i := range k {
		labels[i] = k[i].label
	}
	return "[" + strings.Join(labels, ", ") + "]"
}

// andList joins items as "a", "a and b", "a, b and c".
func andList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// match compiles a match: a ServeMux pattern string, or a mapping. Its
// path is registered in the forms the file's paths section gives it.
func (ld *loader) match(n *yaml.Node, what string, forms pathForms) matcher {
	var m matcher
	var r writtenRoute
	if n.Kind == yaml.ScalarNode {
		var ok bool
		if m.methods, r, ok = ld.matchPattern(n); !ok {
			return m
		}
	} else {
		m, r = ld.matchFields(n, what)
	}
	if r.pathAt == nil {
		return m
	}
	ld.compileRoute(&m, r, forms)
	return m
}

// writtenRoute is the host and path a match writes, with where each is
// written: both forms of match come to this, which compileRoute turns
// into the policy's mux, so the two read the same and report alike.
type writtenRoute struct {
	host, path     string
	hostAt, pathAt *yaml.Node // pathAt nil: every host and path
}

// matchPattern reads a match written as a ServeMux pattern, "METHOD
// host/path", into its method, if it has one, and its route. It returns
// false, having said why, for a pattern that has no route to compile.
func (ld *loader) matchPattern(n *yaml.Node) (methods []string, r writtenRoute, ok bool) {
	s := strings.TrimSpace(n.Value)
	// A method ends at a space or a tab, as ServeMux reads patterns:
	// cut at a space alone, "POST\t/login" would name a host "POST\t"
	// and match no request.
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		method, rest := s[:i], s[i+1:]
		switch {
		case !validToken(method):
			ld.errf(n, "invalid method %q in pattern %q", method, s)
		case strings.ToUpper(method) != method:
			// Methods are case-sensitive: "post /login" would match
			// no POST, and limit nothing.
			ld.errf(n, "method %q in pattern %q must be upper case, as in %q", method, s, strings.ToUpper(method)+" "+strings.TrimSpace(rest))
		}
		methods = []string{method}
		s = strings.TrimSpace(rest)
	}
	r.host, r.path, _ = strings.Cut(s, "/")
	r.path = "/" + r.path
	if !strings.Contains(s, "/") {
		ld.errf(n, "pattern %q has no path; write e.g. \"GET /search\" or \"api.example.com/\"", n.Value)
		return methods, r, false
	}
	r.pathAt, r.hostAt = n, n
	lead := ""
	if len(methods) > 0 {
		lead = methods[0] + " "
	}
	if msg := foreignPattern(lead, s); msg != "" {
		ld.errf(n, "pattern %q%s", strings.TrimSpace(n.Value), msg)
		return methods, r, false
	}
	return methods, r, true
}

// matchFields reads a match written as a mapping: the conditions on
// methods, headers and authentication, which the matcher checks itself,
// and the route, which compileRoute compiles. A path or host that cannot
// be one is reported and left out of the route.
func (ld *loader) matchFields(n *yaml.Node, what string) (m matcher, r writtenRoute) {
	f := ld.fields(n, "match of "+what, "path", "methods", "host", "headers", "authenticated")
	if v, ok := f["path"]; ok {
		r.path, _ = ld.str(v.val, "path")
		r.pathAt = v.val
		if msg := foreignPattern("", r.path); msg != "" {
			ld.errf(v.val, "path %q%s", r.path, msg)
			r.path = ""
		} else if !strings.HasPrefix(r.path, "/") {
			if i := strings.IndexByte(r.path, ' '); i > 0 {
				ld.errf(v.val, "path %q must start with /; put the method in methods: [%s]", r.path, r.path[:i])
			} else {
				ld.errf(v.val, "path %q must start with /", r.path)
			}
			r.path = ""
		}
	}
	if v, ok := f["host"]; ok {
		r.host, _ = ld.str(v.val, "host")
		r.hostAt = v.val
		if strings.ContainsAny(r.host, "/ ") {
			ld.errf(v.val, "host %q must be a host name such as api.example.com", r.host)
			r.host = ""
		}
		if r.pathAt == nil {
			r.pathAt = v.val
		}
	}
	if v, ok := f["methods"]; ok {
		m.methods = ld.methods(v.val)
	}
	if v, ok := f["authenticated"]; ok {
		if b, ok := ld.boolean(v.val, "authenticated"); ok {
			m.auth = -1
			if b {
				m.auth = 1
			}
		}
	}
	if v, ok := f["headers"]; ok {
		m.headers = ld.headerConds(v.val, what)
	}
	return m, r
}

// methods reads a match's list of methods. ServeMux compares methods as
// written, so one that is no token, or not upper case, would match no
// request: each is refused and left out.
func (ld *loader) methods(n *yaml.Node) []string {
	var methods []string
	for _, mn := range ld.list(n, "methods") {
		if s, ok := ld.str(mn, "a method"); ok {
			switch {
			case !validToken(s):
				ld.errf(mn, "%q is not a method: a method is one token, such as GET, POST or PURGE, with no spaces or separators", s)
				continue
			case strings.ToUpper(s) != s:
				ld.errf(mn, "method %q must be upper case, as in %s", s, strings.ToUpper(s))
				continue
			}
			methods = append(methods, s)
		}
	}
	return methods
}

// headerConds reads a match's list of header conditions. Each header is
// noted among those the policies read from every client (see
// proxyHeaders), and checked against the conditions before it, with which
// it may leave the policy matching nothing (see contradicts).
func (ld *loader) headerConds(n *yaml.Node, what string) []headerCond {
	var conds []headerCond
	var condAt []*yaml.Node // where each of conds is written
	for _, hn := range ld.list(n, "headers") {
		hf := ld.fields(hn, "a header condition", "name", "present", "equals")
		if hf == nil {
			continue
		}
		var c headerCond
		nf, ok := hf["name"]
		if !ok {
			ld.errf(hn, "a header condition needs a name")
			continue
		}
		name, _ := ld.str(nf.val, "name")
		if !ld.headerName(nf.val, name) {
			continue
		}
		c.name, c.lower, c.present = textproto.CanonicalMIMEHeaderKey(name), strings.ToLower(name), true
		if c.name == "Host" {
			ld.errf(nf.val, "header condition on %s: %s", name, hostNotHeader)
			continue
		}
		pv, hasPresent := hf["present"]
		ev, hasEquals := hf["equals"]
		switch {
		case hasPresent == hasEquals:
			ld.errf(hn, "header condition on %s needs exactly one of present: true|false or equals: VALUE", name)
			continue
		case hasPresent:
			c.present, _ = ld.boolean(pv.val, "present")
		default:
			c.equals, _ = ld.str(ev.val, "equals")
			switch {
			case c.equals == "":
				ld.errf(ev.val, "equals needs a value; to test that %s is present, write present: true", name)
			case strings.Trim(c.equals, " \t") != c.equals:
				// As for an override's value: it would equal no value.
				ld.errf(ev.val, "equals %q begins or ends with a space or tab, which a header's value never does (they are trimmed), so it would match no request; write %q", c.equals, strings.Trim(c.equals, " \t"))
			}
		}
		ld.reads = append(ld.reads, headerRead{c.name, what, nf.val})
		ld.contradicts(c, hn, conds, condAt, what)
		conds = append(conds, c)
		condAt = append(condAt, hn)
	}
	return conds
}

// compileRoute registers r in m's own ServeMux, in the forms the file's
// paths section gives it. Hosts and paths that ServeMux would take but
// no request could match (a wildcard or non-ASCII host, a port, a query
// string, a path parameter the paths section cuts off) are refused here,
// whichever form of match wrote them, and leave m without a mux.
func (ld *loader) compileRoute(m *matcher, r writtenRoute, forms pathForms) {
	host, path := r.host, r.path
	hostNode, pathNode := r.hostAt, r.pathAt
	if path == "" {
		path = "/"
	}
	// ServeMux compares a pattern's host as written: *.example.com
	// would match only a request that names that very host.
	if strings.Contains(host, "*") {
		ld.errf(hostNode, "host %q has a *: a host is matched as written, with no wildcards, so it would match no request it names; leave the host out to match every host, or write a policy for each", host)
		return
	}
	// Clients send an internationalized name in its ASCII form
	// (xn--bcher-kva.example for bücher.example), which is what a request's
	// host is compared with.
	if i := strings.IndexFunc(host, func(r rune) bool { return r >= utf8.RuneSelf }); i >= 0 {
		ld.errf(hostNode, "host %q is not ASCII: clients send an internationalized name in its ASCII form (punycode, xn--…), so it would match no request; write that form", host)
		return
	}
	// Requests are matched by their host in lower case, without a final
	// dot (see routedHost); so is the pattern. ServeMux matches a request
	// by its host without the port: a pattern's port would match none.
	if name, port, bracketed := splitHost(host); port != "" {
		if bracketed {
			name = "[" + name + "]"
		}
		ld.errf(hostNode, "host %q has a port: a policy matches its host on every port, as the request's port is not compared; write %q", host, name)
		return
	}
	host, _ = routedHost(host)
	// A request's path holds neither its query string nor a fragment
	// (which no client sends): a pattern with a ? or a # would match only
	// a path that escapes it, never the requests it names.
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		ld.errf(pathNode, "path %q has a %c: patterns match the path alone, not the query string or a fragment, so it would match no request it names; write %q (a form:NAME key part reads a query parameter)", path, path[i], path[:i])
		return
	}
	if forms.StripParams && strings.Contains(path, ";") {
		ld.errf(pathNode, "path %q has a ;, and paths.ignore_path_parameters cuts every ; off requests' paths, with the rest of its segment: it would match no request", path)
		return
	}
	if forms.DecodeSlash && (strings.Contains(path, "%2F") || strings.Contains(path, "%2f")) {
		ld.errf(pathNode, "path %q has an escaped slash, and paths.decode_slash reads every %%2F in requests' paths as /: it would match no request; write / instead", path)
		return
	}
	if forms.FoldCase {
		path = foldLiterals(path) // as requests' paths are
	}
	patterns := []string{host + path}
	if alt, ok := slashForm(path); ok && forms.trailingSlash {
		patterns = append(patterns, host+alt)
	}
	mux, mk, err := newMux(patterns...)
	if err != nil {
		ld.errf(pathNode, "%v", err)
		return
	}
	m.mux, m.marker, m.pattern = mux, mk, host+path
}

// patternSyntax names the syntax of patterns, for messages on patterns
// written in another's.
const patternSyntax = "patterns are net/http ServeMux patterns: a path ending in / is a subtree, {name} one segment, {name...} the rest of the path"

// foreignPattern returns why pattern, a host and path as written in the
// file, is in the syntax of another router (a glob, Express's :id, Flask's
// <id>, a regular expression) and what to write instead, with lead (a
// method and a space, or "") before it; or "". ServeMux takes each of
// these for literal text, which no request the author meant has, so the
// policy would load and limit nothing. A literal * or : is all but unheard
// of in a path; one written escaped (%2A, %3A) passes.
func foreignPattern(lead, pattern string) string {
	if regexpLike(pattern) {
		// The literal text before the first operator, up to a /, is
		// what the expression can only mean.
		r := strings.TrimSuffix(strings.TrimPrefix(pattern, "^"), "$")
		i := strings.IndexAny(r, `*+?[](){}|\`)
		if i < 0 {
			if strings.HasSuffix(r, "/") {
				r += "{$}" // that path alone, as the $ said
			}
			return fmt.Sprintf(" is a regular expression, which a pattern is not: there ^ would be read as a host, and . * $ \\ as themselves, so it would match none of the requests meant; write %q (%s)", lead+r, patternSyntax)
		}
		j := strings.LastIndexByte(r[:i], '/')
		if j < 0 {
			return fmt.Sprintf(" is a regular expression, which a pattern is not: there ^ would be read as a host, and . * $ \\ as themselves, so it would match none of the requests meant; %s", patternSyntax)
		}
		under := r[:j+1]
		return fmt.Sprintf(" is a regular expression, which a pattern is not: there ^ would be read as a host, and . * $ \\ as themselves, so it would match none of the requests meant; write %q for everything under %s (%s)", lead+under, pathOf(under), patternSyntax)
	}
	slash := strings.IndexByte(pattern, '/')
	if slash < 0 {
		return ""
	}
	host, segs := pattern[:slash], strings.Split(pattern[slash+1:], "/")
	var first string // the first foreign segment, as written
	var kind byte    // its syntax: '*', ':', '<' or '}'
	subtree := false
	names := 0
	next := func() string { // a fresh wildcard name
		names++
		if names == 1 {
			return "name"
		}
		return "name" + strconv.Itoa(names)
	}
	for i, seg := range segs {
		var k byte
		switch {
		case strings.HasSuffix(seg, "}") && !strings.Contains(seg, "{"):
			// A wildcard missing its opening brace, {name...} written
			// name...}: ServeMux reads a segment without { as literal.
			k = '}'
			inner, dots := strings.TrimSuffix(seg, "}"), ""
			if strings.HasSuffix(inner, "...") {
				inner, dots = strings.TrimSuffix(inner, "..."), "..."
			}
			segs[i] = "{" + goName(inner, next) + dots + "}"
		case strings.ContainsAny(seg, "{}"):
			continue // ServeMux's own syntax, which it checks
		case strings.Contains(seg, "*"):
			k = '*'
			if i == len(segs)-1 && strings.Trim(seg, "*") == "" {
				segs[i], subtree = "", true // /api/* and /api/**: the subtree /api/
			} else {
				segs[i] = "{" + next() + "}"
			}
		case len(seg) > 1 && seg[0] == ':':
			k = ':'
			segs[i] = "{" + goName(seg[1:], next) + "}"
		case len(seg) > 2 && seg[0] == '<' && seg[len(seg)-1] == '>':
			k = '<'
			inner := seg[1 : len(seg)-1]
			inner = inner[strings.LastIndexByte(inner, ':')+1:] // <int:id> is id
			segs[i] = "{" + goName(inner, next) + "}"
		default:
			continue
		}
		if kind == 0 {
			first, kind = seg, k
		}
	}
	if kind == 0 {
		return ""
	}
	path := "/" + strings.Join(segs, "/")
	fixed := lead + host + path
	switch kind {
	case '*':
		if subtree {
			return fmt.Sprintf(": * is not a wildcard here, and matches only a literal *; write %q for everything under %s, or %q for one segment (%s; a literal * is written %%2A)", fixed, path, fixed+"{"+next()+"}", patternSyntax)
		}
		return fmt.Sprintf(": * is not a wildcard here, and matches only a literal *; a wildcard is a whole segment: write %q, where {name} matches any one (%s; a literal * is written %%2A)", fixed, patternSyntax)
	case ':':
		return fmt.Sprintf(": %s is not a wildcard here, and matches only a literal %s; write %q (%s; a literal : at the start of a segment is written %%3A)", first, first, fixed, patternSyntax)
	case '}':
		return fmt.Sprintf(": %s, without its opening brace, is not a wildcard here, and matches only a literal %s; write %q (%s; a literal } is written %%7D)", first, first, fixed, patternSyntax)
	}
	return fmt.Sprintf(": %s is not a wildcard here, and matches only a literal %s; write %q (%s; a literal < or > is written %%3C or %%3E)", first, first, fixed, patternSyntax)
}

// regexpLike reports whether a pattern is written as a regular
// expression: anchored (^, or a $ that is not ServeMux's {$}), or with .*,
// .+ or a backslash, none of which a path means literally.
func regexpLike(pattern string) bool {
	return strings.HasPrefix(pattern, "^") ||
		strings.HasSuffix(pattern, "$") && !strings.HasSuffix(pattern, "{$}") ||
		strings.Contains(pattern, ".*") || strings.Contains(pattern, ".+") ||
		strings.Contains(pattern, `\`)
}

// pathOf returns the path of a pattern's host and path.
func pathOf(pattern string) string {
	if i := strings.IndexByte(pattern, '/'); i >= 0 {
		return pattern[i:]
	}
	return pattern
}

// goName returns the name at the start of s (the id of id?, or of
// id(\d+)) if it can name a ServeMux wildcard, a Go identifier, else a
// fresh name from next.
func goName(s string, next func() string) string {
	end := strings.IndexFunc(s, func(r rune) bool {
		return !(r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	})
	if end >= 0 {
		s = s[:end]
	}
	if s == "" || '0' <= s[0] && s[0] <= '9' {
		return next()
	}
	return s
}

// contradicts warns of a header condition c, written at n, that no
// request can meet together with one of the conditions before it, conds
// (written at condAt): one asks for the header absent, the other for it
// with a value. The policy would match no request, and limit nothing.
func (ld *loader) contradicts(c headerCond, n *yaml.Node, conds []headerCond, condAt []*yaml.Node, what string) {
	for i, d := range conds {
		if d.lower == c.lower && d.present != c.present {
			ld.warnf(n, "header conditions of %s on %s contradict each other: %s here and %s at line %d, and no request has %s both with a value and without one, so the policy matches no request; drop one",
				what, d.name, condString(c), condString(d), condAt[i].Line, c.name)
			return
		}
	}
}

// condString writes a header condition as the file does.
func condString(c headerCond) string {
	switch {
	case c.equals != "":
		return "equals: " + c.equals
	case c.present:
		return "present: true"
	}
	return "present: false"
}

// foldLiterals returns a pattern's path with the ASCII letters outside
// its wildcards in lower case, escaped ones decoded (%4C is l), as
// requests' paths are: {userID} names a wildcard as written.
func foldLiterals(path string) string {
	b := make([]byte, 0, len(path))
	depth := 0
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case c == '{':
			depth++
		case c == '}' && depth > 0:
			depth--
		case depth > 0:
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case c == '%' && i+2 < len(path):
			if d, ok := urlpath.Unhex(path[i+1], path[i+2]); ok && isLetter(d) {
				c, i = d|0x20, i+2
			}
		}
		b = append(b, c)
	}
	return string(b)
}

// isLetter reports whether c is an ASCII letter.
func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// slashForm returns a pattern's path in its other form, with or without a
// final slash, for paths.ignore_trailing_slash: /login gives /login/{$}
// (that path alone), /api/ (a subtree) and /api/{$} give /api, and
// /files/{rest...}, which matches /files/ and below, gives /files. The
// root has no other form.
func slashForm(path string) (string, bool) {
	switch {
	case path == "/" || path == "/{$}":
		return "", false
	case strings.HasSuffix(path, "/{$}"):
		return strings.TrimSuffix(path, "/{$}"), true
	case strings.HasSuffix(path, "/"):
		return strings.TrimSuffix(path, "/"), true
	case strings.HasSuffix(path, "...}"):
		i := strings.LastIndexByte(path, '/')
		if i <= 0 {
			return "", false
		}
		return path[:i], true
	}
	return path + "/{$}", true
}

// maxKeyParts bounds the parts one key combines. The Enforcer keeps the
// value spans of a key's parts, which overrides compare, in an array of
// 2*maxKeyParts ints on the stack (collect, overrideIndex.first), so that
// building a key allocates nothing: raising it grows that array.
const maxKeyParts = 4

// key compiles one key: a part, or a list of parts combined.
func (ld *loader) key(n *yaml.Node, p *Policy) []part {
	var k []part
	var globalAt *yaml.Node // where global is written, if it is
	wild := wildcardsOf(p)
	for _, pn := range ld.list(n, "a key") {
		s, ok := ld.str(pn, "a key part")
		if !ok {
			continue
		}
		pt, err := parsePart(s)
		if err != nil {
			ld.errf(pn, "%v", err)
			continue
		}
		if pt.kind == partPath {
			i := slices.Index(wild, pt.name)
			if i < 0 && p.match.mux != nil {
				ld.errf(pn, "key part %q: the pattern has no wildcard {%s}%s", s, pt.name, didYouMean(pt.name, wild))
				continue
			}
			if j := slices.Index(p.match.pathNames, pt.name); j >= 0 {
				pt.index = j
			} else {
				pt.index = len(p.match.pathNames)
				p.match.pathNames = append(p.match.pathNames, pt.name)
			}
			p.usesPath = true
		}
		pt.fold = p.foldKey && foldable(pt.kind)
		if pt.kind == partHeader {
			ld.reads = append(ld.reads, headerRead{pt.name, fmt.Sprintf("policy %q", p.Name), pn})
		}
		if slices.ContainsFunc(k, func(q part) bool { return q.label == pt.label }) {
			ld.errf(pn, "key part %q repeated", s)
			continue
		}
		if pt.kind == partGlobal {
			globalAt = pn
		}
		k = append(k, pt)
	}
	if globalAt != nil && len(k) > 1 {
		// A key is a counter per value of its parts, and global has one
		// value: [global, ip] is [ip]. Whoever wrote it meant a total, or
		// a total beside the counter per client, which keys: gives.
		rest := slices.DeleteFunc(slices.Clone(k), func(q part) bool { return q.kind == partGlobal })
		slices.SortFunc(rest, func(a, b part) int { return strings.Compare(a.label, b.label) })
		labels := make([]string, len(rest))
		for i := range rest {
			labels[i] = rest[i].label
		}
		ld.errf(globalAt, "global combined with %[1]s in one key adds nothing: the key is still one counter per %[1]s; write global as a key of its own, as in keys: [global, %[2]s], for two counters, a total and one per %[1]s, or drop global", andList(labels), keyLabel(rest))
		return nil
	}
	if len(k) > maxKeyParts {
		ld.errf(n, "a key combines at most %d parts, not %d", maxKeyParts, len(k))
		return nil
	}
	if len(k) == 0 {
		return nil
	}
	// Parts in a fixed order, so [ip, user] and [user, ip] are one key.
	slices.SortFunc(k, func(a, b part) int { return strings.Compare(a.label, b.label) })
	for i := range k {
		if k[i].kind == partPath {
			k[i].index = slices.Index(p.match.pathNames, k[i].name)
		}
	}
	return k
}

// wildcardsOf returns the wildcards of p's pattern.
func wildcardsOf(p *Policy) []string {
	if p.match.mux == nil {
		return nil
	}
	return wildcards(p.match.pattern)
}

// limits compiles a list of limits.
func (ld *loader) limits(n *yaml.Node, p *Policy, set *Set) []*Limit {
	nodes := ld.list(n, "limits")
	var raw []rate.Limit
	var at []*yaml.Node
	for _, ln := range nodes {
		s, ok := ld.str(ln, "a limit")
		if !ok {
			continue
		}
		l, err := rate.ParseLimit(s)
		if err != nil {
			ld.errf(ln, "%v", err)
			continue
		}
		raw = append(raw, l)
		at = append(at, ln)
	}
	out := make([]*Limit, 0, len(raw))
	for i, l := range raw {
		name := p.Name
		if len(raw) > 1 {
			name += "." + strconv.Itoa(i+1)
		}
		cl := compileLimit(p, name, l, set.instances)
		// Equal limits share a key, so a request would be decided twice
		// on one counter and take its cost twice; so do window limits
		// over one window (see stateTag).
		if j := slices.IndexFunc(raw[:i], func(m rate.Limit) bool { return m.String() == l.String() }); j >= 0 {
			ld.errf(at[i], "limit %q is the same as %q at line %d (both are %q): they would count each request twice on one counter", at[i].Value, at[j].Value, at[j].Line, l.String())
			continue
		}
		if j := slices.IndexFunc(raw[:i], func(m rate.Limit) bool { return stateTag(m) == cl.tag }); j >= 0 {
			ld.errf(at[i], "limit %q counts in the same windows as %q at line %d (%s over one window): they would count each request twice on one counter; keep the lower", at[i].Value, at[j].Value, at[j].Line, l.Algorithm)
			continue
		}
		if p.Cost > l.Capacity() {
			if l.Algorithm.HasBurst() {
				wide := l
				wide.Burst = p.Cost
				ld.errf(at[i], "limit %q can never pass a request of cost %d: its capacity is %d (raise the burst to at least %d, as in %q, or lower the cost)", l, p.Cost, l.Capacity(), p.Cost, wide)
			} else {
				// A window admits its count per window, and no more.
				ld.errf(at[i], "limit %q can never pass a request of cost %d: it admits %d per window, and %s has no burst (raise its count to at least %d or lower the cost)", l, p.Cost, l.Capacity(), l.Algorithm, p.Cost)
			}
		} else if p.OnStoreError == sluice.FailLocal && p.Cost > cl.Local.Capacity() {
			ld.errf(at[i], "limit %q divided among %d instances (on_store_error: local) has capacity %d, less than the cost %d", l, set.instances, cl.Local.Capacity(), p.Cost)
		}
		out = append(out, cl)
	}
	return out
}

func (ld *loader) override(n *yaml.Node, p *Policy, set *Set, what string) (override, bool) {
	var o override
	f := ld.fields(n, "an override of "+what, "when", "limits")
	if f == nil {
		return o, false
	}
	wv, ok := f["when"]
	if !ok {
		ld.errf(n, "an override needs when: {PART: VALUE}, the key it applies to")
		return o, false
	}
	lv, ok := f["limits"]
	if !ok {
		ld.errf(n, "an override needs limits")
		return o, false
	}
	labels := map[string]part{}
	for _, k := range p.keys {
		for _, pt := range k {
			labels[pt.label] = pt
		}
	}
	wm := resolve(wv.val)
	if wm.Kind != yaml.MappingNode || len(wm.Content) == 0 {
		ld.errf(wm, "when must map key parts to values, e.g. when: {\"header:x-api-key\": partner-key}")
		return o, false
	}
	good := true
	seen := map[string]int{} // part label to its line
	for i := 0; i+1 < len(wm.Content); i += 2 {
		label, _ := ld.str(wm.Content[i], "a key part")
		vn := resolve(wm.Content[i+1])
		val, ok := ld.str(vn, "a value")
		if !ok {
			good = false
			continue
		}
		pt, err := parsePart(label)
		if err == nil {
			label = pt.label
		}
		if err == nil && pt.kind == partGlobal {
			// Its one value is every request's: the override would be
			// the policy's limits under another name.
			ld.errf(wm.Content[i], "override on global, whose one value every request has: it would replace the policy's limits for every request; change the policy's limits instead, or name a part whose values tell requests apart")
			good = false
			continue
		}
		if _, ok := labels[label]; !ok {
			ld.errf(wm.Content[i], "override on %q, which is not a part of any key of %s%s", label, what, didYouMean(label, keys(labels)))
			good = false
			continue
		}
		// A key has each part once: a part named twice would need two
		// values at once, and the override would apply to no request.
		if line, dup := seen[label]; dup {
			ld.errf(wm.Content[i], "part %q repeated in when (first at line %d): a key has one value for it, so the override would apply to no request", label, line)
			good = false
			continue
		}
		seen[label] = wm.Content[i].Line
		val, ok = ld.overrideValue(vn, labels[label], val, set)
		if !ok {
			good = false
			continue
		}
		o.when = append(o.when, partValue{label, val})
	}
	// An override applies to a key that has every part it names (see
	// indexOverrides): parts of different keys would match no key.
	if good && !slices.ContainsFunc(p.keys, o.fits) {
		names := make([]string, len(o.when))
		for i, w := range o.when {
			names[i] = w.part
		}
		ld.errf(wm, "override on %s, which no one key of %s has: an override applies only to a key with every part it names; name the parts of one key", andList(names), what)
		good = false
	}
	ln := resolve(lv.val)
	if isNull(ln) {
		// Left empty, as by a template: the keys it names would fall back
		// to the policy's limits, which is not what an override is for.
		ld.errf(lv.key, "an override of %s has no limits written: write its limits, or [] to leave the keys it names unlimited by this policy on purpose", what)
		return o, false
	}
	before := len(ld.probs)
	o.limits = ld.limits(ln, p, set)
	// An override with [] leaves its keys unlimited, as a plan with []
	// does its plan; one whose limits were all refused is no override.
	return o, good && len(ld.probs) == before
}

// overrideValue returns an override's value for part pt as keys write it
// (see appendPart), or reports at n a value no request's key can hold: an
// ip grouped as the resolver groups clients, a method in upper case, a
// path:NAME value in lower case under paths.ignore_case. A request's
// part is never empty (the key does not apply), nor is a header's value
// ever padded with spaces or tabs, which net/http trims (and HTTP/2
// forbids). Under fold_key, the value is folded as the request's is
// (see foldValue), so Partner@Example.com applies to partner@example.com.
func (ld *loader) overrideValue(n *yaml.Node, pt part, val string, set *Set) (string, bool) {
	if val == "" {
		ld.errf(n, "override on %s needs a value: a request without one is not keyed by it", pt.label)
		return "", false
	}
	if pt.fold {
		val = foldValue(val)
	}
	switch pt.kind {
	case partIP:
		a, err := netip.ParseAddr(val)
		if err != nil {
			ld.errf(n, "override on ip needs an address, not %q", val)
			return "", false
		}
		return string(clientip.AppendPrefix(nil, set.resolver.Group(a))), true
	case partMethod:
		if !validToken(val) {
			ld.errf(n, "override on method needs a method such as POST, not %q", val)
			return "", false
		}
		// In the form keys hold it: in upper case, HEAD as GET.
		val = keyMethod(val)
	case partHeader:
		if strings.Trim(val, " \t") != val {
			ld.errf(n, "override on %s: the value %q begins or ends with a space or tab, which a header's value never does (they are trimmed); write %q", pt.label, val, strings.Trim(val, " \t"))
			return "", false
		}
	case partPath:
		if set.paths.FoldCase {
			val = foldASCII(val) // as the path's value is
		}
	}
	return escapeValue(val), true
}

// foldASCII returns s with its ASCII letters in lower case.
func foldASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// fits reports whether key has every part o names.
func (o *override) fits(key []part) bool {
	for _, w := range o.when {
		if !slices.ContainsFunc(key, func(pt part) bool { return pt.label == w.part }) {
			return false
		}
	}
	return true
}

// firstWithin returns the index of the first earlier override that o is
// within, or -1: one that asks for a subset of o's parts and values, so
// that every key o applies to, it applies to too. byWhen maps the whenKey
// of each earlier override to its index. o's when holds at most
// maxKeyParts parts (all of one key, each once: loading refuses others),
// so each of its subsets is looked up, rather than every earlier
// override compared.
func (o override) firstWithin(byWhen map[string]int) int {
	first := -1
	sub := make([]partValue, 0, len(o.when))
	for mask := range 1 << len(o.when) {
		sub = sub[:0]
		for i, w := range o.when {
			if mask&(1<<i) != 0 {
				sub = append(sub, w)
			}
		}
		if j, ok := byWhen[whenKey(sub)]; ok && (first < 0 || j < first) {
			first = j
		}
	}
	return first
}

// whenKey returns a key for when as a set: its parts and values in order,
// each after its length, so that two whens with the same parts and
// values, in whatever order, and only they, have one key.
func whenKey(when []partValue) string {
	when = slices.SortedFunc(slices.Values(when), func(a, b partValue) int {
		if c := strings.Compare(a.part, b.part); c != 0 {
			return c
		}
		return strings.Compare(a.value, b.value)
	})
	var b []byte
	for _, w := range when {
		b = append(strconv.AppendInt(b, int64(len(w.part)), 10), ':')
		b = append(b, w.part...)
		b = append(strconv.AppendInt(b, int64(len(w.value)), 10), ':')
		b = append(b, w.value...)
	}
	return string(b)
}

// validName reports whether s is a name for a policy, plan or prefix.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && (c == '-' || c == '_')) {
			return false
		}
	}
	return true
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// didYouMean returns "; did you mean X?" for the closest of options, or "".
func didYouMean(s string, options []string) string {
	if d := suggest(s, options); d != "" {
		return fmt.Sprintf("; did you mean %q?", d)
	}
	return ""
}

// suggest returns the option closest to s, if it is close enough to be a
// likely typo.
func suggest(s string, options []string) string {
	best, bestD := "", 1<<30
	for _, o := range options {
		if d := editDistance(strings.ToLower(s), strings.ToLower(o)); d < bestD {
			best, bestD = o, d
		}
	}
	if bestD <= min(3, max(2, len(s)/3)) && bestD < len(s) || best != "" && strings.HasPrefix(best, s) && len(s) >= 3 {
		return best
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
