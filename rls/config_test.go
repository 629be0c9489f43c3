package rls

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/rate"
)

func parse(t *testing.T, yaml string) *Config {
	t.Helper()
	cfg, err := Parse(File{Name: "test.yaml", Data: []byte(yaml)})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

func TestParseBadConfigs(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // "file:line: message" fragment
	}{
		{
			name: "unknown key in a descriptor",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    shadow: true
`,
			want: `test.yaml:5: unknown key "shadow" in a descriptor`,
		},
		{
			name: "unknown key in rate_limit",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      requests_per_second: 1
`,
			want: `test.yaml:6: unknown key "requests_per_second" in rate_limit`,
		},
		{
			name: "unknown top-level key",
			yaml: "domain: d\nlimits: []\n",
			want: `test.yaml:2: unknown key "limits" in the file`,
		},
		{
			name: "a key valid elsewhere is unknown here",
			yaml: "domain: d\nunit: second\n",
			want: `test.yaml:2: unknown key "unit" in the file`,
		},
		{
			name: "duplicate descriptor",
			yaml: `domain: d
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 50}
`,
			want: `test.yaml:6: duplicate descriptor key "database" value "users" (first at line 3)`,
		},
		{
			name: "duplicate descriptor without value, nested",
			yaml: `domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
`,
			want: `test.yaml:7: duplicate descriptor key "b" with no value (first at line 5)`,
		},
		{
			name: "duplicate YAML key",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      unit: minute
      requests_per_unit: 1
`,
			want: `test.yaml:6: duplicate key "unit" in rate_limit (first at line 5)`,
		},
		{
			name: "bad unit",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: fortnight
      requests_per_unit: 1
`,
			want: `test.yaml:5: invalid rate limit unit "fortnight"`,
		},
		{
			name: "unknown is not a unit",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit: {unit: unknown, requests_per_unit: 1}
`,
			want: `test.yaml:4: invalid rate limit unit "unknown"`,
		},
		{
			name: "missing unit",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit:
      requests_per_unit: 1
`,
			want: `test.yaml:5: rate_limit needs a unit`,
		},
		{
			name: "missing requests_per_unit",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
`,
			want: `test.yaml:5: rate_limit needs requests_per_unit`,
		},
		{
			name: "unlimited with requests_per_unit",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit:
      unlimited: true
      requests_per_unit: 10
`,
			want: `test.yaml:6: an unlimited limit takes no requests_per_unit`,
		},
		{
			name: "unlimited with unit",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit:
      unlimited: true
      unit: second
`,
			want: `test.yaml:6: an unlimited limit takes no unit`,
		},
		{
			name: "negative requests_per_unit",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: -1}
`,
			want: `test.yaml:4: requests_per_unit must be between 0 and 4294967295, not -1`,
		},
		{
			name: "requests_per_unit not a number",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: lots}
`,
			want: `test.yaml:4: requests_per_unit must be a whole number, not "lots"`,
		},
		{
			name: "unit_multiplier zero",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 0}
`,
			want: `test.yaml:4: unit_multiplier must be at least 1`,
		},
		{
			name: "shadow_mode not a boolean",
			yaml: `domain: d
descriptors:
  - key: a
    shadow_mode: yes please
    rate_limit: {unit: second, requests_per_unit: 1}
`,
			want: `test.yaml:4: shadow_mode must be true or false, not "yes please"`,
		},
		{
			name: "empty key",
			yaml: `domain: d
descriptors:
  - key: ""
    rate_limit: {unit: second, requests_per_unit: 1}
`,
			want: `test.yaml:3: descriptor has an empty key`,
		},
		{
			name: "no key",
			yaml: `domain: d
descriptors:
  - value: x
`,
			want: `test.yaml:3: descriptor has no key`,
		},
		{
			name: "replaces itself",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit:
      name: mine
      unit: second
      requests_per_unit: 1
      replaces:
        - name: mine
`,
			want: `test.yaml:9: limit "mine" replaces itself`,
		},
		{
			name: "replaces with an empty name",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      requests_per_unit: 1
      replaces:
        - name: ""
`,
			want: `test.yaml:8: replaces entry has an empty name`,
		},
		{
			name: "share_threshold without a wildcard",
			yaml: `domain: d
descriptors:
  - key: path
    value: /files
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
`,
			want: `test.yaml:3: share_threshold needs a wildcard: a value ending in '*'`,
		},
		{
			name: "empty domain",
			yaml: "domain: \"\"\ndescriptors: []\n",
			want: `test.yaml:1: config file cannot have an empty domain`,
		},
		{
			name: "empty file",
			yaml: "",
			want: `test.yaml: config file cannot be empty`,
		},
		{
			name: "descriptors not a list",
			yaml: "domain: d\ndescriptors:\n  key: a\n",
			want: `test.yaml:3: descriptors must be a list, not a mapping`,
		},
		{
			name: "YAML syntax error",
			yaml: "domain: d\ndescriptors:\n  - key: a\n    value: b: c\n",
			want: `test.yaml:4: invalid YAML: mapping values are not allowed in this context`,
		},
		{
			name: "unknown algorithm (sluice extension)",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}
`,
			want: `test.yaml:4: unknown algorithm "leaky"`,
		},
		{
			// Envoy forwards what is OK at once: a queue's turns would
			// let a burst through.
			name: "leaky_bucket, which Envoy cannot wait for",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky_bucket, burst: 5}
`,
			want: `test.yaml:4: leaky_bucket holds a request until its turn, and Envoy cannot hold one: it forwards what is OK at once; use gcra with burst: 1 for the same rate without bursts`,
		},
		{
			name: "burst on a fixed window (sluice extension)",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      requests_per_unit: 10
      burst: 20
`,
			want: `test.yaml:7: fixed_window has no burst`,
		},
		{
			name: "quota_mode",
			yaml: `domain: d
descriptors:
  - key: a
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
`,
			want: `test.yaml:4: quota_mode is not supported`,
		},
		{
			name: "merge key referring to a list of scalars",
			yaml: `domain: d
descriptors:
  - key: a
    <<: [x]
`,
			want: `test.yaml:4: merge key in a descriptor must refer to a mapping or a list of mappings`,
		},
		{
			name: "algorithm on an unlimited limit",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit:
      unlimited: true
      algorithm: gcra
`,
			want: `test.yaml:6: an unlimited limit takes no algorithm or burst`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(File{Name: "test.yaml", Data: []byte(tt.yaml)})
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tt.yaml)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error:\n  %v\nwant it to contain:\n  %s", err, tt.want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *ConfigError", err)
			}
		})
	}
}

