package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
)

func TestExampleFileLoads(t *testing.T) {
	set, err := LoadFile("../examples/sluice.yaml")
	if err != nil {
		t.Fatalf("examples/sluice.yaml: %v", err)
	}
	want := []string{"anonymous", "authenticated", "expensive", "export", "login", "partner-quota", "analytics", "payments-shadow", "payments"}
	var got []string
	for _, p := range set.Policies() {
		got = append(got, p.Name)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("policies = %v, want %v", got, want)
	}
	anon := set.Policy("anonymous")
	if l := anon.Limits()[1]; l.Algorithm != rate.FixedWindow || l.Period != 24*time.Hour {
		t.Errorf("1000/d = %v, want a fixed_window over a day", l.Limit)
	}
	if l := set.Policy("partner-quota").Limits()[0]; l.Calendar != rate.Month || l.Algorithm != rate.FixedWindow {
		t.Errorf("10000/month = %v, want a calendar-month fixed_window", l.Limit)
	}
	if anon.OnStoreError != sluice.FailLocal || anon.Limits()[0].Local.Burst != 3 {
		t.Errorf("anonymous: on_store_error %v, local share %v; want local, burst ⌈10/4⌉ = 3", anon.OnStoreError, anon.Limits()[0].Local)
	}
	if !set.Policy("payments-shadow").Shadow || set.Policy("analytics").Priority != Low {
		t.Error("shadow or priority not compiled")
	}
}

