package lapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// reliability is the per-peer reliability of a context over an unreliable
// device: a link (sequence numbers, acknowledgement, retransmission) and a
// send queue per peer, and the packets sent and not yet released. Over a
// reliable device only the queues and the packets waiting for Flush are
// used.
type reliability struct {
	c        *Context
	links    []link      // per peer; nil on a reliable device
	queues   []sendQueue // per peer: packets waiting for window or device
	active   []hal.Rank  // peers with queued or unacknowledged packets
	isActive []bool
	flushed  []*outPkt // sent on a reliable device, released at Flush
	acks     [][]byte  // per peer acknowledgement-only packet buffers
	freePkt  *outPkt
	slabs    slabPool  // copied messages' packets, back to back (slab.go)
	nextTick time.Time // earliest retransmission or delayed-ack deadline
	// releaseFn and rtxFn are release and the retransmission hook, made
	// once so that passing them allocates nothing.
	releaseFn func(*outPkt)
	rtxFn     func(*outPkt, time.Duration)
}

// tick runs retransmission timers and sends owed acknowledgements.
func (rl *reliability) tick(now time.Time) {
	c := rl.c
	if c.failover != nil {
		if n := c.failover.Outages(); n != c.outages {
			c.outages = n
			rl.resendInFlight(now)
		}
	}
	rl.nextTick = time.Time{}
	keep := rl.active[:0]
	for _, peer := range rl.active {
		l := &rl.links[peer]
		if c.peerFault(peer) != nil {
			rl.isActive[peer] = false
			continue
		}
		next, failed := l.expire(now, &c.timing, rl.rtxFn)
		if failed {
			rl.failPeer(peer, fmt.Sprintf("no acknowledgement for %v", c.cfg.PeerTimeout))
			rl.isActive[peer] = false
			continue
		}
		if l.needAck(now) {
			rl.sendAck(peer) // clears ackDue, unless the ack could not go
		}
		if d := l.ackDue; !d.IsZero() && (next.IsZero() || d.Before(next)) {
			next = d
		}
		if !next.IsZero() && (rl.nextTick.IsZero() || next.Before(rl.nextTick)) {
			rl.nextTick = next
		}
		if l.inFlight() == 0 && rl.queues[peer].head == nil && l.ackDue.IsZero() && !l.ackNow {
			rl.isActive[peer] = false
			continue
		}
		keep = append(keep, peer)
	}
	rl.active = keep
	rl.flushLocked()
}

// resendInFlight sends again, at once, every packet in flight toward
// every peer and redrives every RDMA transfer under way (c.mu held): the
// device took a member out (hal.Failover), and what went on it is lost.
// The timers' back-off, grown while the member failed, starts afresh.
func (rl *reliability) resendInFlight(now time.Time) {
	c := rl.c
	c.stats.FailoverResends++
	for _, peer := range rl.active {
		if c.reliableTo(peer) || c.peerFault(peer) != nil {
			continue
		}
		l := &rl.links[peer]
		l.backoff = 0
		for s := l.una; s != l.nextSeq; s++ {
			if p := l.inflight[s%sackBits]; p != nil {
				p.sentAt, p.fastRtx = now, false
				rl.retransmit(p, 0)
			}
		}
	}
	for _, op := range c.rd.ops {
		if op != nil && op.sentAll && op.rto > 0 {
			op.deadline = now // rdmaTick, later in this pass, redrives it
		}
	}
}

// retransmit sends p again; rto is the timeout now in force, 0 for a
// hole's repair (see link.expire).
func (rl *reliability) retransmit(p *outPkt, rto time.Duration) {
	c := rl.c
	c.stats.Retransmits++
	c.peerStats[p.peer].Retransmits++
	if trace.On(trace.Internal) {
		c.tr.traceRetransmit(p, rto)
	}
	if err := rl.transmit(p); err != nil && fatalSendErr(err) {
		rl.failPeer(p.peer, err.Error())
	} else if err != nil && !errors.Is(err, hal.ErrNoResource) {
		c.stats.SendErrors++ // lost again; the timer will try again
	}
}

// timerSoon reports whether a retransmission or acknowledgement timer falls
// due sooner than a sleep could be trusted to end: then polling is the only
// way to meet a sub-millisecond RTO.
func (rl *reliability) timerSoon(now time.Time) bool {
	c := rl.c
	if c.reliable && c.ri.reint == nil {
		return false
	}
	c.mu.Lock()
	t := rl.nextTick
	c.mu.Unlock()
	return !t.IsZero() && t.Sub(now) < timerResolution
}

// sendsQueued reports whether packets wait for room in the device (it
// said ErrNoResource). A device signals arrivals, not room: a goroutine
// that slept now might never wake, so it keeps polling instead.
func (rl *reliability) sendsQueued() bool {
	c := rl.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return rl.sendsQueuedLocked()
}

// sendsQueuedLocked is sendsQueued with c.mu held.
func (rl *reliability) sendsQueuedLocked() bool {
	c := rl.c
	for _, p := range rl.active {
		if rl.queues[p].head != nil {
			return true
		}
	}
	return len(rl.flushed) > 0 || c.rd.rdmaPending() || c.nat.nativeQueued()
}

