package redis

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// maxDenyAge is the longest a refusal is repeated locally (see denyCache).
const maxDenyAge = time.Second

// denyShards is the number of independently locked parts of a deny cache.
const denyShards = 32

// denyCache remembers refusals so that the same request can be refused
// again locally, without asking Redis: for maxDenyAge at most while Redis
// answers, and until its RetryAfter has passed while Redis cannot be asked
// (both explained below).
//
// Why this is exact: once Redis refuses a request with RetryAfter T,
// nothing any instance does can make it pass before T, since others can
// only spend more. So a local refusal never refuses what Redis would admit,
// as long as the request is the same: the same keys, limits, costs and
// maximum delays (a larger cost or a shorter maximum delay would also be
// refused, but with a longer RetryAfter than the cached one, so it is sent
// to Redis to learn the exact wait).
//
// That holds while Redis keeps the count that refused. It may lose it: a
// restart without persistence, FLUSHALL, an operator's DEL to unblock a
// client, eviction under maxmemory. The other instances then admit the
// request at once, and one that repeated the refusal until T would refuse
// it meanwhile, for a monthly quota for weeks. So a refusal is repeated
// in Redis's place for maxDenyAge at most, a second, whatever T: a flood
// of refused requests still costs Redis one call a second per request and
// instance, and a lost count is noticed within a second. While Redis
// cannot be asked (sluice.Fallback's DecideCached, Redis down), the
// refusal holds until T: it is the last word Redis gave, and the client
// it refused is as far over its limit as it was.
//
// Save one thing others can do: give back what a request across cluster
// slots took in the slots it committed before a race refused it (see
// crossslot.go). A refusal made while those units were taken may then
// refuse, until T, what Redis would admit once they are given back. That
// errs on the side of refusing, and takes such a race on the same key.
//
// Time is measured on the local clock from when the call to Redis was
// sent, which is no later than the moment Redis decided: a local refusal
// ends no later than Redis's would. Clocks of different instances never
// meet here, so skew between them does not matter; a local clock that
// steps backwards ends the entry.
//
// The cache is bounded: each shard holds at most max entries. A full shard
// drops the expired entries among a few it looks at, or else one of them.
type denyCache struct {
	seed   maphash.Seed
	max    int
	n      atomic.Int64 // entries in all shards, expired or not
	shards [denyShards]denyShard
}

type denyShard struct {
	mu sync.Mutex
	m  map[string]denyEntry
}

type denyEntry struct {
	sent time.Time       // local time the refused call was sent
	ttl  time.Duration   // the shortest RetryAfter among the refused decisions
	outs []rate.Decision // Redis's decisions, one per request
}

func newDenyCache(size int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), max: max(1, size/denyShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]denyEntry)
	}
	return c
}

// appendKey appends the identity of a request to b: everything that the
// refusal depends on. That is a MaxDelay only where the step reads it, a
// leaky_bucket's and a waiting gcra or token_bucket caller's, and as it
// reads it, in whole µs: Limiter.WaitN gives each try of a leaky_bucket
// a MaxDelay from its deadline (and none to the others), and a request
// with no wait would otherwise be an entry of its own, never asked for
// again, pushing out the refusals the cache holds for others.
func appendKey(b []byte, reqs []rate.Request) []byte {
	for _, r := range reqs {
		b = binary.AppendUvarint(b, uint64(len(r.Key)))
		b = append(b, r.Key...)
		l := r.Limit
		b = append(b, byte(l.Algorithm), byte(l.Calendar))
		b = binary.AppendVarint(b, l.Count)
		b = binary.AppendVarint(b, int64(l.Period))
		b = binary.AppendVarint(b, l.Burst)
		b = binary.AppendVarint(b, r.Cost)
		var maxDelay int64
		if l.Algorithm.HasBurst() {
			maxDelay = rate.MaxDelayMicros(r.MaxDelay)
		}
		b = binary.AppendVarint(b, maxDelay)
	}
	return b
}

func (c *denyCache) shard(key []byte) *denyShard {
	return &c.shards[maphash.Bytes(c.seed, key)%denyShards]
}

// get fills out with the cached refusal of the request identified by key,
// counted down to now, and reports whether there was one made within the
// last within (maxDenyAge where Redis can be asked again).
func (c *denyCache) get(key []byte, now time.Time, within time.Duration, out []rate.Decision) bool {
	sh := c.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[string(key)]
	if !ok {
		sh.mu.Unlock()
		return false
	}
	el := now.Sub(e.sent)
	if el < 0 || el >= e.ttl {
		delete(sh.m, string(key))
		c.n.Add(-1)
		sh.mu.Unlock()
		return false
	}
	if el >= within {
		sh.mu.Unlock()
		return false
	}
	copy(out, e.outs)
	sh.mu.Unlock()
	// Decisions are in whole microseconds, as Redis makes them.
	el = el.Truncate(time.Microsecond)
	for i := range e.outs {
		d := &out[i]
		if !d.Allowed {
			d.RetryAfter -= el
		}
		d.ResetAfter = max(0, d.ResetAfter-el)
		d.Delay = max(0, d.Delay-el)
	}
	return true
}

// put remembers the decisions Redis gave to a request sent at sent, if
// any of them is a refusal, until the shortest RetryAfter among them has
// passed (get answers in Redis's place for maxDenyAge of it at most).
func (c *denyCache) put(key []byte, sent time.Time, outs []rate.Decision) {
	ttl := time.Duration(-1)
	for _, d := range outs {
		if !d.Allowed && (ttl < 0 || d.RetryAfter < ttl) {
			ttl = d.RetryAfter
		}
	}
	if ttl <= 0 {
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[string(key)]; !ok && len(sh.m) >= c.max {
		// Look at a few entries (map order is random), dropping the expired
		// ones; if none was, drop the first seen.
		var victim string
		seen, freed := 0, false
		for k, e := range sh.m {
			if el := sent.Sub(e.sent); el < 0 || el >= e.ttl {
				delete(sh.m, k)
				c.n.Add(-1)
				freed = true
			} else if seen == 0 {
				victim = k
			}
			if seen++; seen == 8 {
				break
			}
		}
		if !freed {
			delete(sh.m, victim)
			c.n.Add(-1)
		}
	}
	if _, ok := sh.m[string(key)]; !ok {
		c.n.Add(1)
	}
	sh.m[string(key)] = denyEntry{sent: sent, ttl: ttl, outs: append([]rate.Decision(nil), outs...)}
}

// len returns the number of entries, expired or not.
func (c *denyCache) len() int { return int(c.n.Load()) }