func TestParseDuplicateDomainAcrossFiles(t *testing.T) {
	a := File{Name: "a.yaml", Data: []byte("domain: edge\ndescriptors: []\n")}
	b := File{Name: "b.yaml", Data: []byte("# the same domain again\ndomain: edge\n")}
	_, err := Parse(a, b)
	if err == nil {
		t.Fatal("two files with the same domain were accepted")
	}
	if want := `b.yaml:2: duplicate domain "edge" (also in a.yaml:1)`; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	_, err := Parse(File{Name: "many.yaml", Data: []byte(`domain: d
descriptors:
  - key: a
    rate_limit: {unit: eon, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: second}
  - key: c
    colour: blue
`)})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"many.yaml:4: invalid rate limit unit", "many.yaml:6: rate_limit needs requests_per_unit", `many.yaml:8: unknown key "colour"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestParseUnitsAndExtensions(t *testing.T) {
	cfg := parse(t, `domain: units
descriptors:
  - {key: s, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: m, rate_limit: {unit: Minute, requests_per_unit: 1}}
  - {key: h, rate_limit: &hourly {unit: HOUR, requests_per_unit: 7}}
  - {key: h2, rate_limit: *hourly}
  - {key: d, rate_limit: {unit: day, requests_per_unit: 1}}
  - {key: w, rate_limit: {unit: week, requests_per_unit: 1}}
  - {key: mo, rate_limit: {unit: month, requests_per_unit: 1}}
  - {key: y, rate_limit: {unit: year, requests_per_unit: 1}}
  - {key: m10, rate_limit: {unit: minute, unit_multiplier: 10, requests_per_unit: 1}}
  - {key: g, rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 20}}
  - {key: zero, rate_limit: {unit: second, requests_per_unit: 0}}
  - key: merged
    rate_limit:
      <<: *hourly
      requests_per_unit: 9
