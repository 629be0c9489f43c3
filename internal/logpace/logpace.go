// Package logpace paces a kind of log line: a rate limiter logs most when
// it is attacked or its store or upstream is down, one line a request
// unless something holds it back.
package logpace

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
)

// Every is the least time between two lines of one Pacer.
const Every = time.Second

// Pacer lets one line through per Period and counts the lines it holds
// back, which the next line it lets through reports. The zero Pacer is
// ready to use, with a Period of Every; it is safe for concurrent use.
type Pacer struct {
	// Period is the least time between two lines; zero means Every.
	Period  time.Duration
	last    atomic.Int64 // when the last line went, in ns since the epoch
	skipped atomic.Int64 // lines held back since
}

// Take reports whether a line may be logged at now, and how many were
// held back before it.
func (p *Pacer) Take(now time.Time) (held int64, ok bool) {
	t := now.UnixNano()
	last := p.last.Load()
	period := p.Period
	if period == 0 {
		period = Every
	}
	if last != 0 && t-last < int64(period) || !p.last.CompareAndSwap(last, t) {
		p.skipped.Add(1)
		return 0, false
	}
	return p.skipped.Swap(0), true
}

// Writer is the writer of a log.Logger (package log's standard logger,
// an http.Server's or a ReverseProxy's ErrorLog) whose lines go to Log as
// warnings, one per Every, each with the number left out since the last
// (not_logged): a library that logs a line per request it finds amiss
// (an upstream that breaks off every response, a scan's failed TLS
// handshakes) would otherwise write as much as it is sent. Now is the
// clock it paces by. It is safe for concurrent use.
type Writer struct {
	Log  *slog.Logger
	Now  func() time.Time
	pace Pacer
}

func (w *Writer) Write(b []byte) (int, error) {
	if held, ok := w.pace.Take(w.Now()); ok {
		w.Log.LogAttrs(context.Background(), slog.LevelWarn, strings.TrimSuffix(string(b), "\n"), slog.Int64("not_logged", held))
	}
	return len(b), nil
}
