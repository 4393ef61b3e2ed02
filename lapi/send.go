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
	err := c.amsendTx(tgt, h, uhdr, data, o)
	c.unlockRun() // and the completions of a message to self, or of a send that finished at once
	return err
}

// amsendTx is Amsend with the progress lock held.
func (c *Context) amsendTx(tgt hal.Rank, h HandlerID, uhdr, data []byte, o SendOpts) error {
	if c.useRendezvous(tgt, len(data), len(uhdr)) {
		return c.amRendezvousLocked(tgt, h, uhdr, data, o)
	}
	if c.prep != nil && tgt != c.rank {
		// First thing past the choice of path: the device's line is then
		// on its way while the message is checked and built
		// (hal.SendPreparer).
		c.prep.PrepareSend(tgt)
	}
	return c.amsendLocked(tgt, h, uhdr, data, &o)
}

func (c *Context) amsendLocked(tgt hal.Rank, h HandlerID, uhdr, data []byte, o *SendOpts) error {
	switch {
	case c.closed:
		return ErrClosed
	case int(tgt) >= c.cfg.Size:
		return fmt.Errorf("lapi: send to %d of %d: %w", tgt, c.cfg.Size, ErrBadRank)
	case len(uhdr) > MaxUhdr:
		return fmt.Errorf("lapi: user header of %d bytes (max %d): %w", len(uhdr), MaxUhdr, ErrTooLarge)
	case uint64(len(data)) > math.MaxUint32:
		return fmt.Errorf("lapi: message of %d bytes (max 4 GiB): %w", len(data), ErrTooLarge)
	case c.peerErr[tgt] != nil:
		return c.peerErr[tgt]
	}
	direct := true // may go to the device at once, ahead of the queue
	if c.short != nil && tgt != c.rank && o.Target == 0 && o.Completion == nil && c.queues[tgt].head == nil &&
		(c.shortTo == nil || c.shortTo[tgt]) {
		sent, err := c.sendTiny(tgt, h, uhdr, data)
		if sent {
			c.originDone(o)
			return err
		}
		direct = err == nil // the ring is full: the queue, not a second try
	}
	c.stats.MessagesSent++
	c.peerStats[tgt].MessagesSent++
	var ph pktHdr // set field by field: see decodePkt
	ph.kind, ph.handler, ph.uhdrLen, ph.total = kindAM, uint16(h), uint16(len(uhdr)), uint32(len(data))
	ph.msgID, ph.tcntr, ph.dstEp = c.nextMsg[tgt], o.Target, c.dstEpoch(tgt)
	c.nextMsg[tgt]++
	if o.Completion != nil {
		ph.ccntr = o.Completion.id
		c.await(tgt, o.Completion)
	}
	if tgt == c.rank {
		// The handler gets a copy of uhdr: had an interface method seen
		// the caller's, Go would move every caller's header to the heap.
		p := c.getPkt()
		p.buf = append(p.buf[:0], uhdr...)
		c.deliver(tgt, &ph, p.buf, data)
		c.putPkt(p)
		c.originDone(o)
		// Taken whole (OnWhole), it queued no completion whose run would
		// wake the others: another goroutine of this rank may be blocked
		// waiting for what it delivered, and no frame will come for it.
		c.progressed()
		return nil
	}
	rel := c.reliableTo(tgt)
	hl := c.pktHdrLen(rel)
	room := c.mtuOf(tgt) - hl - len(uhdr)
	if direct && rel && len(data) <= room && c.queues[tgt].head == nil {
		if sent, err := c.sendDirect(tgt, &ph, uhdr, data); sent {
			c.originDone(o)
			return err
		}
	}
	copyData := len(data) <= c.cfg.CopyThreshold
	var m *outMsg
	if !copyData && (o.Origin != nil || o.Notify != nil) {
		m = c.getMsg()
		m.org, m.notify = o.Origin, o.Notify
	}
	if !rel {
		ph.flags = flagSeq
	}
	for off := 0; ; {
		n := min(room, len(data)-off)
		p := c.getPkt()
		p.peer = tgt
		ph.offset = uint32(off)
		p.buf = c.frameHeader(p.buf[:cap(p.buf)], tgt, &ph, uhdr, n)
		if copyData {
			if cap(p.own) < n {
				p.own = make([]byte, 0, max(n, 256))
			}
			p.data = append(p.own[:0], data[off:off+n]...)
		} else {
			p.data = data[off : off+n]
			if m != nil {
				p.msg = m
				m.pending++
			}
		}
		c.queues[tgt].push(p)
		off += n
		if off >= len(data) {
			break
		}
	}
	if copyData {
		c.originDone(o)
	}
	c.activate(tgt)
	var now time.Time
	if !rel {
		now = c.now() // only the reliability protocol keeps time
	}
	return c.pushLocked(tgt, now)
}

