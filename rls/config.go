package rls

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/yamlalias"
	"github.com/sluicehq/sluice/internal/yamlpos"
	"github.com/sluicehq/sluice/rate"
)

// Config is a loaded and validated set of rate limit domains, one per file
// in the format of Envoy's reference rate limit service. It is immutable:
// build a new one to change the limits and hand it to [Service.SetConfig].
// Load one with [LoadFiles], [LoadDir] or [Parse]. A nil *Config has no
// domains: every request is answered OK with no limit.
type Config struct {
	domains map[string]*domain
}

// HasDomain reports whether a domain of that name is configured.
func (c *Config) HasDomain(name string) bool {
	if c == nil {
		return false
	}
	_, ok := c.domains[name]
	return ok
}

// Domains returns the names of the configured domains, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	names := make([]string, 0, len(c.domains))
	for name := range c.domains {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// File is one configuration file's name and contents, for [Parse]. The
// name appears in error messages.
type File struct {
	// Name is the file's name, as ConfigError.File gives it.
	Name string
	// Data is the file's contents, in the reference's YAML format.
	Data []byte
}

// ConfigError is one problem found in a configuration file. Its message
// reads "file:line: message".
type ConfigError struct {
	// File is the name of the file, as given to Parse or LoadFiles.
	File string
	// Line is the 1-based line of the problem, or 0 when the problem
	// concerns the whole file.
	Line int
	// Msg says what is wrong.
	Msg string
}

// Error returns "file:line: message".
func (e *ConfigError) Error() string {
	if e.Line <= 0 {
		return e.File + ": " + e.Msg
	}
	return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
}

// maxErrors bounds how many problems one load reports.
const maxErrors = 20

// maxAliased bounds how many YAML nodes of one file may come from aliases
// (see yamlalias): each alias repeats what its anchor holds, so a few
// lines of aliases to aliases can describe a tree of any size.
const maxAliased = 1 << 16

// LoadFiles reads and parses the given files, one domain each (see
// [Parse]).
func LoadFiles(paths ...string) (*Config, error) {
	files := make([]File, 0, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
		files = append(files, File{Name: p, Data: data})
	}
	return Parse(files...)
}

// LoadDir loads the files of dir that [ConfigFiles] lists, one domain
// each, the way the reference service loads its runtime directory. A
// directory with no file in it is an error: a service with no domain
// limits nothing, which is far more likely a wrong path than the intent.
func LoadDir(dir string) (*Config, error) {
	paths, err := ConfigFiles(dir)
	if err != nil {
		return nil, err
	}
	return LoadFiles(paths...)
}

// Files lists the files of paths as the server reads them: a file as it
// is, a directory's as ConfigFiles lists them.
func Files(paths ...string) ([]string, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		fs, err := ConfigFiles(p)
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
	}
	return files, nil
}

// ConfigFiles lists the files [LoadDir] loads from dir, each directory's
// in name order. As the reference's loader (lyft/goruntime) does, that is
// every file in dir and in the directories below it, whatever its name
// ends in, except that names starting with a dot are skipped, files and
// directories alike: the reference's rule with RUNTIME_IGNOREDOTFILES=true,
// which a Kubernetes ConfigMap volume needs, as its files are links to
// ..data/<name>, and ..data one to a timestamped directory whose name
// starts with a dot too. Symbolic links are followed, to directories as
// well (a ConfigMap item with a path in a directory is one; the
// reference, which cannot read it as a file, skips it), but not to a
// directory that holds the link. A file that is neither a regular file
// nor a directory is an error, and so is finding no file at all.
func ConfigFiles(dir string) ([]string, error) {
	var (
		out     []string
		parents []os.FileInfo // the directories being listed, dir first
		walk    func(dir string) error
	)
	walk = func(dir string) error {
		info, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("rls: %w", err)
		}
		for _, p := range parents {
			if os.SameFile(p, info) {
				return fmt.Errorf("rls: %s is a link to a directory that holds it", dir)
			}
		}
		parents = append(parents, info)
		defer func() { parents = parents[:len(parents)-1] }()
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("rls: %w", err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			path := filepath.Join(dir, e.Name())
			// Stat follows a symbolic link; ReadDir's type does not.
			st, err := os.Stat(path)
			if err != nil {
				return fmt.Errorf("rls: %w", err)
			}
			switch {
			case st.IsDir():
				if err := walk(path); err != nil {
					return err
				}
			case st.Mode().IsRegular():
				out = append(out, path)
			default:
				return fmt.Errorf("rls: %s is not a regular file (%v)", path, st.Mode().Type())
			}
		}
		return nil
	}
	if err := walk(dir); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("rls: no configuration file in %s (names starting with a dot are skipped)", dir)
	}
	return out, nil
}

