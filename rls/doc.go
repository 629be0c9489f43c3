// Package rls serves Envoy's rate limit service API
// (envoy.service.ratelimit.v3.RateLimitService) from sluice: Envoy, Istio,
// Contour, Emissary and Envoy Gateway can point their global rate limiting
// at it instead of Envoy's reference service (envoyproxy/ratelimit),
// keeping their configuration files as they are.
//
// # Use
//
//	cfg, err := rls.LoadDir("/etc/ratelimit/config") // or LoadFiles, Parse
//	svc := rls.NewService(cfg, store, rls.Options{})  // store: any sluice.Store
//	svc.Register(grpcServer)                          // RLS and grpc.health.v1
//	...
//	svc.SetConfig(newCfg)                             // hot reload
//
// # Files
//
//	config.go    Config, Parse, LoadFiles, LoadDir: the reference's YAML
//	             format, decoded strictly, errors as file:line: message
//	match.go     how a request descriptor finds its limit, and its store key
//	service.go   Service, Options, Event: deciding a request
//	headers.go   the optional RateLimit-Policy, RateLimit and Retry-After
//
// # Configuration
//
// One file per domain, in the reference's format ([Parse] shows it all).
// Descriptors nest; each has a key, an optional value, an optional
// rate_limit, and options: shadow_mode (over-limit requests are reported
// and pass), share_threshold (every value matching a wildcard shares one
// counter), detailed_metric and value_to_metric (which only change the
// names in [Event]). A value of "*", or ending in "*", matches by prefix.
// Units are second, minute, hour, day, week, month (30 days) and year (365
// days), as in the reference, optionally multiplied by unit_multiplier.
// requests_per_unit: 0 refuses everything; unlimited: true limits nothing
// and is never sent to the store.
//
// Two keys in rate_limit are sluice extensions: algorithm picks any of
// sluice's algorithms instead of the reference's fixed window (gcra,
// token_bucket, leaky_bucket, sliding_window, sliding_log), and burst sets
// the capacity of the bucket algorithms:
//
//	rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 20}
//
// # Matching
//
// As in the reference: each descriptor of a request walks its domain's
// tree one entry per level, trying at each level the exact key and value,
// then the level's wildcards in file order, then the key alone. The limit
// that applies is the one of the node the last entry reaches: a descriptor
// shorter or longer than a configured path matches nothing. A descriptor
// may carry its own limit (the override Envoy sends from route metadata):
// in a known domain it replaces whatever the configuration says. A limit
// named in the replaces of another limit the same request matched is
// dropped. Unknown domains and unmatched descriptors are OK with no
// current_limit; unlimited ones are OK with limit_remaining 2³²−1.
//
// Hits are the descriptor's hits_addend when set (0 checks without
// spending), else the request's, else 1.
//
// # Deciding, and what a refusal spends
//
// The reference counts windows aligned to the Unix epoch, and so does
// sluice's fixed_window: with the reference's format, switching changes no
// decision. Two things in the reference differ from sluice's own rule that
// a refused request consumes nothing, and by default this package keeps
// the reference's:
//
//   - Each descriptor is decided on its own. A request over one limit
//     still spends from the others.
//   - Refused hits still count. Once a window is exceeded, even a check
//     with 0 hits is over until the window ends; a request for more than
//     is left is refused and leaves nothing for smaller ones. Gateways
//     that record usage after the response (check with 0 hits, then
//     report the real hits) rely on this. sluice's stores never spend on
//     a refusal, so a hit is kept as two units of a window of 2×limit+1,
//     and a refusal fills the rest of the window, the odd unit included
//     (see decideCounting in service.go): the same decisions, at the price
//     of one more store call for the first refusal of each window. That
//     call is not made when the window could end before it arrives, as it
//     would spend from the next window, which the reference leaves alone.
//
// With [Options].RefusedConsumeNothing, a request's enforced descriptors
// are decided together with one [sluice.Store].DecideAll, all or nothing,
// and a refused request spends nothing anywhere. Algorithms other than
// fixed_window always consume nothing on a refusal: counting refused
// requests in a token bucket would starve a client that keeps retrying.
//
// # Keys
//
// State lives in the store under
//
//	rls:<domain>:<key1>=<value1>|<key2>=<value2>:<limit>
//
// with every part escaped (so neither the separators nor Redis Cluster's
// {hash tags} can come from a client), values longer than 64 bytes
// replaced by a hash, and <limit> naming the algorithm, count and period,
// so that reloading an unchanged limit keeps its counters and a changed
// one starts afresh. A fixed window kept the reference's way has
// "_counted" at the end of <limit>: its state is in units of half a hit,
// so the two modes never read each other's counters. The reference instead puts the window's start in its
// keys; sluice's fixed window keeps it in the state.
//
// # What differs from the reference
//
// Decoding is stricter: keys are checked where they stand (the reference
// accepts any known key anywhere), requests_per_unit is required (the
// reference reads a missing one as 0, refusing everything), and unlimited
// with requests_per_unit is an error as well as unlimited with a unit.
// A wildcard matches on its descriptor's key and the value's prefix; the
// reference matches the prefix of "key_value", so its "a_b*" wildcard
// also catches the key "a" with a value starting "b". Negative hits
// (is_negative_hits, a refund) are checked without spending: sluice's
// stores do not give back what was spent. The reference's global shadow
// mode, quota mode, response metadata and X-RateLimit headers are not
// here; Options.Headers gives the RateLimit fields of the current IETF
// draft instead. The reference's local over-limit cache is the store's
// business (store/redis has an exact deny cache).
package rls
