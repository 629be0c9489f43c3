package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/sim"
)

const simUsage = `Usage: sluice sim [flags]

Replays traffic against every rate limiting algorithm, with the same limit,
and shows what passed and what was refused, second by second. A run is
instant and gives the same result every time: it computes the decisions
sluice's stores would make, with simulated time.

With no flags it runs the boundary scenario. Examples:

  sluice sim --list
  sluice sim --scenario calm-burst
  sluice sim --scenario flood --instances 5 --json
  sluice sim --scenario boundary --limit "5 per 10s" --algorithms fixed_window,sliding_log
  sluice sim --csv traffic.csv --limit "100/m" --setup single,own-counters
  sluice sim --scenario boundary --svg boundary.svg

Flags:

  --list               list the built-in scenarios and exit
  --scenario NAME      the built-in scenario to run (default boundary)
  --csv FILE           replay the requests in FILE instead: one per line,
                       "time,key[,cost]", time in seconds from the start
                       (9.9) or RFC 3339 (2025-06-01T12:00:09.9Z); a first
                       line "time,key[,cost]" is a header. Needs --limit.
  --limit LIMIT        the limit, as in sluice's config: "10 per 10s",
                       "5/s", "100/m burst 20". The buckets (token_bucket,
                       leaky_bucket, gcra) hold burst tokens, count if no
                       burst is given; the windows ignore the burst. Every
                       algorithm compared must be able to apply it (a
                       sliding_log counts at most 65536): leave out with
                       --algorithms those that cannot. Default: the
                       scenario's.
  --algorithms LIST    the algorithms to compare, comma-separated:
                       fixed_window, sliding_log, sliding_window,
                       token_bucket, leaky_bucket, gcra; all, alone or
                       among them, means every one. Default (also for an
                       empty list): all.
  --setup LIST         how limiters share counters, comma-separated:
                       single (one limiter), own-counters (N instances
                       behind round robin, each its own counter),
                       shared-counter (N instances, one counter); all,
                       alone or among them, means every one. Default
                       (also for an empty list): the scenario's (single
                       for most).
  --instances N        N for own-counters and shared-counter (default 3)
  --seconds N          how long the scenario lasts; traffic that runs
                       throughout (steady, flood, clients, the calm client)
                       is generated for that long. Default: the scenario's.
  --seed N             the seed of random arrivals (clients) (default 1)
  --max-delay D        how long a client waits rather than be refused, as
                       a policy's max_delay: 500ms, 3s (default 0, none).
                       gcra and token_bucket hold a request past the burst
                       until its unit refills, if within D; leaky_bucket
                       refuses a turn later than D; a request a window
                       refused waits once for its Retry-After, if within
                       D, and is decided again, as sluice serve has it
  --json               print the result as JSON instead of tables:
                       {"scenario": NAME, "results": [{"algorithm": A,
                       "setup": S, "passed": N, "refused": N, "per_second":
                       [{"t": 0, "passed": N, "refused": N}, ...]}, ...]};
                       when not 0, a row and a second also have "held",
                       how many of those passed were held back first (a
                       leaky_bucket's turn, a unit within --max-delay, a
                       window's refusal waited out within it),
                       and a row "max_delay_ns", the longest of those
                       waits, and "over_capacity", requests costing more
                       than the capacity; a row of 2 to 8 clients has
                       "clients": [{"client": C, "passed": N, "refused":
                       N}, ...]
  --svg FILE           also draw the result as an SVG picture in FILE
  --help               show this help

Every count is by the second a request arrived: a held request is
counted there, and went ahead up to its wait later.

Exit codes: 0 success, 1 the CSV file could not be read or holds a line
that is not a request, or the SVG picture could not be written, 2 usage
error, including a CSV request later than --seconds allows.
`

// simFlags are the flags of "sluice sim".
type simFlags struct {
	list        bool
	scenario    string
	csv         string
	limit       string
	algorithms  string
	setups      string
	instances   int
	seconds     int
	seed        uint64
	maxDelay    time.Duration
	json        bool
	svg         string
	set         map[string]bool // the flags given on the command line
	noArguments bool
}