// Parse builds a Config from files in the reference service's format, one
// domain per file:
//
//	domain: <name>
//	descriptors:
//	  - key: <key>
//	    value: <value, optional; "*" or a trailing "*" matches by prefix>
//	    rate_limit:
//	      unit: second | minute | hour | day | week | month | year
//	      requests_per_unit: <n>
//	      unit_multiplier: <sluice extension: n units a window>
//	      unlimited: <bool>
//	      name: <name>
//	      replaces: [{name: <name>}]
//	      algorithm: <sluice extension: gcra, token_bucket, ...>
//	      burst: <sluice extension: bucket capacity>
//	    shadow_mode: <bool>
//	    share_threshold: <bool>
//	    detailed_metric: <bool>
//	    value_to_metric: <bool>
//	    quota_mode: <false; true is not supported>
//	    descriptors: [...]
//
// Decoding is strict: an unknown key, a key written twice in a mapping,
// quota_mode: true, a duplicate descriptor, a bad unit, a missing
// requests_per_unit, unlimited together with a unit or a
// requests_per_unit, a replaces naming its own limit, share_threshold on a
// value that is not a wildcard, aliases that expand to more than 65,536
// YAML nodes and two files with the same domain are all errors. The
// error lists every problem found (up to 20), each as "file:line:
// message" ([ConfigError]), joined with [errors.Join]. Booleans may also
// be written as the reference's YAML 1.1 reads them: yes, no, on, off. A
// key with no value ("shadow_mode:", "rate_limit:" with its lines
// commented out) is read as absent, as the reference reads it. Merge keys
// ("<<") are read as the reference's decoder reads them: where they stand,
// a key set again overwriting what it set (so a key written before a
// merge key that sets it too loses), and a rate_limit set twice merged
// key by key.
func Parse(files ...File) (*Config, error) {
	p := &parser{}
	cfg := &Config{domains: make(map[string]*domain)}
	for _, f := range files {
		p.file = f.Name
		first := len(p.errs)
		d := p.parseFile(f.Data)
		slices.SortStableFunc(p.errs[first:], func(a, b error) int {
			return a.(*ConfigError).Line - b.(*ConfigError).Line
		})
		if d == nil {
			continue
		}
		if prev, ok := cfg.domains[d.name]; ok {
			p.errorf(d.line, "duplicate domain %q (also in %s:%d)", d.name, prev.file, prev.line)
			continue
		}
		cfg.domains[d.name] = d
	}
	if p.more > 0 {
		p.errs = append(p.errs, fmt.Errorf("and %d more problems", p.more))
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return cfg, nil
}

// domain is one configured domain: the root of its descriptor tree.
type domain struct {
	name string
	file string
	line int
	root level
}

// level is one list of descriptors: the top of a domain or the children of
// a descriptor. A request entry looks for its (key, value) in exact, then
// for the first wildcard, in file order, that it matches (see
// node.matches), then for its key alone in anyValue.
type level struct {
	exact    map[entryKey]*node
	wildcard []*node
	anyValue map[string]*node
}

type entryKey struct{ key, value string }

func (l *level) empty() bool {
	return len(l.exact) == 0 && len(l.wildcard) == 0 && len(l.anyValue) == 0
}

// node is one configured descriptor.
type node struct {
	key, value string
	// wildcard is set for a value ending in "*", and for a key ending in
	// "*" with no value (anyKey); prefix is the value, or the key,
	// without its "*".
	wildcard, anyKey bool
	prefix           string
	limit            *limitSpec
	shadow           bool
	share            bool
	detailed         bool
	toMetric         bool
	children         level
	// stat is the reference service's name for the node in its stats:
	// the path of key or key_value parts joined with dots, the last of
	// them part.
	stat, part string
	line       int
}

// unitDurations are the reference's units: fixed windows aligned to the
// Unix epoch, months 30 days and years 365.
var unitDurations = map[rlsv3.RateLimitResponse_RateLimit_Unit]time.Duration{
	rlsv3.RateLimitResponse_RateLimit_SECOND: time.Second,
	rlsv3.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	rlsv3.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	rlsv3.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_WEEK:   7 * 24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_MONTH:  30 * 24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_YEAR:   365 * 24 * time.Hour,
}

// limitSpec is a configured rate_limit block, or a request's override.
type limitSpec struct {
	name      string
	replaces  []string
	unlimited bool
	// perUnit is requests_per_unit; zero refuses every request.
	perUnit    uint32
	unit       rlsv3.RateLimitResponse_RateLimit_Unit
	multiplier uint32
	// limit decides requests; its Count is perUnit (when not zero) and
	// its Period the unit times the multiplier.
	limit rate.Limit
	// id ends the store keys of limit with RefusedConsumeNothing. It
	// names what the state means, as rate.Limit.StateName does, so that a
	// reload keeps the state of a limit whose state still means the same
	// and starts any other afresh. A window's state (fixed_window,
	// sliding_window, sliding_log) is what its windows admitted, whatever
	// the count, so its id names its algorithm and period alone: a reload
	// that lowers requests_per_unit keeps the window's count rather than
	// grant a fresh budget (a count above the new limit is a full window),
	// and an override of the same unit counts in it. A bucket's state is
	// measured in its rate and burst, and means another thing under
	// others: its id names the whole limit.
	id string
	// counted is limit as the reference's counting mode asks for it (see
	// Service.decideCounting), under countedID: for a fixed window, a
	// window of 2×perUnit+1 hits, so that the count can pass the limit,
	// under an id that names the period alone. The count is in hits
	// whatever the limit, so a window keeps it when requests_per_unit
	// changes, and an override of the same period counts in it, as under
	// the reference's keys (domain, entries and window start), each limit
	// within its own room (see Service.decideCounting). Other algorithms
	// keep limit, under an id that names the whole limit.
	counted   rate.Limit
	countedID string
}

// newLimitSpec fills in limit, id, counted and countedID from perUnit,
// unit, multiplier and an algorithm. It reports why they do not make a valid limit.
func newLimitSpec(perUnit uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, multiplier uint32, alg rate.Algorithm, burst int64) (*limitSpec, error) {
	base, ok := unitDurations[unit]
	if !ok {
		return nil, fmt.Errorf("invalid unit %v", unit)
	}
	if multiplier == 0 {
		multiplier = 1
	}
	if int64(multiplier) > rate.MaxExact/int64(base/time.Microsecond) {
		return nil, fmt.Errorf("unit_multiplier %d is too large", multiplier)
	}
	period := base * time.Duration(multiplier)
	ls := &limitSpec{perUnit: perUnit, unit: unit, multiplier: multiplier}
	ls.limit = rate.Limit{Algorithm: alg, Count: int64(perUnit), Period: period, Burst: burst}
	if perUnit > 0 {
		if err := ls.limit.Validate(); err != nil {
			return nil, err
		}
	} else if alg != rate.FixedWindow || burst != 0 {
		return nil, errors.New("requests_per_unit 0 refuses everything and takes no algorithm or burst")
	}
	// The default mode's keys name every limit but a fixed window whole,
	// as they always have: counters kept in Redis survive an upgrade.
	whole := fmt.Sprintf("%s_%d_per_%s", alg, perUnit, period)
	if burst != 0 {
		whole += fmt.Sprintf("_burst_%d", burst)
	}
	ls.id = whole
	if !alg.HasBurst() {
		ls.id = fmt.Sprintf("%s_per_%s", alg, period)
	}
	ls.counted, ls.countedID = ls.limit, whole
	if alg == rate.FixedWindow {
		ls.counted.Count = 2*int64(perUnit) + 1
		ls.countedID = fmt.Sprintf("%s_per_%s_counted", alg, period)
	}
	return ls, nil
}

// setCurrent sets rl, a message nothing has set, to the limit as a
// response's current_limit.
func (ls *limitSpec) setCurrent(rl *rlsv3.RateLimitResponse_RateLimit) {
	rl.Name, rl.RequestsPerUnit, rl.Unit = ls.name, ls.perUnit, ls.unit
	if ls.multiplier > 1 {
		rl.UnitMultiplier = wrapperspb.UInt32(ls.multiplier)
	}
}

// parser collects the problems of one Parse call.
type parser struct {
	file string
	errs []error
	more int // problems found beyond maxErrors
}

// errorf records a problem at line of the current file. A problem already
// recorded is not recorded twice: a mapping merged in several places is
// checked in each.
func (p *parser) errorf(line int, format string, args ...any) {
	e := &ConfigError{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)}
	for _, prev := range p.errs {
		if ce, ok := prev.(*ConfigError); ok && *ce == *e {
			return
		}
	}
	if len(p.errs) >= maxErrors {
		p.more++
		return
	}
	p.errs = append(p.errs, e)
}

