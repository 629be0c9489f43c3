package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// Params adjusts the built-in scenarios. The zero value gives each its
// defaults, the ones its description and its tests speak of.
type Params struct {
	// Seconds, if positive, is how long the scenario lasts. The scenarios
	// whose traffic runs throughout (steady, flood, clients and the calm
	// client of calm-burst) generate it for that long; the others keep
	// their requests and show more or fewer seconds (too few is an error
	// from Run). Zero means the scenario's own length.
	Seconds int
	// Seed seeds the random source of the scenarios with random arrivals
	// (clients). Zero means 1.
	Seed uint64
}

// builtin describes a built-in scenario: its name and how to make it.
type builtin struct {
	name string
	make func(p Params) Scenario
}

// builtins lists the built-in scenarios in the order --list shows them.
func builtins() []builtin {
	return []builtin{
		{"boundary", boundary},
		{"calm-burst", calmBurst},
		{"flood", flood},
		{"token-bucket", tokenBucket},
		{"steady", steady},
		{"clients", clients},
	}
}

// Builtins returns every built-in scenario, made with p.
func Builtins(p Params) []Scenario {
	var out []Scenario
	for _, b := range builtins() {
		out = append(out, b.make(p))
	}
	return out
}

// Builtin returns the built-in scenario with the given name, made with p.
func Builtin(name string, p Params) (Scenario, error) {
	var names []string
	for _, b := range builtins() {
		if b.name == name {
			return b.make(p), nil
		}
		names = append(names, b.name)
	}
	return Scenario{}, fmt.Errorf("unknown scenario %q (want one of %s)", name, strings.Join(names, ", "))
}

// seconds returns p.Seconds, or def when it is zero.
func (p Params) seconds(def int) int {
	if p.Seconds > 0 {
		return p.Seconds
	}
	return def
}

const (
	ms = time.Millisecond
	s  = time.Second
)

// tenPer10s is the limit most scenarios use: small enough to count by hand.
var tenPer10s = rate.Limit{Count: 10, Period: 10 * s}

func boundary(p Params) Scenario {
	return Scenario{
		Name:    "boundary",
		Summary: "a burst of 10 just before a fixed-window boundary (9.9 s) and 10 just after (10.1 s)",
		Description: `Limit 10 per 10s. A client sends 10 requests at 9.9 s and 10 more at 10.1 s, 0.2 s apart but on both sides of the boundary at 10 s between two fixed windows.

fixed_window passes all 20: each burst lands in a window of its own, so around a boundary it lets through twice the limit.
sliding_log passes 10: at 10.1 s the 10 requests of 9.9 s are still inside the last 10 s.
sliding_window passes 10: at 10.1 s, 0.1 s into the new window, it estimates the last 10 s as cur + ⌈prev·(T−e)/T⌉ = 0 + ⌈10·(10−0.1)/10⌉ = ⌈9.9⌉ = 10, so none of the second burst fits.
token_bucket, gcra and leaky_bucket pass 10: the bucket refilled 0.2 of a token between the bursts.`,
		Limit:   tenPer10s,
		Seconds: p.seconds(20),
		Events:  append(Burst("client", 9900*ms, 10), Burst("client", 10100*ms, 10)...),
	}
}

func calmBurst(p Params) Scenario {
	secs := p.seconds(30)
	calm := asClient("calm", Steady("client", 0, time.Duration(secs)*s, 3*s))
	burst := asClient("burst", Burst("client", 4500*ms, 15))
	return Scenario{
		Name:    "calm-burst",
		Summary: "a calm client (1 request every 3 s) and a burst of 15 at 4.5 s on the same key",
		Description: `Limit 10 per 10s. A calm client sends 1 request every 3 s from 0 s (0, 3, 6, … s); at 4.5 s a burst of 15 arrives on the same key.

The window algorithms let the burst fill what the calm client left (8 of 15) and then refuse the calm client at 6 s and 9 s: fixed_window until its window ends at 10 s, sliding_log until the requests of 0 s and 3 s leave the last 10 s, sliding_window until the previous window's weight has decayed. Each passes 16 of 25 and refuses 2 calm requests.
token_bucket and gcra (10 tokens, 1 more every second) are full again at 4.5 s, 1.5 s after the calm request at 3 s: they pass 10 of the burst. By the calm request at 6 s, 1.5 s later, 1.5 tokens have come back, and 3 more come per calm interval, so they never refuse a calm request: 20 of 25 pass. (A burst less than 1 s before a calm request would leave that request no token.)
leaky_bucket admits the same 20, but as a queue: the calm request at 6 s waits 8.5 s for its turn behind the burst.`,
		Limit:   tenPer10s,
		Seconds: secs,
		Events:  append(calm, burst...),
	}
}

