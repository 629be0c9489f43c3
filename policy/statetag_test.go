package policy

import (
	"testing"

	"github.com/sluicehq/sluice/rate"
)

// The tags in store keys do not change from one version of sluice to the
// next: a changed tag starts every client's counter afresh when sluice is
// upgraded (a monthly quota from zero), and during a rolling upgrade the
// old and new instances would count apart.
func TestStateTagsStable(t *testing.T) {
	for limit, want := range map[string]string{
		"fixed_window 10000/month":  "eecc0688",
		"fixed_window 1000/d":       "c3ba4418",
		"sliding_window 100/m":      "7cc0e7e4",
		"sliding_log 5 per 15m":     "be2f2140",
		"gcra 10/s":                 "84421eeb",
		"gcra 10/s burst 20":        "a83982a5",
		"gcra 10/s burst 10":        "f03a18af", // the burst written equal to the count: a tag of its own
		"token_bucket 5/m burst 2":  "41947ed1",
		"leaky_bucket 10/s burst 6": "8888aa05",
	} {
		if got := stateTag(rate.MustParseLimit(limit)); got != want {
			t.Errorf("%s: tag %s, want %s, as earlier versions wrote it", limit, got, want)
		}
	}
}