// pair is one key of a YAML mapping and the value it ends up with.
type pair struct {
	key string
	k   *yaml.Node
	v   *yaml.Node
	// vs lists, when v is a mapping, every mapping the key was given one
	// after the other, v last, to be read as one (see parser.mappings).
	vs []*yaml.Node
}

// mapping returns the pairs of a mapping node (see parser.mappings).
func (p *parser) mapping(n *yaml.Node, what string, want ...string) []pair {
	return p.mappings([]*yaml.Node{n}, what, want...)
}

// mappings returns the pairs of the mapping nodes ns, read one after the
// other as one mapping, with aliases resolved and merge keys ("<<")
// expanded, reporting duplicate and unknown keys. want lists the keys
// allowed; what names the mapping in messages.
//
// Keys are read the way the reference's decoder (yaml.v2, decoding into
// structs) reads them, so that a file gives the limits it gives there:
// in the order they stand, a merge key's mapping where the merge key
// stands (a list of them from the last to the first, so that the first
// wins), each key overwriting what an earlier one set. A key written
// before a merge key that also sets it loses, and one written after it
// wins. A mapping set over a mapping is merged into it key by key, as
// yaml.v2 decodes both into the one struct: ns are those mappings, for a
// rate_limit. A key with no value is absent, as yaml.v2 leaves its field
// at zero, and so clears what it overwrites. A key written twice in one
// mapping, which yaml.v2 reads as the last, is an error here: the first
// is most likely a mistake.
func (p *parser) mappings(ns []*yaml.Node, what string, want ...string) []pair {
	var (
		out  []pair
		at   = map[string]int{} // index in out
		walk func(m *yaml.Node)
	)
	walk = func(m *yaml.Node) {
		written := map[string]int{} // the line of each key written in m
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := deref(m.Content[i]), deref(m.Content[i+1])
			if k.Kind != yaml.ScalarNode {
				p.errorf(k.Line, "%s has a key that is not a string", what)
				continue
			}
			if k.Tag == "!!merge" {
				switch v.Kind {
				case yaml.MappingNode:
					walk(v)
				case yaml.SequenceNode:
					for j := len(v.Content) - 1; j >= 0; j-- {
						if src := deref(v.Content[j]); src.Kind == yaml.MappingNode {
							walk(src)
						} else {
							p.errorf(src.Line, "merge key in %s must refer to a mapping or a list of mappings", what)
						}
					}
				default:
					p.errorf(k.Line, "merge key in %s must refer to a mapping or a list of mappings", what)
				}
				continue
			}
			if first, dup := written[k.Value]; dup {
				p.errorf(k.Line, "duplicate key %q in %s (first at line %d)", k.Value, what, first)
				continue
			}
			written[k.Value] = k.Line
			if !slices.Contains(want, k.Value) {
				p.errorf(k.Line, "unknown key %q in %s (want one of %s)", k.Value, what, strings.Join(want, ", "))
				continue
			}
			pr := pair{key: k.Value, k: k, v: v}
			if v.Kind == yaml.MappingNode {
				pr.vs = []*yaml.Node{v}
			}
			j, ok := at[k.Value]
			if !ok {
				at[k.Value] = len(out)
				out = append(out, pr)
				continue
			}
			if prev := out[j]; prev.vs != nil && pr.vs != nil {
				pr.vs = append(slices.Clip(prev.vs), v)
			}
			out[j] = pr
		}
	}
	for _, n := range ns {
		if n = deref(n); n.Kind != yaml.MappingNode {
			p.errorf(n.Line, "%s must be a mapping, not %s", what, kindName(n))
			continue
		}
		walk(n)
	}
	// A key with no value is absent, as the reference's decoder leaves
	// its field at zero: "rate_limit:" with its lines commented out is no
	// limit. An empty key or domain is an error of its own.
	return slices.DeleteFunc(out, func(pr pair) bool {
		return isNull(pr.v) && pr.key != "key" && pr.key != "domain"
	})
}

