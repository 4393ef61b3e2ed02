package lapi

import (
	"context"
	"runtime"
	"time"

	"github.com/weft-hpc/weft/internal/osyield"
)

// test asks the condition of a wait: cond, or condTx lent the Tx.
func (pg *progressor) test(cond func() (bool, error), condTx func(*Tx) (bool, error)) (bool, error) {
	c := pg.c
	if condTx != nil {
		return condTx(&c.tx)
	}
	return cond()
}

// waitFor is WaitReport polling for spin, then yielding for yield.
// Of cond and condTx, the one not nil is the condition.
func (pg *progressor) waitFor(ctx context.Context, cond func() (done bool, err error), condTx func(*Tx) (bool, error), report func(), spin, yield time.Duration) error {
	// The spin window restarts whenever progress is made: a goroutine that
	// waits for a long time in a busy exchange keeps polling, and blocks
	// only after Spin with nothing happening.
	ws := waitSpin{pg: pg, spin: spin, yield: yield, gosched: pg.c.cfg.Gosched}
	// A context that is never done (Done is nil) is not asked for Err
	// after every pass: an interface call each time.
	cancelable := ctx.Done() != nil
	for i := 1; ; i++ {
		done, did, gen, err := pg.waitPass(cond, condTx)
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
			ws.spinning, i = false, 0
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
			// Nor does it report before that 8th poll: most waits of
			// a rank sharing its core end after a yield or two (the
			// peer ran and answered), and mpi's report allocates.
			osyield.Yield()
			continue
		}
		if ws.spun() {
			continue
		}
		// (report is called here, not by waitSpin: a func kept in a
		// struct and called makes what it captures escape, a heap
		// allocation per wait for mpi's.)
		if report != nil {
			report()
			report = nil
		}
		ws.rest(ctx, gen)
	}
}

// waitPass is one pass of a wait: a poll under the lock, the completions
// it queued run outside, and the condition asked once. did reports that
// the pass made progress, gen the progress generation it saw.
func (pg *progressor) waitPass(cond func() (bool, error), condTx func(*Tx) (bool, error)) (done, did bool, gen uint64, err error) {
	c := pg.c
	// One lock per idle poll: completions are run (outside the lock)
	// only when some are queued, and the condition checked after them.
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false, false, 0, ErrClosed
	}
	n := pg.pollLocked()
	quiet := n > 0 && pg.quiet()
	if quiet {
		done, err = pg.test(cond, condTx)
	}
	if done && err == nil {
		// What this goroutine waits for came, and the rest of the
		// pass has nothing to do: it returns at once, and a
		// ping-pong's reply leaves sooner. The poll itself stays
		// whole: polling one frame first would make each frame of a
		// stream of small messages take a wait of its own.
		pg.progressed()
		c.mu.Unlock()
		return true, true, 0, nil
	}
	did = pg.afterPoll(n)
	queued := len(c.am.done) > 0
	if !queued && !quiet {
		// (After a quiet poll, the pass changed nothing cond reads:
		// cond is asked once per pass.)
		done, err = pg.test(cond, condTx)
	}
	gen = pg.gen
	c.mu.Unlock()
	if queued {
		c.am.runCompletions()
		did = true
		c.mu.Lock()
		done, err = pg.test(cond, condTx)
		gen = pg.gen
		c.mu.Unlock()
	}
	return done, did, gen, err
}

// waitSpin is a waiter's state between passes that made no progress:
// how long it has spun.
type waitSpin struct {
	pg          *progressor
	spin, yield time.Duration
	// gosched is Config.Gosched: how long to spin between two calls
	// to runtime.Gosched (negative: none). It is not called at every
	// clock reading: Gosched takes the scheduler's lock and costs more
	// than a poll, and a ping-pong's reply that came during one waited.
	gosched   time.Duration
	spinning  bool
	spinStart time.Duration // monotonic()
	nextSched time.Duration // how long into the spin to call Gosched next
	waited    time.Duration // since spinStart, at the last spun
}

// spun reads the clock after a pass that made no progress, and reports
// whether the waiter is still within its spin (calling Gosched now and
// then).
func (ws *waitSpin) spun() bool {
	now := monotonic()
	if !ws.spinning {
		ws.spinning, ws.spinStart, ws.nextSched = true, now, ws.gosched
	}
	// The timer and queue checks take the lock: only a waiter that
	// would block makes them.
	ws.waited = now - ws.spinStart
	if ws.waited < ws.spin {
		if ws.gosched >= 0 && ws.waited >= ws.nextSched {
			runtime.Gosched()
			ws.nextSched = ws.waited + ws.gosched
		}
		return true
	}
	return false
}

// rest is what a waiter past its spin does: yield, or block in the
// device (gen is the generation the last pass saw).
func (ws *waitSpin) rest(ctx context.Context, gen uint64) {
	c := ws.pg.c
	switch {
	case ws.waited < max(ws.spin, 0)+ws.yield:
		osyield.Yield()
	case c.rel.timerSoon(time.Now()) || c.rel.sendsQueued():
		runtime.Gosched()
	default:
		ws.pg.block(ctx, gen)
		ws.spinning = false
	}
}

