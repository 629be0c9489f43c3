package redis

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/rate"
)

// Coalescing. Under load most of Redis's time per decision goes to what a
// script call costs whatever it does: reading the command, looking up and
// entering the script, TIME, writing the reply. A coalescer lets the
// decisions that concurrent callers make at the same moment share one
// script call: while maxInFlight calls for a slot are on the wire, new
// decisions queue, and the next call takes everything queued (up to
// maxBatch keys and maxWeight of work). Each caller's requests stay one
// group, decided all or nothing on their own; the groups of a call are
// independent. With no concurrency every decision goes out at once,
// alone, as it would without a coalescer: from the caller's goroutine,
// with nothing queued.

// maxBatch bounds the keys of one coalesced call, and with them its
// arguments and reply. What bounds its run time is maxWeight.
const maxBatch = 256

// maxWeight bounds the work of one coalesced call, in ordinary requests
// (see weight), so that one script run stays short: Redis runs nothing
// else meanwhile, and a run of seconds has it answer BUSY to every client.
// Most requests cost a script run a few microseconds each, and a batch of
// maxBatch of them about a millisecond; a sliding_log request costs about
// a quarter of a microsecond per run of its log, which holds up to its
// Count (rate.MaxLogCount, 65,536). Counting a run as a request
// overstates it tenfold or more, so the bound is sixteen times maxBatch:
// a batch of logs whose Counts add up to it then costs Redis about what a
// full batch of ordinary requests does (4,096 runs, about a millisecond),
// and a log with a larger Count goes alone, costing what it would
// uncoalesced.
const maxWeight = 16 * maxBatch

// maxInFlight is how many calls per slot may be on the wire at once:
// enough to keep Redis busy while the next batch gathers.
const maxInFlight = 2

// pendingCall is one caller's group waiting for its decisions.
type pendingCall struct {
	ctx  context.Context
	keys []string
	args []string // with the place for the now argument, as Store.call takes them
	res  []int64  // the script's integers for this group, when done
	err  error
	done chan struct{}
	// queued is when the call queued, if Options.CallTimeout bounds
	// calls: see next.
	queued time.Time
}

// coalescer batches the calls of one slot. Calls queue only while
// maxInFlight are on the wire: a non-empty queue means inFlight is
// maxInFlight.
type coalescer struct {
	s *Store

	mu       sync.Mutex
	queue    []*pendingCall
	inFlight int
}

// coalescers holds one coalescer per cluster slot in use (one in all for a
// single server). Finding a slot's coalescer takes no lock: it is read on
// every decision.
type coalescers struct {
	s      *Store
	bySlot [16384]atomic.Pointer[coalescer]
}

func (cs *coalescers) get(slot uint16) *coalescer {
	p := &cs.bySlot[slot&16383]
	if c := p.Load(); c != nil {
		return c
	}
	p.CompareAndSwap(nil, &coalescer{s: cs.s})
	return p.Load()
}

// exec decides one group through the coalescer and returns the script's
// integers for it. With a place on the wire free, nothing is queued: the
// group goes at once, alone, from the caller's goroutine and with its
// context, as without a coalescer. Otherwise it waits for the next batch.
func (c *coalescer) exec(ctx context.Context, keys, args []string) ([]int64, error) {
	c.mu.Lock()
	if c.inFlight < maxInFlight {
		c.inFlight++
		c.mu.Unlock()
		res, err := c.s.call(ctx, keys, args)
		if next := c.next(); next != nil {
			go c.run(next)
		}
		return res, err
	}
	p := &pendingCall{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
	if c.s.timeout > 0 {
		p.queued = time.Now()
	}
	c.queue = append(c.queue, p)
	c.mu.Unlock()
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		// If its batch has not gone yet, the group is left out of it
		// (see next): nothing is decided for a caller who is gone. If it
		// has, the call runs and its decision is lost, as it would be for
		// a call abandoned on the wire.
		return nil, ctx.Err()
	}
}

