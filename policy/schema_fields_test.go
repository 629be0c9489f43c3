package policy

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// These tests hold the schema to what the loader does. A file the loader
// takes must pass the schema: an editor or a schema-based check that
// flags it is wrong, and the worse failure. A file the schema passes and
// the loader refuses is allowed only where the schema cannot say why (a
// cross-reference, a bound on a number written as a string); each case
// lists those as loose.

// jsonValue returns v as encoding/json decodes it: numbers as float64.
func jsonValue(t testing.TB, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// loadJSON loads a policy file given as a JSON value. JSON is YAML, but
// for the characters YAML reads as line breaks (U+0085, U+2028), which
// are escaped to stay in their strings.
func loadJSON(t testing.TB, file any) error {
	t.Helper()
	data, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, r := range string(data) {
		switch {
		case r < 0x80:
			b.WriteRune(r)
		case r <= 0xFFFF:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	_, err = Load("f.yaml", []byte(b.String()))
	return err
}

// fieldCase puts each value at one place of a file that loads.
type fieldCase struct {
	name   string
	file   func(v any) map[string]any
	values []any
	// loose are values the schema passes though the loader refuses them.
	loose []any
}

// scalars are tried in every field: the loader reads the text of any
// scalar where it wants a string.
var scalars = []any{nil, true, false, 0, 1, -1, 1.5, 404, "", "x", " ", []any{}, map[string]any{}}

// top returns a file with the given top-level fields and one policy,
// with pol's fields.
func top(fields map[string]any, pol map[string]any) map[string]any {
	p := map[string]any{"name": "p", "limits": "1/s"}
	maps.Copy(p, pol)
	f := map[string]any{"policies": []any{p}}
	maps.Copy(f, fields)
	return f
}

// at returns a file with v at path (such as client_ip.header) among the
// given top-level fields, and one policy with pol's fields.
func at(path string, fields map[string]any, pol map[string]any) func(any) map[string]any {
	return func(v any) map[string]any { return top(merge(fields, nested(path, v)), pol) }
}

// inPolicy returns a file whose one policy has v at path among pol's
// fields.
func inPolicy(path string, pol map[string]any) func(any) map[string]any {
	return func(v any) map[string]any { return top(nil, merge(pol, nested(path, v))) }
}

// nested returns {a: {b: v}} for path a.b.
func nested(path string, v any) map[string]any {
	keys := strings.Split(path, ".")
	for i := len(keys) - 1; i >= 1; i-- {
		v = map[string]any{keys[i]: v}
	}
	return map[string]any{keys[0]: v}
}

// merge returns a and b's fields, b's over a's, merging mappings both have.
func merge(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]any{}
	}
	for k, bv := range b {
		am, aok := out[k].(map[string]any)
		bm, bok := bv.(map[string]any)
		if aok && bok {
			bv = merge(am, bm)
		}
		out[k] = bv
	}
	return out
}

var (
	names = []any{"p", "a1", "1a", "a-b", "a_b", "-a", "_a", "A", "aB", "a.b", "a b", "é", 404, 0, true, false,
		strings.Repeat("a", 64), strings.Repeat("a", 65), strings.Repeat("a", 200)}
	tokens = []any{"X-A", "x-a", "X_A", "X A", "X:A", "X/A", "é", "!#$%&'*+-.^_`|~", "X-A ", 123, -1, 1.5, true}
	texts  = []any{"a", "a b", "é", " a", "a ", "\ta", "a\t", 1, 0, -1, 1.5, true, false}
	bools  = []any{"true", "false", "yes", "True"}
	// durations the loader's duration reads; store.timeout refuses those
	// that are not above zero.
	durations = []any{"1s", "500ms", ".5s", "1.s", "1.5s", "1m30s", "1h1m1s1ms1us1µs1μs1ns", "0", "-0", "+0", "00", "0.0",
		"0s", "-0s", "+0s", "-0.0s", "-1s", "+1s", "1", "1S", "1 s", " 1s", "1s ", "1d", "1sec", "s", ".s", "-.5s",
		"-0.5ns", "0.5ns", "-0.0001us", "-0.001us", "-0.0000000009s", "-0.000000001s", 0.0, 0.5, 2}
)

// wholes returns the whole numbers to try in a field that takes lo to hi,
// and those the schema passes though they are out of bounds: written as
// strings, which YAML 1.2 reads 1_000 as.
func wholes(lo, hi int64) (values, loose []any) {
	for _, n := range []int64{lo - 1, lo, lo + 1, hi - 1, hi, hi + 1} {
		values = append(values, n)
		s := strconv.FormatInt(n, 10)
		values = append(values, s)
		if n < lo && n >= 1 || n > hi {
			loose = append(loose, s)
		}
	}
	values = append(values, "1_0", "_1_0_", "+1_0", "_+10", "1__0", "-10", "1.0", "1e1", "0x10", " 10", "10 ", "0_0", 10.0, 10.5)
	if lo > 10 {
		loose = append(loose, "1_0", "_1_0_", "+1_0", "_+10", "1__0")
	}
	return values, loose
}

func TestSchemaFields(t *testing.T) {
	s := loadSchema(t)
	root := s.at("")
	trusted := map[string]any{"client_ip": map[string]any{"trusted_proxies": []any{"10.0.0.0/8"}}}
	withPlans := map[string]any{"plans": map[string]any{"names": []any{"free"}}}
	credentials := []any{"Authorization", "authorization", "Cookie", "Proxy-Authorization", "PROXY-AUTHORIZATION"}
	headers := []any{"X-Forwarded-For", "x-forwarded-for", "Forwarded", "X-Real-IP", "X-Real-Ip", "X-FORWARDED-FOR", "X-Real-Ip",
		"CF-Connecting-IP", "cf-connecting-ip", "True-Client-IP", "fastly-client-ip", "Fastly-Client-IP", "X-Client-IP",
		"X-Forwarded-For ", "X_Forwarded_For", "X-Forwarded", "Client-IP", "X-Forwarded-Host"}
	instances, instancesLoose := wholes(1, 10000)
	v4, v4Loose := wholes(8, 32)
	v6, v6Loose := wholes(16, 128)
	inFlight, inFlightLoose := wholes(1, 1<<30)
	maxKeys, maxKeysLoose := wholes(1, 1<<40)
	cost, costLoose := wholes(1, 1<<52)
	percents := []any{1, 50, 100, 0, 101, -1, 50.5, "50%", "50", " 50% ", "50 %", "0%", "101%", "999%", "100%", "+50%", "050%",
		"0100%", "-5%", "5%%", "%", "\u00a050%\u3000", "1e2%", "5_0%"}
	limits := []any{"1/s", "10/1m30s", "10/1.5s", "10/μs", "10/µs", "10 / s burst 20", "1000/d", "10000/month", "10/w", "10/week",
		"10/y", "10/mon", "10 per 2month", "0/s", "10/s burst 0", "fixed_window 10/s burst 2", "10000/month burst 5",
		"gcra 10/month", "10/s, burst 5", []any{"1/s", "2/m"}, []any{"1/s", 5}}
	redis := []any{"redis://h:6379/0", "REDIS://h", "Rediss://h", "unix:///tmp/redis.sock", "UNIX:/x", "redis:h", "http://h",
		"redis//h", "redis", "redis\x01://h", "rediss://h:port"}
	parts := []any{"ip", "user", "method", "header:x-a", "header:X-A", "header:Host", "header:HOST", "form:f", "form:user[email]", "form:]a", "header:a[b]", "form:[]", "header:",
		"header", "ip:x", "IP", "cookie:a", "header:x a", []any{"ip", "user"}, []any{"ip", "method", "user", "header:a"},
		[]any{"ip", "method", "user", "header:a", "form:b"},
		"global", "global:x", "global:", "Global", "GLOBAL", "globl", []any{"global"}, []any{"global", "ip"}, []any{"ip", "global"},
		[]any{"global", "global"}, []any{"method", "user", "header:a", "global"}}
	for _, fc := range []fieldCase{
		{name: "prefix", file: at("prefix", nil, nil), values: names, loose: []any{1.5}},
		{name: "instances", file: at("instances", nil, nil), values: instances, loose: instancesLoose},
		{name: "client_ip", file: at("client_ip", nil, nil)},
		{name: "client_ip.trusted_proxies", file: at("client_ip.trusted_proxies", nil, nil),
			values: []any{"10.0.0.0/8", []any{"10.0.0.0/8", "::1"}, "10.0.0.1", []any{"x"}, []any{1}, []any{"::ffff:0:0/95"}, []any{nil}},
			loose:  []any{"x", []any{"x"}, " ", []any{"::ffff:0:0/95"}}},
		{name: "client_ip.trust_unix_sockets", file: at("client_ip.trust_unix_sockets", nil, nil), values: bools},
		{name: "client_ip.header", file: at("client_ip.header", nil, nil), values: headers},
		{name: "client_ip.ipv4_prefix", file: at("client_ip.ipv4_prefix", nil, nil), values: v4, loose: v4Loose},
		{name: "client_ip.ipv6_prefix", file: at("client_ip.ipv6_prefix", nil, nil), values: v6, loose: v6Loose},
		{name: "user", file: at("user", trusted, nil)},
		{name: "user.header", file: at("user.header", trusted, nil), values: slices.Concat(tokens, credentials, headers),
			loose: []any{"X-Forwarded-For", "x-forwarded-for", "X-FORWARDED-FOR"}},
		{name: "plans", file: at("plans", nil, nil)},
		{name: "plans.names", file: at("plans.names", nil, nil),
			values: []any{"free", []any{"free", "pro"}, []any{404}, []any{true}, []any{"Free"}, []any{""}, []any{nil}, "a b", []any{strings.Repeat("a", 65)}},
			loose:  []any{1.5}},
		{name: "plans.default", file: func(v any) map[string]any {
			return top(map[string]any{"plans": map[string]any{"names": []any{v}, "default": v}}, nil)
		}, values: names, loose: []any{1.5}},
		{name: "plans.header", file: at("plans.header", merge(trusted, withPlans), nil), values: slices.Concat(tokens, credentials, headers),
			loose: []any{"X-Forwarded-For", "x-forwarded-for", "X-FORWARDED-FOR"}},
		{name: "plans.api_key_header", file: at("plans.api_key_header", withPlans, nil), values: tokens},
		{name: "plans.api_keys", file: at("plans.api_keys", map[string]any{"plans": map[string]any{"names": []any{"free"}, "api_key_header": "X-Key"}}, nil),
			values: []any{map[string]any{"k": "free"}, map[string]any{"k": "pro"}, map[string]any{"k": 1}, map[string]any{"k": nil}},
			loose:  []any{map[string]any{"k": "pro"}, map[string]any{"k": 1}}},
		{name: "plans.api_keys without api_key_header", file: at("plans.api_keys", withPlans, nil),
			values: []any{map[string]any{"k": "free"}}},
		{name: "concurrency.max_in_flight", file: at("concurrency.max_in_flight", nil, nil), values: inFlight, loose: inFlightLoose},
		{name: "concurrency.retry_after", file: at("concurrency.retry_after", map[string]any{"concurrency": map[string]any{"max_in_flight": 1}}, nil), values: durations},
		{name: "concurrency.shares", file: at("concurrency.shares", map[string]any{"concurrency": map[string]any{"max_in_flight": 1}}, nil)},
		{name: "concurrency.shares.*", file: func(v any) map[string]any {
			return top(map[string]any{"concurrency": map[string]any{"max_in_flight": 1, "shares": map[string]any{"low": v, "normal": v, "critical": v}}}, nil)
		}, values: percents},
		{name: "store", file: at("store", nil, nil)},
		{name: "store.redis", file: at("store.redis", nil, nil), values: redis, loose: []any{"redis\x01://h", "rediss://h:port"}},
		{name: "store.cluster", file: at("store.cluster", nil, nil), values: []any{"a:1", []any{"a:1", "[::1]:2"}, []any{"a"}, "a", []any{1}},
			loose: []any{"a", []any{"a"}}},
		{name: "store.sentinel.master", file: at("store.sentinel.master", map[string]any{"store": map[string]any{"sentinel": map[string]any{"addrs": "a:1"}}}, nil), values: texts},
		{name: "store.sentinel.addrs", file: at("store.sentinel.addrs", map[string]any{"store": map[string]any{"sentinel": map[string]any{"master": "m"}}}, nil),
			values: []any{"a:1", []any{"a:1"}, []any{"a"}}, loose: []any{"x", []any{"a"}}},
		{name: "store.tls", file: at("store.tls", map[string]any{"store": map[string]any{"redis": "redis://h"}}, nil),
			values: []any{map[string]any{"ca": "x"}, map[string]any{"cert": "c"}, map[string]any{"cert": "c", "key": "k"}, map[string]any{"ca": ""}, map[string]any{"ca": 1}}},
		{name: "store.timeout", file: at("store.timeout", nil, nil), values: durations,
			loose: []any{"0.5ns"}}, // under 1ns: zero
		{name: "store.deny_cache", file: at("store.deny_cache", nil, nil), values: bools},
		{name: "store.max_keys", file: at("store.max_keys", nil, nil), values: maxKeys, loose: maxKeysLoose},
		{name: "paths", file: at("paths", nil, nil)},
		{name: "paths.ignore_case", file: at("paths.ignore_case", nil, nil), values: bools},
		{name: "response", file: at("response", nil, nil)},
		{name: "response.headers", file: at("response.headers", nil, nil),
			values: []any{"draft", "legacy", []any{"draft"}, []any{"legacy"}, []any{"draft", "legacy"}, []any{"legacy", "draft"},
				[]any{"draft", "draft"}, []any{"legacy", "legacy"}, []any{"draft", "legacy", "draft"}, []any{"Draft"}, "LEGACY", []any{"drafts"},
				"none", "ietf", []any{"X-RateLimit-Limit"}, []any{nil}, []any{1}, []any{[]any{"draft"}}, map[string]any{"draft": true}}},
		{name: "response.problem_type", file: at("response.problem_type", nil, nil),
			values: []any{"about:blank", "https://example.com/problems/rate-limited", "http://example.com/p#f", "HTTPS://Example.COM/p",
				"urn:example:rate-limited", "tag:example.com,2026:rate-limited", "mailto:api@example.com", "h+t-t.p://x", "https://[2001:db8::1]/p",
				"https://example.com:8443/p%C3%A9?q=1&r=(2)", "https://:80/p", "/problems/x", "problems/x", "example.com/p", "//example.com/p",
				"1http://x", "-x:y", ":x", "https://example.com/a b", "https://example.com/\t", "https://example.com/\x7f", "https://example.com/pé",
				"https://example.com/\"x\"", "https://example.com/<x>", "https://example.com/a\\b", "https://example.com/%zz", "https://example.com/%2",
				"https://example.com/%", "https:///p", "https:/p", "https:p", "https:", "http://", "http://?x", "about:blnak", "ABOUT:blank",
				"About:Blank", "about:", "https://example.com/a#b#c", "https://example.com:x/p", "https://example.com/a[1]", "https://@/p"},
			loose: []any{"https://example.com:x/p", "https://example.com/a[1]", "https://@/p"}},
		{name: "policies", file: func(v any) map[string]any { return map[string]any{"policies": v} },
			values: []any{[]any{map[string]any{"name": "p", "limits": "1/s"}}, map[string]any{"name": "p", "limits": "1/s"}}},
		{name: "policy.name", file: inPolicy("name", nil), values: names, loose: []any{1.5}},
		{name: "policy.match", file: inPolicy("match", nil),
			values: []any{"GET /x", "/x", "x", "post /x", "api.example.com/", "/x/{id}", "/x/*", map[string]any{"path": "/x"}},
			loose:  []any{"post /x", "/x/*"}},
		{name: "policy.match.path", file: inPolicy("match.path", nil),
			values: []any{"/x", "x", "/x?y", "/x#y", "/x/{id}", "/x/:id", "GET /x"}, loose: []any{"/x/:id"}},
		{name: "policy.match.host", file: inPolicy("match.host", nil),
			values: []any{"a.b", "a/b", "a b", "*.a", 1234, "a.b:80", "bücher.example"}, loose: []any{"a.b:80", "bücher.example"}},
		{name: "policy.match.methods", file: inPolicy("match.methods", nil),
			values: []any{"GET", []any{"GET", "POST"}, []any{"get"}, []any{1}, []any{"1E5"}, []any{"G T"}, "get"},
			loose:  []any{true, false}}, // YAML's TRUE is a method; true is not
		{name: "policy.match.headers", file: inPolicy("match.headers", nil),
			values: []any{[]any{map[string]any{"name": "X-A", "present": true}}, map[string]any{"name": "X-A", "present": true},
				[]any{map[string]any{"name": "X-A"}}, []any{map[string]any{"name": "X-A", "present": true, "equals": "b"}}}},
		{name: "policy.match.headers.name", file: func(v any) map[string]any {
			return top(nil, map[string]any{"match": map[string]any{"headers": []any{map[string]any{"name": v, "present": true}}}})
		}, values: slices.Concat(tokens, []any{"Host", "host", "HOST", "X-Host"})},
		{name: "policy.match.headers.equals", file: func(v any) map[string]any {
			return top(nil, map[string]any{"match": map[string]any{"headers": []any{map[string]any{"name": "X-A", "equals": v}}}})
		}, values: texts},
		{name: "policy.key", file: inPolicy("key", nil), values: parts, loose: []any{"path:id"}},
		{name: "policy.keys", file: inPolicy("keys", nil),
			values: slices.Concat(parts, []any{[]any{[]any{"ip", "user"}, "ip"}, []any{[]any{}}, []any{"ip", "ip"},
				[]any{"global", []any{"ip", "user"}}, []any{[]any{"global"}, "ip"}, []any{[]any{"global", "ip"}}, []any{"user", []any{"ip", "global"}},
				[]any{"global", "global"}, []any{"global", []any{"global"}}}),
			loose: []any{[]any{"ip", "ip"}, []any{"global", "global"}, []any{"global", []any{"global"}}}},
		{name: "policy.fold_key", file: inPolicy("fold_key", nil), values: bools},
		{name: "policy.limits", file: inPolicy("limits", nil), values: limits,
			loose: []any{nil, []any{}}}, // a policy with no limits needs a priority
		{name: "policy.limits with a priority", file: inPolicy("limits", map[string]any{"priority": "low"}), values: limits},
		{name: "policy.plans", file: func(v any) map[string]any {
			return top(withPlans, map[string]any{"plans": v})
		}, values: []any{map[string]any{"free": "1/s"}, map[string]any{"free": []any{}}, map[string]any{"free": nil}, map[string]any{"Free": "1/s"},
			map[string]any{"pro": "1/s"}}, loose: []any{map[string]any{"pro": "1/s"}}},
		{name: "policy.overrides", file: inPolicy("overrides", map[string]any{"key": "header:x-k"}),
			values: []any{[]any{map[string]any{"when": map[string]any{"header:x-k": "a"}, "limits": "2/s"}},
				[]any{map[string]any{"when": map[string]any{"header:X-K": "a"}, "limits": []any{}}},
				[]any{map[string]any{"when": map[string]any{"header:x-k": "a"}, "limits": nil}},
				[]any{map[string]any{"when": map[string]any{"heder:x-k": "a"}, "limits": "2/s"}},
				[]any{map[string]any{"when": map[string]any{"ip": "10.0.0.1"}, "limits": "2/s"}},
				[]any{map[string]any{"when": map[string]any{}, "limits": "2/s"}},
				[]any{map[string]any{"limits": "2/s"}},
				[]any{map[string]any{"when": map[string]any{"global": "a"}, "limits": "2/s"}}},
			loose: []any{[]any{map[string]any{"when": map[string]any{"ip": "10.0.0.1"}, "limits": "2/s"}}}},
		{name: "policy.overrides on a policy with a global key", file: inPolicy("overrides", map[string]any{"keys": []any{"global", "header:x-k"}}),
			values: []any{[]any{map[string]any{"when": map[string]any{"header:x-k": "a"}, "limits": "2/s"}},
				[]any{map[string]any{"when": map[string]any{"global": "a"}, "limits": "2/s"}},
				[]any{map[string]any{"when": map[string]any{"global": ""}, "limits": "2/s"}},
				[]any{map[string]any{"when": map[string]any{"global": "a", "header:x-k": "a"}, "limits": "2/s"}}}},
		{name: "policy.overrides.when", file: func(v any) map[string]any {
			return top(nil, map[string]any{"key": "header:x-k", "overrides": []any{map[string]any{"when": map[string]any{"header:x-k": v}, "limits": "2/s"}}})
		}, values: texts, loose: []any{" a", "a ", "\ta", "a\t", " "}}, // padded: refused for a header, unless folded
		{name: "policy.cost", file: inPolicy("cost", map[string]any{"limits": "fixed_window 4503599627370496/s"}), values: cost, loose: costLoose},
		{name: "policy.shadow", file: inPolicy("shadow", nil), values: bools},
		{name: "policy.on_store_error", file: inPolicy("on_store_error", nil),
			values: []any{"open", "closed", "local", "fail_open", "fail_closed", "error", "Open", "fail-open"}},
		{name: "policy.max_delay", file: inPolicy("max_delay", nil), values: durations},
		{name: "policy.priority", file: inPolicy("priority", nil), values: []any{"low", "normal", "critical", "high", "Low"}},
	} {
		for _, v := range slices.Concat(fc.values, scalars) {
			file := fc.file(v)
			err := loadJSON(t, file)
			ok := s.valid(root, jsonValue(t, file))
			switch {
			case err == nil && !ok:
				t.Errorf("%s: the schema refuses %s, which loads", fc.name, quoteJSON(t, v))
			case err != nil && ok && !slices.ContainsFunc(fc.loose, func(l any) bool { return reflect.DeepEqual(jsonValue(t, l), jsonValue(t, v)) }):
				t.Errorf("%s: the schema passes %s, which does not load: %v", fc.name, quoteJSON(t, v), err)
			}
		}
	}
}

func quoteJSON(t testing.TB, v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// yamlValue returns a YAML node as a JSON value, as editors read YAML for
// the schema.
func yamlValue(t testing.TB, n *yaml.Node) any {
	t.Helper()
	switch n.Kind {
	case yaml.DocumentNode:
		return yamlValue(t, n.Content[0])
	case yaml.AliasNode:
		return yamlValue(t, n.Alias)
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[n.Content[i].Value] = yamlValue(t, n.Content[i+1])
		}
		return m
	case yaml.SequenceNode:
		out := []any{}
		for _, c := range n.Content {
			out = append(out, yamlValue(t, c))
		}
		return out
	}
	var v any
	if err := n.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return jsonValue(t, v)
}

// Every policy file the project shows, that loads, passes the schema.
func TestSchemaExamples(t *testing.T) {
	s := loadSchema(t)
	root := s.at("")
	files := map[string][]byte{}
	data, err := os.ReadFile("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files["examples/sluice.yaml"] = data
	docs, _ := filepath.Glob("../docs/*.md")
	block := regexp.MustCompile("(?s)```ya?ml\n(.*?)```")
	for _, name := range append(docs, "../README.md") {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range block.FindAllSubmatch(data, -1) {
			files[fmt.Sprintf("%s block %d", strings.TrimPrefix(name, "../"), i+1)] = m[1]
		}
	}
	loaded := 0
	for name, data := range files {
		if _, err := Load(name, data); err != nil {
			continue // a fragment, or another program's file
		}
		loaded++
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		if !s.valid(root, yamlValue(t, &doc)) {
			t.Errorf("%s loads, and the schema refuses it", name)
		}
	}
	if loaded == 0 {
		t.Error("no file loads: is the corpus still there?")
	}
}
