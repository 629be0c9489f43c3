package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// TestMaxDelay replays what a client waiting up to MaxDelay sees, as
// sluice serve's max_delay applies it: limit 1/s burst 2, 6 requests at
// 0 s and 1 at 2.5 s, on one key.
//
// gcra and token_bucket pass the burst of 2 at once; the k-th request
// after it is due when its unit refills, k s later, and is held for that
// if k s ≤ MaxDelay, its unit reserved. With 3s: the 3rd, 4th and 5th
// wait 1, 2 and 3 s, the 6th (4 s) is refused; the reservations run to
// 5 s, so the request at 2.5 s owes 2.5 units of the 2 the bucket holds,
// plus its own: it is due 1.5 s later, held. With 1s only the 3rd is
// held (the units then run to 3 s: at 2.5 s 0.5 owed plus 1 fits the
// burst of 2, at once). Under 1s nothing is held.
//
// leaky_bucket has a queue of 2: the 1st goes at once, the 2nd's turn
// is 1 s later, the rest find the queue full whatever the wait; a
// MaxDelay under 1 s refuses the 2nd too. By 2.5 s the queue is empty.
//
// The windows (1 per 1 s, no burst) pass 1 of 6 in second 0. With a
// MaxDelay of 1 s or more, the five refused wait once for their
// Retry-After, as sluice serve has them wait, and are decided again:
// fixed_window's next window and sliding_log's unit leaving come 1 s on,
// and one of the five passes, held 1 s; the request at 2.5 s is in a
// window of its own. sliding_window weighs the first second's unit into
// the next until it has gone whole, so one more fits only 2 s on: with
// 3 s one of the five passes then, held 2 s, and fills the window the
// request at 2.5 s arrives in, which waits 1.5 s for the next.
func TestMaxDelay(t *testing.T) {
	type want struct {
		sec0, sec2 Second
		maxDelay   time.Duration
	}
	at := func(t, passed, refused, held int) Second {
		return Second{T: t, Passed: passed, Refused: refused, Held: held}
	}
	noWait := want{at(0, 1, 5, 0), at(2, 1, 0, 0), 0}
	waitOnce := want{at(0, 2, 4, 1), at(2, 1, 0, 0), sec}
	for _, tt := range []struct {
		maxDelay time.Duration
		bucket   want // gcra and token_bucket
		leaky    want
		windows  map[rate.Algorithm]want
	}{
		{0, want{at(0, 2, 4, 0), at(2, 1, 0, 0), 0}, want{at(0, 2, 4, 1), at(2, 1, 0, 0), sec},
			map[rate.Algorithm]want{rate.FixedWindow: noWait, rate.SlidingLog: noWait, rate.SlidingWindow: noWait}},
		{500 * time.Millisecond, want{at(0, 2, 4, 0), at(2, 1, 0, 0), 0}, want{at(0, 1, 5, 0), at(2, 1, 0, 0), 0},
			map[rate.Algorithm]want{rate.FixedWindow: noWait, rate.SlidingLog: noWait, rate.SlidingWindow: noWait}},
		{sec, want{at(0, 3, 3, 1), at(2, 1, 0, 0), sec}, want{at(0, 2, 4, 1), at(2, 1, 0, 0), sec},
			map[rate.Algorithm]want{rate.FixedWindow: waitOnce, rate.SlidingLog: waitOnce, rate.SlidingWindow: noWait}},
		{3 * sec, want{at(0, 5, 1, 3), at(2, 1, 0, 1), 3 * sec}, want{at(0, 2, 4, 1), at(2, 1, 0, 0), sec},
			map[rate.Algorithm]want{rate.FixedWindow: waitOnce, rate.SlidingLog: waitOnce,
				rate.SlidingWindow: {at(0, 2, 4, 1), at(2, 1, 0, 1), 2 * sec}}},
	} {
		sc := Scenario{Name: "wait", Limit: rate.Limit{Count: 1, Period: sec, Burst: 2}, MaxDelay: tt.maxDelay,
			Events: append(Burst("k", 0, 6), Event{At: 2500 * time.Millisecond, Key: "k"})}
		res, err := Run(context.Background(), sc)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range res.Rows {
			w := tt.windows[row.Algorithm]
			switch row.Algorithm {
			case rate.GCRA, rate.TokenBucket:
				w = tt.bucket
			case rate.LeakyBucket:
				w = tt.leaky
			}
			name := fmt.Sprintf("max delay %v, %s", tt.maxDelay, row.Algorithm)
			if len(row.PerSecond) != 3 || row.PerSecond[0] != w.sec0 || row.PerSecond[2] != w.sec2 {
				t.Errorf("%s: per second %+v, want %+v at 0 and %+v at 2", name, row.PerSecond, w.sec0, w.sec2)
				continue
			}
			if row.Passed != w.sec0.Passed+w.sec2.Passed || row.Held != w.sec0.Held+w.sec2.Held || row.Refused != w.sec0.Refused {
				t.Errorf("%s: totals %d passed, %d held, %d refused", name, row.Passed, row.Held, row.Refused)
			}
			if row.MaxDelay != w.maxDelay {
				t.Errorf("%s: longest wait %v, want %v", name, row.MaxDelay, w.maxDelay)
			}
			if c, _ := row.Client("k"); c != (ClientTotal{Client: "k", Passed: row.Passed, Refused: row.Refused, Held: row.Held}) {
				t.Errorf("%s: client totals %+v", name, c)
			}
		}
		if res.MaxDelay != tt.maxDelay {
			t.Errorf("result's max delay %v, want %v", res.MaxDelay, tt.maxDelay)
		}
	}
}

