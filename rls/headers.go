package rls

import (
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

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
// A policy is named by its limit's name, or else by its configured path.
// Shadow-mode limits are not enforced and are left out, as are repeated
// names after the first. Times are whole seconds rounded up; Retry-After
// is never 0, so a client never returns before the window resets.
func headers(items []item) []*corev3.HeaderValue {
	var pol, state strings.Builder
	seen := map[string]bool{}
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
		if seen[name] {
			continue
		}
		seen[name] = true
		if pol.Len() > 0 {
			pol.WriteString(", ")
			state.WriteString(", ")
		}
		writeSFString(&pol, name)
		pol.WriteString(";q=")
		pol.WriteString(strconv.FormatUint(uint64(it.m.limit.perUnit), 10))
		pol.WriteString(";w=")
		pol.WriteString(strconv.FormatInt(rate.CeilSeconds(it.m.limit.limit.Period), 10))
		writeSFString(&state, name)
		state.WriteString(";r=")
		state.WriteString(strconv.FormatInt(max(it.remain, 0), 10))
		state.WriteString(";t=")
		state.WriteString(strconv.FormatInt(rate.CeilSeconds(it.reset), 10))
	}
	if pol.Len() == 0 {
		return nil
	}
	hs := []*corev3.HeaderValue{
		{Key: "RateLimit-Policy", Value: pol.String()},
		{Key: "RateLimit", Value: state.String()},
	}
	if over {
		hs = append(hs, &corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(rate.RetryAfterSeconds(retry), 10)})
	}
	return hs
}

// writeSFString writes s as a Structured Field string (RFC 9651):
// quoted, with '"' and '\' escaped and bytes outside printable ASCII
// replaced by '?'.
func writeSFString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