`)
	day := 24 * time.Hour
	tests := []struct {
		key    string
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
		count  uint32
		period time.Duration
		alg    rate.Algorithm
	}{
		{"s", rlsv3.RateLimitResponse_RateLimit_SECOND, 1, time.Second, rate.FixedWindow},
		{"m", rlsv3.RateLimitResponse_RateLimit_MINUTE, 1, time.Minute, rate.FixedWindow},
		{"h", rlsv3.RateLimitResponse_RateLimit_HOUR, 7, time.Hour, rate.FixedWindow},
		{"h2", rlsv3.RateLimitResponse_RateLimit_HOUR, 7, time.Hour, rate.FixedWindow},
		{"d", rlsv3.RateLimitResponse_RateLimit_DAY, 1, day, rate.FixedWindow},
		{"w", rlsv3.RateLimitResponse_RateLimit_WEEK, 1, 7 * day, rate.FixedWindow},
		{"mo", rlsv3.RateLimitResponse_RateLimit_MONTH, 1, 30 * day, rate.FixedWindow},
		{"y", rlsv3.RateLimitResponse_RateLimit_YEAR, 1, 365 * day, rate.FixedWindow},
		{"m10", rlsv3.RateLimitResponse_RateLimit_MINUTE, 1, 10 * time.Minute, rate.FixedWindow},
		{"g", rlsv3.RateLimitResponse_RateLimit_SECOND, 10, time.Second, rate.GCRA},
		{"zero", rlsv3.RateLimitResponse_RateLimit_SECOND, 0, time.Second, rate.FixedWindow},
		{"merged", rlsv3.RateLimitResponse_RateLimit_HOUR, 9, time.Hour, rate.FixedWindow},
	}
	for _, tt := range tests {
		n := cfg.domains["units"].root.anyValue[tt.key]
		if n == nil || n.limit == nil {
			t.Errorf("%s: no limit", tt.key)
			continue
		}
		ls := n.limit
		if ls.unit != tt.unit || ls.perUnit != tt.count || ls.limit.Period != tt.period || ls.limit.Algorithm != tt.alg {
			t.Errorf("%s: got %v %d per %v (%v), want %v %d per %v (%v)", tt.key, ls.unit, ls.perUnit, ls.limit.Period, ls.limit.Algorithm, tt.unit, tt.count, tt.period, tt.alg)
		}
	}
	if g := cfg.domains["units"].root.anyValue["g"].limit.limit; g.Burst != 20 {
		t.Errorf("burst %d, want 20", g.Burst)
	}
}

// LoadDir loads what the reference's loader (goruntime) does from its
// runtime directory: every file, whatever its name ends in, in the
// directories below too, except names starting with a dot. In a
// Kubernetes ConfigMap volume, that is each file once, through the links
// beside ..data, and not again inside the timestamped directory ..data
// points to.
func TestLoadDirAndFiles(t *testing.T) {
	edge, err := os.ReadFile("testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	messaging, err := os.ReadFile("testdata/messaging.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The ConfigMap has the items edge (no extension), messaging.yaml and
	// more/api.conf.
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	v1 := filepath.Join(dir, "..2026_03_02_10_00_00.1")
	must(os.MkdirAll(filepath.Join(v1, "more"), 0o755))
	must(os.WriteFile(filepath.Join(v1, "edge"), edge, 0o644))
	must(os.WriteFile(filepath.Join(v1, "messaging.yaml"), messaging, 0o644))
	must(os.WriteFile(filepath.Join(v1, "more", "api.conf"), []byte(perMinute), 0o644))
	must(os.Symlink(filepath.Base(v1), filepath.Join(dir, "..data")))
	for _, name := range []string{"edge", "messaging.yaml", "more"} {
		must(os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)))
	}
	must(os.WriteFile(filepath.Join(dir, ".hidden.yaml"), []byte("not: a config"), 0o644))

	files, err := ConfigFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "edge"), filepath.Join(dir, "messaging.yaml"), filepath.Join(dir, "more", "api.conf")}
	if !slices.Equal(files, want) {
		t.Errorf("ConfigFiles = %q, want %q", files, want)
	}
	cfg, err := LoadDir(dir)
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	byFiles, err := LoadFiles(want...)
	if err != nil {
		t.Fatalf("LoadFiles: %v", err)
	}
	if got := cfg.Domains(); !slices.Equal(got, []string{"api", "edge", "messaging"}) || !slices.Equal(got, byFiles.Domains()) {
		t.Fatalf("LoadDir domains %v, LoadFiles domains %v", got, byFiles.Domains())
	}
	if _, err := LoadFiles("testdata/missing.yaml"); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// A directory that gives no domain is an error, not a service that limits
// nothing: it is most likely the wrong path. So is a link that would have
// the walk go round for ever.
func TestLoadDirErrors(t *testing.T) {
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, ".only-hidden.yaml"), []byte(perMinute), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(empty, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	loop := t.TempDir()
	if err := os.WriteFile(filepath.Join(loop, "a.yaml"), []byte(perMinute), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".", filepath.Join(loop, "up")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dir, want string
	}{
		{empty, "rls: no configuration file in " + empty},
		{filepath.Join(empty, "missing"), "no such file or directory"},
		{loop, "rls: " + filepath.Join(loop, "up") + " is a link to a directory that holds it"},
	} {
		if _, err := LoadDir(tt.dir); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("LoadDir(%s) = %v, want an error containing %q", tt.dir, err, tt.want)
		}
	}
}

func TestParseBoundsTheErrorList(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for range 25 {
		b.WriteString("  - key: k\n    rate_limit: {unit: lightyear, requests_per_unit: 1}\n")
	}
	_, err := Parse(File{Name: "big.yaml", Data: []byte(b.String())})
	if err == nil {
		t.Fatal("accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxErrors+1 || lines[maxErrors] != "and 29 more problems" {
		t.Fatalf("%d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

// The reference reads its files as YAML 1.1, where yes, no, on and off
// (and y, n) are booleans; YAML 1.2 reads them as strings. A file written
// for the reference loads here with the same meaning.
func TestParseYAML11Booleans(t *testing.T) {
	cfg := parse(t, `domain: d
