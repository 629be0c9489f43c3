package rls

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// FuzzParse feeds Parse any file. It never panics; a refusal lists only
// ConfigErrors that name the file and a line within it (or none, for the
// whole file); and a configuration it accepts answers a request of its
// domain, with any descriptor, one status per descriptor.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"testdata/edge.yaml", "testdata/messaging.yaml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "remote_address", "10.0.0.1")
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: \"*\"\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), "k", "v")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), "k", "v")
	f.Add([]byte("domain: d\ndescriptors: [{key: a, descriptors: [{key: b, rate_limit: {unlimited: true}}]}]\n"), "a", "")
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		cfg, err := Parse(File{Name: "fuzz.yaml", Data: data})
		if err != nil {
			// YAML breaks lines at \n, \r\n, a lone \r, NEL, LS and
			// PS: at most this many lines.
			lines := 1
			for _, b := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
				lines += strings.Count(string(data), b)
			}
			for _, e := range unjoin(err) {
				var ce *ConfigError
				if !errors.As(e, &ce) {
					t.Fatalf("error %q (%T) is not a ConfigError", e, e)
				}
				if ce.File != "fuzz.yaml" || ce.Line < 0 || ce.Line > lines || ce.Msg == "" {
					t.Fatalf("error %q: file %q, line %d of %d", ce, ce.File, ce.Line, lines)
				}
			}
			return
		}
		svc := NewService(cfg, memory.New(memory.Options{Clock: ratetest.NewClock(start)}), Options{Clock: ratetest.NewClock(start)})
		for _, domain := range cfg.Domains() {
			req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}},
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}, {Key: value, Value: key}}},
			}}
			resp, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatalf("domain %q: %v", domain, err)
			}
			if len(resp.Statuses) != len(req.Descriptors) {
				t.Fatalf("domain %q: %d statuses for %d descriptors", domain, len(resp.Statuses), len(req.Descriptors))
			}
		}
	})
}

// unjoin returns the errors that errors.Join joined into err, or err.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