// runSim is "sluice sim".
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseSimFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		io.WriteString(stdout, simUsage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice sim: %v\nRun 'sluice sim --help' for the flags.\n", err)
		return 2
	}
	if f.list {
		return listScenarios(stdout)
	}
	sc, err := f.buildScenario()
	if err != nil {
		fmt.Fprintf(stderr, "sluice sim: %v\n", err)
		var usage usageError
		if errors.As(err, &usage) {
			fmt.Fprintln(stderr, "Run 'sluice sim --help' for the flags.")
			return 2
		}
		return 1
	}
	res, err := sim.Run(ctx, sc)
	if err != nil {
		fmt.Fprintf(stderr, "sluice sim: %v\n", err)
		if errors.Is(err, sim.ErrInvalid) {
			return 2
		}
		return 1
	}
	if f.svg != "" {
		if err := writeSVGFile(f.svg, res); err != nil {
			fmt.Fprintf(stderr, "sluice sim: %v\n", err)
			return 1
		}
	}
	if f.json {
		b, err := json.Marshal(res)
		if err == nil {
			_, err = stdout.Write(append(b, '\n'))
		}
		if err != nil {
			fmt.Fprintf(stderr, "sluice sim: %v\n", err)
			return 1
		}
	} else {
		if err := sim.WriteText(stdout, res); err != nil {
			fmt.Fprintf(stderr, "sluice sim: %v\n", err)
			return 1
		}
		if f.noArguments {
			fmt.Fprintln(stdout, "\nMore scenarios: sluice sim --list. Every flag: sluice sim --help.")
		}
	}
	if f.svg != "" {
		fmt.Fprintf(stderr, "wrote %s\n", f.svg)
	}
	return 0
}

// usageError is an error in the flags, as opposed to a failure to read a
// file.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// parseSimFlags parses the arguments of "sluice sim".
func parseSimFlags(args []string) (*simFlags, error) {
	f := &simFlags{set: map[string]bool{}, noArguments: len(args) == 0}
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.BoolVar(&f.list, "list", false, "")
	fs.StringVar(&f.scenario, "scenario", "boundary", "")
	fs.StringVar(&f.csv, "csv", "", "")
	fs.StringVar(&f.limit, "limit", "", "")
	fs.StringVar(&f.algorithms, "algorithms", "all", "")
	fs.StringVar(&f.setups, "setup", "", "")
	fs.IntVar(&f.instances, "instances", sim.DefaultInstances, "")
	fs.IntVar(&f.seconds, "seconds", 0, "")
	fs.Uint64Var(&f.seed, "seed", 1, "")
	fs.DurationVar(&f.maxDelay, "max-delay", 0, "")
	fs.BoolVar(&f.json, "json", false, "")
	fs.StringVar(&f.svg, "svg", "", "")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	switch {
	case f.set["csv"] && f.csv == "":
		return nil, errors.New("--csv needs a file name")
	case f.set["csv"] && f.set["scenario"]:
		return nil, errors.New("--csv and --scenario both name the traffic; give one")
	case f.set["csv"] && !f.set["limit"]:
		return nil, errors.New(`--csv needs --limit, such as --limit "100/m"`)
	case f.instances < 1 || f.instances > sim.MaxInstances:
		return nil, fmt.Errorf("--instances must be between 1 and %d, got %d", sim.MaxInstances, f.instances)
	case f.seconds < 0 || f.seconds > sim.MaxSeconds:
		return nil, fmt.Errorf("--seconds must be between 1 and %d (0: the scenario's), got %d", sim.MaxSeconds, f.seconds)
	case f.maxDelay < 0:
		return nil, fmt.Errorf("--max-delay must not be negative, got %v (0 for none)", f.maxDelay)
	case f.set["svg"] && f.svg == "":
		return nil, errors.New("--svg needs a file name")
	}
	return f, nil
}

