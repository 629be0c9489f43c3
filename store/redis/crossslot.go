package redis

import (
	"context"
	"slices"
	"sync"

	"github.com/sluicehq/sluice/rate"
)

// Requests across cluster slots. A script call can only touch the keys of
// one slot, and a request's keys need not share one: a per-IP counter must
// be the same counter whichever account it is combined with, so its key
// cannot carry the account's hash tag. Such a request is decided in two
// phases:
//
//  1. Check: every slot's group of requests is stepped by the script
//     without writing (all slots at once). If any request would be
//     refused, the whole is refused here and nothing anywhere consumed.
//  2. Commit: the groups are decided for real, one after another in the
//     order of their slots. Each is all or nothing on its own. If one is
//     refused, the groups after it are not sent, and the whole is refused.
//
// A group refused at the commit after passing the check means another
// caller spent between the two phases: the groups committed before it
// have consumed, so the refused request took from their limits. That errs
// on the side of protection and is counted (Stats.CrossSlotRaces). No
// phase ever admits more than a limit allows: every commit is the script's
// own atomic step against the state it finds. Likewise, a commit that
// fails (Redis unreachable, the context ended) returns its error, and the
// groups committed before it have consumed.
//
// Without a race, the outcome and every reported number are what one
// atomic call over all the keys would give (each slot's numbers as of its
// own call): a refusal at the check reports, for each request that would
// have passed, what is left without it (the script's cost-0 step), and an
// admission reports each group's commit. The check runs the real step, so
// it refuses what the commit would, a leaky_bucket's MaxDelay included;
// and what passes at the check passes at the commit unless someone spends
// in between, since under every algorithm a request that passes now also
// passes a moment later.

// slotGroup is the part of a request that lives in one slot.
type slotGroup struct {
	slot uint16
	idx  []int // positions in the request
	reqs []rate.Request
	keys []string
	args []string // made once, for the check; the commit changes the last mark
	out  []rate.Decision
}

// decide sends the group as its args say, check or commit.
func (g *slotGroup) decide(ctx context.Context, s *Store) error {
	return s.decideGroup(ctx, g.slot, g.reqs, g.keys, g.args, g.out)
}

// decideAcrossSlots decides reqs, whose keys span several slots, by the
// check and commit phases described above, writing their decisions to out.
func (s *Store) decideAcrossSlots(ctx context.Context, reqs []rate.Request, keys []string, out []rate.Decision) error {
	s.stats.crossSlot.Add(1)
	groups := groupBySlot(reqs, keys)

	// Check, every slot at once.
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i := range groups[1:] {
		wg.Go(func() { errs[i+1] = groups[i+1].decide(ctx, s) })
	}
	errs[0] = groups[0].decide(ctx, s)
	wg.Wait()
	pass := true
	for i := range groups {
		if errs[i] != nil {
			return errs[i]
		}
		pass = pass && allAllowed(groups[i].out)
	}
	if !pass {
		scatter(groups, out)
		return nil
	}

	if s.afterCheck != nil {
		s.afterCheck()
	}
	// Commit, slot by slot.
	for i := range groups {
		g := &groups[i]
		g.args[len(g.args)-1] = markDecide
		if err := g.decide(ctx, s); err != nil {
			return err
		}
		if !allAllowed(g.out) {
			s.stats.crossSlotRaces.Add(1)
			break
		}
	}
	scatter(groups, out)
	return nil
}

// groupBySlot splits a request by slot, in the order of the slots; each
// group keeps its requests in the request's order.
func groupBySlot(reqs []rate.Request, keys []string) []slotGroup {
	var groups []slotGroup
	for i, k := range keys {
		sl := slot(k)
		j := slices.IndexFunc(groups, func(g slotGroup) bool { return g.slot == sl })
		if j < 0 {
			groups = append(groups, slotGroup{slot: sl})
			j = len(groups) - 1
		}
		g := &groups[j]
		g.idx = append(g.idx, i)
		g.reqs = append(g.reqs, reqs[i])
		g.keys = append(g.keys, k)
	}
	slices.SortFunc(groups, func(a, b slotGroup) int { return int(a.slot) - int(b.slot) })
	for i := range groups {
		g := &groups[i]
		g.args = groupArgs(g.reqs, markCheck)
		g.out = make([]rate.Decision, len(g.reqs))
	}
	return groups
}

// scatter copies each group's decisions to their places in out.
func scatter(groups []slotGroup, out []rate.Decision) {
	for _, g := range groups {
		for j, i := range g.idx {
			out[i] = g.out[j]
		}
	}
}

func allAllowed(ds []rate.Decision) bool {
	for _, d := range ds {
		if !d.Allowed {
			return false
		}
	}
	return true
}
