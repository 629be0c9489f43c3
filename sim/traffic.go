package sim

import (
	"math/rand/v2"
	"time"
)

// The traffic patterns below build the built-in scenarios and are there
// for callers who build their own: concatenate what they return into
// Scenario.Events. Every request they make costs 1.

// Steady returns one request for key every interval, from from (included)
// to to (excluded): a client at a constant pace.
func Steady(key string, from, to, every time.Duration) []Event {
	if every <= 0 || to <= from {
		return nil
	}
	events := make([]Event, 0, (to-from+every-1)/every)
	for at := from; at < to; at += every {
		events = append(events, Event{At: at, Key: key})
	}
	return events
}

// Burst returns n requests for key, all at the same instant at.
func Burst(key string, at time.Duration, n int) []Event {
	events := make([]Event, n)
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
	if perSecond <= 0 {
		return nil
	}
	var events []Event
	at := from
	for {
		gap := time.Duration(src.ExpFloat64() / perSecond * float64(time.Second))
		at += gap.Truncate(time.Microsecond)
		if at >= to || len(events) >= MaxEvents {
			return events
		}
		events = append(events, Event{At: at, Key: key})
	}
}

// asClient names client as the sender of every event in events.
func asClient(client string, events []Event) []Event {
	for i := range events {
		events[i].Client = client
	}
	return events
}
