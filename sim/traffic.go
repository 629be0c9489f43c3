package sim

import (
	"math"
	"math/rand/v2"
	"time"
)

// The traffic patterns below build the built-in scenarios and are there
// for callers who build their own: concatenate what they return into
// Scenario.Events. Every request they make costs 1.

// Steady returns one request for key every interval, from from (included)
// to to (excluded): a client at a constant pace. It stops at MaxEvents
// requests.
func Steady(key string, from, to, every time.Duration) []Event {
	if every <= 0 || to <= from {
		return nil
	}
	n := uint64(to-from-1)/uint64(every) + 1 // to-from may overflow int64, not uint64
	events := make([]Event, min(n, MaxEvents))
	for i := range events {
		events[i] = Event{At: from + time.Duration(i)*every, Key: key}
	}
	return events
}

// Burst returns n requests for key, all at the same instant at: none if n
// is not positive, MaxEvents if it is more.
func Burst(key string, at time.Duration, n int) []Event {
	events := make([]Event, min(max(n, 0), MaxEvents))
	for i := range events {
		events[i] = Event{At: at, Key: key}
	}
	return events
}

// Poisson returns requests for key arriving at random, perSecond of them
// per second on average, independently of each other (a Poisson process),
// from from (included) to to (excluded). The same source gives the same
// requests. It stops at MaxEvents requests.
func Poisson(src *rand.Rand, key string, from, to time.Duration, perSecond float64) []Event {
	if !(perSecond > 0) || to <= from {
		return nil
	}
	var events []Event
	for at := from; len(events) < MaxEvents; {
		gap := src.ExpFloat64() / perSecond * float64(time.Second)
		// to-at, positive, may overflow int64 but not uint64; a gap of
		// more than 292 years ends the requests too.
		if gap >= float64(uint64(to-at)) || gap >= math.MaxInt64/2 {
			break
		}
		if at += time.Duration(gap).Truncate(time.Microsecond); at >= to {
			break
		}
		events = append(events, Event{At: at, Key: key})
	}
	return events
}

// asClient names client as the sender of every event in events.
func asClient(client string, events []Event) []Event {
	for i := range events {
		events[i].Client = client
	}
	return events
}
