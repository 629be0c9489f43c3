// Package rate defines what sluice's limits decide: the limits, the six
// algorithms, and the decisions they give. It does no I/O and keeps no
// state of its own; stores (store/memory, store/redis) keep the state and
// call the steps defined here.
//
// # Limits
//
// A [Limit] is an [Algorithm], a Count per Period and, for the bucket
// algorithms, a Burst. [ParseLimit] reads what people write:
//
//	10/s   100/m   1000/h   5000/d   10000/month   10 per 10s   20/s burst 40
//
// [Limit.Share] splits a limit among instances that decide alone while a
// shared store is down, as exactly as whole units allow.
//
// # Which algorithm
//
//	gcra            the default: a token bucket in one number. Smooth,
//	                allows bursts up to Burst, cheapest state. Pick it
//	                unless you have a reason not to. A caller who waits
//	                (Request.MaxDelay) is admitted past the burst with a
//	                Delay, its unit reserved, rather than refused.
//	token_bucket    the same decisions as gcra, kept as (tokens, last
//	                refill) for those who think in tokens.
//	leaky_bucket    shapes instead of refusing: admits into a queue of
//	                Burst places and tells each request its Delay, like
//	                NGINX limit_req with burst. For protecting a backend
//	                that wants a steady rate.
//	fixed_window    a counter per window (UTC days and calendar months
//	                included): quotas and billing. Lets up to twice the
//	                count through around a boundary.
//	sliding_window  fixed windows smoothed by weighting the previous one:
//	                close to a true sliding window for the price of two
//	                counters. Being an estimate, it can refuse a client
//	                sending at exactly Count per Period at the first
//	                instant of a window after a full one.
//	sliding_log     exact over any Period-long interval; memory grows with
//	                Count. For low limits that must never be exceeded
//	                (login attempts).
//
// # Steps
//
// Each algorithm is a pure step, [Limit.Step]: (state, now, cost) →
// (state', [Decision]). Time is an integer count of microseconds since the
// Unix epoch ([Micros]), and every quantity is an exact integer: rates that
// do not divide evenly (3 per 7s) are carried as exact fractions, so a
// million decisions admit exactly what the definition admits, and the
// Redis store's Lua twin of each step agrees to the last token (for as
// long as Lua's float64s hold its instants exactly: see store/redis). A clock
// that steps back never mints tokens: a step is taken at the latest time
// the key's state has seen. The price is that a key used just before the
// clock stepped back by S waits as it would have at that later time, up to
// S longer than its limit alone would make it (a leaky_bucket's turns come
// that much later too). The memory store's system clock slews a step back
// rather than take it (see store/memory); on Redis, whose TIME the steps
// read, keep the masters' clocks synchronised and let them slew.
//
// A [Decision] says whether the request passes, how much remains, and when
// to retry: RetryAfter is the exact wait after which the same request
// passes. Several limits on one request are decided all or nothing by the
// stores; [Combine] folds their decisions into the one a client hears.
//
// # Time
//
// Code that needs the time takes a [Clock]; [SystemClock] is the real one
// and package ratetest has a fake one for tests.
package rate
