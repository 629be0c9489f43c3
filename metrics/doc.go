// Package metrics counts the decisions of httplimit.Middleware and
// grpclimit.New in Prometheus, under the names, labels and results
// sluice serve exports, so that one dashboard and one set of alerts read
// both:
//
//   - sluice_decisions_total{policy,result}: one per policy a request was
//     decided against, by what the policy did to it (see
//     policy.Event.Result): allowed, refused (429), shadow_refused,
//     throttled (admitted after a wait) or unavailable (503: the store
//     could not decide and the request was refused for it).
//   - sluice_fallback_decisions_total{policy}: the decisions the store
//     could not make, made by the policy's on_store_error or a
//     sluice.Fallback's failure mode instead; each is in
//     sluice_decisions_total too.
//   - sluice_shed_total{priority}: requests the concurrency limit shed.
//
// An Observer is a policy.Observer: it goes in the policy.Options that
// httplimit.Options and grpclimit.Options embed. Declare the policy set's
// series before serving, so that the first refusal is an increase() from
// 0 and not the birth of a series:
//
//	obs, err := metrics.NewObserver(prometheus.DefaultRegisterer)
//	...
//	obs.Declare(set)
//	limit := httplimit.Middleware(set, store, httplimit.Options{
//		Options: policy.Options{Observer: obs},
//	})
//	// or, for gRPC:
//	l := grpclimit.New(set, store, grpclimit.Options{
//		Options: policy.Options{Observer: obs},
//	})
//
// One Observer serves any number of middlewares and Limiters, and every
// generation of a reloaded set (Declare each as it is put in force): it
// keeps nothing per set. The series of a policy a reload removes stay,
// flat, until the process restarts.
//
// Labels hold policy names, results and priorities, which the policy file
// bounds, never a request's key (Event.Key is a string the client
// chooses, and a label per value would grow without bound): the keys a
// policy refuses are for logs.
//
// Only the decisions of a policy.Set are counted here: a sluice.Limiter
// built in code (httplimit.Limit, grpclimit.Limit) has no
// policy.Observer.
package metrics
