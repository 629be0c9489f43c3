// Package redis is the shared store: every key's state lives in Redis, so
// any number of instances behind a load balancer enforce one limit
// between them, not one each.
//
//	s, err := redis.Dial("redis://localhost:6379", redis.Options{Prefix: "sluice:"})
//	...
//	d, err := s.Decide(ctx, rate.Request{Key: "user=42", Limit: lim, Cost: 1})
//
// Each script call is bounded, by DefaultCallTimeout (a second) unless
// Options.CallTimeout says otherwise. In production, bound it by what a
// request can wait (sluice serve takes 50ms) and wrap the
// store in a [sluice.Fallback] with a Timeout of -1, so that the store's
// bound, one timer per script call, is the only one; the Fallback decides
// by a failure mode (fail open, fail closed, or a local memory store with
// each instance's share) while Redis is down. Under a policy file
// (httplimit.Middleware, grpclimit.New), whose policies each say what a
// store failure does (on_store_error), give the Fallback Mode
// sluice.FailError: in another mode it decides for every policy first. A call that fails on its
// connection (Redis restarted, and the client's connections to the old
// process are dead) is sent again, up to four times, before it counts as
// a failure, so a restart alone fails no decision. A call that the client
// failed at another call's deadline (it closes a connection at the
// deadline of the call on it, and fails the calls queued behind) says so,
// and the Fallback counts it against Redis only as a deadline: once Redis
// has answered nothing for longer than MaxSilence.
//
// An error does not always mean that nothing was decided. A call whose
// connection broke after Redis ran the script (a proxy or the network cut
// it before the reply) is decided again by its retry, and counts twice; a
// call that times out or is given up while on the wire may have been
// decided in Redis all the same, and has consumed. Both err on the side
// of refusing: Redis never admits more than a limit allows.
//
// # One script call per decision
//
// A decision reads the key's state, steps it and writes it back, and
// between instances that must be one atomic step. Each decision is one
// EVALSHA of scripts/decide.lua (on NOSCRIPT, after a restart or failover,
// the client sends the script itself by EVAL, which loads it). The script
// is the Lua twin of package rate's steps: the same integer arithmetic on
// microseconds, the same exact fractions for rates like 3 per 7s, the same
// behaviour when time goes backwards. The
// conformance suite (store/storetest) holds the two to the same decisions,
// field by field.
//
// Lua's numbers are float64s, exact for integers below 2^53: the script
// agrees with the Go steps while every instant it writes, the Redis clock
// plus what the limit may be owed (a bucket's burst times its emission
// interval, a window's period), stays below 2^53 µs since the epoch, the
// year 2255. For every limit whose burst refills within a year, that is
// until 2254; the longest a limit may be (2^52 µs, 142 years) holds until
// 2112. Past it the script takes the state for another's and starts the
// key fresh.
//
// The time is Redis's (TIME), never the caller's, so instances whose clocks
// disagree still share one timeline.
//
// All the limits of one request (DecideAll) go in the same script call and
// are decided all or nothing: every new state is computed, and written only
// if all allow. (On a Redis Cluster, that holds for keys in one slot; see
// below for keys in several.)
//
// The script is written for Redis's CPU: it defines few functions (each
// is a new closure on every call) and none per key, calls few library
// functions, and
// keeps states as packed binary numbers rather than text to parse. It
// costs Redis about as many instructions per decision as
// go-redis/redis_rate's GCRA script (see the bench module).
//
// A sliding_log is the exception: its cost grows with its log. The log
// keeps a run, 16 bytes of Redis memory, per distinct microsecond at
// which it admitted units, up to its limit's Count (at most
// rate.MaxLogCount, 65,536: a megabyte), and every decision reads every
// run of it (an admit also writes it back). A client at a steady rate
// makes a run per request, so a log soon holds about Count runs. Measured
// on a 2-core VM, a decision costs Redis about a quarter of a microsecond
// of CPU per run: 0.3-0.4ms at 1,000 runs, 4-5ms at 16,384, and at 65,536
// 13-19ms for an admit, 11-16ms for a refusal, during which Redis serves
// nothing else. For large counts choose sliding_window: three numbers
// per key and a constant cost, whatever the count, with the previous
// window weighted rather than every unit's time kept.
//
// # Keys and Redis Cluster
//
// The Redis key of a request key k is Options.Prefix followed by k if k
// has a hash tag (a non-empty {…}), and by {k} otherwise. So by default
// every key is its own tag and keys spread evenly over a cluster's
// masters. Keys with a common tag ("{account=7}:per-second" and
// "{account=7}:per-day") live in one slot, and a request over them is
// decided in one script call, exactly all or nothing. A single server or a
// Sentinel setup has no slots and takes any keys together. It follows
// that k and {k} name one state: a caller that takes keys from clients
// writes their braces out (sluice.Limiter does), so that no client can
// name another's key or pick its slot.
//
// sluice serve sets no Prefix: package policy's keys carry their own hash
// tag, {prefix:policy:parts}:tag, so that the limits of one key of a
// policy share a slot ({sluice:api:ip=203.0.113.7}:bc740a3e); the Envoy
// service's, rls:domain:..., hold no braces, and each is stored whole
// inside its tag. An ACL key pattern or a SCAN pattern for them is
// {sluice:* (and {rls:*), never sluice:*. With a Prefix, keys read
// Prefix{k} and the pattern is Prefix*.
//
// Some keys must not share a tag: a login is limited per account and per
// IP, and the per-IP counter must be one counter whichever account it is
// combined with. A request whose keys span several slots is decided in
// phases. First every slot's part is checked, all at once: the script
// steps it without writing anything. If any part would be refused, the
// request is refused and nothing anywhere consumed. Otherwise each part is
// decided for real, one slot after another in the order of the slots,
// stopping at the first refusal. Without a concurrent caller, that gives
// exactly what one atomic call would give, decision by decision. With one,
// a part may be refused at its commit although it passed its check
// (someone spent in between): the request is refused, and the parts
// committed before it are given back what it took there, all at once, by
// the script too. A refund leaves each key as the request's absence would
// have left it: exactly, whatever other commits and refunds came in
// between at the commit's instant and in whatever order raced requests
// are refunded, unless other decisions on the key came in between at
// later instants, when a bucket may get back less (what it would have
// refilled past full without the request). So across slots a refused
// request ends up consuming nothing, and no limit admits more than it
// allows, since every commit and refund is the script's own atomic step;
// but see below for a bucket refunded after both a later decision and
// the refund of an earlier commit. Races and their refunds are counted
// (Stats.CrossSlotRaces, CrossSlotRefunds; a refund counts when its call
// succeeds, whatever it found to give back).
//
// What does not hold across slots: between its commit and its refund, a
// refused request's units are taken, and others may be refused for them
// (those refusals stand, in the deny cache too). A refund that fails
// (Redis unreachable, the caller's deadline passed) leaves them taken, as
// if the request had been admitted there; it is counted
// (Stats.CrossSlotRefundErrors), and the request is refused all the same,
// without an error. A commit that fails (Redis unreachable, the context
// ended) returns its error after the parts committed before it have
// consumed, and they are not given back: the failed call may have run in
// Redis all the same, and the caller's failure mode, which now decides the
// request, may admit it. Last, a refund tells the state its commit wrote,
// as others' decisions have changed it since, by instants that only move
// forward while the key exists: a key that became fresh after the commit
// (expired, or deleted by a decision) and was written anew by a master
// whose clock had stepped back, or at the very microsecond of the
// commit, may be given back units it does not hold, at most the
// request's. Nor does a bucket's state tell which refunds took what: when
// raced requests on a key are refunded in the order of their commits
// (not the reverse) and another decision on it comes in between at a
// later instant, the later refund may give back nothing, or up to the
// request's cost more than its absence would have. A request across
// slots costs a script call per slot for the check (in parallel), one per
// slot for the commit (in turn), and after a race one per slot committed
// before it for the refund (in parallel).
//
// A key holds its algorithm in one byte and the state's fields as
// big-endian float64s (a sliding log keeps runs of equal timestamps).
// Anything else under a key (another algorithm's state, a value of another
// type, or of this format with numbers the script never writes: an
// infinity, a NaN, a negative count) reads as fresh, and the next
// decision that writes replaces it. It
// expires by itself when its state would be fresh again (after the
// decision's ResetAfter), and is deleted when a decision leaves it fresh,
// so idle keys cost Redis nothing. Nothing bounds how many live keys
// callers make, though (a key per client value until its state is fresh,
// a monthly quota's until the month's end): size Redis's maxmemory for
// them, and choose its maxmemory-policy knowing that an evicted key starts
// afresh, while noeviction fails with OOM every decision that would write
// (docs/serve.md, "Running Redis for sluice").
//
// # What Redis must allow
//
// A decision is EVALSHA, or EVAL after NOSCRIPT; inside, the script calls
// TIME, GET, SET (with PX) and DEL, which an ACL checks too. On a Redis
// Cluster the store reads CLUSTER SLOTS (see below), and the client reads
// it too (CLUSTER SHARDS from Redis 8 on) and sends ASKING during a
// resharding; it asks a single server the same once, to tell whether it
// is a cluster. The client opens each connection with HELLO. Dial turns
// rueidis's client-side cache off, which the store never reads, so the
// client sends no CLIENT TRACKING and falls back to RESP2 on a Redis
// without HELLO; a client given to New or DialOption should have
// DisableCache set too, or it needs CLIENT TRACKING and RESP3 (Redis 6).
// The script needs Redis 5 or later: it writes after reading TIME, which
// Redis allows when it replicates a script by its effects, its default
// from 5 on.
//
// # When the cluster changes
//
// Resharding moves a slot from one master to another, key by key. The
// client follows MOVED and ASK by itself; a script on several keys (a
// request over keys with one tag, or a coalesced batch) that neither
// master holds all of while they move, or none of which exist yet, is
// answered TRYAGAIN. Redis answers all three before it runs anything, so
// sending the script again counts nothing twice. A coalesced batch
// answered TRYAGAIN goes again at once as its callers' groups, each in a
// call of its own: a single key is served on one side or the other. A
// group of several keys is sent again after pauses, within its caller's
// deadline, CallTimeout and a second, until its slot has moved; if the
// resharding stopped midway, it fails with the TRYAGAIN (counted in
// Stats.TryAgain) until redis-cli --cluster fix ends the move.
//
// When a master dies, decisions on its slots fail at once (its address
// refuses connections), and once the other masters agree it has failed
// (the node timeout), with Redis's default cluster-require-full-coverage,
// every decision fails with CLUSTERDOWN until its replica has won an
// election, about a second later. A [sluice.Fallback] decides those by its
// failure mode, master by master: the store tells it which master holds a
// key ([Store.Partition]) and which one a failed call went to
// ([Store.FailedPartition]), so until the node timeout only the dead (or
// hung) master's keys go to the failure mode, and the other masters
// still decide theirs; the CLUSTERDOWN that follows fails every master,
// and each is down on its own until it answers a probe. The store reads
// which master holds which slots (CLUSTER SLOTS) in New, and again, at
// most twice a second, after a call fails, and every 30 seconds while
// calls go on (a resharding fails none), so a replica promoted in a
// dead master's place is a master of its own, and the dead one, holding
// no slot, no longer counts. Decisions then resume by themselves: failed
// calls make the client refresh its map of the cluster, and the script is
// loaded on the new master on NOSCRIPT. What the dead master decided and had not yet
// passed to its replica is lost, since Redis replicates asynchronously:
// those keys have counted less. A failover by CLUSTER FAILOVER, which
// waits for the replica to catch up, fails and loses nothing. A master
// restarted empty answers CLUSTERDOWN until it has rejoined the cluster
// (the node timeout), and then loads the script on NOSCRIPT.
//
// Through a Sentinel, the store follows the master it names: when the
// master dies, decisions fail (connection refused) until the Sentinels
// have promoted its replica (their down-after-milliseconds, then about a
// second), and succeed again within a few round trips of that, with no
// restart; an old master that comes back is not used, the Sentinels
// naming the new one. A store pointed at a replica fails every decision
// with Redis's READONLY, which a sluice.Fallback takes for down. Both
// failovers lose what the old master had not yet passed to its replica:
// those units are admitted again, once each. Redis's min-replicas-to-write
// (with min-replicas-max-lag) bounds that loss to the lag it allows, at
// the price of NOREPLICAS errors, decided by the failure mode, while no
// replica keeps up.
//
// Each key's decisions take the TIME of the master that holds it: when a
// key moves to another master, its decisions continue on that master's
// clock, and one that is behind reads as time going backwards. The steps
// allow for it, as package rate's do: nothing is minted, but a key used
// just before the move is decided as at its latest time, and so waits up
// to the clocks' gap longer than its limit alone would make it (an hour's
// gap holds a busy key at its limit for an hour). The same holds when a
// master's clock steps back. Keep the masters' clocks synchronised, and
// let NTP slew them (chrony's makestep only at boot) rather than step.
//
// # Coalescing
//
// Under load, much of what a script call costs Redis does not depend on
// the work inside it: reading the command, entering the script, TIME,
// writing the reply. So by default concurrent decisions share calls: while
// a couple of calls are on the wire, new decisions queue, and the next call
// carries all of them (up to 256 keys, per cluster slot: a batch never
// spans slots, let alone nodes), as long as their work stays bounded: a
// sliding_log request weighs its limit's Count (see above), so a batch
// of logs costs Redis about what a full batch of other requests does, and
// a log with a Count above 4,096 goes alone. Each caller's requests
// remain their own group, decided all or nothing, independently of the
// other groups in the call. A caller alone never waits for company: its decision goes out at
// once. A caller that gives up while queued (its context ends, or it has
// queued for longer than Options.CallTimeout) is left out of the next
// call: nothing is decided for it. Options.DisableCoalescing turns it off.
//
// # The deny cache
//
// Once Redis refuses a request with RetryAfter T, the store refuses the
// same request (same keys, limits and costs) locally until T has passed,
// or a second at most, without a round trip: nothing another instance
// does can make it pass sooner, since others can only spend more. A flood
// of refused traffic then costs Redis one call a second (or per RetryAfter,
// if shorter) per instance, not one per request. The second bounds how
// long a count Redis lost (a restart without persistence, FLUSHALL, a DEL
// to unblock a client, eviction) is still refused here while the other
// instances admit it. While Redis is down, a sluice.Fallback asks the
// cache (Store.DecideCached), and a refusal holds until T: it is the last
// word Redis gave. The local refusal reports the RetryAfter and ResetAfter counted
// down on the local clock, and the Remaining Redis reported: the refusal
// Redis made, as of then. What others have spent since (on this instance
// too, by requests of other costs) may push the key's real wait further,
// which Redis would tell: the cached wait is then short, never long, and
// the request, back when it has passed, is refused again with the rest of
// its wait, as a RetryAfter is whenever others spend meanwhile. The cache is
// bounded (Options.DenyCacheSize) and can be turned off
// (Options.DisableDenyCache).
//
// That holds while a key is decided under one limit. A key's expiry is
// set by the limit that last wrote it, and a refusal writes nothing: a
// key refused under a slower limit than the one that wrote it (a longer
// period, a lower rate) may expire, fresh, before the refusal's
// RetryAfter, and Redis then admits what the cache still refuses. Keys
// that change limit should change name: package policy and the Envoy
// service put the limit's period (and a bucket's whole limit) in their
// keys, so a reload that changes them starts new keys.
//
// # Stats
//
// [Store.Stats] returns counters, read atomically and cheap enough for
// every metrics scrape: decisions and refusals, script calls, deny-cache
// hits and entries, coalesced batches, requests across slots, their races
// and refunds, and errors.
//
// # Files
//
//   - store.go: Store, Options, New, Dial; script calls, their retries
//     and TRYAGAIN; argument and reply encoding.
//   - scripts/decide.lua: the steps in Lua, the all-or-nothing commit, the
//     check that writes nothing, and the refund of a commit.
//   - crossslot.go: requests whose keys span several cluster slots, and
//     what a race between their phases gives back.
//   - coalesce.go: sharing script calls between concurrent callers.
//   - stats.go: Stats.
//   - keys.go: Redis keys, hash tags and cluster slots.
//   - partition.go: which master holds which slots, for sluice.Fallback.
//   - denycache.go: the deny cache and why it is exact.
package redis
