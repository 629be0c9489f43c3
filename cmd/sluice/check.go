package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/redis/rueidis"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rls"
	"github.com/sluicehq/sluice/server"
)

const checkUsage = `Usage: sluice check [--strict] [--envoy PATH]... [FILE]

Checks configuration files without serving them: a policy file (FILE, or -
to read it from standard input, named <stdin> in messages), and
files or directories in the format of Envoy's reference rate limit service
(--envoy, repeatable), as sluice serve would load them, the policy file's
Redis URL and its store's TLS files included (no connection is made).
Every problem is printed as file:line:col: message (Envoy files:
file:line: message) on stderr and the exit code is 1; when everything
loads, one line per file on stdout sums it up and the exit code is 0.

A policy file that loads may still hold what is likely not meant, such as
a policy that leaves some requests unlimited (no limits for a plan, a key
that needs a header or form field some requests lack). Each is printed as
file:line:col: warning: message; warnings alone leave the exit code 0,
unless --strict is given. What holds only under sluice serve (a policy on
the user with no user section to name it: an application may name it
itself; a store TLS file that does not load here, which may exist only
where sluice serve runs, relative paths read from the working directory
as it reads them) is printed as file:line:col: warning (sluice serve):
message, and --strict leaves it out.

Examples:

  sluice check sluice.yaml
  sluice check --envoy /etc/ratelimit/config
  sluice check sluice.yaml --envoy ratelimit.yaml
  kubectl get configmap sluice -o jsonpath='{.data.sluice\.yaml}' | sluice check -

Flags:

  --envoy PATH   an Envoy rate limit configuration file, or a directory
                 whose files are all read, recursively, but for names
                 starting with a dot, as the reference reads them;
                 repeatable; --envoy-config, as sluice serve names it,
                 is the same flag
  --strict       exit 1 when the policy file (or an Envoy file) has
                 warnings too
  --help         show this help

Exit codes: 0 every file loads, 1 some file has problems (or, with
--strict, warnings), 2 usage error.
`

// runCheck is "sluice check".
func runCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var envoy listFlag
	fs.Var(&envoy, "envoy", "")
	fs.Var(&envoy, "envoy-config", "") // sluice serve's name for it
	strict := fs.Bool("strict", false, "")
	help := fs.Bool("help", false, "")
	fs.BoolVar(help, "h", false, "")
	// Flags may come after the file: parse, take a positional, repeat.
	// The flag package stops at a lone "-" and leaves it as a positional.
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			fmt.Fprintf(stderr, "sluice check: %v\nRun 'sluice check --help' for the flags.\n", err)
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if *help {
		io.WriteString(stdout, checkUsage)
		return exitOK
	}
	if len(files) > 1 {
		fmt.Fprintf(stderr, "sluice check: one policy file at a time, got %q\n", files)
		return exitUsage
	}
	if len(files) == 0 && len(envoy.vals) == 0 {
		fmt.Fprintln(stderr, "sluice check: name a policy file, or Envoy files with --envoy\nRun 'sluice check --help' for the flags.")
		return exitUsage
	}
	code := exitOK
	if len(files) == 1 {
		if set, tlsWarnings := loadPolicy(files[0], stderr); set == nil {
			code = exitFailure
		} else {
			for _, w := range set.Warnings() {
				fmt.Fprintf(stderr, "%s:%d:%d: warning: %s\n", w.File, w.Line, w.Column, w.Message)
			}
			// What holds only under sluice serve: where no application
			// names the user (a library reading the file may name it
			// itself), and the store's TLS files as read here (they may
			// exist only where sluice serve runs, a mounted Secret, say),
			// so --strict does not count these.
			serveWarnings := slices.Concat(set.ServeWarnings(), tlsWarnings)
			slices.SortStableFunc(serveWarnings, func(a, b policy.Problem) int {
				return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
			})
			for _, w := range serveWarnings {
				fmt.Fprintf(stderr, "%s:%d:%d: warning (sluice serve): %s\n", w.File, w.Line, w.Column, w.Message)
			}
			name := files[0]
			if name == "-" {
				name = stdinName
			}
			fmt.Fprintf(stdout, "%s: OK: %s\n", name, summarize(set, len(tlsWarnings)))
			if *strict && len(set.Warnings()) > 0 {
				code = exitFailure
			}
		}
	}
	if len(envoy.vals) > 0 {
		cfg, err := server.LoadEnvoy(envoy.vals...)
		if err != nil {
			printProblems(stderr, err)
			for _, f := range envoyFiles(envoy.vals) {
				if data, err := os.ReadFile(f); err == nil && topKey(data, "policies") && !topKey(data, "domain") {
					fmt.Fprintf(stderr, "%s: this is a sluice policy file (it has a policies list), not an Envoy configuration: check it without --envoy\n", f)
				}
			}
			code = exitFailure
		} else {
			d := cfg.Domains()
			fmt.Fprintf(stdout, "%s: OK: %d domain%s (%s)\n", strings.Join(envoy.vals, ", "), len(d), plural(len(d)), strings.Join(d, ", "))
			warned := false
			for _, f := range envoyFiles(envoy.vals) {
				if line := secondDocument(f); line > 0 {
					fmt.Fprintf(stderr, "%s:%d: warning: this is a second YAML document (after a ---), and the reference service and sluice read only a file's first; put it in a file of its own\n", f, line)
					warned = true
				}
			}
			if *strict && warned {
				code = exitFailure
			}
		}
	}
	return code
}