// deref follows aliases and document nodes.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil {
		switch n.Kind {
		case yaml.AliasNode:
			n = n.Alias
		case yaml.DocumentNode:
			if len(n.Content) == 0 {
				return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line}
			}
			n = n.Content[0]
		case 0:
			// An empty document.
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
		default:
			return n
		}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "this"
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// str reads a scalar as a string, as the reference does: numbers and
// booleans keep their spelling, and an empty value is "".
func (p *parser) str(pr pair) string {
	if isNull(pr.v) {
		return ""
	}
	if pr.v.Kind != yaml.ScalarNode {
		p.errorf(pr.v.Line, "%s must be a string, not %s", pr.key, kindName(pr.v))
		return ""
	}
	return pr.v.Value
}

// yaml11Bools are the booleans of YAML 1.1 that YAML 1.2 reads as strings.
// The reference reads its files as YAML 1.1, so a plain (unquoted) yes or
// off means there what it means here.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

func (p *parser) boolean(pr pair) bool {
	if pr.v.Kind == yaml.ScalarNode && pr.v.Tag == "!!str" && pr.v.Style == 0 {
		if b, ok := yaml11Bools[pr.v.Value]; ok {
			return b
		}
	}
	if pr.v.Kind != yaml.ScalarNode || pr.v.Tag != "!!bool" {
		p.errorf(pr.v.Line, "%s must be true or false, not %s", pr.key, kindName(pr.v))
		return false
	}
	b, _ := strconv.ParseBool(strings.ToLower(pr.v.Value))
	return b
}

