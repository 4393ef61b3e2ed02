package lapi

import (
	"encoding/binary"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// tracer writes a context's trace records (internal/trace).
type tracer struct {
	c *Context
}

// lapi's trace points, by level (WEFT_TRACE; see internal/trace):
//
//	1 a peer declared failed, and why; reintegration giving up on a peer
//	  that never answered BOOTING
//	3 reintegration steps (BOOTING, BOOT_ACK, RDMA_READY sent and
//	  received, a peer's state cleared, RDMA enabled); retransmission
//	  timeouts with the new RTO, hole repairs, and the RTO coming back
//	  after a back-off; RDMA redrives with the new tid and timeout;
//	  protection faults with the check that failed; active-message
//	  rendezvous start and finish
//	4 single packets dropped (duplicate, stale epoch, stale tid, malformed,
//	  from a failed peer), acknowledgements sent and received, stale RDMA
//	  completions, RDMA transfers started and finished
//	5 every frame sent and received
//
// Every call site is guarded by trace.On, so that a level that is off
// costs one atomic load and builds nothing; the functions below build the
// lines out of line, keeping the guarded paths short. Each line names
// this context's rank ("lapi 2: ..."), since the ranks of mpi.Run and of
// the tests share one process and its trace prefix.

// traceRetransmit reports a packet sent again: a hole's repair (rto 0) or
// the retransmission timer running out, with the timeout now in force.
func (tc *tracer) traceRetransmit(p *outPkt, rto time.Duration) {
	c := tc.c
	if rto == 0 {
		trace.Printf(trace.Internal, "lapi %d: retransmit to rank %d: seq %d (try %d), repairing a hole: later packets acknowledged",
			c.rank, p.peer, p.seq, p.retries)
		return
	}
	trace.Printf(trace.Internal, "lapi %d: retransmit timeout to rank %d: seq %d resent (try %d), rto now %v (backoff %d)",
		c.rank, p.peer, p.seq, p.retries, rto, c.rel.links[p.peer].backoff)
}

// traceRTO reports the RTO toward peer back at its estimate: a packet sent
// once was acknowledged, which ends a back-off.
func (tc *tracer) traceRTO(peer hal.Rank) {
	c := tc.c
	l := &c.rel.links[peer]
	t := &c.timing
	trace.Printf(trace.Internal, "lapi %d: rto to rank %d back to %v (srtt %v): back-off ended by a valid sample",
		c.rank, peer, l.rtt.rto(t.initRTO, t.minRTO, t.maxRTO), l.rtt.srtt)
}

// traceAck reports an acknowledgement from peer that released n packets.
func (tc *tracer) traceAck(peer hal.Rank, ph *pktHdr, n int) {
	c := tc.c
	trace.Printf(trace.Hot, "lapi %d: ack from rank %d: cum %d, %d released, %d in flight, credit %d",
		c.rank, peer, ph.ackCum, n, c.rel.links[peer].inFlight(), ph.credit)
}

// traceDrop reports one packet from peer discarded, and why.
func (tc *tracer) traceDrop(peer hal.Rank, why string, seq uint32) {
	c := tc.c
	trace.Printf(trace.Hot, "lapi %d: drop packet from rank %d: %s (seq %d)", c.rank, peer, why, seq)
}

// traceStale reports a packet addressed to an earlier life of this rank.
func (tc *tracer) traceStale(peer hal.Rank, dstEp uint32) {
	c := tc.c
	trace.Printf(trace.Hot, "lapi %d: drop packet from rank %d: stale epoch %#x (this life is %#x)",
		c.rank, peer, dstEp, uint32(c.ri.reint.Epoch()))
}

// traceRecv reports a frame as it arrives.
func (tc *tracer) traceRecv(h *hal.Header, payload []byte) {
	c := tc.c
	var ph pktHdr
	var rh hal.RDMAHdr
	switch {
	case h.Type == hal.FrameData && !c.reliableTo(h.Src) && decodeOK(payload, &ph):
		trace.Printf(trace.HotDetail, "lapi %d: recv %v from rank %d: %d bytes, seq %d kind %d, ack cum %d",
			c.rank, h.Type, h.Src, len(payload), ph.seq, ph.kind, ph.ackCum)
	case hal.IsRDMAFrame(h.Type) && hal.DecodeRDMA(h.Type, payload, &rh) == nil:
		trace.Printf(trace.HotDetail, "lapi %d: recv %v from rank %d: rcxt %d tid %d offset %d, %d bytes",
			c.rank, h.Type, h.Src, rh.RCxt, rh.Tid, rh.Offset, len(rh.Data))
	default:
		trace.Printf(trace.HotDetail, "lapi %d: recv %v from rank %d: %d bytes", c.rank, h.Type, h.Src, len(payload))
	}
}

func decodeOK(payload []byte, ph *pktHdr) bool {
	_, _, err := decodePkt(payload, ph)
	return err == nil
}

// traceSend reports a packet of lapi's own handed to the device.
func (tc *tracer) traceSend(what string, peer hal.Rank, seq uint32, n int) {
	c := tc.c
	trace.Printf(trace.HotDetail, "lapi %d: send %s to rank %d: seq %d, %d data bytes", c.rank, what, peer, seq, n)
}

// traceSendRDMA reports an RDMA frame handed to the device: hdr is its
// frame and RDMA headers as encoded (the data goes separately, n bytes).
func (tc *tracer) traceSendRDMA(hdr []byte, n int) {
	c := tc.c
	if len(hdr) < hal.HeaderLen+hal.RDMAHdrLen {
		return
	}
	le := binary.LittleEndian
	r := hdr[hal.HeaderLen:]
	trace.Printf(trace.HotDetail, "lapi %d: send %v to rank %d: rcxt %d tid %d offset %d, %d bytes",
		c.rank, hal.FrameType(hdr[3]), le.Uint32(hdr[28:]), le.Uint32(r[0:]), le.Uint32(r[8:]), le.Uint64(r[24:]), n)
}

// traceReintRecv reports a reintegration frame as it arrives.
func (tc *tracer) traceReintRecv(from hal.Rank, t hal.FrameType, payload []byte) {
	c := tc.c
	var ep uint64
	if len(payload) >= 8 {
		ep = binary.LittleEndian.Uint64(payload)
	}
	trace.Printf(trace.Internal, "lapi %d: reint: %v received from rank %d (epoch %#x)", c.rank, t, from, ep)
}

// traceReintSend reports a reintegration frame sent.
func (tc *tracer) traceReintSend(m hal.ReintMsg, err error) {
	c := tc.c
	ask := ""
	if m.Ask {
		ask = ", answer asked"
	}
	if m.Answer {
		ask += ", an answer"
	}
	if err != nil {
		trace.Printf(trace.Internal, "lapi %d: reint: %v to rank %d (epoch %#x%s) not sent: %v", c.rank, m.Type, m.Peer, m.Epoch, ask, err)
		return
	}
	trace.Printf(trace.Internal, "lapi %d: reint: %v sent to rank %d (epoch %#x%s)", c.rank, m.Type, m.Peer, m.Epoch, ask)
}

// traceReintAct reports a step of the protocol the driver performs.
func (tc *tracer) traceReintAct(a hal.ReintAction) {
	c := tc.c
	switch a.Kind {
	case hal.ActClearPeer:
		trace.Printf(trace.Internal, "lapi %d: reint: rank %d joining (epoch %#x): what an earlier life of it left here cleared",
			c.rank, a.Peer, c.ri.reint.PeerEpoch(a.Peer))
	case hal.ActEnablePeer:
		trace.Printf(trace.Internal, "lapi %d: reint: rank %d is ready: RDMA to it enabled", c.rank, a.Peer)
	case hal.ActReady:
		trace.Printf(trace.Internal, "lapi %d: reint: every peer accounted for: RDMA enabled here (epoch %#x)", c.rank, c.ri.reint.Epoch())
	case hal.ActGaveUp:
		trace.Printf(trace.Rare, "lapi %d: reint: gave up on rank %d: BOOTING never answered, counted as NACK (dead or unreachable)",
			c.rank, a.Peer)
	}
}

// opName names what an RDMA chunk does.
func opName(t hal.FrameType) string {
	if t == hal.FrameRDMAReadReq {
		return "read"
	}
	return "write"
}

// traceRedrive reports a chunk driven again under a new tid.
func (tc *tracer) traceRedrive(op *rdmaOp, tid uint32) {
	c := tc.c
	trace.Printf(trace.Internal, "lapi %d: rdma redrive to rank %d: %s rcxt %d, %d bytes, new tid %d (drive %d), timeout now %v",
		c.rank, op.g.peer, opName(op.t), op.rc.ID, op.h.Total, tid, op.drives+1, op.rto)
}

// traceRDMAStart reports a chunk's first drive.
func (tc *tracer) traceRDMAStart(op *rdmaOp) {
	c := tc.c
	trace.Printf(trace.Hot, "lapi %d: rdma %s to rank %d: rcxt %d tid %d, %d bytes, timeout %v",
		c.rank, opName(op.t), op.g.peer, op.rc.ID, op.h.Tid, op.h.Total, op.rto)
}

// traceRDMADone reports a chunk completed, or failed with err.
func (tc *tracer) traceRDMADone(op *rdmaOp, err error) {
	c := tc.c
	if err != nil {
		trace.Printf(trace.Hot, "lapi %d: rdma %s to rank %d: rcxt %d failed after %d drives: %v",
			c.rank, opName(op.t), op.g.peer, op.rc.ID, op.drives+1, err)
		return
	}
	trace.Printf(trace.Hot, "lapi %d: rdma %s to rank %d: rcxt %d done after %d drives", c.rank, opName(op.t), op.g.peer, op.rc.ID, op.drives+1)
}

// traceRDMADrops reports the RDMA packets from peer that the engine
// dropped in one Handle, from its counters before (was) and after.
func (tc *tracer) traceRDMADrops(peer hal.Rank, t hal.FrameType, payload []byte, was hal.RDMAStats) {
	c := tc.c
	now := c.rd.eng.Stats()
	why := ""
	switch {
	case now.Stale != was.Stale:
		why = "stale tid or epoch (an abandoned drive, or an earlier life)"
	case now.Duplicates != was.Duplicates:
		why = "duplicate (already placed)"
	case now.Bad != was.Bad:
		why = "malformed"
	default:
		return
	}
	var h hal.RDMAHdr
	hal.DecodeRDMA(t, payload, &h)
	trace.Printf(trace.Hot, "lapi %d: drop %v from rank %d: %s (rcxt %d tid %d offset %d)",
		c.rank, t, peer, why, h.RCxt, h.Tid, h.Offset)
}

// traceFault reports a protection check that failed, here or at the
// peer: nothing was placed.
func (tc *tracer) traceFault(where string, peer hal.Rank, rcxt, tid uint32, check string) {
	c := tc.c
	trace.Printf(trace.Internal, "lapi %d: rdma %s rank %d: protection violation, %s check failed (rcxt %d tid %d): dropped",
		c.rank, where, peer, check, rcxt, tid)
}
