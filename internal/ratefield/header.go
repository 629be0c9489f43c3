package ratefield

import (
	"strconv"

	"github.com/sluicehq/sluice/rate"
)

// Header holds the values that describe a limit in the rate limit
// headers, made once with the limit, as every answer that reports the
// limit writes them: the parts that do not vary with the decision. It is
// what policy.Limit and a Limiter's limits in the middlewares share. The
// zero value describes no limit: make one with NewHeader.
//
// The fields count requests, as the draft has them when they name no
// other unit (qu): under a policy whose requests cost c units each, q, r
// and X-RateLimit-Limit and -Remaining are the units divided by c,
// rounded down, the requests that fit them. Counting units, they would
// tell a client pacing itself by them c times the requests it may send.
type Header struct {
	name   string   // `"name"`, the start of a RateLimit item
	policy []string // the RateLimit-Policy item, a list of one
	limit  string   // the X-RateLimit-Limit value
	cost   int64    // the units each request takes, 1 at least
}

// NewHeader returns the Header of l, named name, for requests of cost
// units each (below 1 means 1).
func NewHeader(name string, l rate.Limit, cost int64) Header {
	cost = max(cost, 1)
	return Header{
		name:   string(AppendString(nil, name)),
		policy: []string{string(appendPolicy(nil, name, l, cost))},
		limit:  strconv.FormatInt(l.Capacity()/cost, 10),
		cost:   cost,
	}
}

// AppendHeader appends the RateLimit item of the decision d (see
// AppendDecision), its r in requests.
func (h *Header) AppendHeader(dst []byte, d rate.Decision) []byte {
	d.Remaining = h.HeaderRemaining(d)
	return AppendDecision(append(dst, h.name...), d)
}

// HeaderRemaining returns the requests the decision d leaves, as r and
// X-RateLimit-Remaining say: its Remaining units over the cost, rounded
// down.
func (h *Header) HeaderRemaining(d rate.Decision) int64 {
	if h.cost > 1 {
		return d.Remaining / h.cost
	}
	return d.Remaining
}

// HeaderPolicy returns the RateLimit-Policy item (see AppendPolicy).
func (h *Header) HeaderPolicy() string { return h.policy[0] }

// HeaderPolicyValues returns HeaderPolicy as a list of one, shared by
// every caller, for gRPC metadata, which copies the lists it is given.
// Its capacity is one, so that an append copies it; its element must
// never be modified.
func (h *Header) HeaderPolicyValues() []string { return h.policy[:1:1] }

// HeaderLimit returns the X-RateLimit-Limit value: the requests the
// limit's capacity holds.
func (h *Header) HeaderLimit() string { return h.limit }
