package lapi

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/osyield"
	"github.com/weft-hpc/weft/internal/trace"
)

// progressLocked is one pass of the progress engine: take what the device
// has, run timers, send what is queued. It reports whether anything
// happened that a waiter might care about.
func (c *Context) progressLocked() bool {
	return c.afterPoll(c.pollLocked())
}

// pollLocked delivers what the device has, the first step of a pass, and
// returns how many frames it took.
func (c *Context) pollLocked() int {
	if !c.reliable {
		// Over a route with no protocol state toward its unreliable
		// peers, the pass keeps no time: the clock costs as much as a
		// shared-memory message. A frame from such a peer reads it
		// (clock).
		c.stale = c.relTo != nil && !c.keepsTime()
		if !c.stale {
			c.pollNow = c.now()
		}
	}
	n, err := c.dev.Poll(c.onFrameFn)
	if err != nil && !c.closed {
		c.closed = true // the device is gone: nothing more can progress
	}
	return n
}

// afterPoll is the rest of a pass after a poll that took n frames.
func (c *Context) afterPoll(n int) bool {
	if !c.reliable && !c.stale {
		c.tick(c.pollNow)
	}
	if len(c.flushed) > 0 {
		c.flushLocked() // packets sent toward reliable peers
	}
	if c.reint != nil && !c.reintIdle {
		if c.reliable {
			c.pollNow = c.now()
			c.nextTick = time.Time{} // only the protocol's timer runs here
		}
		c.reintTick(c.pollNow)
	}
	c.catchUpTPT()
	c.pollNative()
	for _, p := range c.active {
		if c.queues[p].head != nil {
			c.pushLocked(p, c.pollNow)
		}
	}
	if !c.reliable && !c.stale {
		c.rdmaTick(c.pollNow)
	}
	if c.rdmaPending() {
		c.pushRDMA(c.pollNow)
	}
	if c.trigDue.Load() {
		c.fireTriggers()
	}
	did := n > 0 || len(c.done) > 0
	if did {
		c.progressed()
	}
	return did
}

// keepsTime reports whether a pass must read the clock (c.mu held): some
// peer has packets queued or in flight, an acknowledgement or timer is
// due, RDMA is under way, or reintegration has a timer running.
func (c *Context) keepsTime() bool {
	return len(c.active) > 0 || !c.nextTick.IsZero() || c.rd.groups > 0 || c.rdmaPending() ||
		c.reint != nil && !c.reintIdle
}

// clock makes c.pollNow current in a pass that began without reading it
// (stale): a frame from an unreliable peer came.
func (c *Context) clock() {
	if c.stale {
		c.pollNow, c.stale = c.now(), false
	}
}

// progressed marks that a pass delivered something: another goroutine's
// condition may now hold.
func (c *Context) progressed() {
	c.gen++
	if c.sleepers > 0 || c.blocking {
		c.wakeLocked()
	}
}

// quiet reports whether a pass would have nothing to do past its poll:
// a reliable device with nothing to flush, no reintegration timer, no
// RDMA, no completion, no send queued and no TPT change to take in.
func (c *Context) quiet() bool {
	if !c.reliable && !c.stale || len(c.done) > 0 || c.trigDue.Load() || c.reint != nil && !c.reintIdle || c.sendsQueuedLocked() {
		return false
	}
	// No TPT changes to take in, nor a log long enough for catchUpTPT.
	return !c.cm.keep || !c.cm.pending.Load() && len(c.cm.log) < tptLogMax
}

// tick runs retransmission timers and sends owed acknowledgements.
func (c *Context) tick(now time.Time) {
	if c.failover != nil {
		if n := c.failover.Outages(); n != c.outages {
			c.outages = n
			c.resendInFlight(now)
		}
	}
	c.nextTick = time.Time{}
	keep := c.active[:0]
	for _, peer := range c.active {
		l := &c.links[peer]
		if c.peerErr[peer] != nil {
			c.isActive[peer] = false
			continue
		}
		next, failed := l.expire(now, &c.timing, c.rtxFn)
		if failed {
			c.failPeer(peer, fmt.Sprintf("no acknowledgement for %v", c.cfg.PeerTimeout))
			c.isActive[peer] = false
			continue
		}
		if l.needAck(now) {
			c.sendAck(peer) // clears ackDue, unless the ack could not go
		}
		if d := l.ackDue; !d.IsZero() && (next.IsZero() || d.Before(next)) {
			next = d
		}
		if !next.IsZero() && (c.nextTick.IsZero() || next.Before(c.nextTick)) {
			c.nextTick = next
		}
		if l.inFlight() == 0 && c.queues[peer].head == nil && l.ackDue.IsZero() && !l.ackNow {
			c.isActive[peer] = false
			continue
		}
		keep = append(keep, peer)
	}
	c.active = keep
	c.flushLocked()
}