// sendTiny sends a message that fits one short frame of the device, with
// nothing queued ahead of it toward tgt and no target or completion
// counter: the device implies the frame header, only the tiny packet
// header goes, built straight from the arguments (no packet header to fill
// and read back, 3% of an 8-byte ping-pong), and
// the frame is published on return. sent is false when the message must
// go the general way: too long for a short frame or for one packet of the
// MTU, or TPT updates still to push (err nil), or the device full (err
// hal.ErrNoResource); with sent true, err is a failure of the peer.
func (c *Context) sendTiny(tgt hal.Rank, h HandlerID, uhdr, data []byte) (sent bool, err error) {
	n := tinyHdrLen + len(uhdr)
	// (tptBehind first: it inlines, and pushTPT, which does not, cost a
	// call and 26 instructions on every send with nothing to push.)
	if n+len(data) > c.shortMax || len(uhdr)+len(data) > c.mtuOf(tgt)-shortHdrLen || len(uhdr) > 0xff ||
		c.tptBehind(tgt) && !c.pushTPT(tgt) {
		return false, nil
	}
	b := c.direct[:n]
	putTiny(b, uint16(h), len(uhdr), c.dstEpoch(tgt))
	copy(b[tinyHdrLen:], uhdr)
	err = c.short.SendShort(tgt, hal.FrameData, b, data)
	// (errors.Is only on an error: called on nil it still costs a call
	// and 18 instructions, 2% of an 8-byte message's send and delivery.)
	if err != nil && errors.Is(err, hal.ErrNoResource) {
		return false, err // the ring is full: queued, progress sends it
	}
	c.stats.MessagesSent++
	c.peerStats[tgt].MessagesSent++
	c.nextMsg[tgt]++
	if err != nil {
		c.failPeer(tgt, err.Error())
		return true, c.peerErr[tgt]
	}
	c.countSent(tgt, len(uhdr)+len(data))
	if trace.On(trace.HotDetail) {
		c.traceSend("tiny packet", tgt, 0, len(data))
	}
	return true, nil
}

// sendDirect sends a one-packet message to a reliable device at once,
// with nothing queued ahead of it toward tgt: the header is built in a
// scratch buffer and the device, which copies the frame by the time Flush
// returns, is flushed, so no packet is kept and data is free on return.
// sent is false when the message must take the queue (TPT updates still
// to push, or the device full); err is a failure of the peer.
func (c *Context) sendDirect(tgt hal.Rank, ph *pktHdr, uhdr, data []byte) (sent bool, err error) {
	if !c.pushTPT(tgt) {
		return false, nil
	}
	if err = c.dev.Send(c.frameHeader(c.direct[:], tgt, ph, uhdr, len(data)), data); err == nil {
		c.countSent(tgt, len(uhdr)+len(data))
		if trace.On(trace.HotDetail) {
			c.traceSend("packet", tgt, 0, len(data))
		}
		err = c.flushLocked()
	}
	if errors.Is(err, hal.ErrNoResource) {
		return false, nil // the ring is full: queued, progress sends it
	}
	if err != nil {
		c.failPeer(tgt, err.Error())
		return true, c.peerErr[tgt]
	}
	return true, nil
}

