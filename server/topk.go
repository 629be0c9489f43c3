package server

import (
	"container/heap"
	"crypto/sha256"
	"encoding/base64"
	"sort"
	"sync"
	"unicode/utf8"
)

// TopK counts the most frequent keys of an unbounded stream in bounded
// memory, with the space-saving algorithm (Metwally, Agrawal, El Abbadi,
// 2005): it keeps k counters; a key not among them replaces the smallest,
// inheriting its count as an overestimate. Any key whose true count exceeds
// total/k is guaranteed to be held, and each count is at most Err above the
// truth.
//
// The zero value is not usable; call NewTopK. It is safe for concurrent
// use.
type TopK struct {
	mu    sync.Mutex
	k     int
	index map[string]*topEntry
	h     topHeap
	total uint64
}

type topEntry struct {
	key   string
	count uint64
	err   uint64
	i     int // position in the heap
}

// TopEntry is one key of a TopK report.
type TopEntry struct {
	// Key is the key as it was added, or for one longer than 512 bytes,
	// its start, "…#" and a hash of the whole.
	Key string `json:"key"`
	// Count is an upper bound of the key's true count.
	Count uint64 `json:"count"`
	// Err bounds the overestimate: the true count is at least Count − Err.
	Err uint64 `json:"error"`
}

// NewTopK returns a counter that keeps k keys (k < 1 means 1).
func NewTopK(k int) *TopK {
	k = max(k, 1)
	return &TopK{k: k, index: make(map[string]*topEntry, k)}
}

// Add counts one occurrence of key. A key longer than 512 bytes is
// counted, and reported, as its start and a hash of the whole.
func (t *TopK) Add(key string) {
	key = topKey(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total++
	if e, ok := t.index[key]; ok {
		e.count++
		heap.Fix(&t.h, e.i)
		return
	}
	if len(t.h) < t.k {
		e := &topEntry{key: key, count: 1}
		t.index[key] = e
		heap.Push(&t.h, e)
		return
	}
	// Replace the smallest counter.
	e := t.h[0]
	delete(t.index, e.key)
	e.key, e.err = key, e.count
	e.count++
	t.index[key] = e
	heap.Fix(&t.h, 0)
}

// Top returns up to n keys, most frequent first, and the total number of
// occurrences counted.
func (t *TopK) Top(n int) ([]TopEntry, uint64) {
	t.mu.Lock()
	out := make([]TopEntry, 0, len(t.h))
	for _, e := range t.h {
		out = append(out, TopEntry{Key: e.key, Count: e.count, Err: e.err})
	}
	total := t.total
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Key < out[j].Key
	})
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return out, total
}

// topHeap is a min-heap on count.
type topHeap []*topEntry

func (h topHeap) Len() int           { return len(h) }
func (h topHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h topHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *topHeap) Push(x any) {
	e := x.(*topEntry)
	e.i = len(*h)
	*h = append(*h, e)
}
func (h *topHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// maxTopKey bounds the length of a key TopK keeps, in bytes. Keys hold
// values clients sent, and TopK may be given any: the store keys the
// server adds are bounded already (a policy's values at most 64 bytes
// each, an Envoy descriptor's entries 512 bytes together), and most are
// kept as they are.
const maxTopKey = 512

// topKey returns key as TopK keeps it: as it is when it is at most
// maxTopKey bytes long, else its start, "…#" and a hash of the whole, so
// that two long keys never share a counter and the start still says
// what the key is.
func topKey(key string) string {
	if len(key) <= maxTopKey {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	hash := base64.RawURLEncoding.EncodeToString(sum[:16])
	cut := maxTopKey - len("…#") - len(hash)
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	// A new string: a slice of key would keep all of it.
	return key[:cut] + "…#" + hash
}