// resendInFlight sends again, at once, every packet in flight toward
// every peer and redrives every RDMA transfer under way (c.mu held): the
// device took a member out (hal.Failover), and what went on it is lost.
// The timers' back-off, grown while the member failed, starts afresh.
func (c *Context) resendInFlight(now time.Time) {
	c.stats.FailoverResends++
	for _, peer := range c.active {
		if c.reliableTo(peer) || c.peerErr[peer] != nil {
			continue
		}
		l := &c.links[peer]
		l.backoff = 0
		for s := l.una; s != l.nextSeq; s++ {
			if p := l.inflight[s%sackBits]; p != nil {
				p.sentAt, p.fastRtx = now, false
				c.retransmit(p, 0)
			}
		}
	}
	for _, op := range c.rd.ops {
		if op != nil && op.sentAll && op.rto > 0 {
			op.deadline = now // rdmaTick, later in this pass, redrives it
		}
	}
}

// retransmit sends p again; rto is the timeout now in force, 0 for a
// hole's repair (see link.expire).
func (c *Context) retransmit(p *outPkt, rto time.Duration) {
	c.stats.Retransmits++
	c.peerStats[p.peer].Retransmits++
	if trace.On(trace.Internal) {
		c.traceRetransmit(p, rto)
	}
	if err := c.transmit(p); err != nil && fatalSendErr(err) {
		c.failPeer(p.peer, err.Error())
	} else if err != nil && !errors.Is(err, hal.ErrNoResource) {
		c.stats.SendErrors++ // lost again; the timer will try again
	}
}

// failPeer declares peer failed: its queued and unacknowledged packets are
// dropped, counters waiting on them fail, and OnPeerFailed callbacks run.
func (c *Context) failPeer(peer hal.Rank, cause string) {
	if c.peerErr[peer] != nil {
		return
	}
	err := &PeerError{Peer: peer, Cause: cause}
	c.peerErr[peer] = err
	c.faults[peer].Store(&fault{err})
	if trace.On(trace.Rare) {
		trace.Printf(trace.Rare, "lapi %d: rank %d failed: %s", c.rank, peer, cause)
	}
	c.failures.Add(1)
	c.dropPeer(peer, err)
	for _, f := range c.onFail {
		f(&c.tx, peer, err)
	}
}

// dropPeer abandons everything under way with peer, failing it with err:
// queued and unacknowledged packets, half-received messages, gets and rmws.
func (c *Context) dropPeer(peer hal.Rank, err error) {
	drop := func(p *outPkt) {
		if m := p.msg; m != nil && m.pending > 0 {
			m.pending = 0 // report once, however many packets it had
			m.org.fail(err)
			c.note(m.notify, err)
		}
		p.msg = nil
		c.putPkt(p)
	}
	for p := c.queues[peer].pop(); p != nil; p = c.queues[peer].pop() {
		drop(p)
	}
	if !c.reliable {
		l := &c.links[peer]
		for i, p := range l.inflight {
			if p != nil {
				l.inflight[i] = nil
				drop(p)
			}
		}
		l.una = l.nextSeq
	}
	for k := range c.reasm {
		if k.src == peer {
			delete(c.reasm, k)
		}
	}
	c.gets.failPeer(c, peer, err)
	c.dropRDMA(peer, err)
	if c.awaiting != nil {
		for k := range c.awaiting[peer] {
			k.fail(err)
		}
		c.awaiting[peer] = nil
	}
	c.wakeLocked()
}

// FailPeer declares peer failed with the given cause, as if it had stopped
// answering: used when the job learns of a death another way (mpi.Run sees
// a rank's goroutine return, a launcher reports an exit).
func (c *Context) FailPeer(peer hal.Rank, cause string) {
	if int(peer) >= c.cfg.Size {
		return
	}
	c.mu.Lock()
	c.failPeer(peer, cause)
	c.mu.Unlock()
}