// block waits for something to happen: a frame, another goroutine's
// progress, a timer, ctx, or Close.
// gen is the progress generation the caller last checked its condition
// at: if another goroutine (the background timer, a second waiter) made
// progress since, the condition may hold already and block returns at once
// instead of sleeping on a wake-up that has come and gone.
func (pg *progressor) block(ctx context.Context, gen uint64) {
	c := pg.c
	if arm, ok := ctx.Value(armKey{}).(func() bool); ok && arm() {
		return // armed just now: the caller looks at its condition once more first
	}
	c.mu.Lock()
	if c.closed || len(c.am.done) > 0 || pg.gen != gen {
		c.mu.Unlock()
		return
	}
	if pg.blocking {
		ch := pg.wake
		pg.sleepers++
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		c.mu.Lock()
		pg.sleepers--
		c.mu.Unlock()
		return
	}
	pg.blocking = true
	wctx, cancel := context.WithCancel(ctx)
	if (!c.reliable || c.ri.reint != nil) && !c.rel.nextTick.IsZero() {
		wctx, cancel = context.WithDeadline(ctx, c.rel.nextTick)
	}
	pg.blockCancel = cancel
	c.mu.Unlock()
	c.dev.Wait(wctx)
	cancel()
	c.mu.Lock()
	pg.blocking, pg.blockCancel = false, nil
	if pg.bgLong.Load() && pg.bgLong.CompareAndSwap(true, false) {
		select {
		case pg.bgKick <- struct{}{}: // background looks often again (background)
		default:
		}
	}
	c.takeLost() // a device's Wait returns when it finds a peer lost
	pg.wakeLocked()
	c.mu.Unlock()
}

// wakeLocked wakes every goroutine sleeping in block.
func (pg *progressor) wakeLocked() {
	c := pg.c
	pg.gen++
	if pg.blockCancel != nil {
		pg.blockCancel()
	}
	if pg.sleepers > 0 || c.closed {
		close(pg.wake)
		pg.wake = make(chan struct{})
	}
}

// background keeps an unreliable context's timers running while no
// goroutine is inside lapi: retransmissions and acknowledgements must go
// even when the application is computing.
//
// While a goroutine makes progress passes or blocks in the device, that
// goroutine runs the timers, and background's own wake-ups only cost: on
// a node whose every core runs a polling rank, each one takes a core from
// a rank, and its peer waits that long too. So it looks every bgFast at
// first, and each time it finds another goroutine at work it waits twice
// as long, up to bgSlow, or bgBlocked while one blocks in the device
// (whose return kicks it, once per sleep longer than bgSlow); finding
// none, it makes the pass itself and looks every bgFast again.
func (pg *progressor) background() {
	c := pg.c
	defer close(pg.bgDone)
	fast := max(c.cfg.MinRTO, bgFast)
	period := fast
	t := time.NewTimer(period)
	defer t.Stop()
	// pg.passes and pg.gen at the last look (a pass that finds what
	// its waiter waits for returns before counting itself a pass).
	var passes uint32
	var gen uint64
	for {
		select {
		case <-pg.stopBg:
			return
		case <-pg.bgKick:
			// A blocked goroutine came back: it may go on to compute.
			period = fast
			t.Reset(period) // (since Go 1.23 no stale expiry can follow)
			continue
		case <-t.C:
		}
		pg.bgLooks.Add(1)
		if c.mu.TryLock() {
			limit := bgSlow
			if pg.blocking {
				limit = bgBlocked
			}
			busy := pg.blocking || pg.passes != passes || pg.gen != gen
			if !busy && !c.closed {
				pg.bgPasses++
				pg.progressLocked()
			}
			passes, gen = pg.passes, pg.gen
			period = pg.bgPeriod(period, fast, limit, busy)
			c.mu.Unlock()
			c.am.runCompletions()
		} else {
			// Someone holds the lock: making progress already.
			period = pg.bgPeriod(period, fast, bgSlow, true)
		}
		t.Reset(period)
	}
}

// bgPeriod is background's next period after one of period: doubled up
// to limit while another goroutine is busy, else fast. A period past
// bgSlow is recorded in bgLong, so that block's return kicks background
// (background stores it under c.mu when it saw a goroutine blocking, and
// block reads it under c.mu: the kick is not missed).
func (pg *progressor) bgPeriod(period, fast, limit time.Duration, busy bool) time.Duration {
	if busy {
		period = min(2*period, max(limit, fast))
	} else {
		period = fast
	}
	pg.bgLong.Store(period > bgSlow)
	return period
}

// bgFast, bgSlow and bgBlocked bound how often background looks (the
// first is raised to Config.MinRTO): every bgFast while no other goroutine
// makes progress, so that a retransmission is at most that late; up to
// every bgSlow while one makes passes, which is then how late background
// notices it stopped; up to every bgBlocked while one blocks in the
// device, whose return kicks background at once.
const (
	bgFast    = 500 * time.Microsecond
	bgSlow    = 8 * time.Millisecond
	bgBlocked = time.Second
)
