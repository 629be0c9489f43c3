package yamlalias

import (
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func parse(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	return &doc
}

// Each level of aliases doubles the tree: the check stops at the alias
// that crosses the bound, whatever the tree would come to, and lets a
// document within it through.
func TestCheck(t *testing.T) {
	var b strings.Builder
	b.WriteString("l0: &l0 [x, y]\n")
	for i := 1; i < 40; i++ { // 2^40 nodes, expanded
		fmt.Fprintf(&b, "l%d: &l%d [*l%d, *l%d]\n", i, i, i-1, i-1)
	}
	doc := parse(t, b.String())
	at, cycle := Check(doc, 1000)
	if at == nil || cycle || at.Line < 8 || at.Line > 10 {
		t.Errorf("Check(2^40 nodes, 1000) = line %v, cycle %v; want an alias past line 7 (2^9 > 1000), no cycle", at, cycle)
	}
	if at, _ := Check(parse(t, "a: &a [x, y]\nb: *a\nc: *a\n"), 6); at != nil {
		t.Errorf("two aliases of 3 nodes within a bound of 6: stopped at line %d", at.Line)
	}
	if at, _ := Check(parse(t, "a: &a [x, y]\nb: *a\nc: *a\n"), 5); at == nil || at.Line != 3 {
		t.Errorf("two aliases of 3 nodes past a bound of 5: %v, want the alias on line 3", at)
	}
}

// An alias inside the node it names would have no end.
func TestCheckCycle(t *testing.T) {
	if at, cycle := Check(parse(t, "a: &a [x, *a]\n"), 1000); at == nil || !cycle {
		t.Errorf("Check(cycle) = %v, %v; want the alias, cycle", at, cycle)
	}
}
