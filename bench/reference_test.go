package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
)

// differentialEnvoyConfig is TestMatchesReference's configuration, in the
// reference service's format, one descriptor of each kind. Its domain
// (%s) is named per run, so that no count of an earlier run is read.
const differentialEnvoyConfig = `
domain: %s
descriptors:
  # 5 a minute.
  - key: plain
    value: fixed
    rate_limit: {unit: minute, requests_per_unit: 5}
  # 10 a minute for each user, counted apart.
  - key: user
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 10}
  # 40 an hour for all of /files/, counted together.
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 40}
  # 20 a minute for each route of the tenant acme; acme alone has none.
  - key: tenant
    value: acme
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 20}
  - key: health
    rate_limit: {unlimited: true}
  # Over 20 a minute is reported, and passes.
  - key: trial
    value: t1
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  # In a request with a partner, the partner's limit replaces the api's.
  - key: partner
    rate_limit:
      name: partner
      replaces: [{name: api}]
      unit: minute
      requests_per_unit: 30
  - key: api
    rate_limit: {name: api, unit: minute, requests_per_unit: 20}
`

// differentialDescriptors are the descriptors TestMatchesReference's
// requests are drawn from, as key, value, key, value...: each kind in
// differentialEnvoyConfig, and some that match nothing.
var differentialDescriptors = [][]string{
	{"plain", "fixed"},
	{"plain", "other"}, // no limit
	{"user", "u1"},
	{"user", "u2"},
	{"user", "u3"},
	{"path", "/files/a"},
	{"path", "/files/b"},
	{"path", "/docs/x"}, // no limit
	{"tenant", "acme", "route", "r1"},
	{"tenant", "acme", "route", "r2"},
	{"tenant", "acme"},                // the parent alone: no limit
	{"tenant", "beta", "route", "r1"}, // no limit
	{"health", "h1"},
	{"trial", "t1"},
	{"partner", "p1"},
	{"api", "k1"},
	{"api", "k2"},
	{"unknown", "x"}, // no limit
}

// differentialHits are the hits_addend values drawn, for a request and
// for a descriptor; a request's 0 means unset (1), a descriptor's 0 checks
// without spending.
var differentialHits = []uint32{0, 1, 2, 5}

// differentialRequests returns n requests in domain, the same for a given
// seed: 1 to 3 descriptors each, a request's hits_addend drawn from
// differentialHits, and a quarter of the descriptors with their own. A
// partner is followed by an api descriptor where there is room, so that
// replaces is exercised more than by chance.
func differentialRequests(seed uint64, domain string, n int) []*rlsv3.RateLimitRequest {
	r := rand.New(rand.NewPCG(seed, seed))
	hits := func() uint64 { return uint64(differentialHits[r.IntN(len(differentialHits))]) }
	add := func(req *rlsv3.RateLimitRequest, kv ...string) {
		d := &ratelimitv3.RateLimitDescriptor{}
		for j := 0; j < len(kv); j += 2 {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[j], Value: kv[j+1]})
		}
		if r.IntN(4) == 0 {
			d.HitsAddend = wrapperspb.UInt64(hits())
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: uint32(hits())}
		for k := 1 + r.IntN(3); len(req.Descriptors) < k; {
			kv := differentialDescriptors[r.IntN(len(differentialDescriptors))]
			add(req, kv...)
			if kv[0] == "partner" && len(req.Descriptors) < k {
				add(req, "api", []string{"k1", "k2"}[r.IntN(2)])
			}
		}
		reqs[i] = req
	}
	return reqs
}

