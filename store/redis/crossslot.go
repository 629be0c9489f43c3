package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/sluicehq/sluice/rate"
)

// Requests across cluster slots. A script call can only touch the keys of
// one slot, and a request's keys need not share one: a per-IP counter must
// be the same counter whichever account it is combined with, so its key
// cannot carry the account's hash tag. Such a request is decided in
// phases:
//
//  1. Check: every slot's group of requests is stepped by the script
//     without writing (all slots at once). If any request would be
//     refused, the whole is refused here and nothing anywhere consumed.
//  2. Commit: the groups are decided for real, one after another in the
//     order of their slots. Each is all or nothing on its own, and
//     returns a receipt per request: where its units went (see
//     scripts/decide.lua). If one is refused, the groups after it are
//     not sent, and the whole is refused.
//  3. Refund, only after such a refusal: the groups committed before it
//     are given back what their commits took (all at once), each by one
//     script call that takes its receipts.
//
// A group refused at the commit after passing the check means another
// caller spent between the two phases (counted in Stats.CrossSlotRaces).
// The refund then leaves each key of the groups committed before it as
// the request would have left it had it never been admitted: exactly,
// whatever other commits and refunds came in between at the commit's
// instant, in whatever order raced requests are refunded; and never more
// than the request took. When other decisions on the key came in between
// at later instants, a bucket gets back less, by what it would have
// refilled past full without the request (the script explains why); and
// if, besides, the refund of another request that committed the key
// before this one came in between, the bucket may get back nothing of
// this one, or, when those later decisions took the units back up, what
// it would have refilled past full in the meantime, more than the
// request's absence would have left it. Every commit is the script's own
// atomic step against the state it finds, so no phase admits more than
// that state allows; a refund leaves a key fresher than the request's
// absence would have only so, or after a reset the script cannot tell.
//
// What does not hold:
//
//   - Between its commit and its refund (a round trip to each slot),
//     the request's units are taken, and others may be refused for them.
//     Those refusals stand, and so do their entries in the deny caches,
//     which may refuse until their RetryAfter what Redis, after the
//     refund, would admit.
//   - A refund that fails (Redis unreachable, the caller's deadline
//     passed) leaves the units taken, as before refunds existed; it is
//     counted (Stats.CrossSlotRefundErrors), and the request is refused
//     all the same: the refusal is a decision, and an error would hand
//     the request to a failure mode that may admit it. The refund is sent
//     even if the caller has cancelled its context (the units are other
//     callers' concern), within the caller's deadline and CallTimeout.
//   - A commit that fails (Redis unreachable, the context ended) returns
//     its error, and the groups committed before it are not refunded: the
//     failed call may have run in Redis all the same, and the caller's
//     failure mode decides the request, perhaps admitting it (fail open,
//     a local memory store), which those units then rightly count. An
//     error errs on the side of counting, as everywhere in this store.
//
// Without a race, the outcome and every reported number are what one
// atomic call over all the keys would give (each slot's numbers as of its
// own call): a refusal at the check reports, for each request that would
// have passed, what is left without it (the script's cost-0 step), and an
// admission reports each group's commit. After a race, the groups given
// back report what their refunds found left (the script checks each group
// again after its refund); a group whose refund failed reports its commit.
// The check runs the real step, so it refuses what the commit would, a
// caller's MaxDelay included; and what passes at the check passes
// at the commit unless someone spends in between, since under every
// algorithm a request that passes now also passes a moment later.

// slotGroup is the part of a request that lives in one slot.
type slotGroup struct {
	slot uint16
	idx  []int // positions in the request
	reqs []rate.Request
	keys []string
	args []string // made once, for the check; the commit changes the last mark
	out  []rate.Decision
	// receipts are the commit's, receiptPerRequest a request.
	receipts []int64
}

// check checks the group: the script steps it without writing.
func (g *slotGroup) check(ctx context.Context, s *Store) error {
	return s.decideGroup(ctx, g.slot, g.reqs, g.keys, g.args, g.out)
}

// commit decides the group for real and keeps its receipts.
func (g *slotGroup) commit(ctx context.Context, s *Store) error {
	g.args[len(g.args)-1] = markCommit
	res, err := s.groupCall(ctx, g.slot, g.keys, g.args, s.co != nil)
	if err != nil {
		return err
	}
	n := replyPerRequest * len(g.reqs)
	if want := replyLen(len(g.reqs), g.args); len(res) != want {
		return inPartition(s.partitionOf(g.slot), fmt.Errorf("redis store: %w", errReplyLength(len(res), len(g.reqs), want)))
	}
	g.receipts = res[n:]
	return inPartition(s.partitionOf(g.slot), decodeReply(res[:n], g.reqs, g.out))
}

// refund gives the committed group back what its commit took, and writes
// to its decisions what is left (a check after the refund). Its receipts
// follow the requests' arguments, so it goes in a call of its own, not
// through the coalescer.
func (g *slotGroup) refund(ctx context.Context, s *Store) error {
	args := groupArgs(g.reqs, markRefund)
	for _, r := range g.receipts {
		args = append(args, strconv.FormatInt(r, 10))
	}
	res, err := s.groupCall(ctx, g.slot, g.keys, args, false)
	if err != nil {
		return err
	}
	return inPartition(s.partitionOf(g.slot), decodeReply(res, g.reqs, g.out))
}

// decideAcrossSlots decides reqs, whose keys span several slots, by the
// phases described above, writing their decisions to out.
func (s *Store) decideAcrossSlots(ctx context.Context, reqs []rate.Request, keys []string, out []rate.Decision) error {
	s.stats.crossSlot.Add(1)
	groups := groupBySlot(reqs, keys)

	// Check, every slot at once.
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i := range groups[1:] {
		wg.Go(func() { errs[i+1] = groups[i+1].check(ctx, s) })
	}
	errs[0] = groups[0].check(ctx, s)
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
		if err := groups[i].commit(ctx, s); err != nil {
			return err
		}
		if !allAllowed(groups[i].out) {
			s.stats.crossSlotRaces.Add(1)
			if i > 0 {
				s.refund(ctx, groups[:i])
			}
			break
		}
	}
	scatter(groups, out)
	return nil
}

// refund gives back to groups, committed before a refusal, what their
// commits took, all at once, and counts whether every refund succeeded.
// It is sent under ctx's deadline, but not cancelled with it.
func (s *Store) refund(ctx context.Context, groups []slotGroup) {
	if s.beforeRefund != nil {
		s.beforeRefund()
	}
	rctx := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadline(rctx, dl)
		defer cancel()
	}
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i := range groups[1:] {
		wg.Go(func() { errs[i+1] = groups[i+1].refund(rctx, s) })
	}
	errs[0] = groups[0].refund(rctx, s)
	wg.Wait()
	if slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		s.stats.crossSlotRefundErrors.Add(1)
	} else {
		s.stats.crossSlotRefunds.Add(1)
	}
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
