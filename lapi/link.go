package lapi

import (
	"math/bits"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// linkTiming are the reliability constants. Defaults are in Config.
type linkTiming struct {
	initRTO, minRTO, maxRTO time.Duration
	ackDelay                time.Duration
	ackEvery                int
	peerTimeout             time.Duration
	window                  int
}

// outPkt is one packet on its way to a peer: the encoded frame header and
// packet header (with user header) it owns, and the data it refers to.
type outPkt struct {
	buf     []byte // hal header + packet header + user header
	data    []byte // the packet's data: the caller's buffer or an owned copy
	seq     uint32
	firstAt time.Time // first transmission
	sentAt  time.Time // latest transmission
	retries int
	fastRtx bool // already fast-retransmitted once
	msg     *outMsg
	peer    hal.Rank
	own     []byte   // owned buffer for copied data
	slab    *msgSlab // holding buf and data, when the message was copied into one
	hbuf    []byte   // the packet's own header buffer, buf when slab is nil
	next    *outPkt  // free list and send queues
}

// link is the reliability state toward one peer: the sending half (sequence
// numbers, the window of unacknowledged packets, the RTT estimate) and the
// receiving half (what has arrived, what acknowledgement is owed).
// It does no I/O and reads no clock: every method takes now.
type link struct {
	peer hal.Rank

	// sending half
	nextSeq    uint32
	una        uint32 // oldest unacknowledged sequence number
	inflight   [sackBits]*outPkt
	peerCredit int
	rtt        rttEstimator
	backoff    uint      // RTO doublings since the last valid RTT sample
	progress   time.Time // last acknowledgement of new data: the timer restarts there

	// receiving half
	cum     uint32    // every packet below cum has arrived
	sack    [2]uint64 // bit i: packet cum+1+i has arrived
	ackOwed int       // packets arrived since an acknowledgement was sent
	ackDue  time.Time // when a delayed acknowledgement must go (zero: none)
	ackNow  bool      // an acknowledgement must go at the next chance
}

func (l *link) init(peer hal.Rank, window int) {
	*l = link{peer: peer, peerCredit: window}
}

// inFlight is the number of packets sent and not yet acknowledged.
func (l *link) inFlight() int { return int(l.nextSeq - l.una) }

// canSend reports whether the window and the peer's credit allow one more.
func (l *link) canSend(window int) bool {
	return l.inFlight() < min(window, l.peerCredit, sackBits)
}

// assign gives p the next sequence number and records it as in flight.
func (l *link) assign(p *outPkt, now time.Time) {
	p.seq = l.nextSeq
	l.nextSeq++
	p.firstAt, p.sentAt, p.retries, p.fastRtx = now, now, 0, false
	l.inflight[p.seq%sackBits] = p
}

// ackFields are the acknowledgement to put in the next packet to the peer.
// Taking them counts as sending the acknowledgement.
func (l *link) ackFields(credit int) (uint16, uint32, [2]uint64) {
	l.ackOwed, l.ackDue, l.ackNow = 0, time.Time{}, false
	return uint16(min(credit, 0xffff)), l.cum, l.sack
}

// onAck applies an acknowledgement from the peer. released is called for
// each packet newly acknowledged; it returns how many were.
func (l *link) onAck(cum uint32, sack [2]uint64, credit uint16, now time.Time, released func(*outPkt)) int {
	if int32(l.nextSeq-cum) < 0 {
		return 0 // acknowledges packets never sent: not from this peer's view of us
	}
	l.peerCredit = int(credit)
	n := 0
	if int32(cum-l.una) > 0 {
		for s := l.una; s != cum; s++ {
			n += l.release(s, now, released)
		}
		l.una = cum
	}
	// The sack bits are relative to this acknowledgement's own cum, which
	// may be older than una when acknowledgements arrive out of order.
	// Only the set bits are visited: every packet from the peer carries
	// an acknowledgement, and its sack is empty but for losses.
sacked:
	for w, bitsw := range sack {
		for ; bitsw != 0; bitsw &= bitsw - 1 {
			s := cum + 1 + uint32(w*64+bits.TrailingZeros64(bitsw))
			if int32(l.nextSeq-s) <= 0 {
				break sacked
			}
			if int32(s-l.una) >= 0 {
				n += l.release(s, now, released)
			}
		}
	}
	for l.una != l.nextSeq && l.inflight[l.una%sackBits] == nil {
		l.una++
	}
	if n > 0 {
		// https://www.rfc-editor.org/rfc/rfc6298#section-5 (5.3): new data
		// acknowledged restarts the timer.
		l.progress = now
	}
	return n
}

func (l *link) release(s uint32, now time.Time, released func(*outPkt)) int {
	p := l.inflight[s%sackBits]
	if p == nil || p.seq != s {
		return 0
	}
	if p.retries == 0 {
		l.rtt.sample(now.Sub(p.sentAt))
		l.backoff = 0 // a valid sample: the back-off has done its work (Karn)
	}
	l.inflight[s%sackBits] = nil
	released(p)
	return 1
}

// onData records the arrival of packet seq and reports whether it is new;
// a duplicate or out-of-window packet must be discarded. ackNow says the
// sender asked for the acknowledgement at once (flagAckNow).
func (l *link) onData(seq uint32, ackNow bool, now time.Time, t *linkTiming) bool {
	d := int32(seq - l.cum)
	switch {
	case d < 0:
		l.ackNow = true // the peer missed our acknowledgement
		return false
	case d == 0:
		l.cum++
		for {
			b0 := l.sack[0]&1 != 0
			l.shift()
			if !b0 {
				break
			}
			l.cum++
		}
	case d <= sackBits:
		i := d - 1
		if l.sack[i/64]&(1<<(i%64)) != 0 {
			l.ackNow = true
			return false
		}
		l.sack[i/64] |= 1 << (i % 64)
		l.ackNow = true // a hole: tell the sender at once so it can repair it
	default:
		return false // beyond the window the sender was allowed
	}
	l.ackOwed++
	if ackNow || l.ackOwed >= t.ackEvery {
		l.ackNow = true
	} else if l.ackDue.IsZero() {
		l.ackDue = now.Add(t.ackDelay)
	}
	return true
}

func (l *link) shift() {
	l.sack[0] = l.sack[0]>>1 | l.sack[1]<<63
	l.sack[1] >>= 1
}

// needAck reports whether an acknowledgement must be sent now.
func (l *link) needAck(now time.Time) bool {
	return l.ackNow || (!l.ackDue.IsZero() && !now.Before(l.ackDue))
}

// expire runs the link's retransmission timer, one per link as in RFC
// 6298: it covers the oldest unacknowledged packet and restarts whenever
// new data is acknowledged, so a long queue behind a slow link is not
// resent wholesale. When it runs out only that packet goes again and the
// timeout doubles. Holes that the sack bits show (three later packets
// arrived) are repaired at once, each once. rtx is given each packet to
// resend with the timeout now in force: 0 for a hole's repair, the doubled
// one when the timer ran out. It returns when the timer will next run out
// (zero: nothing in flight), and reports failed when a packet has gone
// unacknowledged for peerTimeout.
func (l *link) expire(now time.Time, t *linkTiming, rtx func(p *outPkt, rto time.Duration)) (next time.Time, failed bool) {
	rto := l.backedOffRTO(t)
	later := 0 // packets above the current one already acknowledged
	var oldest *outPkt
	for s := l.nextSeq; s != l.una; {
		s--
		p := l.inflight[s%sackBits]
		if p == nil {
			later++
			continue
		}
		if now.Sub(p.firstAt) >= t.peerTimeout {
			return time.Time{}, true
		}
		oldest = p
		if later >= 3 && !p.fastRtx {
			p.fastRtx = true
			p.retries++
			p.sentAt = now
			rtx(p, 0)
		}
	}
	if oldest == nil {
		return time.Time{}, false
	}
	start := oldest.sentAt
	if l.progress.After(start) {
		start = l.progress
	}
	due := start.Add(rto)
	if !now.Before(due) {
		oldest.retries++
		oldest.sentAt = now
		l.backoff++
		rto = min(rto*2, t.maxRTO)
		rtx(oldest, rto)
		due = now.Add(rto)
	}
	return due, false
}

// backedOffRTO is the retransmission timeout in force: the estimate's,
// doubled for each timeout since the last valid round-trip sample (see
// expire).
func (l *link) backedOffRTO(t *linkTiming) time.Duration {
	return min(l.rtt.rto(t.initRTO, t.minRTO, t.maxRTO)<<min(l.backoff, 10), t.maxRTO)
}

// due is when the retransmission timer of a packet sent now runs out, at
// the timeout in force.
func (l *link) due(now time.Time, t *linkTiming) time.Time { return now.Add(l.backedOffRTO(t)) }

// unassign takes back the sequence number of p, the last one assigned,
// when the device would not take the packet.
func (l *link) unassign(p *outPkt) {
	if p.seq+1 == l.nextSeq {
		l.inflight[p.seq%sackBits] = nil
		l.nextSeq--
	}
}
