// Package retry is the client side of rate limiting: an HTTP client that
// backs off when a server says "too many requests" instead of making the
// overload worse.
//
// A client that retries a 429 at once adds load exactly when the server
// has none to spare, and thousands of clients refused at the same instant
// come back at the same instant, in waves. This package retries the way a
// rate-limited server needs its clients to:
//
//   - it waits as long as Retry-After asks, and never less, measuring a
//     date from the response's Date rather than from its own clock;
//   - it holds one request for no more than Options.MaxWait in all, by
//     default as long as the longest Retry-After it honours: when the next
//     wait would take the sum of a request's waits past it, the caller gets
//     the server's 429 at once;
//   - without Retry-After it waits a random time in a window that doubles
//     with each attempt ("full jitter"), which spreads a herd evenly;
//   - it never waits for a retry its request's context deadline would cut
//     short: if the wait, and an attempt as long as the last one, would
//     cross it (reading the refused body counts too, and so does a
//     pacing wait), the caller gets the server's 429 at once. A server
//     that holds a request it admits (sluice's max_delay, NGINX's
//     limit_req delay=, a leaky bucket) may hold the retry too, up to its
//     own bound, a time no header tells: a deadline shorter than that
//     hold can end the retry while it is held, its unit spent;
//   - a retry budget keeps retries to a share of requests (10% by
//     default), so an outage cannot multiply the traffic of a fleet;
//   - it only repeats requests that are safe to repeat, and of errors only
//     those of the connection.
//
// It works with any server that sends the standard headers. Of sluice it
// uses only package rate, for its Clock: rate depends on nothing but the
// standard library.
//
// # Where to start
//
// Client returns an *http.Client ready to use; NewTransport wraps any
// http.RoundTripper. Options holds every knob, and its zero value is the
// recommended configuration. Transport's doc comment lists exactly which
// requests are retried.
//
// # Files
//
//   - transport.go: Transport, the retry loop, Backoff, which requests are safe.
//   - options.go: Options and their defaults, RetryInfo for the OnRetry
//     hook, and the Clock interface through which all time passes.
//   - budget.go: the retry budget, a ring of buckets over a sliding window.
//   - pacer.go: optional pacing from quota headers (Options.Pacing).
//   - headers.go: ParseRetryAfter and ParseRateLimit, usable on their own.
//   - sfv.go: a small Structured Field (RFC 9651) list parser for the
//     RateLimit and RateLimit-Policy fields.
//
// # Choices
//
// A Retry-After above Options.MaxRetryAfter is not retried: the response
// goes back to the caller, who can read the header and decide. Retrying
// earlier would break the server's request; waiting minutes inside an
// http.Client call is rarely what the caller wants. For the same reason
// Options.MaxWait bounds the sum of one request's waits, pacing waits
// included: without it, a server answering every attempt with a
// Retry-After of five minutes would hold a call for fifteen. By default it
// is MaxRetryAfter, so that a call waits no longer in all than one wait
// may take; the jitter on a Retry-After shrinks to fit what is left.
//
// Retry-After values are honoured with up to one Options.Base of extra
// jitter, never less. A decimal number of seconds ("1.5"), which the RFC
// does not allow but some servers send, is read as it is meant. A value
// that cannot be read at all (garbage, a negative number, a date in a
// format HTTP does not use) is taken for one second, the least a server
// can ask for: it did ask for a wait, and the first backoff is far
// shorter. A date is read in HTTP's three formats, and also as an
// IMF-fixdate whose zone is UTC, UT, +0000 or -0000 (what Go's
// time.RFC1123 and RFC1123Z write for a UTC time), which mean GMT all the
// same, as RFC 9110 asks recipients to read dates robustly; an IMF-fixdate
// in any other zone is unreadable. The two obsolete formats are read only
// as RFC 9110 writes them, in GMT (an asctime date names no zone): Go's
// parser would read "Tuesday, 01-Dec-26 00:00:10 EST" at the offset EST
// has in the machine's own zone, five hours off GMT in New York and none
// where EST is unknown, so the same answer would ask for a different wait
// on every machine. A response's Date is read by the same rule: one in
// another zone is not read, and the client's clock stands in for it, as
// when there is none. A number of seconds too large to represent saturates
// (as RFC 9111 prescribes for delta-seconds) and so exceeds the cap. A
// Retry-After that arrives more than once (two field lines, or a line a
// proxy joined into "5, 60") is read as its longest value, so the client
// comes back after every wait it was given, not after the first.
//
// Of errors, only those of the connection are retried: a net.Error (a
// failed dial, read or write, a timeout), a connection the server closed.
// An error the Transport does not know is more likely one every attempt
// would meet (an unsupported scheme, an invalid header) than one another
// attempt would avoid, and retrying it would spend the budget for nothing.
// A failed dial is retried even for a POST: the request never left, so
// sending it again repeats nothing. Some connection errors are not
// retried all the same, as no attempt would get past them: a server
// certificate that fails verification, a TLS alert from the server (it
// refused the client's certificate, say), a server that does not speak
// TLS, an address that cannot be dialled as written (an invalid port).
//
// Reading a refused body, which lets the retry reuse its connection, is
// bounded in time as in size: a quarter of a second, then the body and
// its connection are given up, so a 503 whose body stalls cannot hold the
// call.
//
// Pacing is off by default. When on, and a host reports r requests left
// until a reset t away (RateLimit, RateLimit-Policy, or the older
// X-RateLimit-Remaining and X-RateLimit-Reset), and r is at most
// Options.PaceThreshold, requests to that host leave t/(r+1) apart, and
// none later than the reset: the report says nothing of the quota after
// it, so requests beyond its r+1 slots all leave at the reset, and the
// reports of their responses space the next ones. A reset more than a day
// away is not believed, being most likely a misread field (a Unix time in
// milliseconds, say), and its quota is ignored. A reset given as a Unix
// time is measured from the response's Date, as a Retry-After date is.
//
// Pacing waits never stack on other waits. Before a retry the Transport
// waits once, the longer of the retry's own wait and the time to the
// host's slot, and holds that one wait to Options.MaxRetryAfter, to what
// is left of Options.MaxWait, and to the deadline, as it holds a
// Retry-After: beyond any, the caller gets the refusal at once. A first
// attempt has no refusal to give back: when its slot lies beyond
// MaxRetryAfter or MaxWait, or leaves no time before the deadline
// for an attempt as long as the host's last, it is sent at once, books no
// slot, and the server decides. It is sent rather than answered with a
// refusal of the Transport's making, because the slot may be far only
// because a quota is spread thin (ten requests left for a day are slots
// hours apart) while the server would accept the request now, and because
// a caller should see the server's answer, not a guess at it. Holding it
// for MaxRetryAfter and sending it anyway would keep the caller minutes
// for nothing, and release every request held so into the same spent
// quota together.
// A request whose caller gives up while it waits for its slot gives the
// slot back, so the requests after it do not wait for a send that never
// happens.
//
// # Testing
//
// All time goes through Options.Clock and all randomness through
// Options.Rand, so tests drive a fake clock and a seeded source and never
// sleep. The one exception is the bound on reading a refused body: like
// net/http's own timeouts it bounds I/O on a real connection, which a fake
// clock does not drive, and so it is real time. The package's own tests
// run a real HTTP server on loopback whose limiter reads the same fake
// clock as the client.
package retry