func (rl *reliability) activate(peer hal.Rank) {
	if !rl.isActive[peer] {
		rl.isActive[peer] = true
		rl.active = append(rl.active, peer)
	}
}

// pushLocked sends queued packets to peer while the window and the device
// allow, then flushes.
func (rl *reliability) pushLocked(peer hal.Rank, now time.Time) error {
	c := rl.c
	if !c.cm.pushTPT(peer) {
		return nil // TPT changes go first; progress retries
	}
	q := &rl.queues[peer]
	rel := c.reliableTo(peer)
	var err error
	for q.head != nil {
		p := q.head
		if !rel {
			l := &rl.links[peer]
			if !l.canSend(c.cfg.Window) {
				break
			}
			l.assign(p, now)
			putSeq(p.buf[hal.HeaderLen:], p.seq)
			if p.seq%ackAskEvery == 0 && l.inFlight()+q.n > c.cfg.Window {
				// More is queued than the window holds: the sender
				// streams, and acknowledgements every ackAskEvery
				// packets keep its window moving (AckEvery is sized for
				// messages that fit in the window).
				askAck(p.buf[hal.HeaderLen:])
			}
		}
		if err = rl.transmit(p); err != nil {
			if !rel && !errors.Is(err, hal.ErrNoResource) && !fatalSendErr(err) {
				// An unreliable device's refusal (a route gone, a
				// link down) is a loss like any other: the packet
				// stays in flight and its timer resends it.
				c.stats.SendErrors++
				err = nil
			} else {
				if !rel {
					rl.links[peer].unassign(p)
				}
				break
			}
		}
		q.pop()
		if rel {
			rl.flushed = append(rl.flushed, p)
		} else {
			// Sent after the pass's tick, or outside a pass: its timer
			// is folded into nextTick here.
			c.rd.foldTimer(rl.links[peer].due(now, &c.timing))
			if c.pr.blocking {
				// The goroutine blocked in Wait set its deadline before
				// this packet had a timer: have it look again.
				c.pr.wakeLocked()
			}
		}
	}
	ferr := rl.flushLocked()
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
		rl.failPeer(peer, err.Error())
		return c.peerFault(peer)
	}
	return nil
}

// transmit hands one packet to the device, with current acknowledgements
// and CRC when the device is unreliable. A full device queue is flushed once
// and retried.
func (rl *reliability) transmit(p *outPkt) error {
	c := rl.c
	if !c.reliableTo(p.peer) {
		l := &rl.links[p.peer]
		credit, cum, sack := l.ackFields(c.cfg.Window)
		putAck(p.buf[hal.HeaderLen:], credit, cum, sack)
		putDstEp(p.buf[hal.HeaderLen:], c.ri.dstEpoch(p.peer))
		hal.Seal(p.buf, p.data)
	}
	err := c.dev.Send(p.buf, p.data)
	if errors.Is(err, hal.ErrNoResource) {
		if err = rl.flushLocked(); err == nil {
			err = c.dev.Send(p.buf, p.data)
		}
	}
	if err == nil {
		rl.countSent(p.peer, len(p.data))
		if trace.On(trace.HotDetail) {
			c.tr.traceSend("packet", p.peer, p.seq, len(p.data))
		}
	}
	return err
}

// flushLocked flushes the device; on a reliable device the packets it has
// taken are then released.
func (rl *reliability) flushLocked() error {
	c := rl.c
	err := c.dev.Flush()
	if err != nil {
		if errors.Is(err, hal.ErrNoResource) {
			return nil // still queued in the device; the next flush sends them
		}
		return err
	}
	c.rd.used = 0 // the device let go of every RDMA header
	for i, p := range rl.flushed {
		rl.release(p)
		rl.flushed[i] = nil
	}
	rl.flushed = rl.flushed[:0]
	return nil
}

// release returns a packet that needs no more transmissions.
func (rl *reliability) release(p *outPkt) {
	c := rl.c
	if m := p.msg; m != nil {
		m.pending--
		if m.pending == 0 {
			if m.org != nil {
				m.org.incr()
			}
			c.am.note(m.notify, nil)
			c.am.putMsg(m)
		}
	}
	rl.putPkt(p)
}

