package lapi

import (
	"time"

	"github.com/weft-hpc/weft/hal"
)

// Snapshot is a context's state at one moment, for serviceability: what
// each link toward a peer holds, the RDMA engine's transfers, the
// reintegration protocol's view, and the counters. It is a copy: reading
// it touches nothing of the context's. mpi writes it into a rank's state
// snapshot on a fatal error, a timeout or a signal (issue 32).
type Snapshot struct {
	Rank hal.Rank
	Size int
	// Reliable: the device is reliable toward every peer, and no link
	// state (sequence numbers, acknowledgements, timers) exists; the
	// Peers' link fields are then zero.
	Reliable bool
	Closed   bool
	// Reintegrates: the context joins by the reintegration protocol;
	// Epoch is this incarnation and Ready whether RDMA is on here.
	// Without it, RDMA is always on.
	Reintegrates bool
	Epoch        uint64
	Ready        bool
	// Peers are one entry per rank of the job, this one's included (its
	// entry says only whether RDMA to self is on).
	Peers []PeerSnapshot
	// RCxtsInUse are the rCxts held by RDMA transfers in flight,
	// Transfers the Puts, Gets and Accumulates not yet completed, and
	// ChunksWaiting their chunks waiting for an rCxt or for room toward
	// their peer.
	RCxtsInUse, Transfers, ChunksWaiting int
	// Serving are the peers' reads this rank is answering.
	Serving int
	// Reassembling are active messages of which some packets have
	// arrived and not all.
	Reassembling int
	// Outstanding are Gets, Rmws and rendezvous sends waiting for their
	// answer.
	Outstanding int
	Stats       Stats
	RDMAStats   RDMAStats
}

// PeerSnapshot is the state toward one peer.
type PeerSnapshot struct {
	Peer hal.Rank
	// Failed is the error the peer was declared failed with, "" when it
	// was not.
	Failed string
	// Unacked are the packets sent and not yet acknowledged, Queued those
	// waiting for room in the window or in the device, and Window how many
	// may be in flight now (the smaller of the configured window and the
	// peer's credit).
	Unacked, Queued, Window int
	// RTO is the retransmission timeout now in force (with its back-off),
	// SRTT the smoothed round-trip time (0: no sample yet), and Backoff
	// the RTO doublings since the last sample.
	RTO, SRTT time.Duration
	Backoff   int
	// OldestAge is how long the oldest unacknowledged packet has waited
	// since its first transmission, and Retries how often it was resent.
	OldestAge time.Duration
	Retries   int
	// AckOwed are the packets from the peer not yet acknowledged to it.
	AckOwed int
	// RDMAReady: RDMA toward the peer is on (reintegration done both
	// ways); PeerEpoch is the incarnation the peer last announced.
	RDMAReady bool
	PeerEpoch uint64
	// RDMABytes are the bytes of RDMA chunks launched toward the peer and
	// not completed, RDMAWindow the congestion window they are held to,
	// and RDMAWaiting the peer's chunks waiting to be launched.
	RDMABytes, RDMAWindow, RDMAWaiting int
}

// Snapshot returns the context's state (see Snapshot, the type).
func (c *Context) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snapshotTx()
}

// snapshotTx is Snapshot with the progress lock held.
func (c *Context) snapshotTx() Snapshot {
	now := c.now()
	s := Snapshot{Rank: c.rank, Size: c.cfg.Size, Reliable: c.reliable, Closed: c.closed,
		Reintegrates: c.ri.reint != nil, Ready: true,
		Transfers: c.rd.groups, ChunksWaiting: len(c.rd.waiting), Serving: len(c.rd.serving),
		Reassembling: len(c.am.reasm), Stats: c.stats, RDMAStats: c.rd.stats}
	s.RDMAStats.Engine = c.rd.eng.Stats()
	if c.rd.pool != nil {
		s.RCxtsInUse = c.rd.pool.InUse()
	}
	for _, g := range c.gets.slots {
		if g != nil && g.used {
			s.Outstanding++
		}
	}
	if c.ri.reint != nil {
		s.Epoch, s.Ready = c.ri.reint.Epoch(), c.ri.reint.Ready()
	}
	s.Peers = make([]PeerSnapshot, c.cfg.Size)
	for i := range s.Peers {
		p := &s.Peers[i]
		peer := hal.Rank(i)
		p.Peer = peer
		if c.ri.reint == nil {
			p.RDMAReady = true
		} else {
			p.RDMAReady = peer == c.rank && c.ri.reint.Ready() || c.ri.reint.RDMATo(peer)
			p.PeerEpoch = c.ri.reint.PeerEpoch(peer)
		}
		if i < len(c.faults) {
			if err := c.peerFault(hal.Rank(i)); err != nil {
				p.Failed = err.Error()
			}
		}
		if i < len(c.rel.queues) {
			p.Queued = c.rel.queues[i].n
		}
		if i < len(c.rd.out) {
			p.RDMABytes, p.RDMAWindow, p.RDMAWaiting = c.rd.out[i], c.rd.cwnd[i], c.rd.nwait[i]
		}
		if c.rel.links == nil || peer == c.rank {
			continue
		}
		l := &c.rel.links[i]
		t := &c.timing
		p.Unacked = l.inFlight()
		p.Window = min(t.window, l.peerCredit, sackBits)
		p.RTO = l.backedOffRTO(t)
		if l.rtt.have {
			p.SRTT = l.rtt.srtt
		}
		p.Backoff = int(l.backoff)
		p.AckOwed = l.ackOwed
		for s := l.una; s != l.nextSeq; s++ {
			if q := l.inflight[s%sackBits]; q != nil {
				p.OldestAge, p.Retries = now.Sub(q.firstAt), q.retries
				break
			}
		}
	}
	return s
}
