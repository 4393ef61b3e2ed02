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
const (
	parkSilence = time.Millisecond
	parkedLook  = 8192
)

// watch is a member's watcher state.
type watch struct {
	dev    hal.Device
	idle   int         // empty polls in a row (Poll's)
	since  time.Time   // when the 64th of them came (Poll's)
	parked bool        // Poll leaves the member to the watcher (Poll's)
	skips  uint32      // passes that did not poll it while parked (Poll's)
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

// pollWatched polls member m, a watched one: every pass while it is not
// parked; once parked, when its watcher has seen it ready, and every
// parkedLook-th pass in case the watcher's thread waits for a processor.
func (d *Device) pollWatched(m int) (int, error) {
	w := d.watches[m]
	if w.parked {
		w.skips++
		if !w.ready.Load() && w.skips%parkedLook != 0 {
			w.armWatcher()
			return 0, nil
		}
	}
	if w.ready.Load() {
		w.ready.Store(false)
	}
	n, err := w.dev.Poll(d.onFrame)
	switch {
	case n > 0 || err != nil:
		w.parked, w.idle = false, 0
	case w.parked:
		w.armWatcher()
	default:
		// Silent: every 64 empty polls, see for how long (a clock
		// read costs as much as a shared-memory poll).
		if w.idle++; w.idle%64 == 0 {
			now := time.Now()
			if w.idle == 64 {
				w.since = now
			} else if now.Sub(w.since) >= parkSilence {
				w.parked = true
				w.armWatcher()
			}
		}
	}
	return n, err
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
