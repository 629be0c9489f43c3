// Command sluice is sluice's command line: "sluice help" lists what it
// does.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
)

// A command is one subcommand: "sluice NAME ARGS…". Run gets the arguments
// after its name and returns the exit code: 0 for success, 1 when the
// work failed, 2 for a usage error (a message on stderr says which).
type command struct {
	// Summary says in one line what the command does, for "sluice help".
	Summary string
	// Run runs the command. It writes its output to stdout and its
	// messages to stderr, and returns when ctx ends at the latest.
	Run func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands returns every subcommand by name. A new subcommand is a file
// holding its Run function, plus its line here.
func commands() map[string]command {
	return map[string]command{
		"check":   {Summary: "check policy and Envoy rate limit files, printing every problem", Run: runCheck},
		"serve":   {Summary: "run the proxy, check endpoints, Envoy's rate limit service and metrics", Run: runServe},
		"sim":     {Summary: "replay traffic against every algorithm and show what passes", Run: runSim},
		"version": {Summary: "print the version", Run: runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to a subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-version", "--version":
		return runVersion(ctx, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && rest[0] != "help" {
			if c, ok := commands()[rest[0]]; ok {
				return c.Run(ctx, []string{"--help"}, stdout, stderr)
			}
			fmt.Fprintf(stderr, "sluice help: unknown command %q\n", rest[0])
			usage(stderr)
			return 2
		}
		usage(stdout)
		return 0
	}
	c, ok := commands()[name]
	if !ok {
		fmt.Fprintf(stderr, "sluice: unknown command %q\n", name)
		if strings.HasPrefix(name, "-") {
			// As from "docker run IMAGE --config …", whose arguments
			// replace the image's "serve".
			fmt.Fprintf(stderr, "Flags go after the command, as in: sluice serve %s\n", strings.Join(args, " "))
		}
		usage(stderr)
		return 2
	}
	return c.Run(ctx, rest, stdout, stderr)
}

// usage lists the subcommands.
func usage(w io.Writer) {
	cmds := commands()
	names := make([]string, 0, len(cmds)+1)
	for n := range cmds {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString("sluice is a rate limiter for HTTP and gRPC APIs.\n\nUsage:\n\n  sluice COMMAND [flags]\n\nCommands:\n\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-8s %s\n", n, cmds[n].Summary)
	}
	fmt.Fprintf(&b, "  %-8s %s\n", "help", "list the commands, or explain one: sluice help COMMAND")
	b.WriteString("\nRun 'sluice COMMAND --help' for a command's flags.\n")
	io.WriteString(w, b.String())
}

// runVersion prints the module version and the revision it was built from.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			fmt.Fprintln(stdout, "Usage: sluice version\n\nPrints the version of sluice and the revision it was built from.")
			return 0
		}
		fmt.Fprintf(stderr, "sluice version: takes no arguments, got %q\n", args)
		return 2
	}
	fmt.Fprintln(stdout, versionText())
	return 0
}

// version is the version a build names at link time, as the Dockerfile
// does (-ldflags "-X main.version=v1.2.0"), where the module's version is
// unknown: a build from a work tree, or from a copy of one without its
// history.
var version string

// versionText describes the build: "sluice v1.2.0 (go1.26.8)", or for a
// build from a work tree "sluice (devel) 3f2a1c9d0b1e, modified (go1.26.8)".
func versionText() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if version != "" {
			return "sluice " + version
		}
		return "sluice (unknown version)"
	}
	v := info.Main.Version
	if version != "" {
		v = version
	} else if v == "" {
		v = "(devel)"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	out := "sluice " + v
	if rev != "" {
		out += " " + rev + modified
	}
	return out + " (" + info.GoVersion + ")"
}
