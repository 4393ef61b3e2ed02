package route

import (
	"fmt"

	"github.com/weft-hpc/weft/hal"
)

// The members' optional interfaces, forwarded toward the peers each
// member reaches (hal.Router says which apply toward a peer).

// SendShort sends a short frame through dst's member, which must be a
// hal.ShortSender: toward another, it fails with hal.ErrTooLarge.
func (d *Device) SendShort(dst hal.Rank, t hal.FrameType, hdr, payload []byte) error {
	if int(dst) >= len(d.via) {
		return fmt.Errorf("route: short frame to rank %d of %d: %w", dst, len(d.via), hal.ErrUnknownPeer)
	}
	s := d.short[d.via[dst]]
	if s == nil {
		return errNoShort
	}
	return s.SendShort(dst, t, hdr, payload)
}

// ShortMax is the most bytes a member's short frame carries (0: none
// sends short frames).
func (d *Device) ShortMax() int { return d.shortMax }

// PrepareSend passes the hint to dst's member if it takes hints.
func (d *Device) PrepareSend(dst hal.Rank) {
	if int(dst) < len(d.via) {
		if p := d.prep[d.via[dst]]; p != nil {
			p.PrepareSend(dst)
		}
	}
}

// CMA reports whether some member has cross-memory attach.
func (d *Device) CMA() bool {
	for _, c := range d.cma {
		if c != nil {
			return true
		}
	}
	return false
}

// cmaTo is peer's member's cross-memory attach.
func (d *Device) cmaTo(peer hal.Rank) (hal.CrossMemory, error) {
	if int(peer) >= len(d.via) {
		return nil, fmt.Errorf("route: cross-memory attach to rank %d of %d: %w", peer, len(d.via), hal.ErrUnknownPeer)
	}
	if c := d.cma[d.via[peer]]; c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("%w toward rank %d", errNoCMA, peer)
}

// ReadFrom reads from peer through its member's cross-memory attach.
func (d *Device) ReadFrom(peer hal.Rank, addr uintptr, dst []byte) error {
	c, err := d.cmaTo(peer)
	if err != nil {
		return err
	}
	return c.ReadFrom(peer, addr, dst)
}

// WriteTo writes to peer through its member's cross-memory attach.
func (d *Device) WriteTo(peer hal.Rank, addr uintptr, src []byte) error {
	c, err := d.cmaTo(peer)
	if err != nil {
		return err
	}
	return c.WriteTo(peer, addr, src)
}

// SharedBlock is the block of the first member that offers one
// (hal.SharedMemory), shared with that member's peers only; nil when none
// does.
func (d *Device) SharedBlock() []byte { return d.block }

// Outages sums the members' hal.Failover counts: a stripe member that
// takes one of its NICs out.
func (d *Device) Outages() uint64 {
	var n uint64
	for _, m := range d.members {
		if f, ok := m.(hal.Failover); ok {
			n += f.Outages()
		}
	}
	return n
}

// Interfaces the route offers whatever its members: each applies toward
// the peers whose member implements it.
var (
	_ hal.Router       = (*Device)(nil)
	_ hal.ShortSender  = (*Device)(nil)
	_ hal.SendPreparer = (*Device)(nil)
	_ hal.CrossMemory  = (*Device)(nil)
	_ hal.SharedMemory = (*Device)(nil)
	_ hal.Failover     = (*Device)(nil)
)

// errNoBroadcast is SendBroadcast's error on a route no member of which
// broadcasts.
var errNoBroadcast = fmt.Errorf("route: send to every peer: no member broadcasts: %w", hal.ErrUnknownPeer)

// SendBroadcast (hal.Broadcaster) sends a multicast frame on the member
// that broadcasts; Caps.Broadcast says whether one does.
func (d *Device) SendBroadcast(hdr, payload []byte) error {
	if d.bcast == nil {
		return errNoBroadcast
	}
	if d.closed.Load() {
		return errClosed
	}
	d.dirty |= 1 << d.bcastIdx
	return d.bcast.SendBroadcast(hdr, payload)
}

// PeersLost (hal.PeerLoss) sums the peers the members found lost without a
// send (a verbs member watching its connections): over a route, a rank
// that only waits for a dead peer learns of it as over the member alone.
func (d *Device) PeersLost() uint64 {
	var n uint64
	for _, m := range d.members {
		if pl, ok := m.(hal.PeerLoss); ok {
			n += pl.PeersLost()
		}
	}
	return n
}

// LostPeers (hal.PeerLoss) appends the peers the members found lost that
// they have not returned before, each only from the member that reaches
// it: another member's view of a peer routed elsewhere is not the route's.
func (d *Device) LostPeers(dst []hal.LostPeer) []hal.LostPeer {
	for i, m := range d.members {
		pl, ok := m.(hal.PeerLoss)
		if !ok {
			continue
		}
		from := len(dst)
		dst = pl.LostPeers(dst)
		keep := dst[:from]
		for _, l := range dst[from:] {
			if int(l.Peer) < len(d.via) && int(d.via[l.Peer]) == i {
				keep = append(keep, l)
			}
		}
		clear(dst[len(keep):])
		dst = keep
	}
	return dst
}
