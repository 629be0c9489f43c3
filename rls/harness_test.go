package rls

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// start is 30 seconds into a minute (and into an hour and a day): every
// fixed window of a minute or more has 30s left, or more.
var start = time.Date(2026, 3, 2, 10, 0, 30, 0, time.UTC)

// harness is a Service on a real gRPC server on a loopback port, with a
// memory store on a fake clock, and a generated client talking to it.
type harness struct {
	t      *testing.T
	clock  *ratetest.Clock
	store  *memory.Store
	svc    *Service
	conn   *grpc.ClientConn
	client rlsv3.RateLimitServiceClient

	mu     sync.Mutex
	events []Event
}

func newHarness(t *testing.T, cfg *Config, opts Options) *harness {
	t.Helper()
	h := &harness{t: t, clock: ratetest.NewClock(start)}
	h.store = memory.New(memory.Options{Clock: h.clock})
	opts.Clock = h.clock
	if opts.Observe == nil {
		opts.Observe = func(e Event) {
			h.mu.Lock()
			h.events = append(h.events, e)
			h.mu.Unlock()
		}
	}
	h.svc = NewService(cfg, h.store, opts)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	h.svc.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	h.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.conn.Close() })
	h.client = rlsv3.NewRateLimitServiceClient(h.conn)
	return h
}

// call sends a request and returns the response or the error.
func (h *harness) call(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.client.ShouldRateLimit(ctx, req)
}

// ask sends a request for domain with the descriptors and fails the test
// on an error.
func (h *harness) ask(domain string, descs ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	h.t.Helper()
	return h.askHits(domain, 0, descs...)
}

func (h *harness) askHits(domain string, hits uint32, descs ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	h.t.Helper()
	resp, err := h.call(&rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs, HitsAddend: hits})
	if err != nil {
		h.t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.GetStatuses()) != len(descs) {
		h.t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(descs))
	}
	return resp
}

func (h *harness) takeEvents() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.events
	h.events = nil
	return e
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// withHits sets a descriptor's own hits_addend.
func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// st describes a descriptor status compactly for comparisons:
// code, limit (0 when absent), unit, remaining, reset in seconds.
type st struct {
	code   rlsv3.RateLimitResponse_Code
	limit  uint32
	unit   rlsv3.RateLimitResponse_RateLimit_Unit
	remain uint32
	reset  int64
}

const (
	ok     = rlsv3.RateLimitResponse_OK
	over   = rlsv3.RateLimitResponse_OVER_LIMIT
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
)

func statusOf(s *rlsv3.RateLimitResponse_DescriptorStatus) st {
	out := st{code: s.GetCode(), remain: s.GetLimitRemaining()}
	if l := s.GetCurrentLimit(); l != nil {
		out.limit, out.unit = l.GetRequestsPerUnit(), l.GetUnit()
	}
	if d := s.GetDurationUntilReset(); d != nil {
		out.reset = d.GetSeconds()
		if d.GetNanos() != 0 {
			out.reset = -1 // never expected: durations are whole seconds
		}
	}
	return out
}

// expect checks every status of resp and its overall code.
func (h *harness) expect(resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, want ...st) {
	h.t.Helper()
	if resp.GetOverallCode() != overall {
		h.t.Errorf("overall %v, want %v", resp.GetOverallCode(), overall)
	}
	for i, w := range want {
		if got := statusOf(resp.GetStatuses()[i]); got != w {
			h.t.Errorf("status %d: %+v, want %+v", i, got, w)
		}
	}
}