// loadPolicy loads the policy file at path as sluice serve would. When
// it does not load, it prints every problem on w and returns nil. Beyond
// policy.Load, that is the store's Redis URL: the policy package checks
// that it is a redis://, rediss:// or unix:// URL, while the Redis client
// reads the rest of it (the database number, the query's options) only
// as sluice serve opens the store, where a mistake keeps serve from
// starting. The store's TLS files, which keep it from starting too, are
// read as well (see storeTLSWarnings), and what does not load in them is
// returned as warnings about sluice serve.
//
// A path of "-" reads the file from standard input, named stdinName.
func loadPolicy(path string, w io.Writer) (*policy.Set, []policy.Problem) {
	var data []byte
	var err error
	if path == "-" {
		path = stdinName
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		if st, serr := os.Stat(path); serr == nil && st.IsDir() {
			err = fmt.Errorf("%s is a directory: name the policy file in it, or check Envoy configurations with --envoy %s", path, path)
		}
		fmt.Fprintf(w, "sluice check: %v\n", err)
		return nil, nil
	}
	set, err := policy.Load(path, data)
	if err != nil {
		printProblems(w, err)
		if topKey(data, "domain") && topKey(data, "descriptors") && !topKey(data, "policies") {
			arg := path
			if path == stdinName {
				arg = "FILE" // --envoy reads files only
			}
			fmt.Fprintf(w, "%s: this is an Envoy rate limit configuration (domain, descriptors), not a policy file: check it with --envoy %s\n", path, arg)
		}
		return nil, nil
	}
	if u := set.Store().Redis; u != "" {
		// The URL parses (policy.Load saw to it), so the client's errors
		// quote a part of its path or query, never the password.
		if _, err := rueidis.ParseURL(u); err != nil {
			line, col := storePos(data, "redis")
			fmt.Fprintln(w, policy.Problem{File: path, Line: line, Column: col,
				Message: "store.redis: " + strings.TrimPrefix(err.Error(), "redis: ") + " (want redis://[user:pass@]host:6379/0, or rediss:// for TLS)"})
			return nil, nil
		}
	}
	return set, storeTLSWarnings(path, data, set.Store().TLS)
}