// Progress makes one pass of the progress engine without blocking.
func (c *Context) Progress() {
	c.mu.Lock()
	c.progressLocked()
	c.mu.Unlock()
	c.runCompletions()
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
// once, when the wait stops spinning and first yields or blocks: a wait
// that long is worth naming in reports, one that ends while spinning (a
// ping-pong's) pays nothing for it. Counting polls instead failed: a
// goroutine descheduled through its spin blocks after as few as 16.
func (c *Context) WaitReport(ctx context.Context, cond func() (done bool, err error), report func()) error {
	return c.waitFor(ctx, cond, nil, report, c.cfg.Spin, c.cfg.Yield)
}

// WaitTx is Wait whose condition is lent the dispatcher's Tx (cond runs
// inside the dispatcher, as every Wait condition does).
func (c *Context) WaitTx(ctx context.Context, cond func(tx *Tx) (done bool, err error)) error {
	return c.waitFor(ctx, nil, cond, nil, c.cfg.Spin, c.cfg.Yield)
}

// test asks the condition of a wait: cond, or condTx lent the Tx.
func (c *Context) test(cond func() (bool, error), condTx func(*Tx) (bool, error)) (bool, error) {
	if condTx != nil {
		return condTx(&c.tx)
	}
	return cond()
}

// WaitQuiet is Wait for a goroutine that runs beside the application's
// (a progress goroutine): it neither spins nor yields, but blocks as soon
// as a pass makes no progress, so that it takes no processor time from
// the application's computation while nothing arrives.
func (c *Context) WaitQuiet(ctx context.Context, cond func() (done bool, err error)) error {
	return c.waitFor(ctx, cond, nil, nil, -1, 0)
}

// waitFor is WaitReport polling for spin, then yielding for yield.
// Of cond and condTx, the one not nil is the condition.
func (c *Context) waitFor(ctx context.Context, cond func() (done bool, err error), condTx func(*Tx) (bool, error), report func(), spin, yield time.Duration) error {
	// The spin window restarts whenever progress is made: a goroutine that
	// waits for a long time in a busy exchange keeps polling, and blocks
	// only after Spin with nothing happening.
	var (
		spinning  bool
		spinStart time.Duration // monotonic()
		nextSched time.Duration // how long into the spin to call Gosched next
	)
	// A context that is never done (Done is nil) is not asked for Err
	// after every pass: an interface call each time.
	cancelable := ctx.Done() != nil
	for i := 1; ; i++ {
		// One lock per idle poll: completions are run (outside the lock)
		// only when some are queued, and the condition checked after them.
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return ErrClosed
		}
		n := c.pollLocked()
		var (
			done bool
			err  error
		)
		quiet := n > 0 && c.quiet()
		if quiet {
			done, err = c.test(cond, condTx)
		}
		if done && err == nil {
			// What this goroutine waits for came, and the rest of the
			// pass has nothing to do: it returns at once, and an
			// 8-byte ping-pong's reply leaves a few ns sooner. The poll
			// itself stays whole: polling one frame first saved the
			// ping-pong another nanosecond but cost a stream of 8-byte
			// messages 12-15% (each frame then took a wait of its own).
			c.progressed()
			c.mu.Unlock()
			return nil
		}
		did := c.afterPoll(n)
		queued := len(c.done) > 0
		if !queued && !quiet {
			// (After a quiet poll, the pass changed nothing cond reads:
			// cond is asked once per pass.)
			done, err = c.test(cond, condTx)
		}
		gen := c.gen
		c.mu.Unlock()
		if queued {
			c.runCompletions()
			did = true
			c.mu.Lock()
			done, err = c.test(cond, condTx)
			gen = c.gen
			c.mu.Unlock()
		}
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if cancelable {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if did {
			spinning, i = false, 0
			continue
		}
		if i&15 != 0 && spin >= 0 {
			continue // a spinning waiter reads the clock every 16 polls
		}
		if i&7 != 0 && spin < 0 && yield > 0 {
			// A yielding waiter yields at every poll and reads the clock
			// every 8th, not at the first: with more ranks than cores,
			// most steps of a collective wait for a yield or two, and
			// the clock costs a tenth of a step between two context
			// switches. (One that does not yield blocks at once.)
			if report != nil {
				report()
				report = nil
			}
			osyield.Yield()
			continue
		}
		now := monotonic()
		if !spinning {
			spinning, spinStart, nextSched = true, now, goschedAfter
		}
		// The timer and queue checks take the lock: only a waiter that
		// would block makes them.
		waited := now - spinStart
		if waited < spin {
			if waited >= nextSched {
				runtime.Gosched()
				nextSched = waited + goschedAfter
			}
			continue
		}
		if report != nil {
			report()
			report = nil
		}
		switch {
		case waited < max(spin, 0)+yield:
			osyield.Yield()
		case c.timerSoon(time.Now()) || c.sendsQueued():
			runtime.Gosched()
		default:
			c.block(ctx, gen)
			spinning = false
		}
	}
}

// goschedAfter is how long a spinning waiter polls between two calls to
// runtime.Gosched, which let the other goroutines of its processor run.
// Gosched takes the scheduler's lock and costs more than a poll: called
// at every clock reading, it delayed a ping-pong's reply whenever the
// message came during it.
const goschedAfter = 4 * time.Microsecond

// epoch is when this package started: monotonic counts from it.
var epoch = time.Now()

// monotonic reads the monotonic clock alone, which is what a waiter's
// spin and yield budgets need: time.Now also reads the wall clock, and
// took 47 ns against 25 on this machine (a VM).
func monotonic() time.Duration { return time.Since(epoch) }

// timerResolution is how late a sleeping goroutine may wake: the Go
// runtime's idle sleep has millisecond granularity.
const timerResolution = time.Millisecond

// timerSoon reports whether a retransmission or acknowledgement timer falls
// due sooner than a sleep could be trusted to end: then polling is the only
// way to meet a sub-millisecond RTO.
func (c *Context) timerSoon(now time.Time) bool {
	if c.reliable && c.reint == nil {
		return false
	}
	c.mu.Lock()
	t := c.nextTick
	c.mu.Unlock()
	return !t.IsZero() && t.Sub(now) < timerResolution
}

// sendsQueued reports whether packets wait for room in the device (it
// said ErrNoResource). A device signals arrivals, not room: a goroutine
// that slept now might never wake, so it keeps polling instead.
func (c *Context) sendsQueued() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sendsQueuedLocked()
}