// Each case is a file with one mistake, and the line, column and words the
// message must have.
func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		line int
		col  int
		want []string
	}{
		{"unknown field", `
policies:
  - name: search
    limt: ["10/s"]
`, 4, 5, []string{`unknown field "limt" in policy "search"`, `did you mean "limits"?`, "allowed: name, match"}},
		{"misspelt fold_key", `
policies:
  - name: login
    key: form:username
    fold_keys: true
    limits: ["5/m"]
`, 5, 5, []string{`unknown field "fold_keys" in policy "login"`, `did you mean "fold_key"?`}},
		{"fold_key not a boolean", `
policies:
  - name: login
    key: form:username
    fold_key: lower
    limits: ["5/m"]
`, 5, 15, []string{"fold_key"}},
		{"unknown top field", `
polices: []
`, 2, 1, []string{`unknown field "polices"`, `did you mean "policies"?`}},
		{"bad limit", `
policies:
  - name: a
    limits: ["10/fortnight"]
`, 4, 14, []string{`unknown unit "fortnight"`}},
		{"cost above capacity", `
policies:
  - name: a
    cost: 30
    limits: ["10/s burst 20"]
`, 5, 14, []string{"can never pass a request of cost 30", "capacity is 20"}},
		{"cost above the local share", `
instances: 4
policies:
  - name: a
    cost: 5
    on_store_error: local
    limits: ["10/s"]
`, 7, 14, []string{"divided among 4 instances", "capacity 3, less than the cost 5"}},
		{"unknown key part", `
policies:
  - name: a
    key: [adress]
    limits: ["1/s"]
`, 4, 11, []string{`unknown key part "adress"`}},
		{"wildcard not in pattern", `
policies:
  - name: a
    match: "GET /items/{id}"
    key: "path:item"
    limits: ["1/s"]
`, 5, 10, []string{`no wildcard {item}`}},
		{"bad pattern", `
policies:
  - name: a
    match: "/items/{id"
    limits: ["1/s"]
`, 4, 12, []string{"invalid pattern"}},
		{"lower-case method in pattern", `
policies:
  - name: a
    match: "post /login"
    limits: ["1/s"]
`, 4, 12, []string{`method "post" in pattern "post /login" must be upper case, as in "POST /login"`}},
		{"method in path", `
policies:
  - name: a
    match: {path: "GET /x"}
    limits: ["1/s"]
`, 4, 19, []string{"put the method in methods: [GET]"}},
		{"store error mode", `
policies:
  - name: a
    on_store_error: opne
    limits: ["1/s"]
`, 4, 21, []string{`want open, closed or local; did you mean "open"?`}},
		{"store error mode error", `
policies:
  - name: a
    on_store_error: error
    limits: ["1/s"]
`, 4, 21, []string{`on_store_error "error": want open, closed or local`}},
		{"no limits", `
policies:
  - name: a
`, 3, 5, []string{"has no limits"}},
		{"empty limits", `
policies:
  - name: a
    match: "POST /login"
    limits:
`, 3, 5, []string{"has no limits"}},
		{"duplicate name", `
policies:
  - name: a
    limits: ["1/s"]
  - name: a
    limits: ["1/s"]
`, 5, 5, []string{`policy name "a" is used twice (first at line 3)`}},
		{"plan not listed", `
plans:
  names: [free, pro]
policies:
  - name: a
    plans:
      prp: ["1/s"]
`, 7, 7, []string{`plan "prp"`, `did you mean "pro"?`}},
		{"plans without section", `
policies:
  - name: a
    plans:
      pro: ["1/s"]
`, 4, 5, []string{"no plans section"}},
		{"repeated field", `
policies:
  - name: a
    limits: ["1/s"]
    limits: ["2/s"]
`, 5, 5, []string{`field "limits" repeated`}},
		// The line of the mistake, not the one where the construct the YAML
		// parser could not finish began (see yamlsyntax_test.go).
		{"yaml syntax", "policies:\n  - name: a\n   limits: x\n", 3, 4, []string{"invalid YAML: did not find expected '-' indicator"}},
		{"bad proxy", `
client_ip:
  trusted_proxies: [10.0.0.0/33]
policies:
  - {name: a, limits: ["1/s"]}
`, 3, 21, []string{`trusted proxy "10.0.0.0/33"`}},
		{"bad forwarding header", `
client_ip:
  trusted_proxies: [10.0.0.0/8]
  header: X-Client-IP
policies:
  - {name: a, limits: ["1/s"]}
`, 4, 11, []string{`unsupported forwarding header "X-Client-IP"`}},
		{"override on a part the key lacks", `
policies:
  - name: a
    key: ip
    limits: ["1/s"]
    overrides:
      - when: {user: acme}
        limits: ["10/s"]
`, 7, 16, []string{`override on "user"`}},
		// An override applies to the key that has every part it names:
		// one naming parts of two different keys applies to none, and
		// the partner it was written for gets the default limits.
		{"override across keys", `
policies:
  - name: a
    keys: [user, ip]
    limits: ["1/s"]
    overrides:
      - when: {user: acme, ip: 192.0.2.1}
        limits: ["10/s"]
`, 7, 15, []string{`override on user and ip, which no one key of policy "a" has`}},
		// A mapping's repeated entry would silently replace the first.
		{"repeated API key", `
plans:
  names: [free, pro]
  api_key_header: X-API-Key
  api_keys:
    pk_1: pro
    pk_1: free
policies:
  - {name: a, limits: ["1/s"], plans: {pro: ["2/s"]}}
`, 7, 5, []string{"API key repeated (first at line 6)"}},
		{"repeated plan of a policy", `
plans:
  names: [free, pro]
policies:
  - name: a
    plans:
      free: ["1/s"]
      free: ["2/s"]
`, 8, 7, []string{`plan "free" repeated in policy "a" (first at line 7)`}},
		// An empty key (a template that left it blank) would leave the
		// policy deciding nothing, as surely as empty limits.
		{"empty key", `
policies:
  - name: a
    key:
    limits: ["1/s"]
`, 4, 5, []string{"key of policy \"a\" has no parts", "key: ip"}},
		{"empty key in keys", `
policies:
  - name: a
    keys: [ip, []]
    limits: ["1/s"]
`, 4, 16, []string{"key of policy \"a\" has no parts"}},
		{"empty keys", `
policies:
  - name: a
    keys: []
    limits: ["1/s"]
`, 4, 5, []string{"keys of policy \"a\" lists no key"}},
		{"repeated key", `
policies:
  - name: a
    keys: [[ip, user], user, [user, ip]]
    limits: ["1/s"]
`, 4, 30, []string{"key [ip, user] repeated (first at line 4)"}},
		{"repeated limit", `
policies:
  - name: a
    limits: ["1000/d", "10/s", "1000 per 24h"]
`, 4, 32, []string{`limit "1000 per 24h" is the same as "1000/d" at line 4`, `fixed_window 1000/d`}},
		// Two window limits over one window count on one counter, as their
		// state does not depend on the count (see stateTag).
		{"window limits over one window", `
policies:
  - name: a
    limits: ["fixed_window 100/h", "10/s", "fixed_window 200 per 1h"]
`, 4, 44, []string{`limit "fixed_window 200 per 1h" counts in the same windows as "fixed_window 100/h" at line 4`}},
		// An empty list (a template's unset value) would lift every limit,
		// and a reload to it would succeed.
		{"empty policies list", `
prefix: sluice
policies: []
`, 3, 1, []string{"the policies list is empty"}},
		{"blank policies list", `
prefix: sluice
policies:
`, 3, 1, []string{"the policies list is empty"}},
		// An override's when names each part once: a part with two values
		// matches no key, and the partner gets the default limits.
		{"override repeats a part", `
policies:
  - name: a
    key: header:x-api-key
    limits: ["1/s"]
    overrides:
      - when: {"header:x-api-key": pk_a, "header:X-API-Key": pk_b}
        limits: ["10/s"]
`, 7, 42, []string{`part "header:x-api-key" repeated in when (first at line 7)`}},
		// Values no request's key can hold: net/http trims header values,
		// and a key with an empty part does not apply.
		{"override on a padded header value", `
policies:
  - name: a
    key: header:x-api-key
    limits: ["1/s"]
    overrides:
      - when: {"header:x-api-key": " pk_a"}
        limits: ["10/s"]
`, 7, 36, []string{`begins or ends with a space or tab`, `write "pk_a"`}},
		{"override on an empty value", `
policies:
  - name: a
    key: user
    limits: ["1/s"]
    overrides:
      - when: {user: ""}
        limits: ["10/s"]
`, 7, 22, []string{"override on user needs a value"}},
		{"override on a method that is none", `
policies:
  - name: a
    key: [ip, method]
    limits: ["1/s"]
    overrides:
      - when: {method: "GET /x", ip: 192.0.2.1}
        limits: ["10/s"]
`, 7, 24, []string{`override on method needs a method such as POST, not "GET /x"`}},
		// The user section: a header, believed from trusted proxies only.
		{"user without header", `
client_ip: {trusted_proxies: [10.0.0.1]}
user: {}
policies:
  - {name: a, key: user, match: {authenticated: true}, limits: ["1/s"]}
`, 3, 1, []string{"user needs header"}},
		{"user header from no trusted proxy", `
user: {header: X-Auth-Request-User}
policies:
  - {name: a, key: user, match: {authenticated: true}, limits: ["1/s"]}
`, 2, 16, []string{"believed only from client_ip.trusted_proxies, and the file trusts no proxy"}},
		{"user header is the forwarding header", `
client_ip: {trusted_proxies: [10.0.0.1]}
user: {header: x-forwarded-for}
policies:
  - {name: a, key: user, match: {authenticated: true}, limits: ["1/s"]}
`, 3, 16, []string{"the header client_ip reads the client address from"}},
		// plans.header, like the user section's: from trusted proxies only.
		{"plan header from no trusted proxy", `
plans: {names: [free, pro], default: free, header: X-Plan}
policies:
  - {name: a, limits: ["1/s"], plans: {pro: ["2/s"]}}
`, 2, 52, []string{"plans.header X-Plan is believed only from client_ip.trusted_proxies, and the file trusts no proxy"}},
		{"plan header is the forwarding header", `
client_ip: {trusted_proxies: [10.0.0.1], header: X-Real-IP}
plans: {names: [free, pro], default: free, header: x-real-ip}
policies:
  - {name: a, limits: ["1/s"], plans: {pro: ["2/s"]}}
`, 3, 52, []string{"the header client_ip reads the client address from"}},
		{"user field misspelt", `
client_ip: {trusted_proxies: [10.0.0.1]}
user: {haeder: X-User}
policies:
  - {name: a, key: user, match: {authenticated: true}, limits: ["1/s"]}
`, 3, 8, []string{`unknown field "haeder" in user`, `did you mean "header"?`}},
		{"query string in pattern", `
policies:
  - name: a
    match: "GET /search?type=export"
    limits: ["1/s"]
`, 4, 12, []string{`path "/search?type=export" has a ?`, "match no request it names", `write "/search"`}},
		{"fragment in path", `
policies:
  - name: a
    match: {path: "/docs#top"}
    limits: ["1/s"]
`, 4, 19, []string{`path "/docs#top" has a #`}},
		{"wildcard host", `
policies:
  - name: a
    match: {host: "*.example.com", path: /}
    limits: ["1/s"]
`, 4, 19, []string{`host "*.example.com" has a *`, "no wildcards"}},
		{"wildcard host in pattern", `
policies:
  - name: a
    match: "GET *.example.com/export"
    limits: ["1/s"]
`, 4, 12, []string{`host "*.example.com" has a *`}},
		{"IPv4-mapped trusted proxy prefix", `
client_ip: {trusted_proxies: ["::ffff:10.0.0.0/8"]}
policies:
  - {name: a, limits: ["1/s"]}
`, 2, 31, []string{`trusted proxy ::ffff:10.0.0.0/8 is an IPv4-mapped prefix`, "10.0.0.0/8"}},
		{"internationalized host", `
policies:
  - name: a
    match: {host: "bücher.example", path: /}
    limits: ["1/s"]
`, 4, 19, []string{`host "bücher.example" is not ASCII`, "punycode"}},
		{"key on the Host header", `
policies:
  - name: a
    key: header:host
    limits: ["1/s"]
`, 4, 10, []string{`key part "header:host" would never apply`, "Request.Host"}},
		{"header condition on Host", `
policies:
  - name: a
    match: {headers: [{name: Host, equals: api.example.com}]}
    limits: ["1/s"]
`, 4, 30, []string{"header condition on Host", "match: {host: NAME}"}},
		{"header condition on a padded value", `
policies:
  - name: a
    match: {headers: [{name: X-Tier, equals: "gold "}]}
    limits: ["1/s"]
`, 4, 46, []string{`equals "gold " begins or ends with a space`, `write "gold"`}},
		{"override repeated", `
policies:
  - name: a
    key: header:x-api-key
    limits: ["1/s"]
    overrides:
      - when: {"header:x-api-key": pk_a}
        limits: ["10/s"]
      - when: {"header:X-API-Key": pk_a}
        limits: ["20/s"]
`, 9, 9, []string{"override never applies", "override at line 7"}},
		{"override after a broader one", `
policies:
  - name: a
    key: [ip, user]
    limits: ["1/s"]
    overrides:
      - when: {user: alice}
        limits: ["10/s"]
      - when: {user: alice, ip: 192.0.2.1}
        limits: ["20/s"]
`, 9, 9, []string{"override never applies", "override at line 7"}},
		{"override on an address of one group", `
client_ip: {ipv4_prefix: 24}
policies:
  - name: a
    limits: ["1/s"]
    overrides:
      - when: {ip: 192.0.2.1}
        limits: ["10/s"]
      - when: {ip: 192.0.2.9}
        limits: ["20/s"]
`, 9, 9, []string{"override never applies", "override at line 7"}},
		{"key and keys", `
policies:
  - name: a
    key: ip
    keys: [user]
    limits: ["1/s"]
`, 5, 5, []string{"both key and keys"}},
		{"shares decrease", `
concurrency:
  max_in_flight: 10
  shares: {low: 90%, normal: 80%}
policies:
  - {name: a, limits: ["1/s"]}
`, 4, 11, []string{"must not decrease"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantFirstProblem(t, tt.yaml, tt.line, tt.col, tt.want) })
	}
}