descriptors:
  - key: a
    shadow_mode: yes
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {unlimited: On}
  - key: c
    shadow_mode: off
    detailed_metric: Y
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	nodes := cfg.domains["d"].root.anyValue
	if a, b, c := nodes["a"], nodes["b"], nodes["c"]; !a.shadow || !b.limit.unlimited || c.shadow || !c.detailed {
		t.Errorf("a shadow %v, b unlimited %v, c shadow %v, c detailed %v; want true, true, false, true",
			a.shadow, b.limit.unlimited, c.shadow, c.detailed)
	}
	// Quoted, they are strings, for the reference too.
	_, err := Parse(File{Name: "test.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: a\n    shadow_mode: \"yes\"\n")})
	if want := `test.yaml:4: shadow_mode must be true or false, not "yes"`; err == nil || err.Error() != want {
		t.Errorf("quoted yes: %v, want %s", err, want)
	}
}

// Aliases let a small file describe a tree of any size: each level below
// refers twice to the level above it. Such a file is refused, quickly,
// instead of taking all the time and memory there is, as the reference's
// YAML decoder refuses excessive aliasing.
func TestParseBoundsAliasExpansion(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - &l0 {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	const levels = 20 // about 3 million descriptors, expanded
	for i := 1; i < levels; i++ {
		fmt.Fprintf(&b, "  - &l%d {key: k%d, descriptors: [*l%d, {key: z, descriptors: [*l%d]}]}\n", i, i, i-1, i-1)
	}
	_, err := Parse(File{Name: "test.yaml", Data: []byte(b.String())})
	if want := "aliases expand to more than 65536 YAML nodes"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one that says %q", err, want)
	}

	// Anchors that share a rate_limit, or a few descriptors, are fine.
	cfg := parse(t, `domain: d
descriptors:
  - &common
    key: path
    rate_limit: &limit {unit: second, requests_per_unit: 5}
  - key: tenant
    value: a
    descriptors: [*common, {key: user, rate_limit: *limit}]
  - key: tenant
    value: b
    <<: &nested
      descriptors: [*common]
  - {key: tenant, value: c, <<: *nested}
`)
	for _, tenant := range []string{"a", "b", "c"} {
		m, ok, err := cfg.lookup("d", desc("tenant", tenant, "path", "/x"), false)
		if err != nil || !ok || m.limit.perUnit != 5 {
			t.Errorf("tenant %s: %+v, %v, %v; want 5 per second", tenant, m.limit, ok, err)
		}
	}
}

