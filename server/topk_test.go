package server

import (
	"fmt"
	"math/rand/v2"
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
