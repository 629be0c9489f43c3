package redis_test

import (
	"context"
	"encoding/binary"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// FuzzStoresAgree holds the Redis script to the memory store's Go steps:
// the same decision, field by field, for one key under two limits of one
// algorithm (a reload that changes the limit), any costs up to one over
// the capacity, waits, and steps of time from a microsecond to over an
// hour. Each op is 8 bytes: cost, which limit and whether the caller
// waits, the wait in sixteenths of the period, the step's unit, the step.
func FuzzStoresAgree(f *testing.F) {
	f.Add("gcra 3 per 7s burst 5", "gcra 10/s", []byte("\x01\x00\x00\x10\x00\x00\x00\x00\x02\x01\x00\x20\x00\x00\x00\x00\x03\x00\x05\x00\x00\x00\x10\x00"))
	f.Add("token_bucket 5/s burst 9", "token_bucket 5/s", []byte("\x09\x00\x00\x00\x00\x00\x00\x00\x01\x01\x00\x00\x30\x00\x00\x00"))
	f.Add("leaky_bucket 5/s burst 10", "leaky_bucket 7 per 3s", []byte("\x03\x00\x00\x00\x00\x01\x00\x00\x04\x01\x00\x00\x00\x02\x00\x00"))
	f.Add("sliding_window 100/m", "sliding_window 7/m", []byte("\x50\x00\x00\x00\x01\x00\x00\x00\x20\x01\x00\x00\x02\x00\x00\x00"))
	f.Add("sliding_log 5 per 15m", "sliding_log 3 per 15m", []byte("\x02\x00\x00\x00\x01\x00\x00\x00\x02\x01\x00\x00\x02\x00\x00\x00"))
	f.Add("fixed_window 10/s", "fixed_window 3/s", []byte("\x05\x00\x00\x00\x01\x00\x00\x00\x05\x01\x00\x00\x02\x00\x00\x00"))
	f.Add("fixed_window 10/month", "fixed_window 3/month", []byte("\x05\x00\x00\x00\x01\x00\x00\x00\x05\x01\x00\x00\x02\x00\x00\x00"))
	srv := redistest.Start(f)
	client := newClient(f, srv.Addr())
	n := 0
	f.Fuzz(func(t *testing.T, s1, s2 string, ops []byte) {
		l1, err1 := rate.ParseLimit(s1)
		l2, err2 := rate.ParseLimit(s2)
		if err1 != nil || err2 != nil || l1.Algorithm != l2.Algorithm || len(ops) > 8*40 {
			return
		}
		n++
		clk := ratetest.NewClock(time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC))
		o := redis.Options{DisableDenyCache: true, Prefix: "p" + strconv.Itoa(n) + ":", Clock: clk}
		redis.PinNow(&o, clk)
		rs := redis.New(client, o)
		ms := memory.New(memory.Options{Clock: clk})
		ctx := context.Background()
		for i := 0; i+8 <= len(ops); i += 8 {
			op := ops[i : i+8]
			l := l1
			if op[1]&1 == 1 {
				l = l2
			}
			cost := int64(op[0]) % (l.Capacity() + 2)
			if l.Capacity() > 200 && op[0] == 255 {
				cost = l.Capacity()
			}
			var maxDelay time.Duration
			if op[1]&2 == 2 {
				maxDelay = time.Duration(op[2]) * l.Period / 16
			}
			step := time.Duration(binary.LittleEndian.Uint32(op[4:8])) * time.Microsecond
			if op[3]&1 == 1 {
				step *= 1000
			}
			clk.Advance(step)
			req := rate.Request{Key: "k", Limit: l, Cost: cost, MaxDelay: maxDelay}
			dr, er := rs.Decide(ctx, req)
			dm, em := ms.Decide(ctx, req)
			if (er == nil) != (em == nil) || dr != dm {
				t.Fatalf("op %d %v cost %d maxDelay %v at +%v: redis %+v %v, memory %+v %v", i/8, l, cost, maxDelay, step, dr, er, dm, em)
			}
		}
	})
}
