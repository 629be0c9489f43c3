package server

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestTopKFindsHeavyHitters(t *testing.T) {
	const k = 200 // any key above 110,000/200 = 550 is held, each count within 550
	top := NewTopK(k)
	truth := map[string]uint64{}
	rng := rand.New(rand.NewPCG(1, 2))
	// Three heavy keys among 100,000 one-off keys.
	heavy := map[string]int{"10.0.0.1": 5000, "10.0.0.2": 3000, "10.0.0.3": 2000}
	var stream []string
	for key, n := range heavy {
		for range n {
			stream = append(stream, key)
		}
	}
	for i := range 100_000 {
		stream = append(stream, fmt.Sprintf("noise-%d", i))
	}
	rng.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
	for _, key := range stream {
		top.Add(key)
		truth[key]++
	}
	got, total := top.Top(3)
	if total != uint64(len(stream)) {
		t.Fatalf("total %d, want %d", total, len(stream))
	}
	want := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}
	for i, e := range got {
		if e.Key != want[i] {
			t.Fatalf("top[%d] = %+v, want %s (all: %+v)", i, e, want[i], got)
		}
		if e.Count < truth[e.Key] || e.Count-e.Err > truth[e.Key] {
			t.Fatalf("%s: count %d err %d does not bound the truth %d", e.Key, e.Count, e.Err, truth[e.Key])
		}
	}
	if all, _ := top.Top(-1); len(all) != k {
		t.Fatalf("holds %d keys, want %d", len(all), k)
	}
}

// A key is a string clients influence: an Envoy descriptor's values are
// in it whole under detailed_metric. TopK keeps the start of a long key
// and a hash of the whole, so that k keys cost a bounded amount of
// memory, and two long keys that differ only at the end stay apart.
func TestTopKBoundsLongKeys(t *testing.T) {
	const k = 4
	top := NewTopK(k)
	long := func(i int) string { return "rls:api api.user_" + strings.Repeat("x", 100_000) + fmt.Sprint(i) }
	for i := range 10 {
		top.Add(long(i))
		top.Add(long(i))
	}
	top.Add("sluice:api:1a2b3c4d:ip=10.0.0.1")
	all, total := top.Top(-1)
	if total != 21 || len(all) != k {
		t.Fatalf("total %d, %d keys; want 21, %d", total, len(all), k)
	}
	seen := map[string]bool{}
	for _, e := range all {
		if len(e.Key) > 512 {
			t.Errorf("a key of %d bytes kept, want at most 512: %.40q…", len(e.Key), e.Key)
		}
		if seen[e.Key] {
			t.Errorf("two long keys kept as one: %.40q…", e.Key)
		}
		seen[e.Key] = true
	}
	// The last key counted is always held.
	if !seen[topKey(long(9))] {
		t.Errorf("the last long key is not held: %+v", all)
	}
	if !strings.HasPrefix(all[0].Key, "rls:api api.user_xxx") {
		t.Errorf("a long key is shown as %.40q…; want its start", all[0].Key)
	}
	if !seen["sluice:api:1a2b3c4d:ip=10.0.0.1"] {
		t.Errorf("a short key is not kept as written: %+v", all)
	}
}
