package udp

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
	"golang.org/x/sys/unix"
)

// Send queues one frame for the next Flush. The frame is hdr (the frame
// header, possibly followed by the upper layer's own) then payload, sealed
// by the caller as hal requires for an unreliable device: the device copies
// nothing and changes nothing, it points the batch at hdr and payload, which
// must stay untouched until Flush returns. An unsealed frame is sent as it
// is, and the receiver drops it (hal.DropCRC).
//
// A full batch returns an error wrapping hal.ErrNoResource: Flush, then
// retry. An unconnected destination wraps hal.ErrUnknownPeer, a frame body
// (everything after the first hal.HeaderLen bytes) above Caps().MTU
// hal.ErrTooLarge, and a header that is short or whose length field
// disagrees with the body hal.ErrBadFrame.
func (d *Device) Send(hdr, payload []byte) error {
	// Send only queues: it uses no descriptor, so a Close beside it needs
	// no guard (release leaves the queue alone), and a frame costs no
	// pair of atomic adds.
	if d.life.Closed() {
		return errClosed
	}
	if len(hdr) < hal.HeaderLen {
		return errShortHeader
	}
	body := len(hdr) - hal.HeaderLen + len(payload)
	if body > d.caps.MTU {
		return fmt.Errorf("udp: send: %d-byte frame body, MTU %d: %w", body, d.caps.MTU, hal.ErrTooLarge)
	}
	if int(binary.LittleEndian.Uint16(hdr[10:])) != body {
		return errLengthMismatch
	}
	dst := hal.Rank(binary.LittleEndian.Uint32(hdr[28:]))
	if int(dst) >= len(d.peers) || d.peers[dst] == nil {
		return fmt.Errorf("udp: send to rank %d: %w", dst, hal.ErrUnknownPeer)
	}
	if d.tx.tail == len(d.tx.msgs) {
		d.counters.NoResource.Add(1)
		return errBatchFull
	}
	d.tx.push(d.peers[dst], hdr, payload)
	return nil
}

// Flush sends every queued frame: one sendmmsg for the whole batch (or one
// sendmsg per frame with Options.Unbatched; with Options.GSO, runs of
// equal-size frames to one peer go as single UDP_SEGMENT messages). When the
// socket's send buffer is full it returns an error wrapping
// hal.ErrNoResource and keeps the unsent frames queued. A frame the kernel
// refuses outright (say, no route to its destination) is dropped, counted in
// Stats().SendErrors, and its error returned after the rest of the batch has
// gone; the device is unreliable, so the layer above recovers the frame like
// any other loss.
func (d *Device) Flush() error {
	if !d.life.Enter() {
		return errClosed
	}
	defer d.life.Leave()
	q := &d.tx
	var hard error
	for q.head < q.tail {
		n, first, errno := d.sendSome()
		if n > 0 {
			d.sent(q.head, q.head+n)
			q.release(q.head, q.head+n)
			q.head += n
			continue
		}
		switch errno {
		case unix.EINTR:
			continue
		case unix.EAGAIN, unix.ENOBUFS:
			d.counters.NoResource.Add(1)
			return errSocketFull
		case unix.EINVAL, unix.EIO, unix.EMSGSIZE, unix.EOPNOTSUPP, unix.ENOPROTOOPT:
			if first > 1 {
				// The kernel or the route cannot segment (no UDP_SEGMENT,
				// no checksum offload on the way): send frames one by one
				// from now on rather than lose them.
				d.gso = false
				d.stats.gsoFallbacks.Add(1)
				continue
			}
		}
		// The message at the head itself failed: skip its frames, or they
		// would block the queue.
		d.stats.sendErrors.Add(uint64(first))
		if hard == nil {
			hard = d.sendError(q.head, errno)
		}
		q.release(q.head, q.head+first)
		q.head += first
	}
	q.release(q.head, q.tail) // resets an empty queue
	return hard
}

// sendSome makes one system call for the frames at the head of the queue.
// It returns how many frames went, and how many the first message carried
// (what a failure concerns).
func (d *Device) sendSome() (sent, first int, errno unix.Errno) {
	q := &d.tx
	msgs, runs := q.msgs[q.head:q.tail], []int(nil)
	if d.gso {
		k := q.coalesce()
		msgs, runs = q.wire[:k], q.runs[:k]
	}
	first = 1
	if runs != nil {
		first = runs[0]
	}
	d.stats.sendCalls.Add(1)
	n := 1
	if d.opts.Unbatched {
		_, errno = sendmsg(d.sock.fd, &msgs[0].Hdr)
	} else {
		n, errno = mmsg(unix.SYS_SENDMMSG, d.sock.fd, msgs)
	}
	if errno != 0 {
		return 0, first, errno
	}
	if runs == nil {
		return n, first, 0
	}
	for _, r := range runs[:n] {
		sent += r
	}
	return sent, first, 0
}

// sent counts queued frames from..to as handed to the kernel.
func (d *Device) sent(from, to int) {
	var bytes int
	for i := from; i < to; i++ {
		bytes += d.tx.frameLen(i)
	}
	d.counters.FramesSent.Add(uint64(to - from))
	d.counters.BytesSent.Add(uint64(bytes))
}

// sendError describes the kernel's refusal of queued frame i.
func (d *Device) sendError(i int, errno unix.Errno) error {
	h := (*[hal.HeaderLen]byte)(unsafe.Pointer(d.tx.iovs[2*i].Base))
	return fmt.Errorf("udp: send %d-byte frame to rank %d: %w",
		d.tx.frameLen(i), binary.LittleEndian.Uint32(h[28:]), errno)
}
