package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// TestChanges: a run differs from a built-in scenario as it comes in the
// settings that change the figures of its description, judged by value.
func TestChanges(t *testing.T) {
	windows := []rate.Algorithm{rate.FixedWindow, rate.SlidingLog, rate.SlidingWindow}
	for _, tt := range []struct {
		name   string
		p      Params
		change func(*Scenario)
		want   []Setting
	}{
		{"boundary", Params{}, nil, nil},
		{"boundary", Params{Seconds: 20, Seed: 1}, func(s *Scenario) { s.Limit = rate.Limit{Count: 10, Period: 10 * time.Second, Burst: 10} }, nil},
		{"boundary", Params{}, func(s *Scenario) { s.Limit.Count = 5 }, []Setting{SettingLimit}},
		{"boundary", Params{}, func(s *Scenario) { s.Limit.Burst = 50; s.Algorithms = windows }, nil},
		{"boundary", Params{}, func(s *Scenario) { s.Limit.Burst = 50 }, []Setting{SettingLimit}},
		{"boundary", Params{Seconds: 30, Seed: 7}, func(s *Scenario) { s.Instances = 5 }, []Setting{SettingSeconds}},
		{"boundary", Params{}, func(s *Scenario) { s.Setups = []Setup{Single, OwnCounters}; s.Instances = 3 }, []Setting{SettingSetups}},
		{"flood", Params{}, func(s *Scenario) { s.Setups = []Setup{SharedCounter} }, nil},
		{"flood", Params{}, func(s *Scenario) { s.Setups = []Setup{Single} }, []Setting{SettingSetups}},
		{"flood", Params{}, func(s *Scenario) { s.Instances = 5 }, []Setting{SettingInstances}},
		{"flood", Params{}, func(s *Scenario) { s.Instances = DefaultInstances }, nil},
		{"clients", Params{Seed: 1}, nil, nil},
		{"clients", Params{Seed: 7}, nil, []Setting{SettingSeed}},
		{"clients", Params{Seconds: 60}, nil, []Setting{SettingSeconds}},
		{"clients", Params{Seconds: 60, Seed: 7}, func(s *Scenario) { s.Limit.Count = 20 }, []Setting{SettingLimit, SettingSeconds, SettingSeed}},
	} {
		sc, err := Builtin(tt.name, tt.p)
		if err != nil {
			t.Fatal(err)
		}
		if tt.change != nil {
			tt.change(&sc)
		}
		if got := Changes(tt.name, sc); !slices.Equal(got, tt.want) {
			t.Errorf("%s %+v: Changes = %v, want %v", tt.name, tt.p, got, tt.want)
		}
	}
	if got := Changes("no-such-scenario", Scenario{Limit: tenPer10s}); got != nil {
		t.Errorf("Changes of no built-in scenario = %v, want nil", got)
	}
}

func TestChangesNote(t *testing.T) {
	if got := ChangesNote(nil); got != "" {
		t.Errorf("ChangesNote(nil) = %q", got)
	}
	if got, want := ChangesNote([]string{"Limit", "Seconds"}), "(The figures above are for the scenario as it comes; this run sets Limit, Seconds.)"; got != want {
		t.Errorf("ChangesNote = %q, want %q", got, want)
	}
}
