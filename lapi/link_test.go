package lapi

import (
	"testing"
	"time"
)

var testTiming = linkTiming{
	initRTO: 2 * time.Millisecond, minRTO: 200 * time.Microsecond, maxRTO: 100 * time.Millisecond,
	ackDelay: 100 * time.Microsecond, ackEvery: 8, peerTimeout: time.Second, window: sackBits,
}

// TestLinkReceiveWindow feeds sequence numbers in a scrambled order with
// duplicates and checks that each is accepted exactly once and that the
// cumulative acknowledgement and sack bits describe what arrived.
func TestLinkReceiveWindow(t *testing.T) {
	var l link
	l.init(1, sackBits)
	now := time.Unix(0, 0)
	order := []uint32{2, 0, 0, 5, 1, 2, 3, 200, 4, 6, 300, 5}
	want := []bool{true, true, false, true, true, false, true, false, true, true, false, false}
	for i, s := range order {
		if got := l.onData(s, false, now, &testTiming); got != want[i] {
			t.Fatalf("packet %d (seq %d): fresh=%v, want %v", i, s, got, want[i])
		}
	}
	if l.cum != 7 || l.sack != [2]uint64{} {
		t.Fatalf("cum=%d sack=%x, want 7 and none", l.cum, l.sack)
	}
	l.onData(9, false, now, &testTiming)
	l.onData(72, false, now, &testTiming)
	if l.sack[0] != 1<<1 || l.sack[1] != 1<<0 {
		t.Fatalf("sack=%x, want bit 1 and bit 64", l.sack)
	}
}

// TestLinkAckAndRetransmit sends a window of packets, acknowledges some by
// sack, and checks release, fast retransmit and timeout retransmission with
// back-off.
func TestLinkAckAndRetransmit(t *testing.T) {
	var l link
	l.init(1, sackBits)
	now := time.Unix(0, 0)
	pkts := make([]*outPkt, 10)
	for i := range pkts {
		pkts[i] = &outPkt{}
		l.assign(pkts[i], now)
	}
	if l.inFlight() != 10 {
		t.Fatalf("in flight %d", l.inFlight())
	}
	var released []uint32
	rel := func(p *outPkt) { released = append(released, p.seq) }
	// Packets 0,1 arrived; 2 lost; 3,4,5 arrived (sack bits 0,1,2 above cum=2).
	now = now.Add(50 * time.Microsecond)
	if n := l.onAck(2, [2]uint64{0b111}, 128, now, rel); n != 5 {
		t.Fatalf("released %d (%v), want 5", n, released)
	}
	if l.una != 2 {
		t.Fatalf("una=%d, want 2", l.una)
	}
	if !l.rtt.have || l.rtt.srtt != 50*time.Microsecond {
		t.Fatalf("rtt not sampled: %+v", l.rtt)
	}
	var rtx []uint32
	next, failed := l.expire(now, &testTiming, func(p *outPkt, _ time.Duration) { rtx = append(rtx, p.seq) })
	if failed || len(rtx) != 1 || rtx[0] != 2 {
		t.Fatalf("fast retransmit: %v failed=%v, want [2]", rtx, failed)
	}
	if next.IsZero() {
		t.Fatal("no next timer with packets in flight")
	}
	// Nothing more acknowledged: when the timer runs out only the oldest
	// packet goes again (RFC 6298 5.4), and the timeout doubles.
	rtx = rtx[:0]
	now = now.Add(testTiming.maxRTO)
	next, _ = l.expire(now, &testTiming, func(p *outPkt, _ time.Duration) { rtx = append(rtx, p.seq) })
	if len(rtx) != 1 || rtx[0] != 2 || l.backoff != 1 || !next.After(now) {
		t.Fatalf("timeout retransmit %v backoff %d next %v, want [2], 1, later", rtx, l.backoff, next.Sub(now))
	}
	// Karn: the acknowledgement of the retransmitted packet 2 alone gives no
	// RTT sample and keeps the back-off.
	srtt := l.rtt.srtt
	l.onAck(6, [2]uint64{}, 128, now.Add(time.Millisecond), rel)
	if l.rtt.srtt != srtt || l.backoff != 1 {
		t.Fatalf("ack of a retransmitted packet: srtt %v (was %v) backoff %d", l.rtt.srtt, srtt, l.backoff)
	}
	// A packet sent once gives a sample, which ends the back-off.
	l.onAck(10, [2]uint64{}, 128, now.Add(2*time.Millisecond), rel)
	if l.inFlight() != 0 || l.backoff != 0 {
		t.Fatalf("after full ack: inflight %d backoff %d", l.inFlight(), l.backoff)
	}
}

