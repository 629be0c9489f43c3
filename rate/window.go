package rate

import "time"

// window returns the start and end, in µs, of the window holding now:
// Period-long windows aligned to the Unix epoch (so daily windows are UTC
// days), or UTC calendar months.
func (l *Limit) window(now int64) (start, end int64) {
	if l.Calendar == Month {
		t := time.UnixMicro(now).UTC()
		y, m, _ := t.Date()
		return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC).UnixMicro(),
			time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	}
	p := l.periodMicros()
	start = floorDiv(now, p) * p
	return start, start + p
}

// fixedWindow counts the units admitted in the current window and starts
// from zero in the next. The state is (window start, count). If time goes
// back into an earlier window, the stored (later) window still counts.
func (l *Limit) fixedWindow(s *State, now, cost int64, next *State, out *Decision) {
	start, end := l.window(now)
	count := int64(0)
	switch {
	case s.A == start:
		count = s.B
	case s.A > start && s.B > 0:
		start, count = s.A, s.B
		_, end = l.window(start)
	}
	if count+cost > l.Count {
		out.set(false, l.Count, l.Count-count, dur(end-now), dur(end-now), 0)
		keep(s, next)
		return
	}
	count += cost
	if count == 0 {
		out.set(true, l.Count, l.Count, 0, 0, 0)
		put(next, 0, 0, 0)
		return
	}
	out.set(true, l.Count, l.Count-count, dur(end-now), 0, 0)
	put(next, start, count, 0)
}

// slidingWindow estimates the units admitted in the last Period as the
// current window's count plus the previous window's count weighted by the
// share of the previous window still inside the last Period:
//
//	estimate = cur + ⌈prev·(T−e)/T⌉,  e = now − current window start
//
// and admits a request if estimate + cost ≤ Count. Rounding the weighted
// part up never admits more than the real-valued formula would. The state
// is (current window start, cur, prev).
func (l *Limit) slidingWindow(s *State, now, cost int64, next *State, out *Decision) {
	t := l.periodMicros()
	start, _ := l.window(now)
	var cur, prev int64
	switch {
	case s.A == start:
		cur, prev = s.B, s.C
	case s.A == start-t:
		prev = s.B
	case s.A > start:
		// Time went back: keep counting in the stored window, at its start.
		start, cur, prev = s.A, s.B, s.C
	}
	// A count above this limit's comes from a state another limit left
	// under the key: it is a full window. That keeps the products below
	// Count·Period, exact, where another limit's counts times this
	// period could pass 2^63 and wrap. The counts written back are the
	// state's own: a limit raised again finds what was counted.
	keptCur, keptPrev := cur, prev
	cur, prev = min(cur, l.Count), min(prev, l.Count)
	e := max(0, now-start)
	weighted := prev - prev*e/t // ⌈prev·(T−e)/T⌉
	if cur+cost+weighted > l.Count {
		out.set(false, l.Count, max(0, l.Count-cur-weighted),
			dur(slidingReset(start, now, t, cur, prev)), dur(l.slidingRetry(start, now, cur, prev, cost)), 0)
		keep(s, next)
		return
	}
	cur += cost
	out.set(true, l.Count, l.Count-cur-weighted, dur(slidingReset(start, now, t, cur, prev)), 0, 0)
	if cur == 0 && prev == 0 {
		put(next, 0, 0, 0)
		return
	}
	put(next, start, keptCur+cost, keptPrev)
}

// slidingReset returns how long until both windows are empty.
func slidingReset(start, now, t, cur, prev int64) int64 {
	switch {
	case cur > 0:
		return start + 2*t - now
	case prev > 0:
		return start + t - now
	}
	return 0
}

// slidingRetry returns the least wait after which a request of cost passes,
// given the current window's start and counts: the first instant at which
// the previous window's weighted count has decayed enough, in this window
// or, if that is not enough, in the next (where cur becomes the previous
// count).
func (l *Limit) slidingRetry(start, now, cur, prev, cost int64) int64 {
	t, n := l.periodMicros(), l.Count
	// In this window: need ⌈prev·(T−e)/T⌉ ≤ n−cur−cost =: room, that is
	// ⌊prev·e/T⌋ ≥ prev−room, that is e ≥ ⌈(prev−room)·T/prev⌉.
	if room := n - cur - cost; room >= 0 && prev > 0 {
		if e := ceilDiv((prev-room)*t, prev); e < t {
			return max(0, start+e-now)
		}
	}
	// In the next window, cur is the previous count.
	next := start + t
	k := cur - (n - cost)
	if k <= 0 || cur == 0 {
		return next - now
	}
	return next + ceilDiv(k*t, cur) - now
}

// slidingLog remembers the time of every admitted unit and admits a request
// if the units in the last Period, plus its cost, stay within Count. A unit
// admitted at a leaves the window when now − a ≥ T. If time goes back, new
// units are recorded at the latest recorded time, so they leave no earlier
// than they should.
func (l *Limit) slidingLog(s *State, now, cost int64, next *State, out *Decision) {
	t := l.periodMicros()
	log := s.Log
	i := 0
	for i < len(log) && now-log[i] >= t {
		i++
	}
	log = log[i:]
	if int64(len(log))+cost > l.Count {
		k := int64(len(log)) + cost - l.Count // units that must leave first
		out.set(false, l.Count, max(0, l.Count-int64(len(log))), dur(log[len(log)-1]+t-now), dur(log[k-1]+t-now), 0)
		keep(s, next)
		return
	}
	remaining := l.Count - int64(len(log)) - cost
	if len(log) == 0 && cost == 0 {
		out.set(true, l.Count, remaining, 0, 0, 0)
		put(next, 0, 0, 0)
		return
	}
	at := now
	if len(log) > 0 {
		at = max(at, log[len(log)-1])
	}
	if cost > 0 {
		if int64(cap(log)-len(log)) < cost {
			// Grow into a new array: the old one still backs s.Log.
			grown := make([]int64, len(log), logCapacity(l.Count, int64(len(log))+cost, i > 0))
			copy(grown, log)
			log = grown
		}
		for range cost {
			log = append(log, at)
		}
	}
	out.set(true, l.Count, remaining, dur(log[len(log)-1]+t-now), 0, 0)
	*next = State{Log: log}
}

// logCapacity returns the capacity of the new array a sliding_log of
// count grows into to hold n timestamps, n ≤ count, given whether units
// left its front in this step.
//
// A log that only grows doubles its array, as append would, but never
// past count, which it cannot outgrow: a key filled to its count holds 8
// bytes a unit of it, where doubling up to 2×count held 16.
//
// A log that slides, as a full one under steady traffic does (it admits
// a unit only when one leaves), gets an eighth more room than it needs,
// at most count/8 beyond count: it is copied once per n/8 units
// admitted. An array of just count would be at its end at every unit, and
// copied whole each time, all 512 KiB of a full sliding_log of 65536.
func logCapacity(count, n int64, sliding bool) int64 {
	if sliding {
		return n + n/8
	}
	return min(count, 2*n)
}
