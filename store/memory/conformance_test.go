package memory_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (sluice.Store, func(time.Time)) {
		clk := ratetest.NewClock(time.Unix(0, 0))
		return memory.New(memory.Options{Clock: clk}), clk.Set
	})
}
