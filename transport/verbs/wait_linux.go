//go:build verbs && linux && cgo

package verbs

/*
#include <infiniband/verbs.h>
typedef struct { uint32_t slot; uint32_t len; int32_t status; uint32_t pad; } weft_rx;
int weft_poll_rx(struct ibv_cq *cq, weft_rx *out, int n);
int weft_get_event(struct ibv_comp_channel *ch);
int weft_req_notify(struct ibv_cq *cq);
*/
import "C"

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxBlock bounds one ppoll. Wake-ups come from the completion channel and
// the eventfd (Close, context cancellation), so this is only a safety net.
const maxBlock = time.Second

// starvedBlock bounds one ppoll while Send has no free slot.
const starvedBlock = time.Millisecond

// Wait returns when Poll has frames to deliver (nil; it may also return nil
// early), when a peer was found lost (nil: PeersLost moved), when ctx is
// done (ctx.Err()), or when the device is closed (hal.ErrClosed),
// including by a Close from another goroutine.
//
// It first polls the receive CQ for Options.Spin, keeping what it finds
// for the next Poll. Then it arms the CQ's notification
// (ibv_req_notify_cq) and looks at the CQ once more, since a completion
// that came before the arming raises no event. Otherwise it blocks in
// ppoll on the completion channel and an eventfd, which Close and ctx's
// cancellation write, so an idle rank costs no CPU.
func (d *Device) Wait(ctx context.Context) error {
	if !d.life.Enter() {
		return errClosed
	}
	defer d.life.Leave()
	if d.lossUnseen() {
		return nil // a peer was found lost: the caller looks (hal.PeerLoss)
	}
	if d.opts.Spin > 0 {
		if got, err := d.spin(ctx); got || err != nil {
			return err
		}
	}
	if !d.rxMu.TryLock() {
		return nil // another goroutine is polling: it delivers what came
	}
	got, err := d.peek()
	d.rxMu.Unlock()
	if got || err != nil {
		return err
	}
	if d.oneSidedBusy() {
		// Writes or Reads in flight: their completion queue is on the
		// same channel, armed as well.
		if got, err := d.peekRC(); got || err != nil {
			return err
		}
	}
	return d.block(ctx)
}

// spinAlone is how long spin polls without yielding: an answer from a
// running peer comes within a few microseconds.
const spinAlone = 20 * time.Microsecond

// spinCheck is how many polls spin makes between two looks at the clock
// (and, past spinAlone, two sched_yields): where the clock is slow to
// read (a VM's) or a yield is a full system call, doing either at every
// poll delays the poll that finds the answer.
const spinCheck = 16

// spin polls the receive CQ for Options.Spin. It reports true when
// completions wait for Poll (or another goroutine is polling), or an error
// for a closed device or a done context. Past spinAlone it also calls
// sched_yield every spinCheck polls, as transport/udp's spin does: the
// peer may be waiting for this very CPU.
func (d *Device) spin(ctx context.Context) (bool, error) {
	start := time.Now()
	done := ctx.Done()
	for i := 1; ; i++ {
		if !d.rxMu.TryLock() {
			return true, nil
		}
		got, err := d.take()
		d.rxMu.Unlock()
		if got || err != nil {
			return got, err
		}
		if d.life.Closed() {
			return false, errClosed
		}
		select {
		case <-done:
			return false, ctx.Err()
		default:
		}
		if i%spinCheck != 0 {
			continue
		}
		waited := time.Since(start)
		if waited > d.opts.Spin {
			return false, nil
		}
		if waited > spinAlone {
			unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
	}
}

// peek arms the CQ if needed and reports whether completions are waiting
// for Poll (take). Called with rxMu held.
func (d *Device) peek() (bool, error) {
	if d.rx.next < d.rx.n {
		return true, nil
	}
	if !d.armed.Load() {
		if rc := C.weft_req_notify(d.rx.cq); rc != 0 {
			return false, fmt.Errorf("verbs: %s: ibv_req_notify_cq: %v", d.devName, syscall.Errno(rc))
		}
		d.armed.Store(true)
	}
	return d.take()
}

// take reports whether completions are waiting for Poll, taking them from
// the CQ into rx when rx holds none. Called with rxMu held.
func (d *Device) take() (bool, error) {
	rx := &d.rx
	if rx.next < rx.n {
		return true, nil
	}
	if err := d.postRecvFrom(batch); err != nil { // (a batch adds at most batch buffers)
		return false, err
	}
	got := C.weft_poll_rx(d.rx.cq, &rx.cqe[0], C.int(min(batch, d.opts.RecvRing)))
	if got < 0 {
		return false, fmt.Errorf("verbs: %s: ibv_poll_cq (receive): %v", d.devName, syscall.Errno(-got))
	}
	rx.next, rx.n = 0, int(got)
	return got > 0, nil
}

// block sleeps in ppoll until the completion channel has an event or the
// eventfd is written.
func (d *Device) block(ctx context.Context) error {
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, d.wakeFromOutside)
		defer stop()
	}
	deadline, hasDeadline := ctx.Deadline()
	for {
		if d.life.Closed() {
			return errClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		timeout := maxBlock
		if d.starved.Load() {
			// Send found every slot in flight: the send CQ is on the
			// channel but not armed (a completion per frame would wake
			// every Wait), so look again soon.
			timeout = starvedBlock
		}
		if hasDeadline {
			timeout = max(0, min(timeout, time.Until(deadline)))
		}
		fds := d.rx.pollfds // a copy: Waits may run side by side
		ts := unix.NsecToTimespec(int64(timeout))
		_, err := unix.Ppoll(fds[:], &ts, nil)
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("verbs: ppoll: %w", err)
		}
		if fds[1].Revents != 0 {
			var b [8]byte
			_, _ = unix.Read(d.efd, b[:]) // reset the eventfd
			if d.lossUnseen() {
				return nil
			}
		}
		if fds[0].Revents != 0 {
			switch rc := C.weft_get_event(d.ch); {
			case rc > 0:
				d.armed.Store(false)
				d.rc.armed.Store(false) // the event may have been either queue's
				return nil
			case rc < 0:
				return fmt.Errorf("verbs: %s: ibv_get_cq_event: %v", d.devName, syscall.Errno(-rc))
			}
			// Another Wait took the event: Poll may have something.
			return nil
		}
	}
}

// wakeFromOutside wakes a blocked Wait from another goroutine (context
// cancellation). It does nothing once the device is closed: Close wakes
// sleepers itself, and the eventfd may already be gone.
func (d *Device) wakeFromOutside() {
	if d.life.Enter() {
		d.wake()
		d.life.Leave()
	}
}
