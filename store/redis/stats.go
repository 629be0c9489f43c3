package redis

import "sync/atomic"

// Stats counts what a Store has done since it was made. Every field is
// read from atomic counters: Stats is cheap enough to call on every scrape
// of a metrics endpoint.
type Stats struct {
	// Decisions counts the requests (Decide and DecideAll calls) that got a
	// decision, from Redis or from the deny cache. Calls that returned an
	// error are not counted here but in Errors.
	Decisions uint64
	// Refused counts the decisions among them that refused.
	Refused uint64
	// ScriptCalls counts script calls sent to Redis: one per coalesced
	// batch, per uncoalesced decision, and per slot and phase (check,
	// commit, refund) of a request whose keys span several cluster slots.
	// Calls that failed count too.
	ScriptCalls uint64
	// DenyCacheHits counts requests refused locally by the deny cache,
	// without asking Redis.
	DenyCacheHits uint64
	// DenyCacheEntries is the number of refusals the deny cache holds now,
	// some of which may have expired and not yet been dropped.
	DenyCacheEntries int
	// CoalescedBatches counts script calls that carried the requests of
	// more than one caller.
	CoalescedBatches uint64
	// CrossSlot counts requests whose keys span several Redis Cluster
	// slots, decided by a check phase and a commit phase (see the package
	// documentation).
	CrossSlot uint64
	// CrossSlotRaces counts the cross-slot requests that passed the check
	// but were refused at the commit, because another caller spent in
	// between. Such a request is refused after the slots before the
	// refusal have committed, and those are then given back what it took
	// (see CrossSlotRefunds and CrossSlotRefundErrors); a race at the
	// first slot has nothing to give back, and counts in neither.
	CrossSlotRaces uint64
	// CrossSlotRefunds counts the races after which every slot committed
	// before the refusal was refunded: each was given back what the
	// request took there as far as its state still shows it (see the
	// package doc on refunds), which may be nothing.
	CrossSlotRefunds uint64
	// CrossSlotRefundErrors counts the races after which a refund failed
	// (Redis unreachable, the caller's deadline passed): the refused
	// request has consumed in that slot, as if it had been admitted there.
	// The refund is not tried again.
	CrossSlotRefundErrors uint64
	// Retries counts script calls sent again because the one before failed
	// on its connection (Redis restarted, a proxy closed it); the retries
	// are not in ScriptCalls.
	Retries uint64
	// TryAgain counts script calls that Redis answered TRYAGAIN: their
	// keys were in a cluster slot moving between masters, and neither
	// master held them all (see the package documentation). The script
	// did not run; a coalesced batch is sent again as its callers'
	// groups, and a group after a pause, and those calls count in
	// ScriptCalls. TryAgain rising long after a resharding means a slot
	// was left midway through its move (redis-cli --cluster fix ends it).
	TryAgain uint64
	// Errors counts the calls that could not decide because Redis failed,
	// timed out or returned something unexpected, or because the caller's
	// context ended. Invalid requests (rate.Request.Check) are not counted.
	Errors uint64
}

// counters are the atomic counters behind Stats.
type counters struct {
	decisions, refused, scriptCalls, denyHits atomic.Uint64
	coalesced, crossSlot, crossSlotRaces      atomic.Uint64
	crossSlotRefunds, crossSlotRefundErrors   atomic.Uint64
	errors, retries, tryAgain                 atomic.Uint64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := Stats{
		Decisions:             s.stats.decisions.Load(),
		Refused:               s.stats.refused.Load(),
		ScriptCalls:           s.stats.scriptCalls.Load(),
		DenyCacheHits:         s.stats.denyHits.Load(),
		CoalescedBatches:      s.stats.coalesced.Load(),
		CrossSlot:             s.stats.crossSlot.Load(),
		CrossSlotRaces:        s.stats.crossSlotRaces.Load(),
		CrossSlotRefunds:      s.stats.crossSlotRefunds.Load(),
		CrossSlotRefundErrors: s.stats.crossSlotRefundErrors.Load(),
		Errors:                s.stats.errors.Load(),
		Retries:               s.stats.retries.Load(),
		TryAgain:              s.stats.tryAgain.Load(),
	}
	if s.deny != nil {
		st.DenyCacheEntries = s.deny.len()
	}
	return st
}
