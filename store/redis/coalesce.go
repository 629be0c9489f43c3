package redis

import (
	"context"
	"sync"
	"time"
)

// Coalescing. Under load most of Redis's time per decision goes to what a
// script call costs whatever it does: reading the command, looking up and
// entering the script, TIME, writing the reply. A coalescer lets the
// decisions that concurrent callers make at the same moment share one
// script call: while maxInFlight calls for a slot are on the wire, new
// decisions queue, and the next call takes everything queued (up to
// maxBatch keys). Each caller's requests stay one group, decided all or
// nothing on their own; the groups of a call are independent. With no
// concurrency every decision goes out at once, alone, as it would without
// a coalescer.

// maxBatch bounds the keys of one coalesced call, so that one script run
// stays short (Redis runs nothing else meanwhile).
const maxBatch = 256

// pendingCall is one caller's group waiting for its decisions.
type pendingCall struct {
	keys []string
	args []string // without the leading now argument
	res  []int64  // the script's integers for this group, when done
	err  error
	done chan struct{}
	ctx  context.Context
}

// coalescer batches the calls of one slot.
type coalescer struct {
	s           *Store
	maxInFlight int

	mu       sync.Mutex
	queue    []*pendingCall
	inFlight int
}

// coalescers holds one coalescer per cluster slot in use (one in all for a
// single server).
type coalescers struct {
	s           *Store
	maxInFlight int
	mu          sync.Mutex
	bySlot      map[uint16]*coalescer
}

func (cs *coalescers) get(slot uint16) *coalescer {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c := cs.bySlot[slot]
	if c == nil {
		c = &coalescer{s: cs.s, maxInFlight: cs.maxInFlight}
		cs.bySlot[slot] = c
	}
	return c
}

// exec decides one group through the coalescer and returns the script's
// integers for it.
func (c *coalescer) exec(ctx context.Context, keys, args []string) ([]int64, error) {
	p := &pendingCall{keys: keys, args: args, done: make(chan struct{}), ctx: ctx}
	c.mu.Lock()
	c.queue = append(c.queue, p)
	var batch []*pendingCall
	if c.inFlight < c.maxInFlight {
		c.inFlight++
		batch = c.takeLocked()
	}
	c.mu.Unlock()
	if batch != nil {
		c.run(batch)
	}
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		// The call may still run; its decision is lost, as it would be
		// for a call abandoned on the wire.
		return nil, ctx.Err()
	}
}

// takeLocked removes the next batch from the queue. c.mu is held.
func (c *coalescer) takeLocked() []*pendingCall {
	n, keys := 0, 0
	for n < len(c.queue) && (n == 0 || keys+len(c.queue[n].keys) <= maxBatch) {
		keys += len(c.queue[n].keys)
		n++
	}
	batch := make([]*pendingCall, n)
	copy(batch, c.queue)
	c.queue = append(c.queue[:0], c.queue[n:]...)
	return batch
}

// run sends a batch, hands each caller its decisions, and starts the next
// batch if calls queued meanwhile.
func (c *coalescer) run(batch []*pendingCall) {
	c.send(batch)
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.inFlight--
		c.mu.Unlock()
		return
	}
	next := c.takeLocked()
	c.mu.Unlock()
	go c.run(next)
}

// send runs one script call for the batch.
func (c *coalescer) send(batch []*pendingCall) {
	nk := 0
	for _, p := range batch {
		nk += len(p.keys)
	}
	keys := make([]string, 0, nk)
	args := make([]string, 0, 1+argsPerRequest*nk)
	args = append(args, c.s.nowArg())
	for _, p := range batch {
		keys = append(keys, p.keys...)
		args = append(args, p.args...)
	}
	ctx, cancel := batchContext(batch)
	c.s.stats.scriptCalls.Add(1)
	if len(batch) > 1 {
		c.s.stats.coalesced.Add(1)
	}
	res, err := decideScript.Exec(ctx, c.s.client, keys, args).AsIntSlice()
	cancel()
	if err == nil && len(res) != replyPerRequest*nk {
		err = errReplyLength(len(res), nk)
	}
	off := 0
	for _, p := range batch {
		if err != nil {
			p.err = err
		} else {
			p.res = res[off : off+replyPerRequest*len(p.keys)]
			off += replyPerRequest * len(p.keys)
		}
		close(p.done)
	}
}

// batchContext returns a context for a batch: it ends when the latest of
// its callers' deadlines passes, or never if one of them has none. A
// caller that gives up earlier stops waiting, not the call.
func batchContext(batch []*pendingCall) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, p := range batch {
		d, ok := p.ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
