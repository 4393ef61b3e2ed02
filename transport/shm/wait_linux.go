package shm

import (
	"context"
	"sync/atomic"
	"time"
)

// maxSleep bounds one futex sleep. Every wake-up that matters (a frame,
// Close, a cancelled context) bumps the futex word, so this is a safety
// net against a peer that died halfway through a wake-up, and the beat at
// which Wait looks for dead peers (peerloss_linux.go).
const maxSleep = 100 * time.Millisecond

// Wait returns when Poll has frames to deliver (nil; it may also return nil
// early), when ctx is done (ctx.Err()), or when the device is closed
// (hal.ErrClosed), including by a Close from another goroutine. It may run
// while another goroutine calls Send and Poll: it reads only shared words.
//
// It first busy-polls the inbound rings for Options.Spin: a sleeping thread
// costs microseconds to wake, which a ping-pong would pay every message.
// Then it advertises that it sleeps and blocks on the futex word in its
// rank's block, which a sender bumps and wakes only when it sees a
// sleeper. The spinning goroutine does not lock its OS thread, so with more
// ranks than cores the Go scheduler stays free to run others.
func (d *Device) Wait(ctx context.Context) error {
	if d.isClosed() {
		return errClosed
	}
	d.waiters.RLock()
	defer d.waiters.RUnlock()
	if d.finished.Load() || d.isClosed() {
		return errClosed
	}
	if d.pending() {
		return nil
	}
	if d.loss.waiting.Load() && d.loss.waiting.CompareAndSwap(true, false) {
		return nil // a peer found dead (hal.PeerLoss): the caller looks after Wait
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.opts.Spin > 0 {
		if got, err := d.spin(ctx); got || err != nil {
			return err
		}
	}
	return d.sleep(ctx)
}

// pending reports whether any inbound ring has a frame for Poll.
func (d *Device) pending() bool {
	for i := range d.in {
		if d.in[i].ready() {
			return true
		}
	}
	return false
}

// spin busy-polls for Options.Spin. It reports true when a frame is ready,
// or an error for a closed device or done context.
func (d *Device) spin(ctx context.Context) (bool, error) {
	done := ctx.Done()
	deadline := time.Now().Add(d.opts.Spin)
	for i := 1; ; i++ {
		if d.pending() {
			return true, nil
		}
		if i%64 != 0 {
			continue // the clock and the channel cost more than a scan
		}
		if d.isClosed() {
			return false, errClosed
		}
		select {
		case <-done:
			return false, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		if d.lookDue() && d.lookAtPeers() {
			return true, nil
		}
	}
}

// sleep blocks on this rank's futex word until a sender, Close or ctx's
// cancellation bumps it.
func (d *Device) sleep(ctx context.Context) error {
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, d.wakeFromOutside)
		defer stop()
	}
	deadline, hasDeadline := ctx.Deadline()
	me := d.me
	atomic.AddUint32(me.sleepers, 1)
	defer atomic.AddUint32(me.sleepers, ^uint32(0))
	for {
		// Read the word before looking at the rings: a frame published
		// after the look bumps it (the sender sees us as a sleeper), and
		// the futex then refuses to sleep on the old value.
		seq := atomic.LoadUint32(me.wakeSeq)
		if d.pending() {
			return nil
		}
		if d.isClosed() {
			return errClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.lookDue() && d.lookAtPeers() {
			return nil // a peer found dead (hal.PeerLoss)
		}
		timeout := maxSleep
		if hasDeadline {
			timeout = max(0, min(timeout, time.Until(deadline)))
		}
		if d.blockHook != nil {
			d.blockHook()
		}
		futexWait(me.wakeSeq, seq, timeout)
	}
}

// wake bumps a rank's futex word and wakes whoever sleeps on it.
func wake(p *peer) {
	atomic.AddUint32(p.wakeSeq, 1)
	futexWake(p.wakeSeq)
}

// wakeFromOutside wakes this device's Wait when its context is cancelled.
// It runs on another goroutine, possibly while Close runs: TryRLock fails
// once the segment is being unmapped, and Close wakes the sleeper itself.
func (d *Device) wakeFromOutside() {
	if d.waiters.TryRLock() {
		if !d.finished.Load() {
			wake(d.me)
		}
		d.waiters.RUnlock()
	}
}
