package rls_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	// The "@type"s of examples/envoy/envoy.yaml that no other import
	// brings in: protojson resolves an Any only by a registered type.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/rls"
	"github.com/sluicehq/sluice/store/memory"
)

// envoyExample is examples/envoy/envoy.yaml, decoded and validated by
// Envoy's own API types, with the parts the rate limits depend on.
type envoyExample struct {
	hcm    *hcmv3.HttpConnectionManager
	filter *ratelimitfilterv3.RateLimit
	routes []*routev3.Route
}

// loadEnvoyExample decodes the file as Envoy does its YAML bootstrap:
// YAML to JSON, then the proto3 JSON mapping, refusing unknown fields.
func loadEnvoyExample(t *testing.T, path string) envoyExample {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("%s: as JSON: %v", path, err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatalf("%s: not an Envoy v3 bootstrap: %v", path, err)
	}
	if err := validateAll(&bs); err != nil {
		t.Fatalf("%s: %v", path, err)
	}

	var ex envoyExample
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig().MessageIs(&hcm) {
					if ex.hcm != nil {
						t.Fatalf("%s: more than one HTTP connection manager", path)
					}
					if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
						t.Fatal(err)
					}
					ex.hcm = &hcm
				}
			}
		}
	}
	if ex.hcm == nil {
		t.Fatalf("%s: no HTTP connection manager", path)
	}
	for _, hf := range ex.hcm.GetHttpFilters() {
		var rl ratelimitfilterv3.RateLimit
		if hf.GetTypedConfig().MessageIs(&rl) {
			if err := hf.GetTypedConfig().UnmarshalTo(&rl); err != nil {
				t.Fatal(err)
			}
			ex.filter = &rl
		}
	}
	if ex.filter == nil {
		t.Fatalf("%s: no rate limit filter", path)
	}
	// What follows models one virtual host for every domain and the
	// route's own rate_limits; anything else would need more model.
	onlyFields(t, ex.filter, "domain", "stage", "timeout", "failure_mode_deny", "rate_limit_service")
	vhs := ex.hcm.GetRouteConfig().GetVirtualHosts()
	if len(vhs) != 1 || len(vhs[0].GetDomains()) != 1 || vhs[0].GetDomains()[0] != "*" {
		t.Fatalf("%s: want one virtual host for domains [*], have %v", path, vhs)
	}
	onlyFields(t, vhs[0], "name", "domains", "routes")
	ex.routes = vhs[0].GetRoutes()
	return ex
}

// validateAll checks m and, since Envoy's generated validators stop at an
// Any, every typed_config in it, against the rules of Envoy's API.
func validateAll(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return err
		}
	}
	var err error
	walkAnys(m.ProtoReflect(), func(a *anypb.Any) bool {
		var inner proto.Message
		if inner, err = a.UnmarshalNew(); err != nil {
			err = fmt.Errorf("%s: %w", a.GetTypeUrl(), err)
			return false
		}
		if err = validateAll(inner); err != nil {
			err = fmt.Errorf("%s: %w", a.GetTypeUrl(), err)
			return false
		}
		return true
	})
	return err
}

// walkAnys calls f with each Any directly in m or in its messages, lists
// and maps, until f returns false.
func walkAnys(m protoreflect.Message, f func(*anypb.Any) bool) bool {
	if a, ok := m.Interface().(*anypb.Any); ok {
		return f(a)
	}
	more := true
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; more && i < v.List().Len(); i++ {
				more = walkAnys(v.List().Get(i).Message(), f)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				more = walkAnys(mv.Message(), f)
				return more
			})
		case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
			more = walkAnys(v.Message(), f)
		}
		return more
	})
	return more
}

// onlyFields fails the test if m sets a field not in names: the test's
// model of Envoy would be silently wrong about it.
func onlyFields(t *testing.T, m proto.Message, names ...string) {
	t.Helper()
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		for _, n := range names {
			if string(fd.Name()) == n {
				return true
			}
		}
		t.Fatalf("%s sets %s, which this test does not model", m.ProtoReflect().Descriptor().FullName(), fd.Name())
		return false
	})
}

