package rls

import (
	"slices"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluicehq/sluice/internal/ratefield"
	"github.com/sluicehq/sluice/rate"
)

// headers returns the RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-10) for the enforced limits of a
// request, in descriptor order, and Retry-After when any of them refused
// it:
//
//	RateLimit-Policy: "per-user";q=20;w=60
//	RateLimit: "per-user";r=0;t=25
//	Retry-After: 25
//
// Items are written as package ratefield writes them for the HTTP
// middleware (q per w seconds states the limit's rate; q is the capacity
// when it comes back in whole seconds). A policy is named by its limit's name, or else by its
// configured path. Shadow-mode limits are not enforced and are left out.
// A name given by several descriptors (the same limit for two values, or
// two limits of one name) is written once, where it first comes, with the
// state of the descriptor nearest to refusing: one over its limit, else
// the one with the least left. Times are whole seconds rounded up;
// Retry-After is never 0, so a client never returns before the window
// resets, and there is none when a descriptor refused more hits than its
// limit holds, or has a limit of zero: no wait would let the request
// through.
func headers(items []item) []*corev3.HeaderValue {
	// A request names a few limits at most: the one reported for each
	// name is found by a scan, and the fields are written on the stack,
	// then copied into one string that every value is a part of.
	var namesBuf [8]string
	var repsBuf [8]*item
	names, reps := namesBuf[:0], repsBuf[:0]
	var retry time.Duration
	over, never := false, false
	for i := range items {
		it := &items[i]
		if !it.limited || !it.decided || it.m.shadow {
			continue
		}
		if it.over {
			over = true
			retry = max(retry, it.reset)
			// More hits than the limit holds, or a limit of zero: no
			// wait lets the request through, and a Retry-After would
			// bring its client back for nothing.
			ls := it.m.limit
			never = never || ls.perUnit == 0 || it.hits > ls.limit.Capacity()
		}
		name := it.m.limit.name
		if name == "" {
			name = it.m.policy
		}
		if j := slices.Index(names, name); j >= 0 {
			if r := reps[j]; it.over && !r.over || it.over == r.over && it.remain < r.remain {
				reps[j] = it
			}
			continue
		}
		names, reps = append(names, name), append(reps, it)
	}
	if len(names) == 0 {
		return nil
	}
	var polBuf, stateBuf [128]byte
	pol, state := polBuf[:0], stateBuf[:0]
	for j, it := range reps {
		if j > 0 {
			pol = append(pol, ", "...)
			state = append(state, ", "...)
		}
		pol = ratefield.AppendPolicy(pol, names[j], it.m.limit.limit)
		state = ratefield.AppendItem(state, names[j], it.remain, it.reset)
	}
	var allBuf [320]byte
	b := append(append(allBuf[:0], pol...), state...)
	retryAfter := over && !never
	if retryAfter {
		b = strconv.AppendInt(b, rate.RetryAfterSeconds(retry), 10)
	}
	all, p, st := string(b), len(pol), len(pol)+len(state)
	set := &headerSet{}
	set.values[0] = corev3.HeaderValue{Key: "RateLimit-Policy", Value: all[:p]}
	set.values[1] = corev3.HeaderValue{Key: "RateLimit", Value: all[p:st]}
	n := 2
	if retryAfter {
		set.values[2] = corev3.HeaderValue{Key: "Retry-After", Value: all[st:]}
		n = 3
	}
	for i := range n {
		set.ptrs[i] = &set.values[i]
	}
	return set.ptrs[:n:n]
}

// headerSet is the header values of a response and the list of them,
// allocated as one.
type headerSet struct {
	values [3]corev3.HeaderValue
	ptrs   [3]*corev3.HeaderValue
}
