package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
)

const checkUsage = `Usage: sluice check [--strict] [--envoy PATH]... [FILE]

Checks configuration files without serving them: a policy file (FILE), and
files or directories in the format of Envoy's reference rate limit service
(--envoy, repeatable). Every problem is printed as file:line:col: message
(Envoy files: file:line: message) and the exit code is 1; when everything
loads, one line per file sums it up and the exit code is 0.

A policy file that loads may still hold what is likely not meant, such as
a policy that leaves some requests unlimited (no limits for a plan, a key
that needs a header or form field some requests lack). Each is printed as
file:line:col: warning: message; warnings alone leave the exit code 0,
unless --strict is given. What holds only under sluice serve (a policy on
the user with no user section to name it: an application may name it
itself) is printed as file:line:col: warning (sluice serve): message, and
--strict leaves it out.

Examples:

  sluice check sluice.yaml
  sluice check --envoy /etc/ratelimit/config
  sluice check sluice.yaml --envoy ratelimit.yaml

Flags:

  --envoy PATH   an Envoy rate limit configuration file, or a directory
                 whose files are all read, recursively, but for names
                 starting with a dot, as the reference reads them;
                 repeatable
  --strict       exit 1 when the policy file has warnings too
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
	strict := fs.Bool("strict", false, "")
	help := fs.Bool("help", false, "")
	fs.BoolVar(help, "h", false, "")
	// Flags may come after the file: parse, take a positional, repeat.
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
		set, err := policy.LoadFile(files[0])
		if err != nil {
			printProblems(stderr, err)
			code = exitFailure
		} else {
			for _, w := range set.Warnings() {
				fmt.Fprintf(stderr, "%s:%d:%d: warning: %s\n", w.File, w.Line, w.Column, w.Message)
			}
			// What holds only under sluice serve, where no application
			// names the user: a library reading the file may name it
			// itself, so --strict does not count these.
			for _, w := range set.ServeWarnings() {
				fmt.Fprintf(stderr, "%s:%d:%d: warning (sluice serve): %s\n", w.File, w.Line, w.Column, w.Message)
			}
			fmt.Fprintf(stdout, "%s: OK: %s\n", files[0], summarize(set))
			if *strict && len(set.Warnings()) > 0 {
				code = exitFailure
			}
		}
	}
	if len(envoy.vals) > 0 {
		cfg, err := server.LoadEnvoy(envoy.vals...)
		if err != nil {
			printProblems(stderr, err)
			code = exitFailure
		} else {
			d := cfg.Domains()
			fmt.Fprintf(stdout, "%s: OK: %d domain%s (%s)\n", strings.Join(envoy.vals, ", "), len(d), plural(len(d)), strings.Join(d, ", "))
		}
	}
	return code
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

// summarize says in a line what a policy file holds.
func summarize(set *policy.Set) string {
	var limits, shadow int
	for _, p := range set.Policies() {
		limits += len(p.Limits())
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
	if n := len(set.Warnings()) + len(set.ServeWarnings()); n > 0 {
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
