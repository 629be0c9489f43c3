package ratefield

import (
	"testing"
	"time"
)

func TestPushback(t *testing.T) {
	for _, tt := range []struct {
		wait, max, left time.Duration
		bounded         bool
		want            string
	}{
		{30 * time.Second, time.Minute, 0, false, "30000"},
		{1500 * time.Microsecond, time.Minute, 0, false, "2"}, // rounded up
		{0, time.Minute, 0, false, "1"},                       // never 0: a retry at once
		{time.Minute, time.Minute, 0, false, "60000"},
		{time.Minute + time.Millisecond, time.Minute, 0, false, "-1"},
		{2 * time.Hour, -1, 0, false, "7200000"}, // no bound
		{time.Second, time.Minute, time.Second, true, "-1"},
		{time.Second, time.Minute, 1001 * time.Millisecond, true, "1000"},
		{time.Second, time.Minute, -time.Second, true, "-1"}, // the deadline has passed
	} {
		if got := Pushback(tt.wait, tt.max, tt.left, tt.bounded); got != tt.want {
			t.Errorf("Pushback(%v, max %v, left %v, bounded %v) = %s, want %s", tt.wait, tt.max, tt.left, tt.bounded, got, tt.want)
		}
	}
}
