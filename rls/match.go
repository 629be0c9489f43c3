package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/rate"
)

// match is what one request descriptor resolves to: the limit that
// applies, if any, and the names it is counted and reported under.
type match struct {
	limit  *limitSpec
	shadow bool
	// key is the store key: the domain, the descriptor's entries and the
	// limit's id, or its countedID in the counting mode (see storeKey).
	key string
	// stat names the limit in metrics, as the reference names its stats:
	// domain.key_value.key...
	stat string
	// policy names the limit in RateLimit headers when it has no name:
	// the configured path, which holds no value from the request.
	policy string
}

// lookup resolves descriptor d in the named domain the way the reference
// service does. It returns ok false for an unknown domain or a descriptor
// that no configured limit matches.
//
// A descriptor carrying a limit override gets that limit, whatever the
// configuration says, as long as the domain is known. Otherwise the
// entries walk the domain's tree one level each: at every level the
// (key, value) is looked up exactly, then among the wildcards of that
// level in configuration order, then by key alone. The limit that applies
// is the one of the node reached by the last entry; a descriptor longer
// or shorter than the configured path has none. Each distinct value gets
// its own key, except that entries matched by a wildcard with
// share_threshold use the wildcard's pattern instead of their value, so
// all values matching it share one counter. counting selects the store
// keys of the reference's counting mode, whose state differs (see
// limitSpec.counted).
func (c *Config) lookup(domainName string, d *ratelimitv3.RateLimitDescriptor, counting bool) (m match, ok bool, err error) {
	if c == nil {
		return match{}, false, nil
	}
	dom := c.domains[domainName]
	if dom == nil {
		return match{}, false, nil
	}
	entries := d.GetEntries()
	if o := d.GetLimit(); o != nil {
		unit := rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit())
		ls, err := newLimitSpec(o.GetRequestsPerUnit(), unit, o.GetUnitMultiplier().GetValue(), rate.FixedWindow, 0)
		if err != nil {
			return match{}, false, fmt.Errorf("descriptor limit override: %w", err)
		}
		stat, policy := []string{domainName}, []string{domainName}
		for _, e := range entries {
			stat = append(stat, statPart(e.GetKey(), e.GetValue()))
			policy = append(policy, e.GetKey())
		}
		return match{
			limit:  ls,
			key:    storeKey(domainName, entries, nil, ls.keyID(counting)),
			stat:   strings.Join(stat, "."),
			policy: strings.Join(policy, "."),
		}, true, nil
	}
	if len(entries) == 0 {
		return match{}, false, nil
	}

	lvl := &dom.root
	var leaf *node
	// shared[i] is the wildcard with share_threshold that entry i matched,
	// whose pattern it is counted under, or nil.
	var shared []*node
	// The nodes matched, level by level; dynamic is set when the stat
	// name takes a value from the request (value_to_metric), where it is
	// otherwise the leaf's own, built at load.
	var path [8]*node
	nodes, dynamic := path[:0], false
	for i, e := range entries {
		key, value := e.GetKey(), e.GetValue()
		next := lvl.exact[entryKey{key, value}]
		if next == nil {
			for _, w := range lvl.wildcard {
				if w.matches(key, value) {
					next = w
					break
				}
			}
			if next != nil && next.share {
				if shared == nil {
					shared = make([]*node, len(entries))
				}
				shared[i] = next
			}
		}
		if next == nil {
			next = lvl.anyValue[key]
		}
		if next == nil {
			break
		}
		nodes = append(nodes, next)
		dynamic = dynamic || next.toMetric && !next.share
		if i == len(entries)-1 {
			leaf = next
		}
		if next.children.empty() {
			break
		}
		lvl = &next.children
	}
	if leaf == nil || leaf.limit == nil {
		return match{}, false, nil
	}
	m = match{
		limit:  leaf.limit,
		shadow: leaf.shadow,
		stat:   leaf.stat,
		policy: leaf.stat,
	}
	if dynamic || leaf.detailed {
		m.stat = statName(domainName, entries, nodes, shared, leaf.detailed)
	}
	if !leaf.limit.unlimited {
		m.key = storeKey(domainName, entries, shared, leaf.limit.keyID(counting))
	}
	return m, true, nil
}

// keyID returns the id that ends the store keys of ls: countedID in the
// reference's counting mode, else id.
func (ls *limitSpec) keyID(counting bool) string {
	if counting {
		return ls.countedID
	}
	return ls.id
}

