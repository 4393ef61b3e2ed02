package shm

import "github.com/weft-hpc/weft/internal/trace"

// The device's life: hal lets Close run at any time, from any goroutine,
// while another is inside Send or Poll, and Poll's callback may close the
// device too. Every call that touches the mapping counts itself in and out
// of one word (two uncontended atomic adds, no lock), and Close only marks
// the word closed: whoever leaves it with nobody inside, Close itself when
// the device is idle, unmaps the segment. A call that finds the mark
// returns hal.ErrClosed without touching the mapping.

// closedBit marks Device.life closed; the bits below it count the calls
// inside the device.
const closedBit = 1 << 62

// isClosed reports whether Close was called.
func (d *Device) isClosed() bool { return d.life.Load()&closedBit != 0 }

// enter counts a call in; it reports false, counted out again, once the
// device is closed: the caller must then not touch the mapping.
func (d *Device) enter() bool {
	if d.life.Add(1)&closedBit != 0 {
		d.leave()
		return false
	}
	return true
}

// leave counts a call out; the last one out of a closed device releases
// it.
func (d *Device) leave() {
	if d.life.Add(^uint64(0)) == closedBit {
		if err := d.finish(); err != nil {
			trace.Printf(trace.Error, "shm: rank %d: close: %v", d.rank, err)
		}
	}
}

// Close wakes a Wait in progress, marks this rank closed (peers' Sends to
// it then fail with hal.ErrUnknownPeer), and unmaps the segment, unlinking
// its name if this was the last rank to have it open. Frames not yet
// polled are lost. A Send, Poll or other call in progress on another
// goroutine (or the Poll whose callback calls Close) finishes first, and
// the unmapping waits until it has returned: the last call out does it,
// and Close then returns nil at once. A second Close returns
// hal.ErrClosed.
func (d *Device) Close() error {
	for {
		v := d.life.Load()
		if v&closedBit != 0 {
			return errClosed
		}
		// In and closed at once: nothing enters after this, and the
		// mapping stays until this call is out.
		if d.life.CompareAndSwap(v, (v+1)|closedBit) {
			break
		}
	}
	wake(d.me)
	if d.life.Add(^uint64(0)) != closedBit {
		return nil // a call is inside: the last one out releases
	}
	return d.finish()
}

// finish releases the device once it is closed and nothing is inside: it
// folds the counters in, waits for a Wait still running (woken by Close),
// and unmaps the segment. It runs once, on whichever goroutine left last
// (leave traces the error it cannot return).
func (d *Device) finish() error {
	if !d.finished.CompareAndSwap(false, true) {
		return nil
	}
	d.countSent()
	d.countIn()
	d.waiters.Lock()
	defer d.waiters.Unlock()
	d.unwatch()
	err := d.seg.detach(d.slot)
	d.trk.Remove(d.trkID)
	trace.Printf(trace.Setup, "shm: rank %d closed (%v)", d.rank, &d.counters)
	return err
}