// A file with several mistakes reports all of them, each with its line.
func TestLoadReportsEveryProblem(t *testing.T) {
	_, err := Load("sluice.yaml", []byte(`
policies:
  - name: a
    limt: ["1/s"]
  - name: b
    limits: ["1/sec burst 0"]
  - name: c
    key: [nope]
    limits: ["1/s"]
    shadow: maybe
`))
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("Load = %v, want an *Error", err)
	}
	lines := []int{}
	for _, p := range perr.Problems {
		lines = append(lines, p.Line)
	}
	want := []int{4, 6, 8, 10}
	if len(lines) != len(want) {
		t.Fatalf("problems on lines %v, want %v:\n%v", lines, want, err)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Fatalf("problems on lines %v, want %v:\n%v", lines, want, err)
		}
	}
}

func TestHeaderValues(t *testing.T) {
	set, err := Load("t.yaml", []byte(`
policies:
  - {name: one, limits: ["10/s burst 20"]}
  - {name: two, limits: ["100/m", "5000/month"]}
  - {name: odd, limits: ["sliding_window 3 per 7s"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		l          *Limit
		policy     string
		limitValue string
	}{
		{set.Policy("one").Limits()[0], `"one";q=20;w=2`, "20"},
		{set.Policy("two").Limits()[0], `"two.1";q=100;w=60`, "100"},
		{set.Policy("two").Limits()[1], `"two.2";q=5000`, "5000"},
		{set.Policy("odd").Limits()[0], `"odd";q=3;w=7`, "3"},
	}
	for _, tt := range tests {
		if got := tt.l.HeaderPolicy(); got != tt.policy {
			t.Errorf("%v: RateLimit-Policy %s, want %s", tt.l, got, tt.policy)
		}
		if got := tt.l.HeaderLimit(); got != tt.limitValue {
			t.Errorf("%v: X-RateLimit-Limit %s, want %s", tt.l, got, tt.limitValue)
		}
	}
	got := string(set.Policy("one").Limits()[0].AppendHeader(nil, rate.Decision{Remaining: 7, ResetAfter: 1001 * time.Millisecond}))
	if got != `"one";r=7;t=2` {
		t.Errorf("RateLimit = %s, want \"one\";r=7;t=2", got)
	}
}

func TestKeyValuesBounded(t *testing.T) {
	long := strings.Repeat("x", 10_000)
	for _, v := range []string{long, "a|b", "{tag}", "#abc", "sp ace", "ü"} {
		got := escapeValue(v)
		if len(got) > maxValue || !strings.HasPrefix(got, "#") {
			t.Errorf("escapeValue(%.20q) = %q, want a hash of at most %d bytes", v, got, maxValue)
		}
	}
	if a, b := escapeValue("a|b"), escapeValue("a|c"); a == b {
		t.Error("different values hash alike")
	}
	if got := escapeValue("user-42@example.com"); got != "user-42@example.com" {
		t.Errorf("plain value changed to %q", got)
	}
}

// Aliases to anchors that hold aliases describe a tree far larger than
// the file. Load refuses one that expands past maxAliased nodes, at the
// alias that crosses the bound, instead of compiling every node of it.
func TestLoadBoundsAliases(t *testing.T) {
	list := func(k int, item string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(item+", ", k), ", ") + "]"
	}
	// One policy, 300 overrides of 300 limits: 90,000 limits from a file
	// of a few kilobytes.
	src := `
policies:
  - name: a
    limits: [&l "1/s"]
    overrides:
      - &o {when: {ip: 192.0.2.1}, limits: ` + list(300, "*l") + `}
      - ` + strings.Repeat("*o\n      - ", 298) + `*o
`
	_, err := Load("sluice.yaml", []byte(src))
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("Load = %v, want an *Error", err)
	}
	if len(perr.Problems) != 1 || perr.Problems[0].Line < 6 || !strings.Contains(perr.Problems[0].Message, "aliases expand to more than 65536 nodes") {
		t.Errorf("problems %v, want one, past line 5, saying the aliases expand too far", perr.Problems)
	}

	// An alias inside the node it names has no end.
	_, err = Load("sluice.yaml", []byte("policies:\n  - &p {name: a, limits: [\"1/s\"], overrides: [*p]}\n"))
	if !errors.As(err, &perr) || len(perr.Problems) != 1 || perr.Problems[0].Line != 2 || perr.Problems[0].Column != 47 ||
		!strings.Contains(perr.Problems[0].Message, "alias *p is inside the node it names") {
		t.Errorf("a cyclic alias: %v, want one problem at 2:47", err)
	}

	// Sharing through aliases within the bound is fine.
	set, err := Load("sluice.yaml", []byte(`
policies:
  - {name: a, match: &m "GET /search", limits: &l ["10/s", "1000/d"]}
  - {name: b, match: *m, key: user, limits: *l}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(set.Policy("b").Limits()); got != 2 {
		t.Errorf("b has %d limits through the alias, want 2", got)
	}
}

// on_store_error reads sluice.FailureMode's names too: fail_open and
// fail_closed are open and closed.
func TestOnStoreErrorSpellings(t *testing.T) {
	for name, want := range map[string]sluice.FailureMode{
		"open": sluice.FailOpen, "fail_open": sluice.FailOpen,
		"closed": sluice.FailClosed, "fail_closed": sluice.FailClosed, "local": sluice.FailLocal,
	} {
		set, err := Load("t.yaml", []byte("policies:\n  - {name: a, on_store_error: "+name+", limits: [\"1/s\"]}\n"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := set.Policies()[0].OnStoreError; got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}

// wantFirstProblem loads yaml as sluice.yaml and checks that it is refused
// and that its first problem is at line:col, with a message holding each
// of want, and leads the error's text.
func wantFirstProblem(t *testing.T, yaml string, line, col int, want []string) {
	t.Helper()
	_, err := Load("sluice.yaml", []byte(yaml))
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("Load = %v, want an *Error", err)
	}
	p := perr.Problems[0]
	if p.File != "sluice.yaml" || p.Line != line || p.Column != col {
		t.Errorf("first problem at %s:%d:%d, want sluice.yaml:%d:%d (%v)", p.File, p.Line, p.Column, line, col, err)
	}
	for _, w := range want {
		if !strings.Contains(p.Message, w) {
			t.Errorf("message %q lacks %q", p.Message, w)
		}
	}
	if !strings.HasPrefix(err.Error(), p.String()) {
		t.Errorf("Error() = %q, want it to start with %q", err.Error(), p.String())
	}
}