func flood(p Params) Scenario {
	secs := p.seconds(10)
	return Scenario{
		Name:    "flood",
		Summary: "10 requests per second on one key, through 3 instances with their own counters or one shared counter",
		Description: `Limit 10 per 10s. One client floods: 10 requests per second (one every 100 ms) for 10 s, 100 requests, through a round-robin balancer over 3 instances.

With own counters each instance lets its own 10 through: the window algorithms pass 30 in 10 s, three times the limit. With one shared counter they pass 10.
The bucket algorithms also refill 1 token per second while the flood lasts: 10 at once and 9 refills within the 10 s, 19 per counter: 57 with own counters, 19 with a shared one.`,
		Limit:   tenPer10s,
		Setups:  []Setup{OwnCounters, SharedCounter},
		Seconds: secs,
		Events:  Steady("client", 0, time.Duration(secs)*s, 100*ms),
	}
}

func tokenBucket(p Params) Scenario {
	return Scenario{
		Name:    "token-bucket",
		Summary: "a bucket of 5 refilled 1 per second: bursts of 7 at 0 s, 3 at 2 s and 10 at 10 s",
		Description: `Limit 5 per 5s: the buckets hold 5 tokens and refill 1 per second. A client sends 7 requests at 0 s, 3 at 2 s and 10 at 10 s.

token_bucket and gcra pass 5 of the first 7 (the bucket is full), 2 of the next 3 (2 tokens refilled in 2 s) and 5 of the last 10 (full again after 8 s): 12 of 20. leaky_bucket admits the same 12 and delays them instead: the 5th request of 0 s waits 4 s.
The window algorithms pass 5 in the first 5 s, none at 2 s, and 5 at 10 s: 10 of 20.`,
		Limit:   rate.Limit{Count: 5, Period: 5 * s},
		Seconds: p.seconds(15),
		Events:  append(append(Burst("client", 0, 7), Burst("client", 2*s, 3)...), Burst("client", 10*s, 10)...),
	}
}

func steady(p Params) Scenario {
	secs := p.seconds(30)
	return Scenario{
		Name:    "steady",
		Summary: "a client at exactly the limit: 1 request per second, on the second",
		Description: `Limit 10 per 10s. A client sends 1 request per second, at 0 s, 1 s, 2 s, …: exactly the limit, never more.

Every algorithm passes all of it but sliding_window, whose estimate assumes the previous window's requests were spread evenly over it. At 10 s, the first instant of a new window, the previous window's 10 requests weigh ⌈10·(10−0)/10⌉ = 10 and the request is refused; at 21 s, 9 requests weigh ⌈9·(10−1)/10⌉ = ⌈8.1⌉ = 9, plus 1 in the current window and 1 asked: 11, refused. It passes 28 of 30.`,
		Limit:   tenPer10s,
		Seconds: secs,
		Events:  Steady("client", 0, time.Duration(secs)*s, s),
	}
}

func clients(p Params) Scenario {
	secs := p.seconds(30)
	seed := p.Seed
	if seed == 0 {
		seed = 1
	}
	src := rand.New(rand.NewPCG(seed, 0x5eed))
	end := time.Duration(secs) * s
	var events []Event
	events = append(events, Poisson(src, "alice", 0, end, 3)...)
	for _, k := range []string{"bob", "carol", "dave"} {
		events = append(events, Poisson(src, k, 0, end, 0.4)...)
	}
	return Scenario{
		Name:    "clients",
		Summary: "four clients, each its own key, arriving at random: alice 3 per second, the others 0.4",
		Description: `Limit 10 per 10s per key. Four clients send requests at random instants (Poisson arrivals, --seed picks them): alice 3 per second on average, bob, carol and dave 0.4.

Each key has its own counter, so alice's excess is refused while the others, well under the limit, pass: a noisy client does not spend anyone else's quota. The per-client totals, under the table and the picture, show it.`,
		Limit:   tenPer10s,
		Seconds: secs,
		Events:  events,
	}
}

// Setting is a setting of a run that the figures of a built-in scenario's
// description depend on. A description counts what passes in the scenario
// as it comes; a run that changes one of these may show other figures,
// and should say so rather than pass those off as its own ([Changes],
// [ChangesNote]).
type Setting uint8

