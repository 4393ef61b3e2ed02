package lapi

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// outMsg tracks a message sent from the caller's buffer (not copied): its
// origin counter fires when the last packet is released (acknowledged, or
// handed to a reliable device).
type outMsg struct {
	pending int
	org     *Counter
	notify  Completer
	next    *outMsg
}

const pktBufLen = hal.HeaderLen + pktHdrLen + MaxUhdr

// Amsend sends an active message: uhdr (at most MaxUhdr bytes) goes to
// handler h at tgt, which says where data goes. It does not block: packets
// the window or device cannot take now are queued and sent as progress is
// made. Counters in o say when data may be reused and when the target has
// completed the message.
func (c *Context) Amsend(tgt hal.Rank, h HandlerID, uhdr, data []byte, o SendOpts) error {
	c.mu.Lock()
	err := c.am.amsendTx(tgt, h, uhdr, data, o)
	c.unlockRun() // and the completions of a message to self, or of a send that finished at once
	return err
}

// fatalSendErr reports whether a device's send error means the peer cannot
// be reached at all (no address, device closed) rather than a lost frame.
func fatalSendErr(err error) bool {
	return errors.Is(err, hal.ErrUnknownPeer) || errors.Is(err, hal.ErrClosed) || errors.Is(err, hal.ErrTooLarge)
}

// amsendTx is Amsend with the progress lock held.
func (ad *dispatcher) amsendTx(tgt hal.Rank, h HandlerID, uhdr, data []byte, o SendOpts) error {
	c := ad.c
	if h == NoHandler {
		return fmt.Errorf("lapi: send to rank %d: handler NoHandler: %w", tgt, ErrNoHandler)
	}
	if ad.useRendezvous(tgt, len(data), len(uhdr)) {
		return ad.amRendezvousLocked(tgt, h, uhdr, data, o)
	}
	if c.prep != nil && tgt != c.rank {
		// First thing past the choice of path: the device's line is then
		// on its way while the message is checked and built
		// (hal.SendPreparer).
		c.prep.PrepareSend(tgt)
	}
	return ad.amsendLocked(tgt, h, uhdr, data, &o)
}

// checkSend reports why a message of uhdr and data cannot go to tgt, or
// nil.
func (ad *dispatcher) checkSend(tgt hal.Rank, uhdr, data []byte) error {
	c := ad.c
	switch {
	case c.closed:
		return ErrClosed
	case int(tgt) >= c.cfg.Size:
		return fmt.Errorf("lapi: send to %d of %d: %w", tgt, c.cfg.Size, ErrBadRank)
	case len(uhdr) > MaxUhdr:
		return fmt.Errorf("lapi: user header of %d bytes (max %d): %w", len(uhdr), MaxUhdr, ErrTooLarge)
	case uint64(len(data)) > math.MaxUint32:
		return fmt.Errorf("lapi: message of %d bytes (max 4 GiB): %w", len(data), ErrTooLarge)
	case c.peerFault(tgt) != nil:
		return c.peerFault(tgt)
	}
	return nil
}

// amsendLocked sends an active message (c.mu held): as one short frame,
// to itself, as one frame straight to the device, or as packets queued
// toward tgt.
func (ad *dispatcher) amsendLocked(tgt hal.Rank, h HandlerID, uhdr, data []byte, o *SendOpts) error {
	c := ad.c
	if err := ad.checkSend(tgt, uhdr, data); err != nil {
		return err
	}
	direct := true // may go to the device at once, ahead of the queue
	if c.short != nil && tgt != c.rank && o.Target == 0 && o.Completion == nil && c.rel.queues[tgt].head == nil &&
		(c.shortTo == nil || c.shortTo[tgt]) {
		sent, err := ad.sendTiny(tgt, h, uhdr, data)
		if sent {
			ad.originDone(o)
			return err
		}
		direct = err == nil // the ring is full: the queue, not a second try
	}
	c.stats.MessagesSent++
	c.peerStats[tgt].MessagesSent++
	var ph pktHdr // set field by field: see decodePkt
	ph.kind, ph.handler, ph.uhdrLen, ph.total = kindAM, uint16(h), uint16(len(uhdr)), uint32(len(data))
	ph.msgID, ph.tcntr, ph.dstEp = ad.nextMsg[tgt], o.Target, c.ri.dstEpoch(tgt)
	ad.nextMsg[tgt]++
	if o.Completion != nil {
		ph.ccntr = o.Completion.id
		ad.await(tgt, o.Completion)
	}
	if tgt == c.rank {
		ad.sendSelf(&ph, uhdr, data, o)
		return nil
	}
	rel := c.reliableTo(tgt)
	hl := ad.pktHdrLen(rel)
	room := c.mtuOf(tgt) - hl - len(uhdr)
	if direct && rel && len(data) <= room && c.rel.queues[tgt].head == nil {
		if sent, err := ad.sendDirect(tgt, &ph, uhdr, data); sent {
			ad.originDone(o)
			return err
		}
	}
	return ad.queueMsg(tgt, &ph, uhdr, data, o, rel, room)
}