// buildScenario builds the scenario the flags ask for.
func (f *simFlags) buildScenario() (sim.Scenario, error) {
	var sc sim.Scenario
	if f.csv != "" {
		file, err := os.Open(f.csv)
		if err != nil {
			return sc, err
		}
		defer file.Close()
		events, start, err := sim.ReadCSV(file)
		if err != nil {
			return sc, fmt.Errorf("%s: %w", f.csv, err)
		}
		if err := f.fitsSeconds(events); err != nil {
			return sc, err
		}
		sc = sim.Scenario{
			Name:    filepath.Base(f.csv),
			Summary: fmt.Sprintf("%d request%s from %s", len(events), plural(len(events)), filepath.Base(f.csv)),
			Start:   start,
			Seconds: f.seconds,
			Events:  events,
		}
	} else {
		var err error
		sc, err = sim.Builtin(f.scenario, sim.Params{Seconds: f.seconds, Seed: f.seed})
		if err != nil {
			return sc, usageError{fmt.Errorf("--scenario: %w", err)}
		}
	}
	algs, err := sim.ParseNames([]string{f.algorithms}, rate.Algorithms(), rate.ParseAlgorithm)
	if err != nil {
		return sc, usageError{fmt.Errorf("--algorithms: %w", err)}
	}
	sc.Algorithms = algs // nil: every algorithm
	if f.limit != "" {
		l, err := sim.ParseLimit(f.limit)
		if err != nil {
			return sc, usageError{fmt.Errorf("--limit: %w", err)}
		}
		sc.Limit = l // that each algorithm compared can apply it, Run checks
	}
	setups, err := sim.ParseNames([]string{f.setups}, sim.Setups(), sim.ParseSetup)
	if err != nil {
		return sc, usageError{fmt.Errorf("--setup: %w", err)}
	}
	if setups != nil {
		sc.Setups = setups
	}
	sc.Instances = f.instances
	sc.MaxDelay = f.maxDelay
	if f.csv == "" {
		sc = sim.NoteChanges(f.scenario, sc, simFlagOf)
	}
	return sc, nil
}

// simFlagOf names each setting a built-in scenario's figures depend on
// by the flag that sets it.
var simFlagOf = map[sim.Setting]string{
	sim.SettingLimit:     "--limit",
	sim.SettingSeconds:   "--seconds",
	sim.SettingSeed:      "--seed",
	sim.SettingInstances: "--instances",
	sim.SettingSetups:    "--setup",
	sim.SettingMaxDelay:  "--max-delay",
}

// fitsSeconds returns a usage error naming the first line of events (by
// line) that arrives after --seconds, if it was given, and the --seconds
// that would hold them all. The file is good; the flag is what to change,
// so it is the flag's error, exit 2, not the file's.
func (f *simFlags) fitsSeconds(events []sim.Event) error {
	if f.seconds == 0 {
		return nil
	}
	end := time.Duration(f.seconds) * time.Second
	var late *sim.Event
	var last time.Duration
	for i, e := range events {
		last = max(last, e.At)
		if e.At >= end && late == nil {
			late = &events[i]
		}
	}
	if late == nil {
		return nil
	}
	return usageError{fmt.Errorf("%s: %w", f.csv, &sim.LineError{Line: late.Line,
		Err: fmt.Errorf("the request arrives at %v, after --seconds %d; give --seconds %d or more, or leave it out", late.At, f.seconds, int(last/time.Second)+1)})}
}

// listScenarios prints the built-in scenarios, one a line.
func listScenarios(w io.Writer) int {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, sc := range sim.Builtins(sim.Params{}) {
		l := sc.Limit
		l.Algorithm = 0
		_, limit, _ := strings.Cut(l.String(), " ")
		fmt.Fprintf(tw, "%s\t%s\t%s\n", sc.Name, limit, sc.Summary)
	}
	if err := tw.Flush(); err != nil {
		return 1
	}
	return 0
}

// writeSVGFile draws res into the file at path, replacing it.
func writeSVGFile(path string, res sim.Result) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := sim.WriteSVG(file, res); err != nil {
		file.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
