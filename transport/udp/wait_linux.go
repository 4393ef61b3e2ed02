package udp

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// maxBlock bounds one ppoll. Wake-ups come from the eventfd (Close, context
// cancellation), so this is only a safety net, rare enough to cost nothing.
const maxBlock = time.Second

// Wait returns when Poll has frames to deliver (nil; it may also return nil
// early), when ctx is done (ctx.Err()), or when the device is closed
// (hal.ErrClosed), including by a Close from another goroutine.
//
// It first busy-polls the socket for Options.Spin, receiving into the ring
// so that the following Poll delivers without another system call; a
// blocked thread costs tens of microseconds to wake on this kind of host,
// which a ping-pong would pay every message. Then it blocks in ppoll on the
// socket and an eventfd, so an idle rank uses no CPU. The spinning goroutine
// does not lock its OS thread (it measured no faster, and with more ranks
// than cores the Go scheduler must stay free to run others).
func (d *Device) Wait(ctx context.Context) error {
	if !d.life.Enter() {
		return errClosed
	}
	defer d.life.Leave()
	if !d.rxMu.TryLock() {
		return nil // another goroutine is polling: it delivers what came
	}
	pending := d.rx.next < d.rx.n || d.mc.rx.next < d.mc.rx.n
	d.rxMu.Unlock()
	if pending {
		return nil
	}
	done := ctx.Done()
	if d.opts.Spin > 0 {
		if got, err := d.spin(ctx, done); got || err != nil {
			return err
		}
	}
	return d.block(ctx, done)
}

// spinAlone is how long spin polls without yielding: an answer from a
// running peer comes within a few microseconds.
const spinAlone = 20 * time.Microsecond

// spin busy-polls for Options.Spin. It reports true when it received
// frames, or an error for a closed device or done context.
//
// Past spinAlone the peer is probably not running, maybe waiting for this
// very CPU (more ranks than cores, or other jobs), so each round also calls
// sched_yield: spinning on would delay the answer it waits for (a tenth of
// the latency under other load, nothing when quiet: bench/results/history.md).
func (d *Device) spin(ctx context.Context, done <-chan struct{}) (bool, error) {
	start := time.Now()
	deadline, yieldAfter := start.Add(d.opts.Spin), start.Add(spinAlone)
	for {
		if !d.rxMu.TryLock() {
			return true, nil // someone is polling: let it deliver
		}
		n, err := d.recv(d.sock.fd, &d.rx)
		if n == 0 && err == nil && d.mc.fd >= 0 {
			n, err = d.recv(d.mc.fd, &d.mc.rx)
		}
		d.rxMu.Unlock()
		if n > 0 || err != nil {
			return true, err
		}
		if d.life.Closed() {
			return false, errClosed
		}
		select {
		case <-done:
			return false, ctx.Err()
		default:
		}
		now := time.Now()
		if now.After(deadline) {
			return false, nil
		}
		if now.After(yieldAfter) {
			unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
	}
}

// block sleeps in ppoll until the socket is readable or the eventfd is
// written (by Close, or by ctx's cancellation through context.AfterFunc).
func (d *Device) block(ctx context.Context, done <-chan struct{}) error {
	// Drops after the last datagram received are invisible in the control
	// messages; going idle is the cheap moment to read the counter.
	if d.rxMu.TryLock() {
		err := d.syncDrops()
		d.rxMu.Unlock()
		if err != nil {
			return err
		}
	}
	if done != nil {
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
		if hasDeadline {
			timeout = max(0, min(timeout, time.Until(deadline)))
		}
		if d.blockHook != nil {
			d.blockHook()
		}
		d.pollfds[0].Revents, d.pollfds[1].Revents, d.pollfds[2].Revents = 0, 0, 0
		// ppoll takes nanoseconds: a retransmission deadline a few hundred
		// microseconds away must not be rounded up to a millisecond.
		ts := unix.NsecToTimespec(int64(timeout))
		_, err := unix.Ppoll(d.pollfds[:d.nfds], &ts, nil)
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("udp: poll: %w", err)
		}
		if d.pollfds[1].Revents != 0 {
			_, _ = unix.Read(d.efd, d.efdBuf[:]) // reset the eventfd
		}
		if s := d.pollfds[0].Revents; s&unix.POLLERR != 0 {
			// A pending socket error (an ICMP report) would keep ppoll
			// returning at once: read it to clear it.
			_, _ = unix.GetsockoptInt(d.sock.fd, unix.SOL_SOCKET, unix.SO_ERROR)
		} else if s != 0 {
			return nil
		}
		if s := d.pollfds[2].Revents; s&unix.POLLERR != 0 {
			_, _ = unix.GetsockoptInt(d.mc.fd, unix.SOL_SOCKET, unix.SO_ERROR)
		} else if s != 0 {
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