// statName returns the reference's stats name for entries, which matched
// nodes, when it holds values from the request: value_to_metric puts a
// node's value in its part, detailed_metric every entry's, except those
// counted under a shared wildcard, whose pattern stays.
func statName(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry, nodes []*node, shared []*node, detailed bool) string {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		e := entries[i]
		switch {
		case shared != nil && shared[i] != nil:
			parts[i] = n.part
		case detailed && shared == nil:
			// The reference writes key_value here even for an empty
			// value; when a shared wildcard is elsewhere in the path,
			// it writes the key alone (the next case).
			parts[i] = e.GetKey() + "_" + e.GetValue()
		case detailed, n.toMetric:
			parts[i] = statPart(e.GetKey(), e.GetValue())
		default:
			parts[i] = n.part
		}
	}
	return domain + "." + strings.Join(parts, ".")
}

func statPart(key, value string) string {
	if value == "" {
		return key
	}
	return key + "_" + value
}

// maxValue is the longest descriptor key or value kept verbatim in a store
// key; longer ones are replaced by a hash. Values come from clients (a
// header, a path), so without a bound a client chooses how much memory
// each key costs.
const maxValue = 64

// maxKey bounds a whole store key in the same way: the entries of a
// descriptor with a limit override are not bounded by the configuration.
const maxKey = 512

// storeKey returns the key a descriptor's state is kept under:
//
//	rls:<domain>:<k1>=<v1>|<k2>=<v2>:<limit id>
//
// Entries counted under a shared wildcard pattern are written
// <k>*=<pattern prefix>, or <k>**=<pattern prefix> for a wildcard key. Every part is escaped so that the separators
// (and Redis Cluster's hash tag braces) never come from a client, and a
// part longer than maxValue is replaced by "%h" and a hash of it, so two
// different descriptors never share a key. The limit id at the end names
// what the state means (see limitSpec.id and countedID), so that a reload
// keeps the state of a limit whose state means the same under the new
// one, and starts any other afresh.
func storeKey(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry, shared []*node, limitID string) string {
	var b strings.Builder
	n := len("rls:") + len(domain) + len(limitID) + 8
	for _, e := range entries {
		n += len(e.GetKey()) + len(e.GetValue()) + 2
	}
	b.Grow(n) // once, for the common key with nothing to escape
	b.WriteString("rls:")
	writePart(&b, domain)
	b.WriteByte(':')
	start := b.Len()
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('|')
		}
		writePart(&b, e.GetKey())
		if shared != nil && shared[i] != nil {
			// A wildcard key's pattern is marked apart from a wildcard
			// value's: writePart escapes every "*" it is given.
			if shared[i].anyKey {
				b.WriteByte('*')
			}
			b.WriteString("*=")
			writePart(&b, shared[i].prefix)
			continue
		}
		b.WriteByte('=')
		writePart(&b, e.GetValue())
	}
	if b.Len()-start > maxKey {
		path := b.String()[start:]
		b.Reset()
		b.WriteString("rls:")
		writePart(&b, domain)
		b.WriteByte(':')
		writeHash(&b, path)
	}
	b.WriteByte(':')
	b.WriteString(limitID)
	return b.String()
}

// writePart writes s escaped: bytes other than letters, digits and
// "-._~/@+" become %XX. A string longer than maxValue becomes %h and its
// hash instead, which no escaped string can be.
func writePart(b *strings.Builder, s string) {
	if len(s) > maxValue {
		writeHash(b, s)
		return
	}
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '/', c == '@', c == '+':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
}

func writeHash(b *strings.Builder, s string) {
	sum := sha256.Sum256([]byte(s))
	b.WriteString("%h")
	b.WriteString(hex.EncodeToString(sum[:16]))
}

// matches reports whether the entry (key, value) matches the wildcard n.
// A wildcard value matches the entry's value of the same key. A wildcard
// key matches the entry's "key_value" as the reference spells it, so
// "user*" catches the keys user_id and username, and "a_b*" the key a
// with a value starting with b.
func (n *node) matches(key, value string) bool {
	if !n.anyKey {
		return n.key == key && strings.HasPrefix(value, n.prefix)
	}
	p := n.prefix
	if len(p) <= len(key) {
		return strings.HasPrefix(key, p)
	}
	return strings.HasPrefix(p, key) && p[len(key)] == '_' && strings.HasPrefix(value, p[len(key)+1:])
}