// sendAck sends an acknowledgement-only packet to peer.
func (rl *reliability) sendAck(peer hal.Rank) {
	c := rl.c
	b := rl.acks[peer]
	if b == nil {
		b = make([]byte, hal.HeaderLen+pktHdrLen)
		rl.acks[peer] = b
	}
	hh := hal.Header{Type: hal.FrameData, JobKey: c.cfg.JobKey, Src: c.rank, Dst: peer, Len: pktHdrLen, Life: c.life}
	hal.EncodeHeader(b, &hh)
	l := &rl.links[peer]
	credit, cum, sack := l.ackFields(c.cfg.Window)
	ph := pktHdr{kind: kindAck, flags: flagSeq, credit: credit, ackCum: cum, sack: sack, dstEp: c.ri.dstEpoch(peer)}
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

func (rl *reliability) getPkt() *outPkt {
	p := rl.freePkt
	if p == nil {
		b := make([]byte, 0, pktBufLen)
		return &outPkt{buf: b, hbuf: b}
	}
	rl.freePkt = p.next
	p.next = nil
	return p
}

func (rl *reliability) putPkt(p *outPkt) {
	if p.slab != nil {
		rl.slabs.put(p.slab)
		p.slab, p.buf = nil, p.hbuf
	}
	p.data, p.msg = nil, nil
	p.next = rl.freePkt
	rl.freePkt = p
}

// countSent counts a packet the device took toward peer, carrying n bytes
// of data (c.mu held).
func (rl *reliability) countSent(peer hal.Rank, n int) {
	c := rl.c
	c.stats.PacketsSent++
	ps := &c.peerStats[peer]
	ps.PacketsSent++
	ps.BytesSent += uint64(n)
}

// flushQueued is drain for a reliable device: packets queued because the
// device was full (a ring toward a slow peer) still go, so that a rank
// leaving right after a barrier does not drop the barrier's last message
// and leave its peer waiting for ever. Bounded by closeDrainMax: a peer
// that has stopped polling does not hold Close.
func (rl *reliability) flushQueued() {
	c := rl.c
	ctx, cancel := context.WithTimeout(context.Background(), closeDrainMax)
	defer cancel()
	c.Wait(ctx, func() (bool, error) { return !rl.sendsQueuedLocked(), nil })
}

// drain runs before Close lets go of an unreliable device, so that a rank
// leaving right after a barrier does not take with it what a peer still
// needs: first it waits until every packet this rank sent is acknowledged
// (the peer has the barrier's message), then it goes on answering until
// nothing has arrived for a quiet period (the peer resends a packet whose
// acknowledgement was lost, and must hear it again). Both end at
// closeDrainMax or PeerTimeout: a peer that is gone does not hold Close.
// With Config.Clock set the caller drives time, and Close does not wait.
func (rl *reliability) drain() {
	c := rl.c
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.PeerTimeout, closeDrainMax))
	defer cancel()
	err := c.Wait(ctx, func() (bool, error) {
		for _, p := range rl.active {
			if c.peerFault(p) == nil && (rl.links[p].inFlight() > 0 || rl.queues[p].head != nil) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return
	}
	quiet := max(10*time.Millisecond, 4*c.cfg.InitRTO)
	for {
		c.mu.Lock()
		last := c.stats.PacketsRecv
		c.mu.Unlock()
		qctx, qcancel := context.WithTimeout(ctx, quiet)
		err := c.Wait(qctx, func() (bool, error) {
			return c.stats.PacketsRecv != last, nil
		})
		qcancel()
		if err != nil {
			return // quiet for a whole period, or out of time
		}
	}
}

// onPacket runs the reliability protocol on packet ph from src over an
// unreliable device: its acknowledgements release what they cover, and
// its data is numbered. It reports whether ph carries data to deliver
// (not an acknowledgement alone, a duplicate or an unnumbered packet).
func (rl *reliability) onPacket(src hal.Rank, ph *pktHdr) bool {
	c := rl.c
	c.pr.clock()
	if ph.flags&flagSeq == 0 {
		c.stats.BadPackets++
		if trace.On(trace.Hot) {
			c.tr.traceDrop(src, "no sequence number over an unreliable device", ph.seq)
		}
		return false
	}
	l := &rl.links[src]
	backoff := l.backoff
	if n := l.onAck(ph.ackCum, ph.sack, ph.credit, c.pr.pollNow, rl.releaseFn); n > 0 {
		if backoff != 0 && l.backoff == 0 && trace.On(trace.Internal) {
			c.tr.traceRTO(src)
		}
		if trace.On(trace.Hot) {
			c.tr.traceAck(src, ph, n)
		}
		// What the window now lets go is pushed after the poll (every
		// caller of pollLocked pushes what is queued), once for all the
		// acknowledgements it took, not a system call for each (an
		// acknowledgement covers AckEvery packets, less than one
		// segmented datagram).
	}
	if ph.kind == kindAck {
		return false
	}
	fresh := l.onData(ph.seq, ph.flags&flagAckNow != 0, c.pr.pollNow, &c.timing)
	rl.activate(src) // an acknowledgement is owed
	if !fresh {
		c.stats.Duplicates++
		c.peerStats[src].Duplicates++
		if trace.On(trace.Hot) {
			c.tr.traceDrop(src, "duplicate or beyond the window", ph.seq)
		}
		return false
	}
	return true
}

// sendQueue is the packets waiting toward one peer for the window or the
// device, in order.
type sendQueue struct {
	head, tail *outPkt
	n          int // packets queued
}

func (q *sendQueue) push(p *outPkt) {
	q.n++
	p.next = nil
	if q.tail == nil {
		q.head = p
	} else {
		q.tail.next = p
	}
	q.tail = p
}

func (q *sendQueue) pop() *outPkt {
	p := q.head
	if p != nil {
		q.n--
		q.head = p.next
		if q.head == nil {
			q.tail = nil
		}
		p.next = nil
	}
	return p
}