// sendSelf delivers a message to this rank's own handler.
func (ad *dispatcher) sendSelf(ph *pktHdr, uhdr, data []byte, o *SendOpts) {
	c := ad.c
	// The handler gets a copy of uhdr: had an interface method seen
	// the caller's, Go would move every caller's header to the heap.
	p := c.rel.getPkt()
	p.buf = append(p.buf[:0], uhdr...)
	ad.deliver(c.rank, ph, p.buf, data)
	c.rel.putPkt(p)
	ad.originDone(o)
	// Taken whole (OnWhole), it queued no completion whose run would
	// wake the others: another goroutine of this rank may be blocked
	// waiting for what it delivered, and no frame will come for it.
	c.pr.progressed()
}

// queueMsg cuts a message into packets of room bytes of data each (the
// data copied if it is small, else sent from the caller's buffer and
// reported when the last packet is released), queues them toward tgt,
// and pushes what the window and the device take now.
func (ad *dispatcher) queueMsg(tgt hal.Rank, ph *pktHdr, uhdr, data []byte, o *SendOpts, rel bool, room int) error {
	c := ad.c
	copyData := len(data) <= c.cfg.CopyThreshold ||
		o.WaitsNow && !rel && len(data) <= NetCopyThreshold && (c.cfg.AMRendezvous < 0 || len(data) < c.cfg.AMRendezvous)
	var m *outMsg
	if !copyData && (o.Origin != nil || o.Notify != nil) {
		m = ad.getMsg()
		m.org, m.notify = o.Origin, o.Notify
	}
	if !rel {
		ph.flags = flagSeq
	}
	// Copied toward an unreliable peer, the packets go back to back into
	// one slab (slab.go), headers and data alike, when one is large
	// enough: the device then gathers a run of them as one piece.
	var slab *msgSlab
	hdrLen := hal.HeaderLen + pktHdrLen + len(uhdr) // frameHeader's, when !rel
	if copyData && !rel && len(data) > 0 && room > 0 {
		slab = c.rel.slabs.get((len(data)+room-1)/room*hdrLen + len(data))
	}
	at := 0 // slab bytes taken
	for off := 0; ; {
		n := min(room, len(data)-off)
		p := c.rel.getPkt()
		p.peer = tgt
		ph.offset = uint32(off)
		if m != nil && !rel && off+n == len(data) {
			ph.flags |= flagAckNow
		}
		hb := p.buf[:cap(p.buf)]
		if slab != nil {
			hb = slab.b[at : at+hdrLen : at+hdrLen]
		}
		p.buf = ad.frameHeader(hb, tgt, ph, uhdr, n)
		switch {
		case slab != nil:
			end := at + hdrLen + n
			p.data = slab.b[at+hdrLen : end : end]
			copy(p.data, data[off:off+n])
			p.slab = slab
			slab.refs++
			at = end
		case copyData:
			if cap(p.own) < n {
				p.own = make([]byte, 0, max(n, 256))
			}
			p.data = append(p.own[:0], data[off:off+n]...)
		default:
			p.data = data[off : off+n]
			if m != nil {
				p.msg = m
				m.pending++
			}
		}
		c.rel.queues[tgt].push(p)
		off += n
		if off >= len(data) {
			break
		}
	}
	if copyData {
		ad.originDone(o)
	}
	c.rel.activate(tgt)
	var now time.Time
	if !rel {
		now = c.now() // only the reliability protocol keeps time
	}
	return c.rel.pushLocked(tgt, now)
}