// A key with no value (or ~, null) reads as absent, as the reference's
// decoder leaves its field at zero: a rate_limit whose lines are commented
// out is no limit, an empty shadow_mode is false. What the reference would
// read as 0 requests_per_unit is still refused here as missing.
func TestParseEmptyValuesAreAbsent(t *testing.T) {
	cfg := parse(t, `domain: d
descriptors:
  - key: disabled
    rate_limit:
      # unit: second
      # requests_per_unit: 10
  - key: a
    value: ~
    shadow_mode:
    detailed_metric: null
    value_to_metric:
    rate_limit:
      unit: minute
      requests_per_unit: 5
      unit_multiplier:
      name:
      replaces:
  - key: b
    rate_limit: {unlimited: true, unit: }
  - key: c
    descriptors:
`)
	nodes := cfg.domains["d"].root.anyValue
	if n := nodes["disabled"]; n == nil || n.limit != nil {
		t.Errorf("disabled: %+v, want a descriptor with no limit", n)
	}
	if a := nodes["a"]; a == nil || a.shadow || a.detailed || a.toMetric || a.limit == nil ||
		a.limit.perUnit != 5 || a.limit.multiplier != 1 || a.limit.name != "" || len(a.limit.replaces) != 0 {
		t.Errorf("a: %+v, want 5 a minute and no options", a)
	}
	if b := nodes["b"]; b == nil || b.limit == nil || !b.limit.unlimited {
		t.Errorf("b: %+v, want unlimited", b)
	}
	_, err := Parse(File{Name: "test.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: }\n")})
	if want := "test.yaml:4: rate_limit needs requests_per_unit (0 refuses every request)"; err == nil || err.Error() != want {
		t.Errorf("empty requests_per_unit: %v, want %s", err, want)
	}
}

// The reference's descriptors have quota_mode, false unless set. A file
// that sets it to false loads as it does there; true, which would let
// over-limit requests pass and report them in the response's metadata,
// is refused (see TestParseBadConfigs) rather than ignored.
func TestParseQuotaModeFalse(t *testing.T) {
	cfg := parse(t, `domain: d
descriptors:
  - key: a
    quota_mode: false
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    quota_mode: no
    descriptors:
      - key: c
        quota_mode:
        rate_limit: {unit: second, requests_per_unit: 2}
`)
	for _, tt := range []struct {
		d    *ratelimitv3.RateLimitDescriptor
		want uint32
	}{{desc("a", "x"), 1}, {desc("b", "x", "c", "y"), 2}} {
		if m, ok, err := cfg.lookup("d", tt.d, false); err != nil || !ok || m.limit.perUnit != tt.want || m.shadow {
			t.Errorf("%v: %+v, %v, %v; want %d a second, enforced", tt.d, m.limit, ok, err, tt.want)
		}
	}
}

