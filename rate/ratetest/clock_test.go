package ratetest

import (
	"context"
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewClock(start)
	if err := c.Sleep(context.Background(), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	c.Advance(-time.Second)
	if got := c.Now().Sub(start); got != 2*time.Second {
		t.Fatalf("clock moved %v, want 2s", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Hour); err == nil {
		t.Fatal("Sleep on a done context returned nil")
	}
	if d, n := c.Slept(); d != 3*time.Second || n != 1 {
		t.Fatalf("Slept() = %v, %d; want 3s, 1", d, n)
	}
	var zero Clock
	if !zero.Now().Equal(time.Unix(0, 0)) {
		t.Fatalf("zero clock at %v", zero.Now())
	}
}