// TestMatchesReference sends the same requests to Envoy's reference rate
// limit service (with a redis-server of its own) and to sluice serve (its
// counters in memory, in the default mode that counts refused hits as the
// reference does), both given differentialEnvoyConfig, one request to
// each in turn, and checks that they answer alike: the overall code, and
// for each descriptor its code, current_limit, limit_remaining, and
// duration_until_reset within a second (each reads its own clock); and
// that nothing else differs but response_headers_to_add (see
// comparedPart). The requests, the same on every run, are drawn by
// differentialRequests.
//
// Both count in fixed windows aligned to the Unix epoch, the longest here
// an hour: the test waits until the current minute has 40s left, so that
// the requests, sent in well under a second, fall in one window of each
// length. It fails if the reference cannot be built or started: make
// test runs it, and a comparison that silently stops running compares
// nothing.
//
//	cd bench && go test -count 1 -run TestMatchesReference -v .
func TestMatchesReference(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the reference service and sluice serve")
	}
	const seed, n = 1, 200
	domain := fmt.Sprintf("diff-%016x", rand.Uint64())
	envoy := fmt.Sprintf(differentialEnvoyConfig, domain)

	rs := redistest.Start(t)
	refAddr, err := startReferenceForTest(t, envoy, rs.Addr())
	if err != nil {
		t.Fatalf("the reference service cannot run here: %v", err)
	}
	sluiceAddr, err := startSluiceForTest(t, envoy)
	if err != nil {
		t.Fatal(err)
	}
	ref, sluice := rlsClient(t, refAddr), rlsClient(t, sluiceAddr)

	// Wait for a minute with room for the whole sequence: a minute's
	// boundary is an hour's too.
	if left := time.Minute - time.Duration(time.Now().UnixNano())%time.Minute; left < 40*time.Second {
		t.Logf("waiting %v for the next minute", left.Round(time.Millisecond))
		time.Sleep(left + 50*time.Millisecond)
	}
	minute := time.Now().Unix() / 60

	var seen differentialCoverage
	mismatches := 0
	for i, req := range differentialRequests(seed, domain, n) {
		want := ask(t, ref, "reference", i, req)
		got := ask(t, sluice, "sluice", i, req)
		if m := time.Now().Unix() / 60; m != minute {
			t.Fatalf("request %d was sent in the minute after the first's: the windows differ from here on", i)
		}
		seen.add(req, want)
		diffs := diffResponses(want, got)
		if len(diffs) == 0 {
			continue
		}
		t.Errorf("request %d: %s\n  differs: %s\n  reference: %s\n  sluice:    %s",
			i, formatRequest(req), strings.Join(diffs, "; "), formatResponse(want), formatResponse(got))
		if mismatches++; mismatches == 10 {
			t.Fatalf("stopping after %d requests that differ (the counts of the later ones may differ only because of the earlier)", mismatches)
		}
	}
	t.Logf("%d requests, %d descriptors: %s", n, seen.descriptors, seen.String())
}

// ask sends req to the service called name, and fails t if it does not
// answer.
func ask(t *testing.T, c rlsv3.RateLimitServiceClient, name string, i int, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("request %d: %s: %s: %v", i, formatRequest(req), name, err)
	}
	return resp
}

