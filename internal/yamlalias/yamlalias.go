// Package yamlalias bounds what the aliases of a YAML document expand to,
// for loaders that follow aliases as they compile. Each alias repeats
// what its anchor holds, and an anchor may hold aliases itself: a few
// kilobytes of aliases to aliases describe a tree of billions of nodes,
// which a loader would compile one by one.
package yamlalias

import "go.yaml.in/yaml/v3"

// Check walks doc and returns the first alias at which the nodes that the
// document's aliases stand for, once expanded, pass max in all, or the
// first alias that lies inside the node it names (a tree without end),
// with cycle set. It returns nil when the document is within the bound;
// only then may a loader follow its aliases.
func Check(doc *yaml.Node, max int) (at *yaml.Node, cycle bool) {
	const inside = -1
	// size returns how many nodes n stands for once its aliases are
	// expanded, at most max+1, or inside. The sizes of anchored nodes,
	// which aliases name, are kept: inside while being counted.
	sizes := map[*yaml.Node]int{}
	var size func(n *yaml.Node) int
	size = func(n *yaml.Node) int {
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n == nil {
			return 0
		}
		if n.Anchor != "" {
			if s, ok := sizes[n]; ok {
				return s
			}
			sizes[n] = inside
		}
		s := 1
		for _, c := range n.Content {
			cs := size(c)
			if cs == inside {
				s = inside
				break
			}
			s = min(s+cs, max+1)
		}
		if n.Anchor != "" {
			sizes[n] = s
		}
		return s
	}
	total := 0
	var walk func(n *yaml.Node) (*yaml.Node, bool)
	walk = func(n *yaml.Node) (*yaml.Node, bool) {
		if n.Kind != yaml.AliasNode {
			for _, c := range n.Content {
				if at, cycle := walk(c); at != nil {
					return at, cycle
				}
			}
			return nil, false
		}
		s := size(n)
		if s == inside {
			return n, true
		}
		if total += s; total > max {
			return n, false
		}
		return nil, false
	}
	return walk(doc)
}
