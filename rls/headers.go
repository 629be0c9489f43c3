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
// middleware (q is the capacity: the burst, when an algorithm extension
// sets one). A policy is named by its limit's name, or else by its
// configured path. Shadow-mode limits are not enforced and are left out,
// as are repeated names after the first. Times are whole seconds rounded
// up; Retry-After is never 0, so a client never returns before the window
// resets.
func headers(items []item) []*corev3.HeaderValue {
	// The fields are written on the stack, then copied into one string
	// that every value is a part of; a request names a few limits at
	// most, so names already written are found by a scan.
	var polBuf, stateBuf [128]byte
	pol, state := polBuf[:0], stateBuf[:0]
	var names [8]string
	seen := names[:0]
	var retry time.Duration
	over := false
	for i := range items {
		it := &items[i]
		if !it.limited || !it.decided || it.m.shadow {
			continue
		}
		if it.over {
			over = true
			retry = max(retry, it.reset)
		}
		name := it.m.limit.name
		if name == "" {
			name = it.m.policy
		}
		if slices.Contains(seen, name) {
			continue
		}
		seen = append(seen, name)
		if len(pol) > 0 {
			pol = append(pol, ", "...)
			state = append(state, ", "...)
		}
		pol = ratefield.AppendPolicy(pol, name, it.m.limit.limit)
		state = ratefield.AppendItem(state, name, it.remain, it.reset)
	}
	if len(seen) == 0 {
		return nil
	}
	var allBuf [320]byte
	b := append(append(allBuf[:0], pol...), state...)
	if over {
		b = strconv.AppendInt(b, rate.RetryAfterSeconds(retry), 10)
	}
	all, p, st := string(b), len(pol), len(pol)+len(state)
	set := &headerSet{}
	set.values[0] = corev3.HeaderValue{Key: "RateLimit-Policy", Value: all[:p]}
	set.values[1] = corev3.HeaderValue{Key: "RateLimit", Value: all[p:st]}
	n := 2
	if over {
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
