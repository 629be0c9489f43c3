package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// Keys the memory store evicted at max_keys are logged, once a watch
// period, with how many: each was a count forgotten, its client starting
// afresh, and an operator saw it only in a metric.
func TestEvictionsLogged(t *testing.T) {
	var buf bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&buf, nil))}
	clock := ratetest.NewClock(time.Unix(1_800_000_000, 0))
	st := memory.New(memory.Options{Clock: clock, MaxKeys: 64})
	w := &memoryWatch{st: st, name: "memory", every: time.Minute}
	decide := func(from, to int) {
		for i := from; i < to; i++ {
			st.Decide(context.Background(), rate.Request{Key: fmt.Sprint("k", i), Limit: rate.Limit{Count: 1, Period: time.Hour}, Cost: 1})
		}
	}
	decide(0, 64)
	s.watchOnce(w)
	if buf.Len() != 0 {
		t.Fatalf("a store within max_keys logged:\n%s", buf.String())
	}
	decide(64, 164)
	s.watchOnce(w)
	evicted := st.Stats().Evictions
	if evicted == 0 {
		t.Fatal("the test evicted nothing")
	}
	want := fmt.Sprintf("evicted=%d max_keys=64", evicted)
	if !strings.Contains(buf.String(), "keys evicted at max_keys") || !strings.Contains(buf.String(), want) {
		t.Errorf("log:\n%s\nwant a line of the keys evicted, %s", buf.String(), want)
	}
	buf.Reset()
	s.watchOnce(w) // nothing new since
	if buf.Len() != 0 {
		t.Errorf("a period with no eviction logged:\n%s", buf.String())
	}
}
