package stripe

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/weft-hpc/weft/hal"
)

// Peers the members find lost without a send (hal.PeerLoss). A member
// that watches its connections (transport/verbs) reports a peer it lost;
// over a stripe that is one link gone: the stripe takes that link out
// (ReasonPeerLost) and carries on over the others, and reports the peer
// lost to the layer above only once every member has lost it (or failed
// as a whole), as a single device would. Members are looked at in Poll,
// on the progress lock, where link state lives; the first Wait after a
// peer is reported returns at once, so that a rank blocked for a dead
// peer looks (the layer above reads PeersLost after every Wait).

var _ hal.PeerLoss = (*Device)(nil)

// peerLoss is the stripe's side of hal.PeerLoss. seen and buf are
// progress-lock state; pending is guarded by mu, and count and waiting
// are atomic, for PeersLost, LostPeers and Wait off the progress lock.
type peerLoss struct {
	seen    []uint64 // each member's PeersLost at the last look (0 for one without)
	buf     []hal.LostPeer
	open    bool // some peer is lost on a member and not yet reported
	mu      sync.Mutex
	pending []hal.LostPeer // lost on every member, not yet taken by LostPeers
	count   atomic.Uint64  // peers reported lost so far
	waiting atomic.Bool    // a peer was reported since the last Wait
}

// PeersLost (hal.PeerLoss) counts the peers the stripe found lost on
// every member.
func (d *Device) PeersLost() uint64 { return d.loss.count.Load() }

// LostPeers (hal.PeerLoss) appends the peers found lost on every member
// that it has not returned before.
func (d *Device) LostPeers(dst []hal.LostPeer) []hal.LostPeer {
	l := &d.loss
	l.mu.Lock()
	defer l.mu.Unlock()
	dst = append(dst, l.pending...)
	clear(l.pending)
	l.pending = l.pending[:0]
	return dst
}

// takeMemberLosses takes the peers each member found lost since the last
// look: their links go out, and a peer lost on every member (a member
// failed as a whole counts as having lost it) is reported (progress lock).
func (d *Device) takeMemberLosses() {
	l := &d.loss
	for _, m := range d.members {
		pl, ok := m.dev.(hal.PeerLoss)
		if !ok {
			continue
		}
		n := pl.PeersLost()
		if n == l.seen[m.idx] {
			continue
		}
		l.seen[m.idx] = n
		l.buf = pl.LostPeers(l.buf[:0])
		for _, lp := range l.buf {
			ps := d.peer(lp.Peer)
			if ps == nil {
				continue
			}
			if ps.lostOn == 0 {
				ps.lostErr = lp.Err
			}
			ps.lostOn |= 1 << m.idx
			d.takeOut(m, lp.Peer, ps, ReasonPeerLost, d.now)
			l.open = true
		}
		clear(l.buf)
	}
	if l.open {
		d.reportLost()
	}
}

// reportLost reports the peers lost on every member that are not
// reported yet (progress lock).
func (d *Device) reportLost() {
	l := &d.loss
	failed := uint32(0)
	for _, m := range d.members {
		if m.failed {
			failed |= 1 << m.idx
		}
	}
	all := uint32(1)<<len(d.members) - 1
	l.open = false
	for p, ps := range d.peers {
		if ps.lostOn == 0 || ps.reported {
			continue
		}
		if (ps.lostOn|failed)&all != all {
			l.open = true // still reachable on a member: reported when that one loses it too
			continue
		}
		ps.reported = true
		err := fmt.Errorf("stripe: rank %d lost on every member: %w", p, ps.lostErr)
		l.mu.Lock()
		l.pending = append(l.pending, hal.LostPeer{Peer: hal.Rank(p), Err: err})
		l.mu.Unlock()
		l.count.Add(1)
		l.waiting.Store(true)
	}
}

// clearLost forgets that member i lost any peer: its device was replaced,
// and the new one's connections are its own (progress lock).
func (d *Device) clearLost(i int) {
	d.loss.seen[i] = 0
	for _, ps := range d.peers {
		ps.lostOn &^= 1 << i
	}
}
