// Package server is `sluice serve`: one process that enforces a policy
// file for what stands in front of an API.
//
//   - A reverse proxy (Options.Upstream): allowed requests go to the
//     upstream through httputil.ReverseProxy, streamed as they come
//     (server-sent events, chunked replies) and with protocol upgrades
//     (websockets) passed through, but for an Upgrade to h2c, which goes
//     on as a plain request; refused ones get 429 from sluice. gRPC calls
//     pass over HTTP/2 (TLS, or h2c with prior knowledge, to an h2c://
//     upstream too), and sluice's own answers to them are gRPC's (see
//     grpcanswer.go).
//     The policies decide the request as the upstream gets it: without
//     the hop-by-hop fields ReverseProxy drops, those its Connection
//     field names included. A client that stops sending its body
//     (Options.BodyTimeout) or taking its response (Options.SendTimeout)
//     is cut off.
//   - Check endpoints for gateways that ask before they forward:
//     /check for Traefik's forwardAuth, /check/nginx for NGINX's
//     auth_request (which needs a 403 and an error_page to turn it back
//     into a 429; examples/nginx.conf is the recipe, tested with a real
//     NGINX).
//   - Envoy's rate limit service (Options.EnvoyConfigs), configured in the
//     reference service's own format, through package rls.
//   - An admin listener: /metrics, /healthz, /readyz, /debug/top (the
//     most refused keys), pprof, and the dashboard.
//
// # Where to start
//
// [New] loads the configuration, connects to the store and opens the
// listeners ([Server.Addrs] says where, useful with port 0); [Server.Run]
// serves until its context ends and then drains. [Server.Reload] reloads
// the files (SIGHUP in the command); the server also polls them, so the
// symlink swap of a Kubernetes ConfigMap is seen.
//
// # Redis down at start
//
// A Redis that is not there yet when the server starts (the connection
// refused, no route to it, no answer within the dial timeout, a name that
// does not resolve yet: see store.go) is an outage like
// any other, not a reason to exit: New logs it once and returns a server
// whose breaker (sluice.Fallback, in front of Redis) is down from the
// start, so each policy's on_store_error applies, /readyz says Redis
// does not answer and sluice_redis_down reads 1. A stand-in for the
// Redis store fails every call at once while the server tries to connect
// in the background with backoff (store.go); once it does, it swaps the
// store in, and the breaker's next probe brings Redis back. A Redis that
// answers and refuses (a password, TLS) still makes New fail with its
// error.
//
// # Reloads
//
// A configuration is loaded whole, validated, and its handlers built
// before one pointer swap puts it in force; requests in flight finish on
// the generation they started on. A file that does not load leaves the
// old configuration serving; the reason is logged (file:line:col) and
// counted in sluice_config_reloads_total{result="failure"}. Counters
// survive: a store key names the policy and its key, and a window limit's
// (fixed_window, sliding_window, sliding_log) its algorithm and window, so
// a changed count keeps the window's usage; a bucket's names the whole
// limit, so a changed one starts afresh (see package policy). The store
// itself, and
// the local store that on_store_error: local falls back to, are made once
// and shared by every generation; a change of the store section is
// logged and waits for a restart (sluice_config_restart_required says so
// meanwhile). The concurrency limit (concurrency:
// max_in_flight) counts the requests in flight across generations: right
// after a reload, those still in flight on the old configuration count
// against the new one's limit.
//
// # TLS
//
// With Options.TLSCert and TLSKey, the proxy and check listeners serve
// HTTPS and the gRPC listener TLS; the admin listener stays plain. Every
// handshake takes the certificate (and, with TLSClientCA, the client CA
// pool) in force, so a reload of the files (Reload, or the poller seeing
// them change) is one pointer swap: new handshakes see the new pair,
// connections already open keep theirs. A pair that does not load keeps
// the one in force, and is logged and counted as a failed reload.
//
// # Client addresses
//
// Only a trusted proxy (client_ip.trusted_proxies in the policy file) is
// believed about the client: its X-Forwarded-For, -Host and -Proto are
// passed on with this hop appended, and a gateway's X-Forwarded-Method
// and -Uri say what a check is about. From anyone else these headers are
// dropped or ignored, and so are X-Real-IP, Forwarded and the rest of the
// X-Forwarded- family, so no client can pick the bucket it is counted in
// or tell the upstream who it is. These headers spelled with underscores,
// dots or other signs for hyphens (X_Forwarded_For, X.Forwarded.For) are
// dropped from everyone. A trusted proxy's are
// passed on as it sent them, with whatever a client sent that it let
// through: the upstream can trust of them what that proxy sets. So it is
// with the user and plan headers (the user section's, plans.header):
// believed and forwarded only from a trusted proxy that gives them once,
// and their other spellings dropped from everyone. A check cannot drop a
// field, the gateway forwarding the request whole: one carrying another
// spelling of a field the policies read is answered 400.
//
// A policy on a host matches the request's Host, or, from a trusted
// proxy, its X-Forwarded-Host, in the proxy as in a check. Every request
// goes to the one upstream whatever its host: a host pattern limits only
// what the upstream tells apart by host.
//
// # Paths
//
// A policy's pattern means what it means to net/http's ServeMux, which
// redirects a path with . or .. segments or repeated slashes to the clean
// one. The proxy and the check endpoints decide such a request as that
// clean path (POST //login is a POST /login), and the proxy forwards the
// path as it came, but answers 400 to one with . or .. segments, which an
// upstream could serve as another path; a fragment in X-Forwarded-Uri is
// no part of the path.
//
// # Files
//
//   - server.go: Options, New, Run, the listeners, shutdown.
//   - config.go: loading, generations, Reload.
//   - store.go: memory or Redis (one server, Cluster, Sentinel), with a
//     timeout and metrics on every call (the latency of Redis's, of the
//     calls sent to it), and a Redis not there at start connected later.
//   - proxy.go: the reverse proxy and the demo upstream.
//   - grpcanswer.go: sluice's own answers to a gRPC call through the
//     proxy (a refusal, a shed call, a failed store, 400, 408, 502, 504),
//     written as gRPC's trailers-only errors with retry pushback.
//   - check.go: the check endpoints.
//   - admin.go: metrics, health, readiness, top keys, pprof, dashboard.
//   - observe.go: every decision into metrics, dashboard and top keys;
//     every request into sluice_requests_total.
//   - metrics.go: the Prometheus collectors.
//   - topk.go: the most refused keys in bounded memory.
//   - tls.go: the TLS files, loaded, served per handshake, reloaded.
//   - watch.go: polling the configuration and TLS files.
//   - demo.yaml: the built-in demo configuration.
package server
