// Package policy reads rate limit policies from a YAML file and applies
// them to requests, for any transport: httplimit and grpclimit are thin
// layers over its Enforcer.
//
// A policy file is one YAML document that lists policies. Each says which
// requests it matches, how it keys them, and the limits it applies:
//
//	policies:
//	  - name: search                 # in keys, headers, logs and metrics
//	    match: "GET /search"         # a net/http ServeMux pattern
//	    key: ip                      # one bucket per client address
//	    limits: ["10/s burst 20", "5000/d"]
//
// examples/sluice.yaml is a complete, commented file, and
// examples/sluice.schema.json its JSON Schema for editors.
//
// # Semantics
//
// A request is decided against every enforcing policy it matches, all at
// once through the store's DecideAll: it passes only if every limit of
// every key allows it, and a refused request consumes nothing anywhere
// (on a Redis Cluster, but for the race across slots described below,
// after Keys, in "A JSON body is no form"). Shadow policies (shadow:
// true) are decided separately, reported to the Observer and logged, and
// never refuse. They are decided only for
// requests the enforcing policies let through: a request those refused,
// or could not decide, consumed nothing, and enforced beside them a
// shadow policy would not have counted it either.
//
// Matching: match is a ServeMux pattern ("POST /login",
// "api.example.com/export/{id}", "/analytics/" for a subtree), or a
// mapping of path, host, methods, headers (present, absent or equal) and
// authenticated (whether the request has a user: see Users below). Patterns are matched by
// a ServeMux of the policy's own, so they mean what they mean to
// net/http, on the clean path a request means: //login, /a/../login and
// /x/%2e%2e/login are /login, as a router or an upstream that cleans
// paths would serve them (where ServeMux itself redirects, both the
// unclean request and the one that follows the redirect count). Escaped
// unreserved characters (letters, digits, - . _ ~) are decoded before dot
// segments are resolved, as NGINX, Apache and Tomcat do; there alone the
// match differs from ServeMux's, which takes %2e%2e for a segment named
// ".." (a pattern /x/{seg}/login matches it there, not here). An escaped
// reserved character stays so: /x%2F..%2Flogin is one segment, as to
// ServeMux (Apache and Tomcat refuse it by default); NGINX decodes %2F
// too and serves it as /login, which no policy on /login decides unless
// paths.decode_slash says so (below).
// Hosts and methods match whatever their case, and hosts without a final
// dot (API.Example.com. is api.example.com, post is POST), as the
// gateways and applications that serve such requests read them; a method
// key counts them as one, and HEAD as GET (a policy on GET matches HEAD
// too, so a client alternating the two must not have twice the limit).
// The method is the request's own: no override (an X-HTTP-Method-Override
// header, a _method form field) is read, so where the application honours
// one, match such a route by its path alone, whatever the method. A
// pattern's host has no port (a policy matches its host on every port, an
// IPv6 address with or without one) and no wildcard (*.example.com is
// refused), and is ASCII, as clients send it. A pattern's path has no
// query string or fragment: one with a ? or a # is refused. Nor has it
// another router's syntax, which ServeMux would take for literal text
// that no request meant has: a glob (/api/*, /api/**, /v*/users),
// Express's /users/:id, Flask's /api/<id> and regular expressions
// (^/re/.*$, whose ^ would be a host) are refused, with the pattern to
// write (/api/ for a subtree, {id} for one segment); a literal *, or a :
// that starts a segment, is written escaped, %2A or %3A.
//
// A header is present when it is given with a value that is not blank:
// spaces and tabs alone are no value, as HTTP/1.1 servers trim them to
// nothing while HTTP/2 and gRPC pass them on, and a header:NAME key part
// applies to a request exactly when its header is present. For the same
// reason a value's leading and trailing spaces and tabs are no part of
// it, in a key, an equals condition, a user, a plan or an API key: " k"
// is the key k over every protocol, not a fresh counter. A header
// given more than once is present, and equal to a value if one of its
// values is, as servers differ on the value they read. Conditions that
// contradict each other (present: false beside present: true or equals,
// on one header) match no request, and get a warning. Host is no header
// field of a request (net/http moves it to Request.Host), so conditions
// and key parts on it are refused. No match means every request.
//
// Paths are otherwise matched as ServeMux matches them: in their case
// (/LOGIN is not /login), with their final slash (/login/ is not /login,
// and /api is not in the subtree /api/: ServeMux redirects it there), and
// with a ;parameter part of its segment (/login;jsessionid=1 is not
// /login). An
// application that serves these spellings as the path (Express's default
// router and ASP.NET Core: case and a final slash; Tomcat, Jetty, so
// Spring: ;parameters) lets a client past the policies on the path with
// them, unless the file's paths section says so:
//
//	paths:
//	  ignore_case: true             # /LOGIN is /login
//	  ignore_trailing_slash: true   # /login/ is /login, /api is /api/
//	  ignore_path_parameters: true  # /login;jsessionid=1 is /login
//	  decode_slash: true            # /api%2Fsecret is /api/secret
//
// ignore_case matches paths and patterns with their ASCII letters in lower
// case, escaped ones decoded first (%4C is l); an escaped non-ASCII letter
// (%C3%89, É) is compared as written. Wildcard names keep their case, and
// path:NAME keys get their value in lower case: /users/Bob and /users/bob
// count as one. ignore_trailing_slash registers each pattern in its other
// form too: /login also matches /login/, /users/{id} /users/7/, and the
// subtree /api/ (or /api/{$}) /api. ignore_path_parameters cuts, from every
// segment, a ; and the rest of the segment before dot segments are
// resolved, as Tomcat does (/x/..;/login is /login); an escaped %3B is no
// parameter, and a pattern with a ; is refused, as it would match nothing.
// decode_slash reads an escaped slash (%2F) as a slash, before dot
// segments are resolved (/x%2F..%2Flogin is /login), as NGINX serves it
// and gorilla/mux (without UseEncodedPath) and gin (without UseRawPath)
// route it, on the decoded path: without it, such an application serves
// /api%2Fsecret as /api/secret, which no policy on /api/secret decides.
// Leave it off for net/http's ServeMux, chi and echo, which keep %2F
// within its segment (/files/{name} matches /files/a%2Fb), as sluice
// does; a pattern with %2F is refused under it. All four default to
// false.
//
// Keys: a key is built from parts (ip, user, method, global,
// header:NAME, path:NAME for a wildcard of the pattern, form:NAME for a
// form field from a url-encoded or multipart body or the query string,
// never from a JSON body; the handler still gets the body whole); key:
// [ip, user] combines parts into one key, keys: [user, ip] limits each
// separately, with the same limits (a login must pass both). global has
// one value for every request: key: global is one counter for all the
// requests the policy matches, whoever sends them (/search at most
// 1000/s in total), stored as {prefix:policy:global=}:tag (with limits
// per plan, a total per plan: global=pro). One client
// can then spend the total for everyone: pair it with a per-client key,
// keys: [global, ip], a total and a counter per address that a request
// must both pass. On Redis every request of the policy meets that one
// key, in one Cluster slot: a hot key, whose master decides all of the
// policy's traffic. global stands alone in a key (beside other parts it
// would add nothing, and load refuses it) and names no override, as no
// request's value differs. A key with a part the request lacks does not
// apply to it. The default key is
// ip; every request whose client has no IP address (a peer on a Unix
// socket, with nothing trusted to say more) has the one ip value
// "unknown", and so shares one counter. Stored keys read
// {prefix:policy:part=value|part=value}:tag, the braces a Redis Cluster
// hash tag that keeps a key's limits in one slot; values longer than 64
// bytes or holding | { } #, spaces or non-printable bytes are replaced by
// a hash, so a
// client can neither grow keys nor forge their structure. A value is
// compared byte for byte by default: a form:NAME or header:NAME key on an
// account counts "Victim@example.com", "victim@example.com" and
// " victim@example.com" apart, while an application that looks accounts
// up case-insensitively (as most do e-mail addresses) or trims them
// serves them as one, so that a guesser spreads its attempts on one
// account over its spellings. fold_key: true puts the values of a
// policy's user, header:NAME, path:NAME and form:NAME parts in one form
// before they are keyed: trimmed of white space at either end and in
// lower case (strings.ToLower: Unicode's simple mapping, not full case
// folding, so ß and SS stay apart). Its overrides' values for these parts
// are folded alike, so when: {form:username: Partner@Example.com} applies
// to partner@example.com; ip and method are unchanged, as are #many and
// #unread. An application with its own normalisation (NFKC, or
// dots in Gmail addresses) may still serve more spellings as one: key it
// on the header its authentication layer sets (the account as it looks
// it up), or on user.
//
// A JSON body is no form: on a JSON login, a form:username key finds the
// field only in the query string, where the client writes what it likes,
// or finds none and does not apply. Key such a route by a header the
// authentication layer sets (header:NAME, or user), or by ip. Different
// limits per key (5 attempts per account and 20 per address in 15
// minutes) take a policy per key on the same route; a request is decided
// against both at once, all or nothing, so one that either refuses counts
// in neither (on a Redis Cluster, where the two keys lie in different
// slots, one that passes both checks and is refused at the later commit,
// another instance having spent in between, is given back on the key
// committed first what it took there, and its units are taken only for
// that round trip, or for good if the refund fails; see package
// store/redis, whose Stats.CrossSlotRaces and CrossSlotRefundErrors,
// sluice serve's sluice_redis_cross_slot_races_total and
// sluice_redis_cross_slot_refund_errors_total, count them):
//
//	policies:
//	  - name: login-account
//	    match: "POST /login"
//	    key: form:username
//	    limits: ["5/15m"]
//	  - name: login-ip
//	    match: "POST /login"
//	    key: ip
//	    limits: ["20/15m"]
//
// Reloads: the tag is a hash of what the key's state means. For the window
// algorithms (fixed_window, calendar days and months included,
// sliding_window, sliding_log) that is the algorithm and the window, not
// the count, so a reload that changes a count keeps the window's usage: a
// monthly quota lowered from 10000 to 5000 after 9000 were used refuses
// the rest of the month. For gcra, token_bucket and leaky_bucket, whose
// state is measured in their rate and burst, it is the whole limit: a
// changed bucket starts afresh. The prefix and the policy's name are part
// of every key, so renaming a policy, or changing the prefix, starts its
// counters afresh too. Two window limits of one policy over one window
// would count on one counter, and are refused.
//
// Users: a request's user (key part user, match authenticated) is the one
// the application names with WithUser (or httplimit's Identify, grpclimit's
// hook). `sluice serve`, which has no application in front of it, reads
// the file's user section instead: the header an authentication proxy
// names the user in, believed only from client_ip's trusted proxies, and
// given once (see Set.UserOf):
//
//	user:
//	  header: X-Auth-Request-User  # oauth2-proxy; Traefik forwardAuth's authResponseHeaders;
//	                               # NGINX auth_request_set and proxy_set_header
//
// The proxy must set the header on every request, replacing any a client
// sent: one it passes on lets the client name any user. `sluice serve`
// removes the header from every other peer's request, so it must be one
// that only the proxy writes: a file whose user.header or plans.header is
// a credential clients send (Authorization, Proxy-Authorization, Cookie),
// plans.api_key_header, or a header a policy reads from every client
// (header:NAME, a header condition) does not load, as every client's
// copy would be taken away from the upstream, or read as the client's
// own word. Libraries ignore
// the section unless told to read it (httplimit.Options{Identify:
// set.UserOf}). A file whose policies read the user and that has no user
// section gets a serve warning (Set.ServeWarnings): under `sluice serve`
// every request is anonymous to them.
//
// Plans: a request's plan selects a policy's limits (its plans mapping).
// It is the one the application names with WithPlan (or httplimit's and
// grpclimit's Plan hooks); else the one plans.api_keys maps the request's
// plans.api_key_header to; else the one plans.header names, read by the
// user section's rule: believed only from client_ip's trusted proxies (a
// file with a plans.header and no trusted proxy does not load), and given
// once (see Set.PlanHeaderOf); else plans.default. A listed API key thus
// wins over the header, and an unknown one falls back to the header, then
// to plans.default. A plan plans.names does not list is plans.default.
// The trusted proxy must set the plan header on every request, replacing
// any a client sent, as it does the user's.
//
//	client_ip:
//	  trusted_proxies: [10.0.0.5]  # the gateway that sets X-Plan
//	plans:
//	  names: [free, pro]
//	  default: free
//	  header: X-Plan
//
// sluice reads no tokens: to key or choose a plan by a claim of a JWT,
// have the gateway or authentication layer that verifies the token copy
// the claim into user.header or plans.header, from an address in
// client_ip.trusted_proxies.
//
// An API key plans.api_keys does not list gets no plan of its own. So
// that a client cannot make up keys for fresh counters, list every real
// key in api_keys, make plans.default the plan of anonymous requests, and
// give that plan no limits ([]) in the policy keyed by the API key: a
// made-up key creates no counter there, and meets the anonymous limit
// (per-ip):
//
//	plans:
//	  names: [anonymous, partner]
//	  default: anonymous
//	  api_key_header: X-API-Key
//	  api_keys: {pk_live_acme: partner}  # every real key, and its plan
//	policies:
//	  - name: per-key
//	    match: {headers: [{name: X-API-Key, present: true}]}
//	    key: header:X-API-Key
//	    plans: {anonymous: [], partner: ["1000/h"]}
//	  - name: per-ip
//	    key: ip
//	    plans: {anonymous: ["100/h"], partner: []}
//
// A header or form field given once keys as its value. Given more than
// once, it keys as #many, one value for all such requests, which no
// client can choose or vary: servers differ on the value they read (Go
// the first, of a url-encoded form the body's before the query string's,
// of a multipart one the query string's first; Django, PHP and Rails the
// last; PHP's $_POST, Django's request.POST and multer a form's from the
// body alone; Node and Rack a header's values joined), so no one value is
// the one the application acts on. A header is given more than once in
// two field lines (or metadata values); a form field twice in the body,
// twice in the query string, or once in each, or in a pair that a parser
// which also splits fields on ; finds and Go drops
// (username=a&x=1;username=b). A plan header or API key header given more
// than once names no plan. A form field that may lie past one of
// net/http's bounds on forms (10 MB of body, 1000 parts), or past a part
// of a multipart body net/http cannot read, keys as #unread, likewise one
// value for all such requests; a multipart body is read to its end, up to
// that bound, to know that the field is given once. So does a form field
// of a request described without its body (WithoutBody: a gateway's
// check) whose body would hold form fields, or of a form body net/http
// reads less of than other servers do (in a content coding, of a method
// in lower case, under several Content-Types or parameters mime refuses,
// or with a multipart part net/http skips that may name a field).
//
// Limits are written as rate.ParseLimit reads them. A daily limit with no
// algorithm named (1000/d) is a fixed_window over UTC days, as a monthly
// one (10000/month) is over UTC calendar months. Windows of several days
// (per 7d) are aligned to the Unix epoch, not to the calendar: a week's
// window starts on a Thursday, 00:00 UTC. Plans (see Plans above) select
// other limits per policy, and overrides give named keys their own: a key
// gets the limits of the first override that names it, and an override that
// could never apply, after one that names all its keys, is refused. An
// empty list, [], leaves a plan or an override's keys unlimited by the
// policy on purpose; limits left blank or null (pro: or limits: ~, as a
// template leaves them) say nothing, and are refused rather than read as
// [] or as the defaults, as is a policy with no priority whose every list
// is []. A limit that could never pass a request of the policy's cost is
// refused at load.
//
// Waiting: max_delay holds a request back rather than refuse it, when it
// would pass within that time. Under a gcra or token_bucket limit, a
// request past the burst is admitted with its unit reserved and held
// until it refills, so that requests held together go one after another,
// each at its unit's time, and one whose unit comes later than max_delay
// is refused at once (with the burst as NGINX's delay=, see
// docs/nginx.md); a leaky_bucket limit makes every request wait its turn,
// up to max_delay. Under a window limit (fixed_window, sliding_window,
// sliding_log) a refused request waits for its Retry-After, once, and is
// decided again: that wait reserves nothing, so requests refused together
// and decided again together pass as far as the window then admits, and
// the others are refused after waiting. The waits count from the store's
// decision: on Redis, the time its answer takes to arrive (a
// millisecond, up to the call timeout under load) comes on top, as the
// request may not go ahead before its unit is due. Waits use the
// Enforcer's clock and end with the request's context. A request is
// never held back for a wait its context's deadline cannot cover: it is
// refused at once instead, and takes no turn in a leaky_bucket's queue
// nor unit of a bucket. A request whose context ends while it waits its
// turn or unit (its client gone) keeps it, as NGINX's limit_req keeps a
// delayed request's excess: those behind it wait as if it had gone
// through. A server that shuts down bounds the waits by the end of its
// drain (see Drain, WithDrain): one that would outlast it is refused at
// once, and one already held past it is answered Unavailable with
// ErrDrained, rather than cut with no answer.
//
// Store failures: on_store_error is open (let the request through, the
// default), closed (503, not 429: the client did nothing wrong) or local
// (decide in this process, with each limit shared among instances, see
// rate.Limit.Share).
// A policy's on_store_error acts on the errors of the store the Enforcer
// is given. A store wrapped in a sluice.Fallback for its breaker, as
// `sluice serve` wraps Redis, must be one in FailError mode, which fails
// fast with an error: a Fallback in any other mode answers for every
// policy before the policies see a failure, so FailOpen (the zero
// FallbackOptions) turns a login's on_store_error: closed into open. The
// Enforcer asks such a Fallback who decided: a FailClosed refusal, which
// no limit made, is Unavailable (503, not 429) with the Fallback's
// RetryAfter, and a FailOpen pass is allowed, both with no limit to
// report (Outcome.Limit is nil) and reported as store failures whose
// error wraps sluice.ErrStoreDown; a FailLocal decision, its local
// store's, is a limit's, as the primary's is.
// Every failure is reported to the Observer; the first after a success,
// and the recovery, are logged. A call cut short because the request
// itself ended is not reported: the request is Unavailable, and nothing
// is logged or observed. (A store's breaker, sluice.Fallback, may still
// count it against a store that has answered nothing for a while: a hung
// one.)
//
// Priorities: with a concurrency section, requests in flight are bounded
// and each priority may fill only its share of the slots (low 50%, normal
// 80%, critical 100% by default), so low-priority work is shed first. A
// request's priority is the lowest one set by the enforcing policies it
// matches, normal if none sets one. A policy may set a priority and no
// limits: it only classifies. A request takes its slot before its keys
// are built, so a shed request has nothing of its body read for a
// form:NAME key. The slot is given back when the handler returns: the
// bound is on the requests being served, not on the work an upstream
// carries on with after its client (or a proxy in between) gave up.
//
// Responses: the response section says what `sluice serve` tells the
// clients it decides (see Set.Response): which families of rate limit
// headers it sends, and the type of its 429 problem bodies, an absolute
// URI. [] sends no rate limit headers at all (Kong's
// hide_client_headers); Retry-After, HTTP's own, still goes with every
// refusal. Libraries ignore the section unless they pass it on to
// httplimit.Options.
//
//	response:
//	  headers: [draft]  # RateLimit and RateLimit-Policy; legacy: X-RateLimit-*
//	  problem_type: https://example.com/problems/rate-limited
//
// # Where to start
//
// LoadFile (the whole of `sluice check`) and Load return a compiled,
// immutable Set, or an *Error listing every problem as file:line:col.
// A Set's Warnings list, in the same form, what loads but is likely not
// meant, above all requests a policy leaves unlimited: a plan it gives no
// limits, a key part (user, header:NAME, form:NAME) that requests may
// lack. `sluice check` prints them, `sluice serve` logs them, with the
// Set's ServeWarnings: what only `sluice serve` would not apply.
// NewEnforcer applies a Set to Requests against a sluice.Store.
//
// # Files
//
//   - load.go: the strict YAML reader: fields, messages, did-you-mean.
//   - set.go: Set, Policy, Limit and their precomputed header values.
//   - match.go: matching as ServeMux does, through a routing tree built
//     from each policy's patterns beside its mux, so that a request's path
//     is split once for all policies; path wildcards (read through the
//     mux); the paths a request means are internal/urlpath's.
//   - key.go: key parts and how values are written into keys.
//   - form.go: form fields for form:NAME parts, the body kept whole.
//   - request.go: Request, WithUser, WithPlan.
//   - enforce.go: Enforcer, Outcome, Observer: deciding, waiting,
//     fallbacks; overrides found by their keys' values.
//   - gate.go: the concurrency limit with priority shares.
//   - store.go: the store section (StoreConfig), which `sluice serve`
//     reads to choose its store; libraries ignore it.
//   - response.go: the response section (Response), which `sluice serve`
//     passes to httplimit; libraries ignore it.
package policy