// Merge keys ("<<") give the limits the reference's decoder (yaml.v2,
// into structs) gives, as it decodes these very lines: keys in the order
// they stand, a merge where it stands, a later key overwriting an earlier
// one; a rate_limit set over another merged into it key by key; an empty
// value clearing what it overwrites; in a list of merges, the first
// winning.
func TestParseMergeKeysAsTheReference(t *testing.T) {
	cfg := parse(t, `domain: d
descriptors:
  - key: base
    rate_limit: &hourly {unit: hour, requests_per_unit: 7}
  - key: before
    rate_limit:
      requests_per_unit: 9
      <<: *hourly
  - key: after
    rate_limit:
      <<: *hourly
      requests_per_unit: 9
  - key: fields
    <<: {rate_limit: {unit: minute, requests_per_unit: 10, name: n}}
    rate_limit: {requests_per_unit: 20}
  - key: fields_merged_last
    rate_limit: {requests_per_unit: 20}
    <<: {rate_limit: {unit: minute}}
  - key: cleared
    <<: {rate_limit: {unit: minute, requests_per_unit: 10}}
    rate_limit:
  - key: list
    <<: [{shadow_mode: true, value: a, rate_limit: *hourly}, {shadow_mode: false, value: b}]
`)
	for _, tt := range []struct {
		d      *ratelimitv3.RateLimitDescriptor
		count  uint32 // 0: no limit
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
		name   string
		shadow bool
	}{
		{d: desc("before", "x"), count: 7, unit: hour},
		{d: desc("after", "x"), count: 9, unit: hour},
		{d: desc("fields", "x"), count: 20, unit: minute, name: "n"},
		{d: desc("fields_merged_last", "x"), count: 20, unit: minute},
		{d: desc("cleared", "x")},
		{d: desc("list", "a"), count: 7, unit: hour, shadow: true},
		{d: desc("list", "b")},
	} {
		m, ok, err := cfg.lookup("d", tt.d, false)
		if err != nil {
			t.Fatal(err)
		}
		if tt.count == 0 {
			if ok {
				t.Errorf("%v: %d per %v, want no limit", tt.d, m.limit.perUnit, m.limit.unit)
			}
			continue
		}
		if !ok || m.limit.perUnit != tt.count || m.limit.unit != tt.unit || m.limit.name != tt.name || m.shadow != tt.shadow {
			t.Errorf("%v: %+v (shadow %v), want %d per %v, name %q, shadow %v", tt.d, m.limit, m.shadow, tt.count, tt.unit, tt.name, tt.shadow)
		}
	}
}

// Files takes a file as it is and a directory's files as ConfigFiles
// lists them, in the order given, and fails on a path that is not there.
func TestFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.yaml", "sub/b.yaml", ".hidden.yaml", "one.yaml"} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("domain: x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	one := filepath.Join(dir, "one.yaml")
	got, err := Files(one, filepath.Join(dir, "sub"), one)
	want := []string{one, filepath.Join(dir, "sub", "b.yaml"), one}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Files = %q, %v; want %q", got, err, want)
	}
	all, _ := ConfigFiles(dir)
	if got, err := Files(dir); err != nil || !slices.Equal(got, all) {
		t.Errorf("Files(dir) = %q, %v; want ConfigFiles' %q", got, err, all)
	}
	if _, err := Files(one, filepath.Join(dir, "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing path: %v", err)
	}
}