// sendTiny sends a message that fits one short frame of the device, with
// nothing queued ahead of it toward tgt and no target or completion
// counter: the device implies the frame header, only the tiny packet
// header goes, built straight from the arguments (no packet header to fill
// and read back), and the frame is published on return. sent is false when the message must
// go the general way: too long for a short frame or for one packet of the
// MTU, or TPT updates still to push (err nil), or the device full (err
// hal.ErrNoResource); with sent true, err is a failure of the peer.
func (ad *dispatcher) sendTiny(tgt hal.Rank, h HandlerID, uhdr, data []byte) (sent bool, err error) {
	c := ad.c
	n := tinyHdrLen + len(uhdr)
	// (tptBehind first: it inlines, and pushTPT, which does not, would
	// cost a call on every send with nothing to push.)
	if n+len(data) > c.shortMax || len(uhdr)+len(data) > c.mtuOf(tgt)-shortHdrLen || len(uhdr) > 0xff ||
		c.cm.tptBehind(tgt) && !c.cm.pushTPT(tgt) {
		return false, nil
	}
	b := ad.direct[:n]
	putTiny(b, uint16(h), len(uhdr), c.ri.dstEpoch(tgt))
	copy(b[tinyHdrLen:], uhdr)
	err = c.short.SendShort(tgt, hal.FrameData, b, data)
	// (errors.Is only on an error: called on nil it still costs a call
	// on every send.)
	if err != nil && errors.Is(err, hal.ErrNoResource) {
		return false, err // the ring is full: queued, progress sends it
	}
	c.stats.MessagesSent++
	c.peerStats[tgt].MessagesSent++
	ad.nextMsg[tgt]++
	if err != nil {
		c.rel.failPeer(tgt, err.Error())
		return true, c.peerFault(tgt)
	}
	c.rel.countSent(tgt, len(uhdr)+len(data))
	if trace.On(trace.HotDetail) {
		c.tr.traceSend("tiny packet", tgt, 0, len(data))
	}
	return true, nil
}

// sendDirect sends a one-packet message to a reliable device at once,
// with nothing queued ahead of it toward tgt: the header is built in a
// scratch buffer and the device, which copies the frame by the time Flush
// returns, is flushed, so no packet is kept and data is free on return.
// sent is false when the message must take the queue (TPT updates still
// to push, or the device full); err is a failure of the peer.
func (ad *dispatcher) sendDirect(tgt hal.Rank, ph *pktHdr, uhdr, data []byte) (sent bool, err error) {
	c := ad.c
	if !c.cm.pushTPT(tgt) {
		return false, nil
	}
	if err = c.dev.Send(ad.frameHeader(ad.direct[:], tgt, ph, uhdr, len(data)), data); err == nil {
		c.rel.countSent(tgt, len(uhdr)+len(data))
		if trace.On(trace.HotDetail) {
			c.tr.traceSend("packet", tgt, 0, len(data))
		}
		err = c.rel.flushLocked()
	}
	if errors.Is(err, hal.ErrNoResource) {
		return false, nil // the ring is full: queued, progress sends it
	}
	if err != nil {
		c.rel.failPeer(tgt, err.Error())
		return true, c.peerFault(tgt)
	}
	return true, nil
}

// frameHeader writes into b (pktBufLen bytes) the frame header, packet
// header and user header of a packet of ph with n data bytes to tgt, and
// returns them. The packet header takes the layout this context sends:
// the long one on an unreliable device (transmit rewrites its
// acknowledgement fields), else the tiny one when ph allows it, else the
// short one.
func (ad *dispatcher) frameHeader(b []byte, tgt hal.Rank, ph *pktHdr, uhdr []byte, n int) []byte {
	c := ad.c
	rel := c.reliableTo(tgt)
	tiny := rel && ph.tiny(n)
	hl := ad.pktHdrLen(rel)
	if tiny {
		hl = tinyHdrLen
	}
	b = b[:hal.HeaderLen+hl+len(uhdr)]
	hh := hal.Header{Type: hal.FrameData, JobKey: c.cfg.JobKey, Src: c.rank, Dst: tgt, Len: uint16(hl + len(uhdr) + n), Life: c.life}
	hal.EncodeHeader(b, &hh)
	switch {
	case tiny:
		ph.encodeTiny(b[hal.HeaderLen:])
	case rel:
		ph.encodeShort(b[hal.HeaderLen:])
	default:
		ph.encode(b[hal.HeaderLen:])
	}
	copy(b[hal.HeaderLen+hl:], uhdr)
	return b
}

// pktHdrLen is the length of the packet headers this context sends to a
// peer: the short layout over a reliable device (rel; the tiny one is
// shorter still).
func (ad *dispatcher) pktHdrLen(rel bool) int {
	if rel {
		return shortHdrLen
	}
	return pktHdrLen
}

func (ad *dispatcher) getMsg() *outMsg {
	m := ad.freeMsg
	if m == nil {
		return &outMsg{}
	}
	ad.freeMsg = m.next
	m.next = nil
	return m
}

func (ad *dispatcher) putMsg(m *outMsg) {
	*m = outMsg{next: ad.freeMsg}
	ad.freeMsg = m
}