// frameHeader writes into b (pktBufLen bytes) the frame header, packet
// header and user header of a packet of ph with n data bytes to tgt, and
// returns them. The packet header takes the layout this context sends:
// the long one on an unreliable device (transmit rewrites its
// acknowledgement fields), else the tiny one when ph allows it, else the
// short one.
func (c *Context) frameHeader(b []byte, tgt hal.Rank, ph *pktHdr, uhdr []byte, n int) []byte {
	rel := c.reliableTo(tgt)
	tiny := rel && ph.tiny(n)
	hl := c.pktHdrLen(rel)
	if tiny {
		hl = tinyHdrLen
	}
	b = b[:hal.HeaderLen+hl+len(uhdr)]
	hh := hal.Header{Type: hal.FrameData, JobKey: c.cfg.JobKey, Src: c.rank, Dst: tgt, Len: uint16(hl + len(uhdr) + n)}
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
func (c *Context) pktHdrLen(rel bool) int {
	if rel {
		return shortHdrLen
	}
	return pktHdrLen
}

func (c *Context) activate(peer hal.Rank) {
	if !c.isActive[peer] {
		c.isActive[peer] = true
		c.active = append(c.active, peer)
	}
}

// pushLocked sends queued packets to peer while the window and the device
// allow, then flushes.
func (c *Context) pushLocked(peer hal.Rank, now time.Time) error {
	if !c.pushTPT(peer) {
		return nil // TPT changes go first; progress retries
	}
	q := &c.queues[peer]
	rel := c.reliableTo(peer)
	var err error
	for q.head != nil {
		p := q.head
		if !rel {
			l := &c.links[peer]
			if !l.canSend(c.cfg.Window) {
				break
			}
			l.assign(p, now)
			putSeq(p.buf[hal.HeaderLen:], p.seq)
		}
		if err = c.transmit(p); err != nil {
			if !rel && !errors.Is(err, hal.ErrNoResource) && !fatalSendErr(err) {
				// An unreliable device's refusal (a route gone, a
				// link down) is a loss like any other: the packet
				// stays in flight and its timer resends it.
				c.stats.SendErrors++
				err = nil
			} else {
				if !rel {
					c.links[peer].unassign(p)
				}
				break
			}
		}
		q.pop()
		if rel {
			c.flushed = append(c.flushed, p)
		} else {
			// Sent after the pass's tick, or outside a pass: its timer
			// is folded into nextTick here.
			c.foldTimer(c.links[peer].due(now, &c.timing))
			if c.blocking {
				// The goroutine blocked in Wait set its deadline before
				// this packet had a timer: have it look again.
				c.wakeLocked()
			}
		}
	}
	ferr := c.flushLocked()
	if ferr != nil && !rel && !fatalSendErr(ferr) {
		c.stats.SendErrors++
		ferr = nil
	}
	if errors.Is(err, hal.ErrNoResource) {
		err = nil // the queue keeps the packets; progress retries
	}
	if err == nil {
		err = ferr
	}
	if err != nil {
		c.failPeer(peer, err.Error())
		return c.peerErr[peer]
	}
	return nil
}

// transmit hands one packet to the device, with current acknowledgements
// and CRC when the device is unreliable. A full device queue is flushed once
// and retried.
func (c *Context) transmit(p *outPkt) error {
	if !c.reliableTo(p.peer) {
		l := &c.links[p.peer]
		credit, cum, sack := l.ackFields(c.cfg.Window)
		putAck(p.buf[hal.HeaderLen:], credit, cum, sack)
		putDstEp(p.buf[hal.HeaderLen:], c.dstEpoch(p.peer))
		hal.Seal(p.buf, p.data)
	}
	err := c.dev.Send(p.buf, p.data)
	if errors.Is(err, hal.ErrNoResource) {
		if err = c.flushLocked(); err == nil {
			err = c.dev.Send(p.buf, p.data)
		}
	}
	if err == nil {
		c.countSent(p.peer, len(p.data))
		if trace.On(trace.HotDetail) {
			c.traceSend("packet", p.peer, p.seq, len(p.data))
		}
	}
	return err
}

// flushLocked flushes the device; on a reliable device the packets it has
// taken are then released.
func (c *Context) flushLocked() error {
	err := c.dev.Flush()
	if err != nil {
		if errors.Is(err, hal.ErrNoResource) {
			return nil // still queued in the device; the next flush sends them
		}
		return err
	}
	c.rd.used = 0 // the device let go of every RDMA header
	for i, p := range c.flushed {
		c.release(p)
		c.flushed[i] = nil
	}
	c.flushed = c.flushed[:0]
	return nil
}

// release returns a packet that needs no more transmissions.
func (c *Context) release(p *outPkt) {
	if m := p.msg; m != nil {
		m.pending--
		if m.pending == 0 {
			if m.org != nil {
				m.org.incr()
			}
			c.note(m.notify, nil)
			c.putMsg(m)
		}
	}
	c.putPkt(p)
}

// sendAck sends an acknowledgement-only packet to peer.
func (c *Context) sendAck(peer hal.Rank) {
	b := c.acks[peer]
	if b == nil {
		b = make([]byte, hal.HeaderLen+pktHdrLen)
		c.acks[peer] = b
	}
	hh := hal.Header{Type: hal.FrameData, JobKey: c.cfg.JobKey, Src: c.rank, Dst: peer, Len: pktHdrLen}
	hal.EncodeHeader(b, &hh)
	l := &c.links[peer]
	credit, cum, sack := l.ackFields(c.cfg.Window)
	ph := pktHdr{kind: kindAck, flags: flagSeq, credit: credit, ackCum: cum, sack: sack, dstEp: c.dstEpoch(peer)}
	ph.encode(b[hal.HeaderLen:])
	hal.Seal(b, nil)
	if err := c.dev.Send(b, nil); err == nil {
		c.stats.AcksSent++
		if trace.On(trace.Hot) {
			trace.Printf(trace.Hot, "lapi %d: ack to rank %d: cum %d, credit %d", c.rank, peer, cum, credit)
		}
	} else if errors.Is(err, hal.ErrNoResource) {
		l.ackNow = true // try again next pass
	}
}

func (c *Context) getPkt() *outPkt {
	p := c.freePkt
	if p == nil {
		return &outPkt{buf: make([]byte, 0, pktBufLen)}
	}
	c.freePkt = p.next
	p.next = nil
	return p
}

func (c *Context) putPkt(p *outPkt) {
	p.data, p.msg = nil, nil
	p.next = c.freePkt
	c.freePkt = p
}

func (c *Context) getMsg() *outMsg {
	m := c.freeMsg
	if m == nil {
		return &outMsg{}
	}
	c.freeMsg = m.next
	m.next = nil
	return m
}

func (c *Context) putMsg(m *outMsg) {
	*m = outMsg{next: c.freeMsg}
	c.freeMsg = m
}

// originDone reports that the origin buffer may be reused.
func (c *Context) originDone(o *SendOpts) {
	if o.Origin != nil {
		o.Origin.incr()
		c.progressed() // another goroutine may wait on the counter
	}
	c.note(o.Notify, nil)
}

// doneHere reports an operation this rank finished itself, at once (on
// its own memory, or by cross-memory attach): origin and completion
// counters and the completer, failed with err if it is not nil.
func (c *Context) doneHere(o *SendOpts, err error) {
	if err != nil {
		o.Origin.fail(err)
		o.Completion.fail(err)
	}
	if o.Origin != nil {
		o.Origin.incr()
	}
	if o.Completion != nil {
		o.Completion.incr()
	}
	c.note(o.Notify, err)
	// Done on the caller's goroutine, with no frame to wake the others:
	// one of them may wait on these counters (or the target's, when the
	// target is this rank).
	c.progressed()
}

// note queues a Completer call to run outside the progress lock.
func (c *Context) note(n Completer, err error) {
	if n != nil {
		c.done = append(c.done, completion{notify: n, err: err})
	}
}

// await records that peer owes k a completion, so that k fails if peer
// fails or restarts before sending it.
func (c *Context) await(peer hal.Rank, k *Counter) {
	if peer == c.rank {
		return
	}
	if c.awaiting == nil {
		c.awaiting = make([]map[*Counter]int, c.cfg.Size)
	}
	if c.awaiting[peer] == nil {
		c.awaiting[peer] = make(map[*Counter]int)
	}
	c.awaiting[peer][k]++
}

// awaited records a completion peer sent for k.
func (c *Context) awaited(peer hal.Rank, k *Counter) {
	if c.awaiting == nil || c.awaiting[peer] == nil {
		return
	}
	if n := c.awaiting[peer][k] - 1; n > 0 {
		c.awaiting[peer][k] = n
	} else {
		delete(c.awaiting[peer], k)
	}
}

// fatalSendErr reports whether a device's send error means the peer cannot
// be reached at all (no address, device closed) rather than a lost frame.
func fatalSendErr(err error) bool {
	return errors.Is(err, hal.ErrUnknownPeer) || errors.Is(err, hal.ErrClosed) || errors.Is(err, hal.ErrTooLarge)
}

// countSent counts a packet the device took toward peer, carrying n bytes
// of data (c.mu held).
func (c *Context) countSent(peer hal.Rank, n int) {
	c.stats.PacketsSent++
	ps := &c.peerStats[peer]
	ps.PacketsSent++
	ps.BytesSent += uint64(n)
}