// sendsQueuedLocked is sendsQueued with c.mu held.
func (c *Context) sendsQueuedLocked() bool {
	for _, p := range c.active {
		if c.queues[p].head != nil {
			return true
		}
	}
	return len(c.flushed) > 0 || c.rdmaPending() || c.nativeQueued()
}

// block waits for something to happen: a frame, another goroutine's
// progress, a timer, ctx, or Close.
// gen is the progress generation the caller last checked its condition
// at: if another goroutine (the background timer, a second waiter) made
// progress since, the condition may hold already and block returns at once
// instead of sleeping on a wake-up that has come and gone.
func (c *Context) block(ctx context.Context, gen uint64) {
	if arm, ok := ctx.Value(armKey{}).(func() bool); ok && arm() {
		return // armed just now: the caller looks at its condition once more first
	}
	c.mu.Lock()
	if c.closed || len(c.done) > 0 || c.gen != gen {
		c.mu.Unlock()
		return
	}
	if c.blocking {
		ch := c.wake
		c.sleepers++
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		c.mu.Lock()
		c.sleepers--
		c.mu.Unlock()
		return
	}
	c.blocking = true
	wctx, cancel := context.WithCancel(ctx)
	if (!c.reliable || c.reint != nil) && !c.nextTick.IsZero() {
		wctx, cancel = context.WithDeadline(ctx, c.nextTick)
	}
	c.blockCancel = cancel
	c.mu.Unlock()
	c.dev.Wait(wctx)
	cancel()
	c.mu.Lock()
	c.blocking, c.blockCancel = false, nil
	c.wakeLocked()
	c.mu.Unlock()
}

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
// is (an argument cost the 8-byte ping-pong 4%), and only the blocking
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
	c.wakeLocked()
	c.mu.Unlock()
}

// wakeLocked wakes every goroutine sleeping in block.
func (c *Context) wakeLocked() {
	c.gen++
	if c.blockCancel != nil {
		c.blockCancel()
	}
	if c.sleepers > 0 || c.closed {
		close(c.wake)
		c.wake = make(chan struct{})
	}
}

// background keeps an unreliable context's timers running while no
// goroutine is inside lapi: retransmissions and acknowledgements must go
// even when the application is computing.
func (c *Context) background() {
	defer close(c.bgDone)
	period := max(c.cfg.MinRTO, 500*time.Microsecond)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-c.stopBg:
			return
		case <-t.C:
		}
		if !c.mu.TryLock() {
			continue // someone is making progress already
		}
		if !c.closed && !c.blocking {
			c.progressLocked()
		}
		c.mu.Unlock()
		c.runCompletions()
	}
}