// The settings, in the order Changes reports them.
const (
	// SettingLimit is the limit, as one of the algorithms compared
	// applies it: a burst the windows ignore changes nothing for them.
	SettingLimit Setting = iota
	// SettingSeconds is how long the scenario lasts (Params.Seconds).
	SettingSeconds
	// SettingSeed is the seed of random arrivals (Params.Seed), in a
	// scenario that has them.
	SettingSeed
	// SettingInstances is how many instances share the traffic, in a
	// setup with several.
	SettingInstances
	// SettingSetups are the setups run, if one is not the scenario's own.
	SettingSetups
	// SettingMaxDelay is how long a client waits (Scenario.MaxDelay),
	// where an algorithm compared holds requests for it: a bucket.
	SettingMaxDelay

	numSettings = iota
)

var settingNames = [numSettings]string{"limit", "seconds", "seed", "instances", "setups", "max_delay"}

// String returns the setting's name: limit, seconds, seed, instances,
// setups or max_delay.
func (s Setting) String() string {
	if int(s) < len(settingNames) {
		return settingNames[s]
	}
	return fmt.Sprintf("Setting(%d)", uint8(s))
}

// Changes returns the settings in which run differs from the built-in
// scenario name as it comes (Builtin(name, Params{})), among those its
// description's figures depend on; nil if it differs in none, or name is
// no built-in scenario. run is what Builtin(name, p) made, then given its
// own limit, algorithms, setups, instances or max delay. Only what
// changes a figure counts, whoever gave it: the scenario's own limit given
// again, fewer algorithms, a seed where nothing is random, instances with
// one limiter, or a max delay on the windows alone change none. The
// command line and the dashboard share it, so that both say the same of
// the same run.
func Changes(name string, run Scenario) []Setting {
	base, err := Builtin(name, Params{})
	if err != nil {
		return nil
	}
	var out []Setting
	for _, a := range run.algorithms() {
		if !sameLimit(run.LimitFor(a), base.LimitFor(a)) {
			out = append(out, SettingLimit)
			break
		}
	}
	if run.seconds() != base.seconds() {
		out = append(out, SettingSeconds)
	}
	// The traffic of the same length with the default seed: only the
	// seed can make run's differ from it.
	if same, err := Builtin(name, Params{Seconds: run.Seconds}); err == nil && !slices.Equal(same.Events, run.Events) {
		out = append(out, SettingSeed)
	}
	several := slices.ContainsFunc(run.setups(), func(s Setup) bool { return s != Single })
	if several && run.instances() != base.instances() {
		out = append(out, SettingInstances)
	}
	if slices.ContainsFunc(run.setups(), func(s Setup) bool { return !slices.Contains(base.setups(), s) }) {
		out = append(out, SettingSetups)
	}
	// No built-in scenario waits.
	if run.MaxDelay != base.MaxDelay {
		out = append(out, SettingMaxDelay)
	}
	return out
}

// NoteChanges returns run, made from the built-in scenario name, with
// the note of [ChangesNote] ending its description if run changes a
// setting its figures depend on ([Changes]), each named by label: the
// flag or the form's field a user set it by, or, for a setting label
// lacks, its String. A run with no description, traffic of one's own, is
// returned as it is: it has no figures to take back.
func NoteChanges(name string, run Scenario, label map[Setting]string) Scenario {
	if run.Description == "" {
		return run
	}
	var names []string
	for _, c := range Changes(name, run) {
		l, ok := label[c]
		if !ok {
			l = c.String()
		}
		names = append(names, l)
	}
	if note := ChangesNote(names); note != "" {
		run.Description += "\n\n" + note
	}
	return run
}

// sameLimit reports whether a and b, limits of one algorithm, decide
// alike: a burst of zero is the count.
func sameLimit(a, b rate.Limit) bool {
	return a.Count == b.Count && a.Period == b.Period && a.Calendar == b.Calendar && a.Capacity() == b.Capacity()
}

// ChangesNote returns the sentence that ends the description of a run
// with changed settings, naming them as given (each as the caller's users
// know it: a flag, a form's label): "(The figures above are for the
// scenario as it comes; this run sets --limit, --seconds.)". It returns ""
// for no names.
func ChangesNote(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("(The figures above are for the scenario as it comes; this run sets %s.)", strings.Join(names, ", "))
}
