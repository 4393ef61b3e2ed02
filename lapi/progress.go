package lapi

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// progressor drives a context: the progress passes that poll the device
// and run the timers, and the waiting of goroutines for conditions. One
// goroutine at a time blocks in the device's Wait; others sleep on wake,
// which is closed whenever progress is made.
type progressor struct {
	c           *Context
	pollNow     time.Time
	stale       bool // over a route: this pass has not read the clock into pollNow
	blocking    bool
	gen         uint64 // bumped by every progress pass that did something
	blockCancel context.CancelFunc
	sleepers    int
	passes      uint32 // passes made, for lossEvery
	wake        chan struct{}
	stopBg      chan struct{}
	bgDone      chan struct{}
	bgKick      chan struct{} // block's return: background looks often again
	bgLong      atomic.Bool   // background sleeps longer than bgSlow: kick it
	// bgLooks counts background's wake-ups, bgPasses the passes it made
	// itself (c.mu held).
	bgLooks  atomic.Uint64
	bgPasses uint64
}

// progressLocked is one pass of the progress engine: take what the device
// has, run timers, send what is queued. It reports whether anything
// happened that a waiter might care about.
func (pg *progressor) progressLocked() bool {
	return pg.afterPoll(pg.pollLocked())
}

// pollLocked delivers what the device has, the first step of a pass, and
// returns how many frames it took.
func (pg *progressor) pollLocked() int {
	c := pg.c
	if !c.reliable {
		// Over a route with no protocol state toward its unreliable
		// peers, the pass keeps no time: the clock costs as much as a
		// shared-memory message. A frame from such a peer reads it
		// (clock).
		pg.stale = c.relTo != nil && !pg.keepsTime()
		if !pg.stale {
			pg.pollNow = c.now()
		}
	}
	n, err := c.dev.Poll(c.am.onFrameFn)
	if err != nil && !c.closed {
		c.closed = true // the device is gone: nothing more can progress
	}
	return n
}

// lossEvery is how many passes go between looks for peers the device
// found lost without a send (takeLost), besides the look after every
// blocking Wait: a caller that never blocks (a Test loop, a rank kept busy
// by other peers) still learns of a dead peer, at the cost of an atomic
// load every few dozen passes.
const lossEvery = 64

// afterPoll is the rest of a pass after a poll that took n frames.
func (pg *progressor) afterPoll(n int) bool {
	c := pg.c
	if pg.passes++; pg.passes%lossEvery == 0 {
		c.takeLost()
	}
	if !c.reliable && !pg.stale {
		c.rel.tick(pg.pollNow)
	}
	if len(c.rel.flushed) > 0 {
		c.rel.flushLocked() // packets sent toward reliable peers
	}
	if c.ri.reint != nil && !c.ri.reintIdle {
		if c.reliable {
			pg.pollNow = c.now()
			c.rel.nextTick = time.Time{} // only the protocol's timer runs here
		}
		c.ri.reintTick(pg.pollNow)
	}
	c.cm.catchUpTPT()
	c.nat.pollNative()
	for _, p := range c.rel.active {
		if c.rel.queues[p].head != nil {
			c.rel.pushLocked(p, pg.pollNow)
		}
	}
	if !c.reliable && !pg.stale {
		c.rd.rdmaTick(pg.pollNow)
	}
	if c.rd.rdmaPending() {
		c.rd.pushRDMA(pg.pollNow)
	}
	if c.trg.trigDue.Load() {
		c.trg.fireTriggers()
	}
	did := n > 0 || len(c.am.done) > 0
	if did {
		pg.progressed()
	}
	return did
}

// keepsTime reports whether a pass must read the clock (c.mu held): some
// peer has packets queued or in flight, an acknowledgement or timer is
// due, RDMA is under way, or reintegration has a timer running.
func (pg *progressor) keepsTime() bool {
	c := pg.c
	return len(c.rel.active) > 0 || !c.rel.nextTick.IsZero() || c.rd.groups > 0 || c.rd.rdmaPending() ||
		c.ri.reint != nil && !c.ri.reintIdle
}

// clock makes c.pollNow current in a pass that began without reading it
// (stale): a frame from an unreliable peer came.
func (pg *progressor) clock() {
	c := pg.c
	if pg.stale {
		pg.pollNow, pg.stale = c.now(), false
	}
}

// progressed marks that a pass delivered something: another goroutine's
// condition may now hold.
func (pg *progressor) progressed() {
	pg.gen++
	if pg.sleepers > 0 || pg.blocking {
		pg.wakeLocked()
	}
}

// quiet reports whether a pass would have nothing to do past its poll:
// a reliable device with nothing to flush, no reintegration timer, no
// RDMA, no completion, no send queued and no TPT change to take in.
func (pg *progressor) quiet() bool {
	c := pg.c
	if !c.reliable && !pg.stale || len(c.am.done) > 0 || c.trg.trigDue.Load() || c.ri.reint != nil && !c.ri.reintIdle || c.rel.sendsQueuedLocked() {
		return false
	}
	// No TPT changes to take in, nor a log long enough for catchUpTPT.
	return !c.cm.keep || !c.cm.pending.Load() && len(c.cm.log) < tptLogMax
}