func (p *parser) uint32(pr pair) (uint32, bool) {
	if pr.v.Kind != yaml.ScalarNode || pr.v.Tag != "!!int" {
		p.errorf(pr.v.Line, "%s must be a whole number, not %s", pr.key, kindName(pr.v))
		return 0, false
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(pr.v.Value, "_", ""), 0, 64)
	if err != nil || n < 0 || n > math.MaxUint32 {
		p.errorf(pr.v.Line, "%s must be between 0 and %d, not %s", pr.key, uint32(math.MaxUint32), pr.v.Value)
		return 0, false
	}
	return uint32(n), true
}

func (p *parser) parseFile(data []byte) *domain {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// The parser names no line for many syntax errors and, for
		// others, a line above the mistake. Decoded into a yaml.Node, a
		// document has no type errors, only syntax errors.
		at := yamlpos.Locate(data, err)
		p.errorf(at.Line, "invalid YAML: %s", at.Message)
		return nil
	}
	if at, cycle := yamlalias.Check(&doc, maxAliased); at != nil {
		if cycle {
			p.errorf(at.Line, "alias *%s is inside the node it names, which would have no end", at.Value)
		} else {
			p.errorf(at.Line, "aliases expand to more than %d YAML nodes", maxAliased)
		}
		return nil
	}
	root := deref(&doc)
	if isNull(root) {
		p.errorf(0, "config file cannot be empty: it needs a domain")
		return nil
	}
	d := &domain{file: p.file, line: root.Line}
	var descs *yaml.Node
	for _, pr := range p.mapping(root, "the file", "domain", "descriptors") {
		switch pr.key {
		case "domain":
			d.name = p.str(pr)
			d.line = pr.k.Line
		case "descriptors":
			descs = pr.v
		}
	}
	if d.name == "" {
		p.errorf(d.line, "config file cannot have an empty domain")
	}
	p.parseLevel(&d.root, descs, d.name)
	if d.name == "" {
		return nil
	}
	return d
}

var (
	descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "share_threshold", "detailed_metric", "value_to_metric", "quota_mode"}
	rateLimitKeys  = []string{"unit", "requests_per_unit", "unit_multiplier", "unlimited", "name", "replaces", "algorithm", "burst"}
)

