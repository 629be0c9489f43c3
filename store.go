package sluice

import (
	"context"

	"github.com/sluicehq/sluice/rate"
)

// Store keeps the state of many keys and decides requests against it. The
// in-memory store (store/memory) is the default; store/redis shares one
// state between many instances.
//
// A refusal is a decision, not an error: a Store returns an error only when
// it could not decide (the network is down, the context ended, a request
// is invalid). Requests that fail [rate.Request.Check] (an invalid limit,
// or a cost that can never pass) are refused with its error; for a cost it
// wraps [rate.ErrCostExceedsCapacity] or [rate.ErrNegativeCost].
type Store interface {
	// Decide decides one request: it admits it, storing the key's new
	// state, or refuses it, consuming nothing.
	Decide(ctx context.Context, r rate.Request) (rate.Decision, error)
	// DecideAll decides several requests as one, all or nothing: if any is
	// refused, none consumes anything (a store documents any exception:
	// store/redis on a Redis Cluster, for keys in different slots). It writes the decision for reqs[i]
	// to out[i] (out must be at least as long as reqs) and returns their
	// combination (see [rate.Combine]). When the whole is refused, out[i]
	// still says whether reqs[i] alone would have passed, and its Remaining
	// is what is left without this request. A key may appear more than
	// once: each of its requests is decided on the state the ones before
	// it left, as if they had been admitted (the memory and Redis stores
	// both do so). Requests of one key under one limit whose costs add up
	// past its capacity can never pass together: a store refuses them,
	// every time, and [Fallback] returns an error wrapping
	// [rate.ErrCostExceedsCapacity] before any store (see
	// [rate.CheckGroup]); a caller that groups requests itself can ask
	// rate.CheckGroup first.
	DecideAll(ctx context.Context, reqs []rate.Request, out []rate.Decision) (rate.Decision, error)
}

// Resetter is a Store that can forget keys: [Limiter.Reset] needs its
// store to be one. The memory store, the Redis store and [Fallback] are.
type Resetter interface {
	// Reset forgets the state of each store key (a rate.Request.Key), as
	// if no request had come for it: the next request for it is decided
	// as its first. A key the store does not hold is no error. An error
	// means some keys may not have been forgotten.
	Reset(ctx context.Context, keys ...string) error
}