// storeTLSWarnings reads the store's TLS files as sluice serve does at
// start, where one that does not load stops it (exit 3), and returns a
// problem for each that does not, placed at its name in the policy file
// (data, named path). A relative path is read, as by sluice serve, from
// the working directory. They are read whatever the store: sluice serve
// reads them with a --redis URL too.
//
// The policy package only names the files, so that a file checked where
// they are not (a pipeline, for a Secret mounted where sluice runs) can
// load; the caller makes these warnings about sluice serve for the same
// reason.
func storeTLSWarnings(path string, data []byte, t policy.StoreTLS) []policy.Problem {
	var out []policy.Problem
	add := func(field string, err error) {
		// A file that cannot be read is the field that names it.
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Path == t.Key {
			field = "key"
		}
		line, col := storePos(data, "tls", field)
		msg := err.Error()
		if pe != nil && errors.Is(err, fs.ErrNotExist) && !filepath.IsAbs(pe.Path) {
			msg += " (a relative path is read from the working directory, as sluice serve reads it)"
		}
		out = append(out, policy.Problem{File: path, Line: line, Column: col, Message: msg})
	}
	if t.CA != "" {
		if _, err := t.ReadCA(); err != nil {
			add("ca", err)
		}
	}
	if t.Cert != "" && t.Key != "" { // the loader refuses one without the other
		if _, err := t.ReadCertificate(); err != nil {
			add("cert", err)
		}
	}
	return out
}

// stdinName names the policy file read from standard input in messages,
// as compilers name it.
const stdinName = "<stdin>"

// storePos returns where the value at keys (such as "tls", "ca") under
// the store section is in a policy file that loads: the nearest mapping
// it is in when it cannot be found, or 1:1 without a store section.
func storePos(data []byte, keys ...string) (line, col int) {
	n := topValue(data, "store")
	if n == nil {
		return 1, 1
	}
next:
	for _, key := range keys {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == key {
					if n = n.Content[i+1]; n.Kind == yaml.AliasNode {
						n = n.Alias
					}
					continue next
				}
			}
		}
		break
	}
	return n.Line, n.Column
}

// topValue returns the value of key in the top-level mapping of a YAML
// document, aliases followed, or nil.
func topValue(data []byte, key string) *yaml.Node {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			v := m.Content[i+1]
			if v.Kind == yaml.AliasNode {
				v = v.Alias
			}
			return v
		}
	}
	return nil
}

// topKey reports whether the top-level mapping of a YAML document has key.
func topKey(data []byte, key string) bool { return topValue(data, key) != nil }

// envoyFiles lists the files LoadEnvoy reads of paths, as far as they can
// be listed.
func envoyFiles(paths []string) []string {
	var out []string
	for _, p := range paths {
		if fs, err := rls.Files(p); err == nil {
			out = append(out, fs...)
		}
	}
	return out
}

// secondDocument returns the line of the first content of a second YAML
// document in the file at path, or 0: Envoy's reference service
// reads only a file's first document, and so does sluice, which a file
// of several separated by --- would not lead anyone to expect.
func secondDocument(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			return 0 // the end, or what the loader reported already
		}
		if i > 0 && len(doc.Content) > 0 && !(doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null") {
			return doc.Content[0].Line
		}
	}
}

// printProblems prints every problem of a load error, one per line.
func printProblems(w io.Writer, err error) {
	var perr *policy.Error
	if errors.As(err, &perr) {
		for _, p := range perr.Problems {
			fmt.Fprintln(w, p.String())
		}
		return
	}
	fmt.Fprintln(w, err.Error())
}

// summarize says in a line what a policy file holds: its limits are
// every one a policy may apply, per plan and per override included. Its
// warnings are the Set's and moreWarnings others (the store's TLS files).
func summarize(set *policy.Set, moreWarnings int) string {
	var limits, shadow int
	for _, p := range set.Policies() {
		limits += len(p.AllLimits())
		if p.Shadow {
			shadow++
		}
	}
	n := len(set.Policies())
	s := fmt.Sprintf("%d polic%s", n, map[bool]string{true: "y", false: "ies"}[n == 1])
	if shadow > 0 {
		s += fmt.Sprintf(" (%d shadow)", shadow)
	}
	s += fmt.Sprintf(", %d limit%s", limits, plural(limits))
	st := set.Store()
	switch {
	case st.Redis != "":
		s += ", store: redis"
	case len(st.Cluster) > 0:
		s += ", store: redis cluster"
	case st.SentinelMaster != "":
		s += ", store: redis sentinel"
	default:
		s += ", store: memory"
	}
	if n := len(set.Warnings()) + len(set.ServeWarnings()) + moreWarnings; n > 0 {
		s += fmt.Sprintf(", %d warning%s", n, plural(n))
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