// diffResponses returns how got differs from the reference's want, one
// phrase per difference.
func diffResponses(want, got *rlsv3.RateLimitResponse) []string {
	var diffs []string
	if want.GetOverallCode() != got.GetOverallCode() {
		diffs = append(diffs, fmt.Sprintf("overall_code %v, reference %v", got.GetOverallCode(), want.GetOverallCode()))
	}
	if len(want.GetStatuses()) != len(got.GetStatuses()) {
		return append(diffs, fmt.Sprintf("%d statuses, reference %d", len(got.GetStatuses()), len(want.GetStatuses())))
	}
	for i, w := range want.GetStatuses() {
		g := got.GetStatuses()[i]
		if w.GetCode() != g.GetCode() {
			diffs = append(diffs, fmt.Sprintf("[%d] code %v, reference %v", i, g.GetCode(), w.GetCode()))
		}
		if !proto.Equal(w.GetCurrentLimit(), g.GetCurrentLimit()) {
			diffs = append(diffs, fmt.Sprintf("[%d] current_limit %s, reference %s", i, formatLimit(g.GetCurrentLimit()), formatLimit(w.GetCurrentLimit())))
		}
		if w.GetLimitRemaining() != g.GetLimitRemaining() {
			diffs = append(diffs, fmt.Sprintf("[%d] limit_remaining %d, reference %d", i, g.GetLimitRemaining(), w.GetLimitRemaining()))
		}
		wr, gr := w.GetDurationUntilReset(), g.GetDurationUntilReset()
		switch {
		case (wr == nil) != (gr == nil):
			diffs = append(diffs, fmt.Sprintf("[%d] duration_until_reset %v, reference %v", i, gr.AsDuration(), wr.AsDuration()))
		case wr != nil && (wr.AsDuration()-gr.AsDuration()).Abs() > time.Second:
			diffs = append(diffs, fmt.Sprintf("[%d] duration_until_reset %v, reference %v: more than 1s apart", i, gr.AsDuration(), wr.AsDuration()))
		}
	}
	if len(diffs) == 0 && !proto.Equal(comparedPart(want), comparedPart(got)) {
		diffs = append(diffs, fmt.Sprintf("other fields: sluice {%s}, reference {%s}",
			prototext.MarshalOptions{}.Format(comparedPart(got)), prototext.MarshalOptions{}.Format(comparedPart(want))))
	}
	return diffs
}

// comparedPart returns a copy of resp without what the two services are
// not expected to agree on: duration_until_reset, which each computes
// from its own clock, and response_headers_to_add, where sluice serve
// puts the RateLimit fields with --envoy-headers (docs/envoy.md) and the
// reference its X-RateLimit ones with LIMIT_RESPONSE_HEADERS_ENABLED.
func comparedPart(resp *rlsv3.RateLimitResponse) *rlsv3.RateLimitResponse {
	c := proto.Clone(resp).(*rlsv3.RateLimitResponse)
	c.ResponseHeadersToAdd = nil
	for _, s := range c.GetStatuses() {
		s.DurationUntilReset = nil
	}
	return c
}

// formatRequest writes req on one line, as
//
//	hits=2 [plain=fixed] [tenant=acme,route=r1 hits=0]
//
// its own hits_addend (hits=…) shown where set.
func formatRequest(req *rlsv3.RateLimitRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "hits=%d", req.GetHitsAddend())
	for _, d := range req.GetDescriptors() {
		b.WriteString(" [")
		for j, e := range d.GetEntries() {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s=%s", e.GetKey(), e.GetValue())
		}
		if d.GetHitsAddend() != nil {
			fmt.Fprintf(&b, " hits=%d", d.GetHitsAddend().GetValue())
		}
		b.WriteByte(']')
	}
	return b.String()
}

// formatResponse writes resp on one line, as
//
//	OVER_LIMIT [OVER_LIMIT 5/MINUTE left=0 reset=42s] [OK none left=0]
func formatResponse(resp *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(resp.GetOverallCode().String())
	for _, s := range resp.GetStatuses() {
		fmt.Fprintf(&b, " [%v %s left=%d", s.GetCode(), formatLimit(s.GetCurrentLimit()), s.GetLimitRemaining())
		if s.GetDurationUntilReset() != nil {
			fmt.Fprintf(&b, " reset=%v", s.GetDurationUntilReset().AsDuration())
		}
		b.WriteByte(']')
	}
	return b.String()
}

// formatLimit writes a current_limit as 5/MINUTE, with its name if any.
func formatLimit(l *rlsv3.RateLimitResponse_RateLimit) string {
	if l == nil {
		return "none"
	}
	s := fmt.Sprintf("%d/%v", l.GetRequestsPerUnit(), l.GetUnit())
	if l.GetUnitMultiplier() != nil {
		s = fmt.Sprintf("%d/%dx%v", l.GetRequestsPerUnit(), l.GetUnitMultiplier().GetValue(), l.GetUnit())
	}
	if l.GetName() != "" {
		s += "(" + l.GetName() + ")"
	}
	return s
}