// parseLevel parses a list of descriptors into l. stat is the stats path of
// the parent.
func (p *parser) parseLevel(l *level, list *yaml.Node, stat string) {
	list = deref(list)
	if isNull(list) {
		return
	}
	if list.Kind != yaml.SequenceNode {
		p.errorf(list.Line, "descriptors must be a list, not %s", kindName(list))
		return
	}
	for _, item := range list.Content {
		n := p.parseNode(item, stat)
		if n == nil {
			continue
		}
		if dup := l.find(n); dup != nil {
			if n.value == "" {
				p.errorf(n.line, "duplicate descriptor key %q with no value (first at line %d)", n.key, dup.line)
			} else {
				p.errorf(n.line, "duplicate descriptor key %q value %q (first at line %d)", n.key, n.value, dup.line)
			}
			continue
		}
		l.add(n)
	}
}

func (l *level) find(n *node) *node {
	switch {
	case n.wildcard:
		for _, w := range l.wildcard {
			if w.key == n.key && w.value == n.value {
				return w
			}
		}
		return nil
	case n.value == "":
		return l.anyValue[n.key]
	}
	return l.exact[entryKey{n.key, n.value}]
}

func (l *level) add(n *node) {
	switch {
	case n.wildcard:
		l.wildcard = append(l.wildcard, n)
	case n.value == "":
		if l.anyValue == nil {
			l.anyValue = map[string]*node{}
		}
		l.anyValue[n.key] = n
	default:
		if l.exact == nil {
			l.exact = map[entryKey]*node{}
		}
		l.exact[entryKey{n.key, n.value}] = n
	}
}

func (p *parser) parseNode(item *yaml.Node, parentStat string) *node {
	n := &node{line: deref(item).Line}
	var (
		rl       []*yaml.Node
		children *yaml.Node
	)
	keySeen := false
	for _, pr := range p.mapping(item, "a descriptor", descriptorKeys...) {
		switch pr.key {
		case "key":
			n.key, keySeen = p.str(pr), true
		case "value":
			n.value = p.str(pr)
		case "rate_limit":
			// The mappings given to it, to be read as one (a list
			// when merge keys set it more than once).
			rl = pr.vs
			if rl == nil {
				rl = []*yaml.Node{pr.v}
			}
		case "descriptors":
			children = pr.v
		case "shadow_mode":
			n.shadow = p.boolean(pr)
		case "share_threshold":
			n.share = p.boolean(pr)
		case "detailed_metric":
			n.detailed = p.boolean(pr)
		case "value_to_metric":
			n.toMetric = p.boolean(pr)
		case "quota_mode":
			// The reference's quota mode lets over-limit requests pass
			// and lists them in the response's dynamic metadata, which
			// sluice does not send. false, its default, means nothing.
			if p.boolean(pr) {
				p.errorf(pr.k.Line, "quota_mode is not supported (shadow_mode lets over-limit requests pass)")
			}
		}
	}
	if n.key == "" {
		if keySeen {
			p.errorf(n.line, "descriptor has an empty key")
		} else {
			p.errorf(n.line, "descriptor has no key")
		}
		return nil
	}
	switch {
	case strings.HasSuffix(n.value, "*"):
		n.wildcard, n.prefix = true, strings.TrimSuffix(n.value, "*")
	case n.value == "" && strings.HasSuffix(n.key, "*"):
		// The reference looks an entry up by "key_value" and takes a
		// descriptor's "key_value", or its key when it has no value, for
		// a wildcard when it ends in "*": such a key is one.
		n.wildcard, n.anyKey, n.prefix = true, true, strings.TrimSuffix(n.key, "*")
	}
	if n.share && !n.wildcard {
		p.errorf(n.line, "share_threshold needs a wildcard: a value ending in '*', or a key ending in '*' with no value (key %q value %q)", n.key, n.value)
	}
	part := n.key
	if n.value != "" {
		part += "_" + n.value
	}
	n.stat, n.part = parentStat+"."+part, part
	if rl != nil {
		n.limit = p.parseRateLimit(rl)
	}
	p.parseLevel(&n.children, children, n.stat)
	return n
}

