package route

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// Polling a network member costs a system call (UDP's recvmmsg, about a
// microsecond) where shared memory's costs a few loads: polled side by
// side on every pass, the network member would make a same-node message
// wait for it. So every member but the first has a watcher, a goroutine
// that blocks in the member's Wait on the route's behalf. Poll polls such
// a member on every pass while it delivers; when it has found nothing for
// parkSilence it parks it, polls it only now and then and arms its
// watcher, and polls it on every pass again once it delivers. Wait
// waits on the first member itself and has the watchers watch the others.
// A member's Wait is only ever called by its watcher, so never twice at
// once (the UDP device's Wait is not reentrant).
//
// A stream across nodes never parks its member: a round trip on the
// network is tens of microseconds, not parkSilence. A parked member is
// also polled every parkedLook-th pass: the watcher's wake is a thread's
// wake-up, which waits for a processor when the node runs more threads
// than it has cores.
//
// Until it parks, a member that has found nothing sparseAfter times in a
// row is polled every sparseEvery-th pass only: after traffic across
// nodes (a collective's, a barrier's) a same-node exchange would
// otherwise pay a system call per pass until parkSilence, which is all of
// a short exchange. A frame from another node waits a few passes more,
// against a network latency of microseconds.
const (
	parkSilence = 200 * time.Microsecond
	parkedLook  = 8192
	sparseAfter = 16
	sparseEvery = 8
)

// watch is a member's watcher state.
type watch struct {
	dev    hal.Device
	idle   int         // empty polls in a row (Poll's)
	since  time.Time   // when the 64th of them came (Poll's)
	parked bool        // Poll leaves the member to the watcher (Poll's)
	ready  atomic.Bool // the watcher saw the member ready to deliver
	armed  atomic.Bool // the watcher waits on the member, or is about to
	arm    chan struct{}
}

// startWatchers starts a watcher for every member but the first.
func (d *Device) startWatchers() {
	d.watches = make([]*watch, len(d.members))
	d.stopCtx, d.stop = context.WithCancel(context.Background())
	for m := 1; m < len(d.members); m++ {
		w := &watch{dev: d.members[m], arm: make(chan struct{}, 1)}
		d.watches[m] = w
		go d.watcher(w)
	}
}

// armWatcher has w's watcher wait on its member, unless it does already.
func (w *watch) armWatcher() {
	if !w.armed.Load() && w.armed.CompareAndSwap(false, true) {
		w.arm <- struct{}{}
	}
}

// watcher waits on w's member each time it is armed, until Close.
func (d *Device) watcher(w *watch) {
	for {
		select {
		case <-w.arm:
		case <-d.stopCtx.Done():
			return
		}
		err := w.dev.Wait(d.stopCtx)
		if d.closed.Load() {
			return
		}
		// Also on an error: Poll then polls the member and meets it.
		_ = err
		w.ready.Store(true)
		d.anyReady.Store(true)
		w.armed.Store(false)
		d.ring()
	}
}

// ring wakes a Wait in progress: a watched member may deliver.
func (d *Device) ring() {
	d.waitMu.Lock()
	if d.cancelWait != nil {
		d.cancelWait()
	}
	d.waitMu.Unlock()
}

// pollWatched polls the watched members, those after the first: each one
// on every pass while it is not parked; once parked, when its watcher has
// seen it ready, and every parkedLook-th pass in case the watcher's thread
// waits for a processor (Poll counts the passes in skips, and calls it
// only when some member may be polled: quiet says when none is).
func (d *Device) pollWatched() (int, error) {
	d.anyReady.Store(false) // before the members' flags: a ring after this is seen now or next pass
	total := 0
	var first error
	for m := 1; m < len(d.watches); m++ {
		w := d.watches[m]
		if w.parked && !w.ready.Load() && d.skips%parkedLook != 0 ||
			!w.parked && w.idle >= sparseAfter && d.skips%sparseEvery != 0 {
			continue
		}
		if w.ready.Load() {
			w.ready.Store(false)
		}
		d.member = m
		n, err := w.dev.Poll(d.onFrame)
		total += n
		if err != nil && first == nil {
			first = err
		}
		switch {
		case n > 0 || err != nil:
			if w.parked {
				w.parked = false
				d.nParked--
			}
			w.idle = 0
		case w.parked:
			w.armWatcher()
		default:
			// Silent: every 64 empty polls, see for how long (a
			// clock read costs as much as a shared-memory poll).
			if w.idle++; w.idle%64 == 0 {
				now := time.Now()
				if w.idle == 64 {
					w.since = now
				} else if now.Sub(w.since) >= parkSilence {
					w.parked = true
					d.nParked++
					w.armWatcher()
				}
			}
		}
	}
	return total, first
}

// waitWatched is Wait: on the first member in the calling goroutine, on
// the others through their watchers, whose ring cancels the first's wait.
func (d *Device) waitWatched(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d.waitMu.Lock()
	d.cancelWait = cancel
	d.waitMu.Unlock()
	defer func() {
		d.waitMu.Lock()
		d.cancelWait = nil
		d.waitMu.Unlock()
	}()
	for _, w := range d.watches[1:] {
		if w.ready.Load() {
			return nil // (after registering: a ring from now on cancels wctx)
		}
		w.armWatcher()
	}
	err := d.members[0].Wait(wctx)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return nil // a watcher rang
	}
	return err
}

// quiet reports whether no watched member is to be polled this pass
// (skips counted it): all are parked, no watcher rang, and it is not a
// parkedLook-th pass. It is in the spin of every waiter on the node's
// member, and costs one load and a compare.
func (d *Device) quiet() bool {
	return d.nParked == len(d.watches)-1 && d.skips%parkedLook != 0 && !d.anyReady.Load()
}
