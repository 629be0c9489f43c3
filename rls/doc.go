// Package rls serves Envoy's rate limit service API
// (envoy.service.ratelimit.v3.RateLimitService) from sluice: Envoy, Istio,
// Contour and Emissary can point their global rate limiting at it instead
// of Envoy's reference service (envoyproxy/ratelimit), keeping their
// configuration files as they are.
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
//	config.go    Config, Parse, LoadFiles, LoadDir, ConfigFiles, Files:
//	             the reference's YAML format, decoded strictly, errors as
//	             file:line: message
//	match.go     how a request descriptor finds its limit, and its store key
//	service.go   Service, Options, Event: deciding a request
//	headers.go   the optional RateLimit-Policy, RateLimit and Retry-After
//
// # Configuration
//
// One file per domain, in the reference's format ([Parse] shows it all).
// [LoadDir] loads a directory as the reference loads its runtime
// directory: every file below it, whatever its name ends in, except names
// starting with a dot ([ConfigFiles] lists them). Descriptors nest; each
// has a key, an optional value, an optional rate_limit, and options:
// shadow_mode (over-limit requests are reported and pass), share_threshold
// (every value matching a wildcard shares one counter), detailed_metric
// and value_to_metric (which only change the names in [Event]). A value of
// "*", or ending in "*", matches by prefix. Units are second, minute,
// hour, day, week, month (30 days) and year (365 days), as in the
// reference. requests_per_unit: 0 refuses everything; unlimited: true
// limits nothing and is never sent to the store. quota_mode: false is
// accepted, and true refused (see below).
//
// Three keys in rate_limit are sluice extensions, which the reference
// refuses in its files: unit_multiplier makes the window that many units
// long (the reference also ignores it in a request's limit override,
// where sluice applies it); algorithm picks any of sluice's algorithms
// instead of the reference's fixed window (gcra, token_bucket,
// sliding_window, sliding_log; not leaky_bucket, whose queue holds
// requests until their turn, which Envoy cannot: gcra with burst: 1 gives
// the same rate without bursts); and burst sets the capacity of the
// bucket algorithms:
//
//	rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 20}
//
// YAML is read as the reference's decoder (yaml.v2) reads it: booleans of
// YAML 1.1 (yes, off), an empty value as absent, merge keys ("<<") where
// they stand, so that a key written before one is overwritten by it, and
// a rate_limit set twice through merges merged key by key.
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
//     a refusal, so the window is asked for with room for 2×limit+1 hits
//     and a request adds at most limit+1: while the count is within the
//     limit any request fits and is counted, over the limit or not, by the
//     one call that decides it; once it is above, every request is over
//     until the window ends, counted or not (see decideCounting in
//     service.go). The count is in hits, under a key that names the
//     period and not the limit, so that, as in the reference, a reload
//     that changes requests_per_unit keeps the window's count and an
//     override of the same unit counts in it, each limit counting the
//     hits it refuses within its own room, 2×its limit+1 (see below).
//
// In this mode each descriptor is one store call, one after the other (the
// reference sends a request's descriptors to Redis in one pipeline).
// Envoy sends one descriptor per rate_limits entry of the route, a
// handful; a request of more than [Options].MaxDescriptors (1,000 by
// default) is refused with InvalidArgument before any is decided, where
// the reference has no bound but gRPC's on a message's size (4MB by
// default, some 400,000 descriptors).
//
// With [Options].RefusedConsumeNothing, a request's enforced descriptors
// are decided together with one [sluice.Store].DecideAll, all or nothing,
// and a refused request spends nothing anywhere (on a Redis Cluster, but
// for a race across slots: see package store/redis). Descriptors of a
// request that count in one window under limits of different counts (the
// configured limit and an override of its unit) are decided on the
// window's count with all their hits on it: the request passes only if
// the window stays within each limit. Algorithms other than fixed_window
// always consume nothing on a refusal: counting refused requests in a
// token bucket would starve a client that keeps retrying.
//
// # Keys
//
// State lives in the store under
//
//	rls:<domain>:<key1>=<value1>|<key2>=<value2>:<limit>
//
// with every part escaped (so neither the separators nor Redis Cluster's
// {hash tags} can come from a client) and values longer than 64 bytes
// replaced by a hash. In Redis, with no store Prefix, a key is stored
// whole inside a hash tag, {rls:...}: an ACL key pattern for them is
// ~{rls:*. <limit> names what the state means, so that a reload keeps
// the state of a limit whose state means the same under the new one and
// starts any other afresh. A bucket's names the whole limit
// (gcra_10_per_1s_burst_20), as its state is measured in its rate and
// burst. A window's names its algorithm and period, not its count, as
// rate.Limit.StateName does: a reload that lowers requests_per_unit keeps
// the window's count, and is over at once if the window holds more; a
// raised one admits the difference; an override of the same unit counts
// in the same window. With RefusedConsumeNothing that is every window
// (fixed_window_per_1m0s, sliding_log_per_1h0m0s). In the default mode, a
// fixed window's is fixed_window_per_1m0s_counted, its count in hits
// whatever the limit, and a sliding_window's or sliding_log's names the
// whole limit (sliding_window_20_per_1m0s): a changed count starts it
// afresh. The two modes never read each other's keys. The reference
// instead puts the window's start in its keys; sluice's fixed window keeps
// it in the state, and a request counts in the window the store decides
// it in, on the store's clock.
//
// # What differs from the reference
//
// Decoding is stricter: keys are checked where they stand (the reference
// accepts any known key anywhere); a key written twice in one mapping is
// an error (yaml.v2 keeps the last, and merges a rate_limit written twice
// key by key); requests_per_unit is required (the
// reference reads a missing one as 0, refusing everything); unlimited with
// requests_per_unit is an error, and so is unlimited with any unit (the
// reference refuses a valid unit, but ignores an invalid one). A domain in
// two files is an error: the reference's MERGE_DOMAIN_CONFIG, which merges
// them, has no equivalent. quota_mode: true is refused: the reference's
// quota mode (over-limit requests pass and are listed in the response's
// dynamic metadata) is not here, nor its global shadow and quota modes,
// response metadata, and its RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset headers; Options.Headers gives the RateLimit fields of
// the current IETF draft instead. Configuration comes from files: the
// reference's xDS mode (CONFIG_TYPE=GRPC_XDS_SOTW), in which Envoy
// Gateway feeds the rate limit service it deploys, is not served. A
// scalar is read as YAML text, so a float or a number past 64 bits
// stands for itself as a key or value, where the reference refuses the
// file. A request without a domain or without descriptors is refused
// with InvalidArgument, where the reference answers Unknown.
//
// The reference names a descriptor key_value and looks an entry up by
// that name, so two things that are apart here meet there. A wildcard
// value (key "a", value "b*") matches the entries of key "a" whose value
// starts with "b"; the reference matches the prefix "a_b" of the entry's
// "key_value", so it also catches the key "a_bc" with any value. A key
// ending in "*" with no value is a wildcard over "key_value" here as
// there: "user*" matches the keys user_id and username, "*" any entry.
// A descriptor written
// with key "a_b" and no value matches the entry key "a_b" alone; in the
// reference, the entry a=b finds it too (and a file with both "key: a_b"
// and "key: a, value: b" is refused as a duplicate).
//
// is_negative_hits, a refund, is ignored by the reference (at the version
// checked, v1.4.1-0.20260122083618-3fb702589d36), which spends the hits
// like any others; sluice checks such a descriptor without spending, as
// its stores cannot give back what was spent. In the default mode, a
// limit counts the hits it refuses only within its room of 2×its limit+1
// (see above), where the reference counts every hit. A window that one
// limit alone writes answers as the reference's does. Where limits of
// different counts write one window (a reload that raises
// requests_per_unit, or a configured limit and a smaller override of its
// unit), the smallest one's answers are still the reference's, but a
// larger one does not see the hits the smaller refused past its room, and
// can admit where the reference refuses: configured at 20 an hour, 18
// hits, then 3 refused by an override of 3 an hour, and the configured
// limit admits a 19th hit, which the reference, counting 22, refuses.
// What a limit admits still keeps the count within it. In a
// directory, a symbolic
// link to a directory is followed; the reference cannot read it and skips
// it. The reference's local over-limit cache is the store's business
// (store/redis has an exact deny cache).
package rls
