package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// TestParseNames: lists as a flag, a form's fields or a JSON array give
// them, read by one rule.
func TestParseNames(t *testing.T) {
	every := fmt.Sprint(rate.Algorithms())
	for _, tt := range []struct {
		list []string
		want string // fmt.Sprint of the result, "nil", or "error: " and what it says
	}{
		// No names: nil, the caller's default.
		{nil, "nil"},
		{[]string{}, "nil"},
		{[]string{""}, "nil"},
		{[]string{",", " , ", ""}, "nil"},
		// Names in the order first given, once each, spaces and blanks
		// left out; an entry may hold several.
		{[]string{"gcra"}, "[gcra]"},
		{[]string{" gcra , fixed_window,"}, "[gcra fixed_window]"},
		{[]string{"gcra", "fixed_window,gcra", " gcra"}, "[gcra fixed_window]"},
		// "all", alone or beside names, in any entry: every value, in
		// its own order.
		{[]string{"all"}, every},
		{[]string{" all "}, every},
		{[]string{"gcra,all"}, every},
		{[]string{"gcra", "all", "fixed_window"}, every},
		// An unknown name is refused, "all" or not; names are exact.
		{[]string{"leaky"}, `error: unknown algorithm "leaky"`},
		{[]string{"all,leaky"}, `error: unknown algorithm "leaky"`},
		{[]string{"leaky", "all"}, `error: unknown algorithm "leaky"`},
		{[]string{"ALL"}, `error: unknown algorithm "ALL"`},
		{[]string{"gcra fixed_window"}, `error: unknown algorithm "gcra fixed_window"`},
	} {
		got, err := ParseNames(tt.list, rate.Algorithms(), rate.ParseAlgorithm)
		s := fmt.Sprint(got)
		switch {
		case err != nil:
			s = "error: " + err.Error()
		case got == nil:
			s = "nil"
		}
		if s != tt.want && !(strings.HasPrefix(tt.want, "error: ") && strings.HasPrefix(s, tt.want)) {
			t.Errorf("ParseNames(%q) = %s, want %s", tt.list, s, tt.want)
		}
	}
}

// TestParseNamesSetups: the same rule for setups, and "all" gives a list
// of its own, which the caller may change without changing Setups'.
func TestParseNamesSetups(t *testing.T) {
	all := Setups()
	got, err := ParseNames([]string{"own-counters,all"}, all, ParseSetup)
	if err != nil || fmt.Sprint(got) != "[single own-counters shared-counter]" {
		t.Fatalf("all = %v, %v", got, err)
	}
	got[0] = SharedCounter
	if all[0] != Single {
		t.Errorf("changing the result changed all: %v", all)
	}
	if _, err := ParseNames([]string{"single", "cluster"}, all, ParseSetup); err == nil || !strings.Contains(err.Error(), `unknown setup "cluster"`) {
		t.Errorf("cluster: %v, want unknown setup", err)
	}
}

// TestNoteChanges: the note names what changed by the caller's labels,
// and only under a built-in scenario's description.
func TestNoteChanges(t *testing.T) {
	labels := map[Setting]string{SettingLimit: "--limit"}
	for _, tt := range []struct {
		name   string
		change func(*Scenario)
		note   string // the description's last paragraph if changed, "" for none
	}{
		{"boundary", nil, ""},
		{"boundary", func(s *Scenario) { s.Limit.Count = 5 }, "(The figures above are for the scenario as it comes; this run sets --limit.)"},
		// A setting the labels lack goes by its own name.
		{"boundary", func(s *Scenario) { s.Limit.Count = 5; s.MaxDelay = time.Second }, "(The figures above are for the scenario as it comes; this run sets --limit, max_delay.)"},
		// Traffic of one's own has no figures to take back.
		{"boundary", func(s *Scenario) { s.Description = ""; s.Limit.Count = 5 }, ""},
		{"no-such-scenario", func(s *Scenario) { s.Limit.Count = 5 }, ""},
	} {
		sc, err := Builtin("boundary", Params{})
		if err != nil {
			t.Fatal(err)
		}
		if tt.change != nil {
			tt.change(&sc)
		}
		before := sc.Description
		got := NoteChanges(tt.name, sc, labels).Description
		want := before
		if tt.note != "" {
			want += "\n\n" + tt.note
		}
		if got != want {
			t.Errorf("%s: description ends %q, want %q", tt.name, got[max(0, len(got)-90):], want[max(0, len(want)-90):])
		}
	}
}