// TestLinkTimerRestartsOnProgress: the timer runs from the last
// acknowledgement of new data, so the tail of a long queue is not resent
// merely for having waited behind the head.
func TestLinkTimerRestartsOnProgress(t *testing.T) {
	var l link
	l.init(1, sackBits)
	start := time.Unix(0, 0)
	for i := 0; i < 20; i++ {
		l.assign(&outPkt{}, start)
	}
	rel := func(*outPkt) {}
	rto := testTiming.initRTO
	now := start
	for cum := uint32(1); cum <= 20; cum++ {
		now = now.Add(rto / 2) // each ack comes half an RTO after the previous
		l.onAck(cum, [2]uint64{}, 128, now, rel)
		n := 0
		l.expire(now, &testTiming, func(*outPkt, time.Duration) { n++ })
		if n != 0 {
			t.Fatalf("after ack %d at %v: %d spurious retransmissions", cum, now.Sub(start), n)
		}
	}
}

// TestLinkPeerTimeout: a packet never acknowledged fails the peer.
func TestLinkPeerTimeout(t *testing.T) {
	var l link
	l.init(3, sackBits)
	now := time.Unix(0, 0)
	l.assign(&outPkt{}, now)
	for i := 0; i < 100; i++ {
		now = now.Add(50 * time.Millisecond)
		if _, failed := l.expire(now, &testTiming, func(*outPkt, time.Duration) {}); failed {
			if now.Sub(time.Unix(0, 0)) < testTiming.peerTimeout {
				t.Fatalf("failed early at %v", now)
			}
			return
		}
	}
	t.Fatal("peer never declared failed")
}

// TestLinkStaleAck: an acknowledgement older than what is known, or beyond
// what was sent, must not release anything it should not.
func TestLinkStaleAck(t *testing.T) {
	var l link
	l.init(1, sackBits)
	now := time.Unix(0, 0)
	for i := 0; i < 4; i++ {
		l.assign(&outPkt{}, now)
	}
	n := 0
	rel := func(*outPkt) { n++ }
	l.onAck(2, [2]uint64{}, 128, now, rel)
	l.onAck(1, [2]uint64{}, 128, now, rel) // stale
	l.onAck(1000, [2]uint64{}, 128, now, rel)
	if n != 2 || l.una != 2 {
		t.Fatalf("released %d una %d, want 2 and 2", n, l.una)
	}
}

// TestLinkReorderedAck: an old acknowledgement arriving after a newer one
// must read its sack bits against its own cumulative point, not release
// packets the peer never got.
func TestLinkReorderedAck(t *testing.T) {
	var l link
	l.init(1, sackBits)
	now := time.Unix(0, 0)
	for i := 0; i < 10; i++ {
		l.assign(&outPkt{}, now)
	}
	var rel []uint32
	f := func(p *outPkt) { rel = append(rel, p.seq) }
	l.onAck(5, [2]uint64{}, 128, now, f) // newer: 0..4 arrived
	// Older: cum 2, sack bit 0 = packet 3. Packets 5..9 were not acknowledged.
	l.onAck(2, [2]uint64{0b1}, 128, now, f)
	if len(rel) != 5 || l.una != 5 {
		t.Fatalf("released %v una %d, want 0..4 and 5", rel, l.una)
	}
	l.onAck(2, [2]uint64{0b1000}, 128, now, f) // bit 3 = packet 6
	if len(rel) != 6 || rel[5] != 6 {
		t.Fatalf("released %v, want packet 6 added", rel)
	}
}

// TestLinkSackBothWords: sack bits in both words release their packets,
// and a bit past what was sent ends the walk.
func TestLinkSackBothWords(t *testing.T) {
	l, now := linkSent(100)
	var released []uint32
	rel := func(p *outPkt) { released = append(released, p.seq) }
	// cum 0: bit i stands for packet 1+i. Packets 1, 71 and 100 (never
	// sent: 0..99 were) are named.
	sack := [2]uint64{1 << 0, 1<<(70-64) | 1<<(99-64)}
	if n := l.onAck(0, sack, 128, now, rel); n != 2 || len(released) != 2 || released[0] != 1 || released[1] != 71 {
		t.Fatalf("released %d: %v, want packets 1 and 71", n, released)
	}
}

// BenchmarkOnAckEmptySack is the acknowledgement every packet from a
// peer carries: nothing new, no sack bits.
func BenchmarkOnAckEmptySack(b *testing.B) {
	l, now := linkSent(10)
	rel := func(*outPkt) {}
	for b.Loop() {
		l.onAck(0, [2]uint64{}, 128, now, rel)
	}
}

// linkSent is a link toward rank 1 with n packets sent at time 0, and
// that time.
func linkSent(n int) (*link, time.Time) {
	l := new(link)
	l.init(1, sackBits)
	now := time.Unix(0, 0)
	for range n {
		l.assign(&outPkt{}, now)
	}
	return l, now
}