// differentialCoverage counts what the reference answered, so that the
// log shows the sequence reached each case.
type differentialCoverage struct {
	descriptors, over, shadowOver, unlimited, replaced, noLimit, ownHits int
}

func (c *differentialCoverage) add(req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse) {
	partner := false
	for _, d := range req.GetDescriptors() {
		partner = partner || d.GetEntries()[0].GetKey() == "partner"
	}
	for i, d := range req.GetDescriptors() {
		c.descriptors++
		if d.GetHitsAddend() != nil {
			c.ownHits++
		}
		s := resp.GetStatuses()[i]
		switch key := d.GetEntries()[0].GetKey(); {
		case s.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
			c.over++
		case key == "trial" && s.GetLimitRemaining() == 0:
			c.shadowOver++
		case s.GetLimitRemaining() == 1<<32-1:
			c.unlimited++
		case key == "api" && partner:
			c.replaced++
		case s.GetCurrentLimit() == nil:
			c.noLimit++
		}
	}
}

func (c *differentialCoverage) String() string {
	return fmt.Sprintf("%d over the limit, %d at or over in shadow mode, %d unlimited, %d replaced, %d with no limit, %d with their own hits_addend",
		c.over, c.shadowOver, c.unlimited, c.replaced, c.noLimit, c.ownHits)
}

// rlsClient returns a client of the rate limit service at addr, closed
// when the test ends.
func rlsClient(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// The benchmarks' helpers (process_test.go) take a *testing.B; these
// start the same processes, set up the same way, for a test.

// startReferenceForTest starts the reference service as startReference
// does, and returns its gRPC address, or why it could not.
func startReferenceForTest(t *testing.T, envoy, redisAddr string) (string, error) {
	t.Helper()
	bin, err := referenceBinary()
	if err != nil {
		return "", err
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "differential.yaml"), []byte(envoy), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr, health := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin)
	cmd.Env = referenceEnv(dir, grpcAddr, health, freeAddr(t), redisAddr)
	return grpcAddr, startForTest(t, cmd, "http://"+health+"/healthcheck")
}

// startSluiceForTest starts sluice serve as startServe does, with only
// the gRPC listener, envoy as its configuration and its counters in
// memory, and returns its gRPC address, or why it could not.
func startSluiceForTest(t *testing.T, envoy string) (string, error) {
	t.Helper()
	bin, err := sluiceBinary()
	if err != nil {
		return "", err
	}
	file := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(file, []byte(envoy), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr, admin := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, "serve",
		"--listen", "off", "--check-listen", "off",
		"--grpc-listen", grpcAddr, "--admin-listen", admin,
		"--watch-interval", "0", "--log-format", "json",
		"--envoy-config", file,
	)
	return grpcAddr, startForTest(t, cmd, "http://"+admin+"/readyz")
}

// startForTest starts cmd and waits until it answers 200 at readyURL, as
// waitReady does; it returns an error, with what cmd logged, if cmd exits
// first or is not ready within 20s. When the test ends, cmd is stopped
// with an interrupt, and the test fails if it does not exit cleanly.
func startForTest(t *testing.T, cmd *exec.Cmd, readyURL string) error {
	t.Helper()
	log := &lockedLog{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return err
	}
	name := filepath.Base(cmd.Path)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exited := false
	t.Cleanup(func() {
		if exited {
			return
		}
		cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-done:
			if err != nil && !isInterrupt(err) {
				t.Errorf("%s: %v\n%s", name, err, log)
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Errorf("%s did not stop within 20s", name)
		}
	})
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := client.Get(readyURL); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-done:
			exited = true
			return fmt.Errorf("%s exited: %v\n%s", name, err, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within 20s\n%s", name, log)
		}
	}
}

// lockedLog keeps a process's output, which its own goroutine writes
// while a failure may read it.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
