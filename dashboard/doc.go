// Package dashboard is the web page of a sluice server: what its limits do,
// as people understand rate limiting best, by seeing it. One column per
// second, what passed in green, what was refused (429) hatched red.
//
// The page has two parts. Live shows every decision the server makes, one
// row per policy, over the last minutes; it polls the server every 2
// seconds. The playground replays traffic against every algorithm with
// package sim, a built-in scenario or pasted CSV, and shows the totals and
// the picture.
//
// # Where to start
//
// [New] returns a [Dashboard], an [http.Handler] to mount on the admin
// listener; call [Dashboard.Record] for every decision, and
// [Dashboard.RecordShadow] for a shadow policy's:
//
//	d := dashboard.New(dashboard.Options{Logger: log})
//	admin.Handle("/", d)
//	…
//	d.Record(policy, decision.Allowed)
//	d.RecordShadow(shadowPolicy, decision.Allowed)
//
// Mounted under a prefix, strip it: admin.Handle("/dash/",
// http.StripPrefix("/dash", d)). The page links relatively.
//
// # Endpoints
//
//	GET  /                 the page
//	GET  /static/…         its script, style sheet and icon, embedded
//	GET  /api/live         live decisions as JSON ([Live]); ?seconds=N
//	GET  /api/live.svg     the same, drawn: what the page shows
//	GET  /api/scenarios    the built-in scenarios ([ScenarioInfo])
//	POST /api/sim          run a simulation ([SimRequest] → [SimResponse])
//
// Errors are application/problem+json ([Problem]), an unknown path's 404
// and a wrong method's 405 (with Allow) included; a CSV error names its
// line. POST api/sim reads at most Options.MaxBody bytes (413 beyond),
// arriving within Options.Timeout (408 beyond), parses the traffic and
// runs at most Options.MaxRunning simulations at once (429 beyond) for
// at most Options.Timeout each (503 beyond), and refuses requests from
// pages of other origins (403). A client gets Options.Timeout more to
// take its answer, after which its connection is cut: one that reads
// nothing does not keep its place among MaxRunning. The page and its
// files are revalidated at every load, and carry ETags so that an
// unchanged one costs a 304.
//
// # The page
//
// Plain HTML, SVG and one script file, embedded with go:embed: no build
// step, no external asset, usable offline. Every response carries a
// Content-Security-Policy that allows only the dashboard's own script and
// style sheet; the script inserts what the server sends as text or as
// parsed SVG, never as HTML. The pictures are drawn on the server: live
// rows by this package in the style of package sim, the playground's by
// sim.WriteSVG. Their rows, columns and the playground's totals carry
// their counts as data-* attributes (data-policy, data-algorithm,
// data-setup, data-passed, data-refused, and on live rows and columns
// data-shadow-refused) for scripts and tests. A link such as
// ?scenario=flood&run=1 opens the playground on a scenario and runs it.
//
// # Live counts
//
// A row counts what its policy decided, so it says "allowed", not
// "passed": a request is refused whole, and one that a policy allowed
// may have been refused by another, its client getting the 429 and the
// first policy's limits counting nothing. A row's allowed may then exceed
// its limit; sluice serve's sluice_requests_total counts what clients
// got. A shadow policy refuses nothing: what it would have refused
// (LivePolicy.ShadowRefused) counts among its allowed (Passed), drawn in amber on
// top of the green, and not in the row's refused share, which stays what
// clients got.
//
// Each policy has a ring of per-second counters (passed, refused, and of
// passed, shadow refused) as long as Options.Window; Record takes a read
// lock on the map and the policy's own lock, and allocates only for a
// policy's first decision. There are at most Options.MaxPolicies rows:
// MaxPolicies-1 policies get rows of their own, the rest share the row
// [Other]; a policy idle for the whole window gives its place up.
//
// # Files
//
//   - dashboard.go: Options, New, the routes, the page.
//   - live.go: Record's counters, Live snapshots.
//   - livesvg.go: the live picture.
//   - playground.go: POST api/sim, SimRequest, SimResponse.
//   - problem.go: problem+json errors.
//   - web/: index.html (a template), static/app.js, static/style.css.
package dashboard