// FailPeer declares peer failed with the given cause, as if it had stopped
// answering: used when the job learns of a death another way (mpi.Run sees
// a rank's goroutine return, a launcher reports an exit).
func (c *Context) FailPeer(peer hal.Rank, cause string) {
	if int(peer) >= c.cfg.Size {
		return
	}
	c.mu.Lock()
	c.rel.failPeer(peer, cause)
	c.mu.Unlock()
}

// Progress makes one pass of the progress engine without blocking.
func (c *Context) Progress() {
	c.mu.Lock()
	c.pr.progressLocked()
	c.mu.Unlock()
	c.am.runCompletions()
}

// Wait makes progress until cond reports done or an error; cond runs
// inside the dispatcher (see Tx), so it must be quick and must not call
// the context (but PeerErr).
// An error cond returns ends the wait, done or not; once cond reports done
// with no error, Wait returns without calling it again (a condition may
// act on the completion it sees, as mpi's gives its request back). The
// calling goroutine polls for Config.Spin, then blocks: in the device's
// Wait if no other goroutine is, else until another goroutine makes
// progress. cond is called as given: a closure around it cost an 8-byte
// ping-pong's receiver 15 instructions a pass, and comparing an error
// sentinel (runtime.ifaceeq) 20 a message, between the frame and the reply.
func (c *Context) Wait(ctx context.Context, cond func() (done bool, err error)) error {
	return c.WaitReport(ctx, cond, nil)
}

// WaitReport is Wait that calls report (if not nil; outside the lock)
// once, when the wait stops spinning and first blocks, or (Config.Yield)
// reads the clock between its yields, every 8th poll: a wait that long is
// worth naming in reports, one that ends while spinning or after a yield
// or two (a ping-pong's) pays nothing for it. Counting polls instead failed: a
// goroutine descheduled through its spin blocks after as few as 16.
func (c *Context) WaitReport(ctx context.Context, cond func() (done bool, err error), report func()) error {
	return c.pr.waitFor(ctx, cond, nil, report, c.cfg.Spin, c.cfg.Yield)
}

// WaitTx is Wait whose condition is lent the dispatcher's Tx (cond runs
// inside the dispatcher, as every Wait condition does).
func (c *Context) WaitTx(ctx context.Context, cond func(tx *Tx) (done bool, err error)) error {
	return c.pr.waitFor(ctx, nil, cond, nil, c.cfg.Spin, c.cfg.Yield)
}

// WaitQuiet is Wait for a goroutine that runs beside the application's
// (a progress goroutine): it neither spins nor yields, but blocks as soon
// as a pass makes no progress, so that it takes no processor time from
// the application's computation while nothing arrives.
func (c *Context) WaitQuiet(ctx context.Context, cond func() (done bool, err error)) error {
	return c.pr.waitFor(ctx, cond, nil, nil, -1, 0)
}

// epoch is when this package started: monotonic counts from it.
var epoch = time.Now()

// monotonic reads the monotonic clock alone, which is what a waiter's
// spin and yield budgets need: time.Now also reads the wall clock, which
// about doubles its cost on a VM.
func monotonic() time.Duration { return time.Since(epoch) }

// timerResolution is how late a sleeping goroutine may wake: the Go
// runtime's idle sleep has millisecond granularity.
const timerResolution = time.Millisecond

// WithArm returns a context under which a wait on a condition that
// changes without a frame (another rank writes memory the condition
// reads: a hal.SharedMemory block) can block safely. Before the goroutine
// blocks, the wait calls arm; when arm reports that it armed just now,
// the wait looks at its condition once more instead of blocking, and
// blocks only at a later turn, when arm reports it was armed already.
// arm must see to it that whoever changes what the condition reads from
// then on sends this rank a frame, since a blocked goroutine wakes only
// for frames; arm's store and the condition's loads, against the writer's
// store and its look at what arm wrote, must be sequentially consistent
// atomics (sync/atomic), so that one side sees the other. The waiter
// disarms when its wait is over.
//
// A hook in a context value, as net/http/httptrace passes its hooks:
// the wait loop, which every message's latency goes through, stays as it
// is (an argument there costs every small message), and only the blocking
// path looks for it.
func WithArm(ctx context.Context, arm func() (armedNow bool)) context.Context {
	return context.WithValue(ctx, armKey{}, arm)
}

type armKey struct{}

// Wake makes every goroutine blocked in Wait re-check its condition. A
// condition that depends on something outside the context (a flag another
// goroutine sets) needs it: lapi only re-checks when it makes progress.
func (c *Context) Wake() {
	c.mu.Lock()
	c.pr.wakeLocked()
	c.mu.Unlock()
}