// normalize is the connection manager's path rewriting, before routing,
// for the paths this test sends: normalize_path resolves "." and ".."
// segments (RFC 3986 section 5.2.4), then merge_slashes merges "//".
func (ex envoyExample) normalize(p string) string {
	path, query, hasQuery := strings.Cut(p, "?")
	if ex.hcm.GetNormalizePath().GetValue() {
		var out []string
		for _, seg := range strings.Split(path, "/")[1:] {
			switch seg {
			case ".":
			case "..":
				if len(out) > 0 {
					out = out[:len(out)-1]
				}
			default:
				out = append(out, seg)
			}
		}
		path = "/" + strings.Join(out, "/")
	}
	if ex.hcm.GetMergeSlashes() {
		for strings.Contains(path, "//") {
			path = strings.ReplaceAll(path, "//", "/")
		}
	}
	if hasQuery {
		return path + "?" + query
	}
	return path
}

// route is the first route whose match takes the (normalized) path, as
// Envoy picks it: path matchers ignore the query string.
func (ex envoyExample) route(t *testing.T, p string) *routev3.Route {
	t.Helper()
	for _, r := range ex.routes {
		m := r.GetMatch()
		onlyFields(t, m, "prefix", "path", "path_separated_prefix", "case_sensitive")
		path, _, _ := strings.Cut(p, "?")
		fold := func(s string) string { return s }
		if cs := m.GetCaseSensitive(); cs != nil && !cs.GetValue() {
			fold = strings.ToLower
		}
		path = fold(path)
		var ok bool
		switch ps := m.GetPathSpecifier().(type) {
		case *routev3.RouteMatch_Prefix:
			ok = strings.HasPrefix(path, fold(ps.Prefix))
		case *routev3.RouteMatch_Path:
			ok = path == fold(ps.Path)
		case *routev3.RouteMatch_PathSeparatedPrefix:
			want := fold(ps.PathSeparatedPrefix)
			ok = path == want || strings.HasPrefix(path, want+"/")
		default:
			t.Fatalf("route %q: path matcher %T is not modelled", r.GetName(), ps)
		}
		if ok {
			return r
		}
	}
	t.Fatalf("no route takes %s", p)
	return nil
}

// envoyRequest is what the descriptors of a request are built from.
type envoyRequest struct {
	path    string
	remote  string
	headers map[string]string
}

// descriptors builds what the rate limit filter sends for req, as Envoy
// does: one descriptor per rate_limits entry of the filter's stage, none
// for an entry with an action that has nothing to say.
func (ex envoyExample) descriptors(t *testing.T, req envoyRequest) []*ratelimitv3.RateLimitDescriptor {
	t.Helper()
	path := ex.normalize(req.path)
	r := ex.route(t, path)
	var out []*ratelimitv3.RateLimitDescriptor
	for _, rl := range r.GetRoute().GetRateLimits() {
		onlyFields(t, rl, "actions", "stage")
		if rl.GetStage().GetValue() != ex.filter.GetStage() {
			continue
		}
		d := &ratelimitv3.RateLimitDescriptor{}
		for _, a := range rl.GetActions() {
			switch {
			case a.GetRemoteAddress() != nil:
				d.Entries = append(d.Entries, entry("remote_address", req.remote))
			case a.GetGenericKey() != nil:
				gk := a.GetGenericKey()
				onlyFields(t, gk, "descriptor_key", "descriptor_value")
				key := gk.GetDescriptorKey()
				if key == "" {
					key = "generic_key"
				}
				d.Entries = append(d.Entries, entry(key, gk.GetDescriptorValue()))
			case a.GetRequestHeaders() != nil:
				rh := a.GetRequestHeaders()
				onlyFields(t, rh, "header_name", "descriptor_key")
				v, ok := req.headers[rh.GetHeaderName()]
				if rh.GetHeaderName() == ":path" {
					v, ok = path, true
				}
				if !ok {
					d = nil
				} else {
					d.Entries = append(d.Entries, entry(rh.GetDescriptorKey(), v))
				}
			default:
				t.Fatalf("route %q: rate limit action %T is not modelled", r.GetName(), a.GetActionSpecifier())
			}
			if d == nil {
				break
			}
		}
		if d != nil {
			out = append(out, d)
		}
	}
	return out
}

