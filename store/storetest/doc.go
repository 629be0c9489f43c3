// Package storetest is the conformance suite every [sluice.Store] passes:
// the same sequences of (time, key, cost) fed to a store and to the
// definition of each algorithm, [rate.Limit.Step], must give the same
// decisions, field by field (Allowed, Limit, Remaining, ResetAfter,
// RetryAfter, Delay).
//
// A store's tests call [Run] with a function that makes a fresh, empty
// store and returns with it a function that sets the time the store
// decides at:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) (sluice.Store, func(time.Time)) {
//			clk := ratetest.NewClock(time.Unix(0, 0))
//			return memory.New(memory.Options{Clock: clk}), clk.Set
//		})
//	}
//
// [ErrorTexts] checks apart, with the store's own prefix, that a bad call
// reads the same in every store.
//
// The suite has two parts. Seed cases are short sequences whose outcome a
// reader can check by hand (a token bucket of 5 refilled at 1/s; a burst
// at the edge of a minute under each window algorithm; calendar months;
// time going backwards; cost 0 and cost above 1; several limits at once).
// Random sequences then drive every algorithm with seeded random limits,
// costs, times (forwards, backwards, across long gaps) and groups of
// requests; the expected decisions come from the reference model, which
// runs [rate.Limit.StepWithin] itself.
//
// # The reference model
//
// A store keeps one [rate.State] per key, fresh when never seen. A group
// of requests (one Decide, or one DecideAll) steps each request from its
// key's state; if every request is allowed, each key's state becomes the
// one its step returned, and otherwise no state changes at all: a refused
// request consumes nothing and its bookkeeping is not kept either. When a
// group is refused, a request that would have passed alone still reports
// Allowed (and its Delay), with the Remaining and ResetAfter that a step
// of cost 0 reports: what is left without it, as [sluice.Store] says.
//
// A store may forget a key whose state is fresh again at the latest time
// it has seen (its last ResetAfter has passed), so when the suite steps
// time back it never steps to before such a key's expiry. The keys of a
// group are distinct; groups in this suite share a hash tag ({…}) so that
// a Redis Cluster can decide them in one slot.
//
// # Files
//
//   - storetest.go: Run, the harness that checks each decision against the
//     model, the seed cases and the random sequences.
package storetest
