package sluice_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// The outage's lines use the attribute names and the duration form the
// other lines of sluice serve use: error, not err, and an outage's length
// as a duration's text, not nanoseconds (a JSON log wrote down_for as
// 25003000000).
func TestFallbackLogAttributes(t *testing.T) {
	clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
	b := &breakable{Store: memory.New(memory.Options{Clock: clk})}
	logs := &logLines{}
	f := sluice.NewFallback(b, sluice.FallbackOptions{Mode: sluice.FailOpen, Clock: clk, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	r := rate.Request{Key: "k", Limit: tenPerMinute, Cost: 1}
	b.state.Store(1)
	f.Decide(context.Background(), r)
	b.state.Store(0)
	clk.Advance(2500 * time.Millisecond)
	for range 20 { // until a probe finds the primary back
		f.Decide(context.Background(), r)
		clk.Advance(time.Second)
	}
	all := strings.Join(logs.lines(), "\n")
	if !strings.Contains(all, `"error":"connection refused"`) || strings.Contains(all, `"err":`) {
		t.Errorf("the outage's line: want the error as error, not err:\n%s", all)
	}
	if !strings.Contains(all, `"down_for":"2.5s"`) {
		t.Errorf("the recovery's line: want down_for as 2.5s:\n%s", all)
	}
}
