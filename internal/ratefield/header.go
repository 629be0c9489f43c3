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
type Header struct {
	name   string   // `"name"`, the start of a RateLimit item
	policy []string // the RateLimit-Policy item, a list of one
	limit  string   // the X-RateLimit-Limit value
}

// NewHeader returns the Header of l, named name.
func NewHeader(name string, l rate.Limit) Header {
	return Header{
		name:   string(AppendString(nil, name)),
		policy: []string{string(AppendPolicy(nil, name, l))},
		limit:  strconv.FormatInt(l.Capacity(), 10),
	}
}

// AppendHeader appends the RateLimit item of the decision d (see
// AppendDecision).
func (h *Header) AppendHeader(dst []byte, d rate.Decision) []byte {
	return AppendDecision(append(dst, h.name...), d)
}

// HeaderPolicy returns the RateLimit-Policy item (see AppendPolicy).
func (h *Header) HeaderPolicy() string { return h.policy[0] }

// HeaderPolicyValues returns HeaderPolicy as a list of one, shared by
// every caller, for gRPC metadata, which copies the lists it is given.
// Its capacity is one, so that an append copies it; its element must
// never be modified.
func (h *Header) HeaderPolicyValues() []string { return h.policy[:1:1] }

// HeaderLimit returns the X-RateLimit-Limit value: the limit's capacity.
func (h *Header) HeaderLimit() string { return h.limit }
