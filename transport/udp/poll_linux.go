package udp

import (
	"fmt"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
	"golang.org/x/sys/unix"
)

// pollRounds bounds the recvmmsg batches one Poll drains, so that a flood
// of arrivals cannot keep the caller from sending (acks, replies).
const pollRounds = 4

// Poll delivers the frames that have arrived, without blocking: first any
// that Wait already took off the sockets while spinning, then up to
// pollRounds batches from the job's multicast group's socket, if the
// device joined one, and as many from its own. Frames that fail
// hal.Check, are addressed to another rank or come from a rank outside
// the job are counted under their drop reason and never delivered; the
// device's own multicast frames, looped back to this host, are discarded
// uncounted. The header and payload passed to fn are valid only during
// fn.
func (d *Device) Poll(fn func(h *hal.Header, payload []byte)) (int, error) {
	if !d.life.Enter() {
		return 0, errClosed
	}
	defer d.life.Leave()
	d.rxMu.Lock()
	defer d.rxMu.Unlock()
	delivered := 0
	if d.mc.fd >= 0 {
		// The group's frames first: a message that follows a stream on
		// the device's own socket (its end) finds the stream placed.
		n, err := d.pollSocket(d.mc.fd, &d.mc.rx, &d.mc.lastDrops, true, fn)
		delivered += n
		if err != nil {
			return delivered, err
		}
	}
	n, err := d.pollSocket(d.sock.fd, &d.rx, &d.lastDrops, false, fn)
	return delivered + n, err
}

// pollSocket is Poll on one socket and its ring.
func (d *Device) pollSocket(fd int, r *rxRing, last *uint32, group bool, fn func(h *hal.Header, payload []byte)) (int, error) {
	delivered := 0
	if r.next < r.n {
		delivered = d.deliver(r, last, group, fn)
		if r.n < len(r.msgs) {
			// That batch emptied the socket a moment ago: skip a system
			// call that would most likely find nothing.
			return delivered, nil
		}
	}
	for range pollRounds {
		n, err := d.recv(fd, r)
		if err != nil {
			return delivered, err
		}
		if n == 0 {
			break
		}
		delivered += d.deliver(r, last, group, fn)
		if n < len(r.msgs) {
			break
		}
	}
	return delivered, nil
}

// recv refills ring r from socket fd with one recvmmsg. It must be called
// only when every frame in the ring has been delivered. It returns 0, nil
// when the socket is empty.
func (d *Device) recv(fd int, r *rxRing) (int, error) {
	r.rearm()
	for {
		d.stats.recvCalls.Add(1)
		n, errno := mmsg(unix.SYS_RECVMMSG, fd, r.msgs)
		switch errno {
		case 0:
			r.n = n
			return n, nil
		case unix.EAGAIN:
			return 0, nil
		case unix.EINTR:
			continue
		}
		return 0, fmt.Errorf("udp: recvmmsg: %w", errno)
	}
}

// deliver validates and hands over the frames in ring r not yet
// delivered, and returns how many it delivered; last is the ring's
// socket's drop counter as folded in, group whether it is the multicast
// group's. It advances the ring before each callback so that a callback
// that panics does not see its frame again.
func (d *Device) deliver(r *rxRing, last *uint32, group bool, fn func(h *hal.Header, payload []byte)) int {
	var frames, bytes uint64
	for r.next < r.n {
		i := r.next
		r.next++
		drops, hasDrops, gro := r.control(i)
		if hasDrops {
			d.noteDrops(last, drops)
		}
		data := r.frame(i)
		if r.msgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
			// Larger than any frame this device accepts: a peer with
			// another MTU. Check cannot see it (the length was cut).
			d.counters.Drop(hal.DropLength)
			continue
		}
		if gro <= 0 {
			gro = len(data)
		}
		// A UDP_GRO buffer holds datagrams of gro bytes, the last one
		// possibly shorter; otherwise data is one datagram (maybe empty,
		// which is judged once too).
		for {
			frame := data[:min(gro, len(data))]
			data = data[len(frame):]
			if d.accept(frame, group) {
				frames++
				bytes += uint64(len(frame))
				fn(&d.rxHdr, frame[hal.HeaderLen:])
			}
			if len(data) == 0 {
				break
			}
		}
	}
	d.counters.FramesRecv.Add(frames)
	d.counters.BytesRecv.Add(bytes)
	return int(frames)
}

// accept decodes frame into d.rxHdr and reports whether it may be
// delivered; if not, it counts the drop under its reason, except for this
// device's own multicast frame come back on the group's socket.
func (d *Device) accept(frame []byte, group bool) bool {
	if _, err := hal.Check(frame, d.cfg.JobKey, true, &d.rxHdr); err != nil {
		d.counters.DropErr(err)
		if trace.On(trace.Hot) {
			d.traceDrop(frame, err)
		}
		return false
	}
	if group && d.rxHdr.Src == d.cfg.Rank && d.rxHdr.Dst == hal.BroadcastRank {
		return false // its own, looped back to this host's ranks
	}
	if !hal.ForRank(&d.rxHdr, d.cfg.Rank) || (d.cfg.Size > 0 && int(d.rxHdr.Src) >= d.cfg.Size) {
		d.counters.Drop(hal.DropPeer)
		if trace.On(trace.Hot) {
			d.traceDrop(frame, fmt.Errorf("from rank %d to rank %d: not for this device", d.rxHdr.Src, d.rxHdr.Dst))
		}
		return false
	}
	return true
}

// traceDrop reports a received frame discarded (level 4, trace.Hot). It
// decodes the header again rather than read d.rxHdr, which a header that
// failed to decode leaves partly or wholly as the previous frame's: the
// type and source are named only if the header decodes, and may then be
// what a corruption made them.
func (d *Device) traceDrop(frame []byte, why error) {
	var h hal.Header
	if hal.DecodeHeader(frame, &h) != nil {
		trace.Printf(trace.Hot, "udp %d: drop frame of %d bytes (header unreadable): %v", d.cfg.Rank, len(frame), why)
		return
	}
	trace.Printf(trace.Hot, "udp %d: drop %v frame of %d bytes (header says from rank %d): %v",
		d.cfg.Rank, h.Type, len(frame), h.Src, why)
}