// next is called when a call comes back: it returns the next batch if
// calls queued meanwhile, which keeps the place on the wire, or else nil,
// and frees the place.
//
// Groups whose callers gave up while queued are dropped, not sent: their
// callers have returned an error and may have decided otherwise since (a
// sluice.Fallback decides by its failure mode), so deciding them in Redis
// would count them twice, and it would spend Redis's time, when it is
// slowest, on callers who are gone.
//
// With Options.CallTimeout, so are the groups that have queued for longer
// than it: they fail with context.DeadlineExceeded. Each call on the wire
// ends within CallTimeout, and a batch takes at most maxBatch keys, so
// without this a caller behind many batches of a hung Redis would wait a
// CallTimeout for each of them; with it, no decision waits much more than
// twice CallTimeout (once queued, once on the wire), however many queue.
func (c *coalescer) next() []*pendingCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	var now time.Time
	if c.s.timeout > 0 {
		now = time.Now()
	}
	// One allocation: a batch takes at most every queued call, and at
	// most maxBatch of them (each has a key at least).
	batch := make([]*pendingCall, 0, min(len(c.queue), maxBatch))
	i, keys, work := 0, 0, 0
	for ; i < len(c.queue); i++ {
		p := c.queue[i]
		err := p.ctx.Err()
		if err == nil && c.s.timeout > 0 && now.Sub(p.queued) > c.s.timeout {
			err = context.DeadlineExceeded
		}
		if err != nil {
			p.err = err
			close(p.done)
			continue
		}
		w := weight(p)
		if len(batch) > 0 && (keys+len(p.keys) > maxBatch || work+w > maxWeight) {
			break
		}
		keys += len(p.keys)
		work += w
		batch = append(batch, p)
	}
	n := copy(c.queue, c.queue[i:])
	clear(c.queue[n:])
	c.queue = c.queue[:n]
	if len(batch) == 0 {
		c.inFlight--
		return nil
	}
	return batch
}

// weight returns the work group p gives a script run, in ordinary
// requests (see maxWeight): a sliding_log request counts the runs its log
// can hold, its limit's Count, since a decision reads every run of the
// log and an admit writes them all back; any other request counts 1.
func weight(p *pendingCall) int {
	w := 0
	for i := range p.keys {
		a := p.args[1+argsPerRequest*i:]
		w++
		if a[0] == algorithmArgs[rate.SlidingLog] {
			// Parsed back from the argument: it is all the coalescer sees of
			// the request, and only queued groups pay for it.
			if n, err := strconv.Atoi(a[1]); err == nil && n > 1 {
				w += n - 1
			}
		}
	}
	return w
}

// run sends batches, handing each caller its decisions, while calls queue.
func (c *coalescer) run(batch []*pendingCall) {
	for batch != nil {
		c.send(batch)
		batch = c.next()
	}
}

// send runs one script call for the batch.
func (c *coalescer) send(batch []*pendingCall) {
	if len(batch) == 1 {
		p := batch[0]
		p.res, p.err = c.s.call(p.ctx, p.keys, p.args)
		close(p.done)
		return
	}
	nk, nres := 0, 0
	for _, p := range batch {
		nk += len(p.keys)
		nres += replyLen(len(p.keys), p.args)
	}
	keys := make([]string, 0, nk)
	args := make([]string, 1, 1+argsPerRequest*nk)
	for _, p := range batch {
		keys = append(keys, p.keys...)
		args = append(args, p.args[1:]...)
	}
	ctx, cancel := batchContext(batch)
	c.s.stats.coalesced.Add(1)
	res, err := c.s.call(ctx, keys, args)
	cancel()
	if isTryAgain(err) {
		c.split(batch)
		return
	}
	if err == nil && len(res) != nres {
		err = errReplyLength(len(res), nk, nres)
	}
	off := 0
	for _, p := range batch {
		if err != nil {
			p.err = err
		} else {
			n := replyLen(len(p.keys), p.args)
			p.res = res[off : off+n]
			off += n
		}
		close(p.done)
	}
}

// split sends each group of a batch that Redis answered TRYAGAIN in a call
// of its own, all at once, each with its caller's context.
//
// The batch's slot is moving between cluster masters: the old master
// redirects a script to the new one (ASK) unless it holds all its keys,
// and the new one runs a script only if it holds all its keys or has just
// one, answering TRYAGAIN otherwise. So a batch of keys that the two
// masters hold between them, or of new keys, runs nowhere until the move
// ends, while each key alone runs at once on one master or the other. Most
// groups are one key: coalescing must not make them wait for a move, nor
// fail them when it has stopped midway. A group of several keys answered
// TRYAGAIN again waits for the move as a caller alone would (see
// Store.waitMigration).
func (c *coalescer) split(batch []*pendingCall) {
	var wg sync.WaitGroup
	for _, p := range batch {
		wg.Go(func() {
			p.res, p.err = c.s.call(p.ctx, p.keys, p.args)
			close(p.done)
		})
	}
	wg.Wait()
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