func entry(k, v string) *ratelimitv3.RateLimitDescriptor_Entry {
	return &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v}
}

func descString(d *ratelimitv3.RateLimitDescriptor) string {
	var kv []string
	for _, e := range d.GetEntries() {
		kv = append(kv, e.GetKey()+"="+e.GetValue())
	}
	return "[" + strings.Join(kv, ", ") + "]"
}

// TestEnvoyExampleLimitsLogins holds examples/envoy/envoy.yaml to Envoy's
// v3 API and to examples/envoy/config: every way of writing the login's
// path that reaches the application's login builds the descriptor that
// edge.yaml limits to 5 a minute per address.
func TestEnvoyExampleLimitsLogins(t *testing.T) {
	ex := loadEnvoyExample(t, "../examples/envoy/envoy.yaml")
	cfg, err := rls.LoadDir("../examples/envoy/config")
	if err != nil {
		t.Fatal(err)
	}

	for _, path := range []string{"/login", "/login?next=/", "//login", "/./login", "/static/../login", "/LOGIN", "/Login?next=/", "/login/", "/login/?next=/"} {
		t.Run(path, func(t *testing.T) {
			req := envoyRequest{path: path, remote: "10.0.0.1"}
			descs := ex.descriptors(t, req)
			var names []string
			login := -1
			for i, d := range descs {
				names = append(names, descString(d))
				if descString(d) == "[path=/login, remote_address=10.0.0.1]" {
					login = i
				}
			}
			if login < 0 {
				t.Errorf("descriptors %v, want [path=/login, remote_address=10.0.0.1] among them", names)
			}

			clock := ratetest.NewClock(time.Date(2026, 3, 2, 10, 0, 30, 0, time.UTC))
			svc := rls.NewService(cfg, memory.New(memory.Options{Clock: clock}), rls.Options{Clock: clock})
			for i := range 6 {
				resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
					Domain: ex.filter.GetDomain(), Descriptors: descs})
				if err != nil {
					t.Fatal(err)
				}
				want := rlsv3.RateLimitResponse_OK
				if i == 5 {
					want = rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if got := resp.GetOverallCode(); got != want {
					t.Fatalf("request %d of %v: %v, want %v", i+1, names, got, want)
				}
				if login >= 0 {
					lim := resp.GetStatuses()[login].GetCurrentLimit()
					if lim.GetRequestsPerUnit() != 5 || lim.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
						t.Fatalf("request %d: login limit %v, want 5 a minute", i+1, lim)
					}
				}
			}
		})
	}
}

// TestEnvoyExampleLoginKeepsTheOtherLimits checks that the login route,
// whose rate_limits replace the catch-all's rather than add to them,
// still sends every descriptor the catch-all does.
func TestEnvoyExampleLoginKeepsTheOtherLimits(t *testing.T) {
	ex := loadEnvoyExample(t, "../examples/envoy/envoy.yaml")
	headers := map[string]string{"x-api-key": "k1"}
	login := ex.descriptors(t, envoyRequest{path: "/login", remote: "10.0.0.1", headers: headers})
	other := ex.descriptors(t, envoyRequest{path: "/orders", remote: "10.0.0.1", headers: headers})
	have := map[string]bool{}
	var names []string
	for _, d := range login {
		have[descString(d)] = true
		names = append(names, descString(d))
	}
	if len(other) == 0 {
		t.Fatal("/orders: no descriptors")
	}
	for _, d := range other {
		if !have[descString(d)] {
			t.Errorf("/orders sends %s, /login does not (it sends %v)", descString(d), names)
		}
	}
}
