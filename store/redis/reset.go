package redis

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
)

var _ sluice.Resetter = (*Store)(nil)

// Reset forgets the state of each request key, as if no request had come
// for it (see sluice.Resetter): it deletes the Redis keys that hold them,
// named as DecideAll names them (see Store.Key), and then the deny
// cache's refusals of every request over any of them, which would
// otherwise refuse a key reset, without asking Redis, until they ran out.
// A key Redis does not hold is no error.
//
// On one server the keys go in one DEL, which deletes them at once. On a
// Redis Cluster, whose DEL takes keys of one slot only, each key has a
// DEL of its own, sent together; one that fails may leave the others
// deleted. The call is bounded by CallTimeout, as a decision's is, and
// sent again, as a decision is, when it fails on a dead connection.
//
// Only this instance's deny cache forgets: another instance sharing the
// keys may refuse them from its own until its cached refusals run out: a
// second at most.
func (s *Store) Reset(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	if dl, ok := ctx.Deadline(); s.timeout > 0 && (!ok || time.Until(dl) > s.timeout) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	err := s.del(ctx, keys)
	// A connection that died under the client (Redis restarted) fails on
	// its first use: send the DEL again, as call does a script. Unlike a
	// script, a DEL that ran before the connection broke and runs again
	// counts nothing twice.
	for try := 0; err != nil && try < maxRetries && retryable(ctx, err); try++ {
		err = s.del(ctx, keys)
	}
	// After the DEL, so that a refusal cached while it was on the wire, of
	// the state before it, goes too; even if it failed, as a cache that
	// forgets too much only sends requests to Redis.
	if s.deny != nil {
		s.deny.forget(keys)
	}
	if err != nil {
		return fmt.Errorf("redis store: reset: %w", err)
	}
	return nil
}

// del deletes the Redis keys of request keys.
func (s *Store) del(ctx context.Context, keys []string) error {
	if !s.cluster {
		rk := make([]string, len(keys))
		for i, k := range keys {
			rk[i] = redisKey(s.prefix, k)
		}
		return s.client.Do(ctx, s.client.B().Del().Key(rk...).Build()).Error()
	}
	// A DEL per key rather than per slot: one of several keys of a slot
	// that is moving between masters would be answered TRYAGAIN, where
	// the client follows a single key wherever it is.
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = s.client.B().Del().Key(redisKey(s.prefix, k)).Build()
	}
	for _, r := range s.client.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

// forget drops the refusals of every request that holds one of keys.
//
// It looks at every entry, as the cache is filed by whole requests: a
// reset is rare next to decisions, and the cache holds only refusals in
// force.
func (c *denyCache) forget(keys []string) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for k := range sh.m {
			if holdsAny(k, keys) {
				delete(sh.m, k)
				c.n.Add(-1)
			}
		}
		sh.mu.Unlock()
	}
}

// holdsAny reports whether the request identity id (see appendKey) holds
// a request for one of keys. An identity it cannot read holds any key:
// forgetting too much only sends a request to Redis.
func holdsAny(id string, keys []string) bool {
	for len(id) > 0 {
		n, w := binary.Uvarint([]byte(id[:min(len(id), binary.MaxVarintLen64)]))
		if w <= 0 || uint64(len(id)-w) < n {
			return true
		}
		key := id[w : w+int(n)]
		for _, k := range keys {
			if k == key {
				return true
			}
		}
		// Past the key: the algorithm and calendar bytes, then the
		// count, period, burst, cost and maximum delay as varints.
		id = id[w+int(n):]
		if len(id) < 2 {
			return true
		}
		id = id[2:]
		for range 5 {
			_, w := binary.Varint([]byte(id[:min(len(id), binary.MaxVarintLen64)]))
			if w <= 0 {
				return true
			}
			id = id[w:]
		}
	}
	return false
}