// TestMaxDelayShown: the outputs say the wait a run allows, and what
// gcra and a window did with it, in words as well as in the count of held
// requests.
func TestMaxDelayShown(t *testing.T) {
	sc := Scenario{Name: "wait", Limit: rate.Limit{Count: 1, Period: sec, Burst: 2}, MaxDelay: 3 * sec,
		Algorithms: []rate.Algorithm{rate.FixedWindow, rate.GCRA}, Events: Burst("k", 0, 6)}
	text := strings.Join(strings.Fields(textOf(t, sc)), " ")
	for _, want := range []string{
		"wait: limit 1/s, max delay 3s",
		// Second 0: fixed_window passes 1, and 1 of the 5 it refuses
		// after waiting 1 s for the next window; gcra 2 at once and 3
		// held of 5, 1 refused.
		"0 │ 2 (1 held) ✕4 5 (3 held) ✕1",
		"gcra held 3 requests past its burst until their units refilled, up to 3s",
		"fixed_window held 1 request it refused for their Retry-After, up to 1s",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, textOf(t, sc))
		}
	}
	r, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	if m := parseMarks(t, svgOf(t, r)); !strings.Contains(m.text, "limit 1/s, max delay 3s") {
		t.Errorf("the picture's title does not give the max delay: %q", m.text)
	}
}

// TestMaxDelayInvalid: a negative wait is no setting anyone meant.
func TestMaxDelayInvalid(t *testing.T) {
	sc := Scenario{Name: "x", Limit: tenPer10s, MaxDelay: -time.Second, Events: []Event{{Key: "k"}}}
	if _, err := Run(context.Background(), sc); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "max delay") {
		t.Errorf("error %v, want ErrInvalid naming the max delay", err)
	}
}

// TestChangesMaxDelay: a max delay changes what the buckets pass, and
// what the windows pass after a wait, so a built-in scenario's figures.
func TestChangesMaxDelay(t *testing.T) {
	sc, _ := Builtin("boundary", Params{})
	sc.MaxDelay = 3 * sec
	if got := Changes("boundary", sc); !slices.Equal(got, []Setting{SettingMaxDelay}) {
		t.Errorf("Changes = %v, want [max_delay]", got)
	}
	sc.Algorithms = []rate.Algorithm{rate.FixedWindow, rate.SlidingLog}
	if got := Changes("boundary", sc); !slices.Equal(got, []Setting{SettingMaxDelay}) {
		t.Errorf("windows only: Changes = %v, want [max_delay]", got)
	}
	if SettingMaxDelay.String() != "max_delay" {
		t.Errorf("SettingMaxDelay is named %q", SettingMaxDelay)
	}
}
