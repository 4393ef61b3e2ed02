package lapi

import (
	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// dispatcher is a context's active messages: the handlers, the sending of
// messages and their packets, the reassembly and dispatch of those that
// arrive, the counters, and the completions that run outside the lock.
type dispatcher struct {
	c        *Context
	nextMsg  []uint32           // per peer: the next message's number
	reasm    map[reasmKey]inMsg // by value: a multi-packet message allocates no record
	handlers []handlerEntry
	counters []*Counter
	freeMsg  *outMsg
	awaiting []map[*Counter]int // per peer: completions it still owes us
	direct   [pktBufLen]byte    // sendDirect's frame header
	done     []completion       // completions waiting to run outside the lock
	spare    []completion       // runCompletions' other queue, nil while it runs one
	// onFrameFn is onFrame, made once so that polling allocates nothing.
	onFrameFn func(*hal.Header, []byte)
	// early holds packets for handlers not registered yet (early.go),
	// earlyBytes what they carry.
	early      []earlyPkt
	earlyBytes int
}

// reasmKey names a message being reassembled.
type reasmKey struct {
	src   hal.Rank
	msgID uint32
}

// inMsg is a multi-packet message whose packets are still arriving.
type inMsg struct {
	buf    []byte
	cookie any
	left   int       // data bytes not yet arrived
	h      AMHandler // whose OnHeader gave buf and cookie (for OnAbort)
}

// completion is a message whose data has all been placed; its handler's
// OnComplete and counters run outside the progress lock.
type completion struct {
	notify Completer // set for a Completer call instead of a handler
	err    error
	h      AMHandler
	src    hal.Rank
	cookie any
	tcntr  uint32
	ccntr  uint32
}

// onFrame is the device's Poll callback: one arriving frame.
func (ad *dispatcher) onFrame(h *hal.Header, payload []byte) {
	c := ad.c
	if trace.On(trace.HotDetail) {
		c.tr.traceRecv(h, payload)
	}
	if h.Life != 0 && c.ri.staleLife(h.Src, h.Life) && !isReintFrame(h.Type) {
		// From an earlier life of its sender, delayed: since the new
		// life joined, this rank's sequence numbers, transfers and
		// reply slots toward it start afresh, and the old packet would
		// pass for a new one (a fetch-and-add or an accumulate applied
		// twice).
		c.stats.Stale++
		if trace.On(trace.Hot) {
			trace.Printf(trace.Hot, "lapi %d: drop %v frame from an earlier life of rank %d", c.rank, h.Type, h.Src)
		}
		return
	}
	if h.Type == hal.FrameData && len(payload) >= tinyHdrLen && payload[0] == kindAMTiny && c.reliableTo(h.Src) {
		ad.onTiny(h, payload)
		return
	}
	if ad.route(h, payload) {
		return
	}
	if h.Type != hal.FrameData || int(h.Src) >= c.cfg.Size || h.Dst != c.rank {
		c.stats.BadPackets++
		if trace.On(trace.Hot) {
			trace.Printf(trace.Hot, "lapi %d: drop %v frame from rank %d to rank %d: not for lapi here", c.rank, h.Type, h.Src, h.Dst)
		}
		return
	}
	var ph pktHdr
	uhdr, data, err := decodePkt(payload, &ph)
	if err != nil {
		c.stats.BadPackets++
		if trace.On(trace.Hot) {
			trace.Printf(trace.Hot, "lapi %d: drop packet from rank %d: %v", c.rank, h.Src, err)
		}
		return
	}
	if !ad.admit(h.Src, ph.dstEp) {
		return
	}
	if !c.reliableTo(h.Src) {
		if ph.dstEp == 0 && c.ri.reint != nil {
			// Sent before its sender heard any life of this rank: it
			// may have been meant for an earlier one, and taking it
			// would advance a link the sender resets when it hears
			// this life's BOOTING, so that its next packet passed for
			// a duplicate. Unacknowledged, it is sent again with this
			// life's epoch, or failed at the reset (ErrPeerRestarted).
			c.stats.Stale++
			return
		}
		if ph.kind == kindAM && ph.flags&flagSeq != 0 && ad.earlyFor(&ph, uhdr) && earlyFull(len(ad.early), ad.earlyBytes, len(uhdr)+len(data)) {
			return // unacknowledged: sent again until there is room (early.go)
		}
		if !c.rel.onPacket(h.Src, &ph) {
			return
		}
	} else if ph.kind != kindAM {
		c.stats.BadPackets++
		if trace.On(trace.Hot) {
			c.tr.traceDrop(h.Src, "not an active message over a reliable device", ph.seq)
		}
		return
	}
	ad.deliver(h.Src, &ph, uhdr, data)
}

// route hands a frame that is not an active message's packet to the
// component it is for (reintegration, TPT replicas, RDMA, multicast), and
// reports whether it did.
func (ad *dispatcher) route(h *hal.Header, payload []byte) bool {
	c := ad.c
	if int(h.Src) >= c.cfg.Size {
		return false
	}
	switch {
	case c.ri.reint != nil && isReintFrame(h.Type):
		if trace.On(trace.Internal) {
			c.tr.traceReintRecv(h.Src, h.Type, payload)
		}
		c.ri.handle(h.Src, h.Type, payload)
	case h.Type == hal.FrameTPTUpdate && h.Dst == c.rank:
		c.cm.onTPTUpdate(h.Src, payload)
	case hal.IsRDMAFrame(h.Type) && h.Dst == c.rank:
		c.rd.onRDMA(h, payload)
	case h.Type == hal.FrameMcast && h.Dst == hal.BroadcastRank:
		c.coll.onMcast(h.Src, payload)
	default:
		return false
	}
	return true
}

// onTiny takes a tiny packet, a small message's on a reliable device: the
// checks of onFrame, decodePkt and deliver for this layout alone, in
// their order and with their counts, and the handler called on the
// packet's own fields. Decoding into a packet header first took a sixth
// of the time from a ping-pong's arrival to its reply.
func (ad *dispatcher) onTiny(h *hal.Header, b []byte) {
	c := ad.c
	handler, dstEp, uhdr, data, ok := decodeTiny(b)
	if !ok || int(h.Src) >= c.cfg.Size || h.Dst != c.rank {
		c.stats.BadPackets++
		return
	}
	if !ad.admit(h.Src, dstEp) {
		return
	}
	ph := pktHdr{kind: kindAM, handler: handler, total: uint32(len(data))}
	ad.deliver(h.Src, &ph, uhdr, data) // a tiny packet has no counters
}

// admit counts a decoded packet from src naming the destination epoch
// dstEp as received, and reports whether it is to be delivered: not for
// an earlier life of this rank, nor from a failed peer (c.mu held).
func (ad *dispatcher) admit(src hal.Rank, dstEp uint32) bool {
	c := ad.c
	c.stats.PacketsRecv++
	if int(src) < len(c.peerStats) {
		c.peerStats[src].PacketsRecv++
	}
	if c.ri.staleEpoch(dstEp) {
		c.stats.Stale++ // for an earlier life of this rank: its sender will learn
		if trace.On(trace.Hot) {
			c.tr.traceStale(src, dstEp)
		}
		return false
	}
	if c.peerFault(src) != nil {
		if trace.On(trace.Hot) {
			trace.Printf(trace.Hot, "lapi %d: drop packet from rank %d: it was declared failed", c.rank, src)
		}
		return false // a failed peer's late packets are ignored
	}
	return true
}

// deliver places one packet of an active message; one for a handler not
// registered yet is kept until it is (early.go).
func (ad *dispatcher) deliver(src hal.Rank, ph *pktHdr, uhdr, data []byte) {
	if ad.earlyFor(ph, uhdr) {
		ad.keepEarly(src, ph, uhdr, data)
		return
	}
	e := &ad.handlers[ph.handler]
	if e.h == nil {
		ad.c.stats.BadPackets++ // registered as nil
		return
	}
	hd := e.h
	if ph.offset == 0 && len(data) == int(ph.total) {
		ad.deliverWhole(e, src, uhdr, data, ph.tcntr, ph.ccntr)
		return
	}
	key := reasmKey{src, ph.msgID}
	m, ok := ad.reasm[key]
	if !ok {
		buf, cookie := hd.OnHeader(src, uhdr, int(ph.total))
		m = inMsg{buf: buf, cookie: cookie, left: int(ph.total), h: hd}
	}
	if int(ph.offset) < len(m.buf) {
		copy(m.buf[ph.offset:], data)
	}
	m.left -= len(data)
	if m.left > 0 {
		ad.reasm[key] = m
		return
	}
	delete(ad.reasm, key)
	ad.complete(hd, src, m.cookie, ph.tcntr, ph.ccntr)
}

// deliverWhole places a message that came in one packet, with its
// target and completion counters.
func (ad *dispatcher) deliverWhole(e *handlerEntry, src hal.Rank, uhdr, data []byte, tcntr, ccntr uint32) {
	c := ad.c
	if wh := e.whole; wh != nil && tcntr == 0 && ccntr == 0 && wh.OnWhole(src, uhdr, data) {
		c.stats.MessagesIn++
		c.peerStats[src].MessagesIn++
		return
	}
	buf, cookie := e.h.OnHeader(src, uhdr, len(data))
	copy(buf, data)
	ad.complete(e.h, src, cookie, tcntr, ccntr)
}
