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

// peerLoss is the stripe's side of hal.PeerLoss. devs, seen, buf and
// dirty are progress-lock state; pending is guarded by mu, and count and
// waiting are atomic, for PeersLost, LostPeers and Wait off the progress
// lock.
type peerLoss struct {
	devs    []hal.PeerLoss // each member's, nil for one that finds no peer lost
	seen    []uint64       // each member's PeersLost at the last look
	buf     []hal.LostPeer
	dirty   bool // a loss or a member failure since the last reportLost
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
	for i, pl := range l.devs {
		if pl == nil {
			continue
		}
		m := d.members[i]
		n := pl.PeersLost()
		if n == l.seen[i] {
			continue
		}
		l.seen[i] = n
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
			l.dirty = true
		}
		clear(l.buf)
	}
	if l.dirty {
		d.reportLost()
	}
}

// foundAgain forgets that member m lost ps's peer: its link is back in
// (the peer answered a rejoin on it, in this life or a new one). The peer
// is reachable again, so it is reported again if it is lost again
// (progress lock).
func (d *Device) foundAgain(m *member, ps *peerState) {
	ps.lostOn &^= 1 << m.idx
	ps.reported = false
	if ps.lostOn == 0 {
		ps.lostErr = nil
	}
}

// reportLost reports the peers lost on every member that are not
// reported yet (progress lock).
func (d *Device) reportLost() {
	l := &d.loss
	all := uint32(1)<<len(d.members) - 1
	failed := all &^ d.okMask // members out as a whole for a device error
	l.dirty = false
	for p, ps := range d.peers {
		if ps.lostOn == 0 || ps.reported || (ps.lostOn|failed)&all != all {
			continue // still reachable on a member: judged again when that one loses it or fails
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

// lossDevs finds each member's hal.PeerLoss, once, at New and Replace.
func (d *Device) lossDevs() {
	if d.loss.devs == nil {
		d.loss.devs, d.loss.seen = make([]hal.PeerLoss, len(d.members)), make([]uint64, len(d.members))
	}
	for i, m := range d.members {
		d.loss.devs[i], _ = m.dev.(hal.PeerLoss)
	}
}

// clearLost forgets that member i lost any peer: its device was replaced,
// and the new one's connections are its own (progress lock).
func (d *Device) clearLost(i int) {
	d.lossDevs()
	d.loss.seen[i] = 0
	for _, ps := range d.peers {
		ps.lostOn &^= 1 << i
	}
}
