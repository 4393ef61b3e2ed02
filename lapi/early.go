package lapi

import (
	"encoding/binary"
	"slices"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// A packet may name a handler (or a FIFO) its destination has not
// registered yet. Every rank registers the same handlers in the same
// order, but not at the same moment: a peer that has finished starting
// sends as soon as reintegration lets it, and this rank's background
// progress may complete reintegration before its caller has registered
// anything. Over an unreliable device such a packet has been numbered
// and acknowledged by the time its handler is looked up, so dropping it
// lost the message for good (an MPI job hung in its first Barrier this
// way, under load). The dispatcher keeps it, copied, and
// RegisterHandler delivers it, in arrival order and before any later
// packet (an RTS, a large message's header, waits for the handler it
// names); a half-RDMA write's packet for a FIFO not registered yet
// (whose origin hears it complete) is kept the same way until
// RegisterFIFO. Past earlyMax packets or earlyMaxBytes bytes (a peer
// naming handlers that are never registered), further ones are dropped:
// over an unreliable device before they are acknowledged (the sender
// tries again), over a reliable one counted bad.
const (
	earlyMax      = 1024
	earlyMaxBytes = 4 << 20
)

// earlyPkt is a packet kept for a handler not yet registered.
type earlyPkt struct {
	src        hal.Rank
	ph         pktHdr
	uhdr, data []byte // one copy of both
}

// keepEarly keeps a packet of src for the unregistered handler ph names
// (c.mu held), or counts it bad when the bound is reached.
func (ad *dispatcher) keepEarly(src hal.Rank, ph *pktHdr, uhdr, data []byte) {
	c := ad.c
	n := len(uhdr) + len(data)
	if earlyFull(len(ad.early), ad.earlyBytes, n) {
		c.stats.BadPackets++
		if trace.On(trace.Hot) {
			trace.Printf(trace.Hot, "lapi %d: drop packet from rank %d for handler %d: never registered here (%d packets kept for unregistered handlers already)",
				c.rank, src, ph.handler, len(ad.early))
		}
		return
	}
	buf := make([]byte, n)
	copy(buf, uhdr)
	copy(buf[len(uhdr):], data)
	ad.early = append(ad.early, earlyPkt{src: src, ph: *ph, uhdr: buf[:len(uhdr):len(uhdr)], data: buf[len(uhdr):]})
	ad.earlyBytes += n
	c.stats.EarlyPackets++
	if trace.On(trace.Hot) {
		trace.Printf(trace.Hot, "lapi %d: packet from rank %d for handler %d kept until it is registered", c.rank, src, ph.handler)
	}
}

// deliverEarly delivers, in arrival order, the kept packets whose
// handlers are registered now (c.mu held), and reports whether it
// delivered any.
func (ad *dispatcher) deliverEarly() bool {
	if len(ad.early) == 0 {
		return false
	}
	delivered := false
	ad.early = slices.DeleteFunc(ad.early, func(p earlyPkt) bool {
		if ad.earlyFor(&p.ph, p.uhdr) {
			return false
		}
		ad.earlyBytes -= len(p.uhdr) + len(p.data)
		ad.deliver(p.src, &p.ph, p.uhdr, p.data)
		delivered = true
		return true
	})
	return delivered
}

// registered reports whether handler id is registered (perhaps as nil,
// which deliver counts bad).
func (ad *dispatcher) registered(id uint16) bool { return int(id) < len(ad.handlers) }

// earlyFor reports whether the packet ph, with user header uhdr, is for a
// handler not registered yet: its own, or for an RTS (a large message's
// header, taken by lapi's own handler) the user's handler it names.
func (ad *dispatcher) earlyFor(ph *pktHdr, uhdr []byte) bool {
	if ph.handler == uint16(hRTS) && len(uhdr) >= 2 {
		return !ad.registered(binary.LittleEndian.Uint16(uhdr))
	}
	return !ad.registered(ph.handler)
}

// earlyFull reports whether a packet of n bytes would not be kept beside
// count packets of bytes bytes kept already. Over an unreliable device
// onFrame then drops it before the reliability layer numbers and
// acknowledges it: its sender sends it again until the handler is
// registered, and nothing is lost.
func earlyFull(count, bytes, n int) bool {
	return count >= earlyMax || bytes+n > earlyMaxBytes
}

// dropEarly forgets the kept packets from peer (c.mu held): it failed,
// and a later life of it numbers its messages afresh.
func (ad *dispatcher) dropEarly(peer hal.Rank) {
	ad.early = slices.DeleteFunc(ad.early, func(p earlyPkt) bool {
		if p.src == peer {
			ad.earlyBytes -= len(p.uhdr) + len(p.data)
		}
		return p.src == peer
	})
	r := &ad.c.rd
	r.early = slices.DeleteFunc(r.early, func(p earlyFIFO) bool {
		if p.src == peer {
			r.earlyBytes -= len(p.data)
		}
		return p.src == peer
	})
}

// earlyFIFO is a half-RDMA write's packet kept for a FIFO not registered
// yet: fifoPacket's arguments, data copied.
type earlyFIFO struct {
	src       hal.Rank
	arg       uint32
	off       uint64
	dst, data []byte
	place     hal.PVO
}

// keepEarlyFIFO keeps a packet for an unregistered FIFO (c.mu held), or
// counts it bad when the bound is reached.
func (r *rdmaState) keepEarlyFIFO(src hal.Rank, arg uint32, off uint64, dst []byte, place hal.PVO, data []byte) {
	c := r.c
	if earlyFull(len(r.early), r.earlyBytes, len(data)) {
		c.stats.BadPackets++
		return
	}
	r.early = append(r.early, earlyFIFO{src: src, arg: arg, off: off, dst: dst, place: place, data: append([]byte(nil), data...)})
	r.earlyBytes += len(data)
	c.stats.EarlyPackets++
}

// deliverEarlyFIFO hands the kept packets whose FIFOs are registered now
// to them, in arrival order (c.mu held).
func (r *rdmaState) deliverEarlyFIFO() {
	if len(r.early) == 0 {
		return
	}
	r.early = slices.DeleteFunc(r.early, func(p earlyFIFO) bool {
		if id := p.arg & (1<<fifoChunkShift - 1); int(id) >= len(r.fifos) {
			return false
		}
		r.earlyBytes -= len(p.data)
		r.fifoPacket(p.src, p.arg, p.off, p.dst, p.place, p.data)
		return true
	})
}
