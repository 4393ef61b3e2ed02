package lapi

import (
	"errors"
	"fmt"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// sendDone sends a header-only completion or a report of missing
// segments (its bitmap in h.Data), or queues it behind those the device
// had no room for (pushDones sends them). One lost on an unreliable
// device is answered again when the origin probes or redrives.
func (r *rdmaState) sendDone(peer hal.Rank, h hal.RDMAHdr) {
	if len(r.dones) > 0 || !r.trySendDone(peer, h) {
		// Kept, not dropped: over a reliable device nothing redrives
		// the transfer, and its origin would wait for ever. A report's
		// bitmap is the engine's until its next packet: copied.
		if len(h.Data) > 0 {
			h.Data = append([]byte(nil), h.Data...)
		}
		r.dones = append(r.dones, rdmaDone{peer, h})
	}
}

// trySendDone sends a completion to peer's origin, reporting false when
// the device has no room for it yet (c.mu held).
func (r *rdmaState) trySendDone(peer hal.Rank, h hal.RDMAHdr) bool {
	c := r.c
	b := r.hdrSlot()
	if b == nil {
		return false
	}
	h.DstEp = c.ri.dstEpoch(peer)
	if h.Flags&hal.FlagMissing != 0 {
		b = hal.AppendReport(b[:hal.HeaderLen], &h) // the slot holds the longest (initRDMA)
	} else {
		hal.EncodeRDMA(b[hal.HeaderLen:], hal.FrameRDMADone, &h)
		b = b[:hal.HeaderLen+hal.RDMAHdrLen]
	}
	fh := hal.Header{Type: hal.FrameRDMADone, JobKey: c.cfg.JobKey, Src: c.rank, Dst: peer, Len: uint16(len(b) - hal.HeaderLen), Life: c.life}
	hal.EncodeHeader(b, &fh)
	if !c.reliableTo(peer) {
		hal.Seal(b, nil)
	}
	switch err := c.dev.Send(b, nil); {
	case err == nil:
		r.used++
		c.rel.countSent(peer, 0)
		if trace.On(trace.HotDetail) {
			c.tr.traceSendRDMA(b, 0)
		}
	case errors.Is(err, hal.ErrNoResource):
		return false
	case c.reliableTo(peer) || fatalSendErr(err):
		c.rel.failPeer(peer, err.Error())
	default:
		c.stats.SendErrors++ // a loss: the origin's redrive covers it
	}
	return true
}

// pushDones sends the completions the device had no room for, in order
// (c.mu held).
func (r *rdmaState) pushDones() {
	c := r.c
	n := 0
	for ; n < len(r.dones); n++ {
		d := r.dones[n]
		if c.peerFault(d.peer) == nil && !r.trySendDone(d.peer, d.h) {
			if !r.reclaimHdrs() || !r.trySendDone(d.peer, d.h) {
				break // still full: progress retries
			}
		}
	}
	r.dones = r.dones[:copy(r.dones, r.dones[n:])]
}

// onRDMA is onFrame for RDMA frames (c.mu held).
func (r *rdmaState) onRDMA(h *hal.Header, payload []byte) {
	c := r.c
	if c.peerFault(h.Src) != nil {
		return
	}
	var was hal.RDMAStats
	tracing := trace.On(trace.Hot)
	if tracing {
		was = r.eng.Stats()
	}
	evs, msgs := r.eng.Handle(h.Src, h.Type, payload)
	if tracing {
		c.tr.traceRDMADrops(h.Src, h.Type, payload, was)
	}
	for i := range evs {
		r.rdmaEvent(&evs[i])
	}
	for _, m := range msgs {
		r.sendDone(m.Peer, m.Hdr)
	}
	if len(msgs) > 0 {
		c.rel.flushLocked() // a completion waits for nothing else to ride with
	}
}

func (r *rdmaState) rdmaEvent(ev *hal.RDMAEvent) {
	c := r.c
	switch ev.Kind {
	case hal.EvOriginDone, hal.EvReadDone:
		// A completion of an earlier drive of the transfer ends it too
		// (every byte is placed): a probe or redrive that a late
		// completion overtook does not have to be answered.
		op := r.opFor(ev.RCxt)
		if op == nil || op.g.peer != ev.Peer || !op.rc.Current(ev.Key, ev.Tid) &&
			(ev.Kind != hal.EvOriginDone || !op.rc.Completes(ev.Key, ev.Base, ev.Tid)) {
			r.stats.StaleCompletions++
			if trace.On(trace.Hot) {
				trace.Printf(trace.Hot, "lapi %d: drop rdma completion from rank %d: stale (rcxt %d tid %d, an earlier drive's)",
					c.rank, ev.Peer, ev.RCxt, ev.Tid)
			}
			return
		}
		var err error
		if ev.Code != 0 {
			if trace.On(trace.Internal) {
				c.tr.traceFault("refused by", ev.Peer, ev.RCxt, ev.Tid, hal.FaultCheck(ev.Code))
			}
			err = fmt.Errorf("lapi: RDMA at rank %d: %s check failed: %w", ev.Peer, hal.FaultCheck(ev.Code), ErrProtection)
		}
		r.finishOp(op, err)
	case hal.EvTargetDone:
		if k := c.am.counter(ev.Cookie); k != nil {
			c.am.awaited(ev.Peer, k) // a GetFromFIFO's origin counter, which the writer owed
			k.incr()
		}
	case hal.EvFault:
		r.stats.Faults++
		if trace.On(trace.Internal) {
			c.tr.traceFault("from", ev.Peer, ev.RCxt, ev.Tid, hal.FaultCheck(ev.Code))
		}
		if k := c.am.counter(ev.Cookie); k != nil {
			c.am.awaited(ev.Peer, k)
			k.fail(fmt.Errorf("lapi: RDMA from rank %d: %w", ev.Peer, ev.Err))
			k.incr()
		}
	case hal.EvFIFO:
		r.fifoPacket(ev.Peer, ev.Arg, ev.Offset, ev.Dst, ev.Place, ev.Data)
	case hal.EvReadFIFO:
		op := r.opFor(ev.RCxt)
		if op == nil || op.g.peer != ev.Peer || op.g.fifo == nil {
			c.stats.BadPackets++ // cannot happen: the engine checked the read's tid
			return
		}
		if len(ev.Data) > 0 { // a read of no bytes: its handler sees no packet
			op.g.fifo.OnFIFO(ev.Peer, op.off+ev.Offset, nil, ev.Data)
		}
	case hal.EvReadMissing:
		op := r.opFor(ev.RCxt)
		if op == nil || op.g.peer != ev.Peer || !op.rc.Current(ev.Key, ev.Tid) || op.t != hal.FrameRDMAReadReq || !op.sentAll {
			r.stats.StaleCompletions++
			return
		}
		r.rereadMissing(op)
	case hal.EvMissing:
		op := r.opFor(ev.RCxt)
		if op == nil || op.g.peer != ev.Peer || !op.rc.Current(ev.Key, ev.Tid) || op.t != hal.FrameRDMAWrite || !op.sentAll {
			r.stats.StaleCompletions++
			return
		}
		r.redriveMissing(op, ev.Offset, ev.Data)
	case hal.EvServeRead:
		s := ev.Stream
		s.SetFrame(c.cfg.JobKey, c.rank, c.life)
		s.Hdr.DstEp = c.ri.dstEpoch(ev.Peer)
		k := servKey{ev.Peer, ev.RCxt}
		if old := r.serving[k]; old != nil {
			r.unqueue(old) // a redrive replaces the earlier drive
			r.eng.ReleaseStream(old)
		}
		r.serving[k] = s
		// Served ahead of this rank's own queued chunks: the reader's
		// timer runs from its request, theirs only once they are sent.
		r.queueStreamFront(outStream{s: s}) // the progress pass pushes it
	}
}

// served forgets a read-serving stream that has sent its last packet.
func (r *rdmaState) served(s *hal.RDMAStream) {
	k := servKey{s.Peer, s.Hdr.RCxt}
	if r.serving[k] == s {
		delete(r.serving, k)
	}
	r.eng.ReleaseStream(s)
}
