package policy

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// store.max_keys is taken as written or refused, never cut: on a 32-bit
// platform a value past the int's range wrapped to a negative bound (none)
// or to 1 (every new key evicting the last), and sluice check said OK.
func TestMaxKeysNeverWraps(t *testing.T) {
	for _, n := range []int64{1 << 31, 3_000_000_000, 1 << 32, 1<<32 + 1, 1 << 40} {
		set, err := Load("test.yaml", fmt.Appendf(nil, "store: {max_keys: %d}\npolicies: [{name: a, limits: [\"1/s\"]}]\n", n))
		switch {
		case n > math.MaxInt:
			if err == nil || !strings.Contains(err.Error(), "between 1 and") {
				t.Errorf("max_keys %d, past this platform's int: %v, want it refused", n, err)
			}
		case err != nil:
			t.Errorf("max_keys %d: %v", n, err)
		case int64(set.Store().MaxKeys) != n:
			t.Errorf("max_keys %d read as %d", n, set.Store().MaxKeys)
		}
	}
}