// parseRateLimit parses the mappings given to a rate_limit, read as one.
func (p *parser) parseRateLimit(rl []*yaml.Node) *limitSpec {
	var (
		perUnit, multiplier uint32
		unitName            string
		unitLine, rpuLine   int
		hasUnit, hasPerUnit bool
		unlimited           bool
		name                string
		replaces            []string
		replacesLines       []int
		alg                 = rate.FixedWindow
		burst               int64
		extLine             int
	)
	// Problems of the limit as a whole are at the last mapping given.
	line := deref(rl[len(rl)-1]).Line
	for _, pr := range p.mappings(rl, "rate_limit", rateLimitKeys...) {
		switch pr.key {
		case "unit":
			unitName, unitLine, hasUnit = p.str(pr), pr.k.Line, true
		case "requests_per_unit":
			perUnit, _ = p.uint32(pr)
			rpuLine, hasPerUnit = pr.k.Line, true
		case "unit_multiplier":
			if m, ok := p.uint32(pr); ok {
				if m == 0 {
					p.errorf(pr.k.Line, "unit_multiplier must be at least 1")
				}
				multiplier = m
			}
		case "unlimited":
			unlimited = p.boolean(pr)
		case "name":
			name = p.str(pr)
		case "replaces":
			list := pr.v
			if list.Kind != yaml.SequenceNode {
				p.errorf(list.Line, "replaces must be a list of {name: ...}, not %s", kindName(list))
				continue
			}
			for _, item := range list.Content {
				r := ""
				for _, rp := range p.mapping(item, "a replaces entry", "name") {
					r = p.str(rp)
				}
				replaces = append(replaces, r)
				replacesLines = append(replacesLines, deref(item).Line)
			}
		case "algorithm":
			a, err := rate.ParseAlgorithm(p.str(pr))
			switch {
			case err != nil:
				p.errorf(pr.v.Line, "%v", err)
			case a == rate.LeakyBucket:
				// A leaky_bucket admits a request into its queue and
				// tells it to wait its turn; Envoy forwards what is OK at
				// once, so its queue would let a burst through at once.
				p.errorf(pr.v.Line, "leaky_bucket holds a request until its turn, and Envoy cannot hold one: it forwards what is OK at once; use gcra with burst: 1 for the same rate without bursts")
			}
			alg, extLine = a, pr.k.Line
		case "burst":
			b, _ := p.uint32(pr)
			burst = int64(b)
			if extLine == 0 {
				extLine = pr.k.Line
			}
		}
	}
	for i, r := range replaces {
		switch {
		case r == "":
			p.errorf(replacesLines[i], "replaces entry has an empty name")
		case r == name:
			p.errorf(replacesLines[i], "limit %q replaces itself", r)
		}
	}
	unit, validUnit := rlsv3.RateLimitResponse_RateLimit_UNKNOWN, false
	if hasUnit {
		v, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unitName)]
		unit = rlsv3.RateLimitResponse_RateLimit_Unit(v)
		validUnit = ok && unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	}
	if unlimited {
		ok := true
		if hasUnit {
			p.errorf(unitLine, "an unlimited limit takes no unit")
			ok = false
		}
		if hasPerUnit {
			p.errorf(rpuLine, "an unlimited limit takes no requests_per_unit")
			ok = false
		}
		if extLine != 0 {
			p.errorf(extLine, "an unlimited limit takes no algorithm or burst")
			ok = false
		}
		if !ok {
			return nil
		}
		return &limitSpec{name: name, replaces: replaces, unlimited: true}
	}
	switch {
	case !hasUnit:
		p.errorf(line, "rate_limit needs a unit (second, minute, hour, day, week, month or year), or unlimited: true")
		return nil
	case !validUnit:
		p.errorf(unitLine, "invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", unitName)
		return nil
	case !hasPerUnit:
		p.errorf(line, "rate_limit needs requests_per_unit (0 refuses every request)")
		return nil
	}
	ls, err := newLimitSpec(perUnit, unit, multiplier, alg, burst)
	if err != nil {
		line := rpuLine
		if extLine != 0 {
			line = extLine
		}
		p.errorf(line, "%v", err)
		return nil
	}
	ls.name, ls.replaces = name, replaces
	return ls
}
