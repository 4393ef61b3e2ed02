package lapi

import "github.com/weft-hpc/weft/hal"

// lossWatch takes the peers a device finds lost without a send toward
// them (hal.PeerLoss) and fails them as a send's error does: a rank that
// only waits for a dead peer learns of it from its own device. The
// device's Wait returns when it finds one, so the look after every Wait
// (block) is where a waiting rank sees it.
type lossWatch struct {
	dev  hal.PeerLoss // nil: the device does not report lost peers
	seen uint64       // dev.PeersLost() at the last look
	buf  []hal.LostPeer
}

// takeLost fails the peers the device found lost since the last look
// (c.mu held). Cheap when none was: one atomic load in the device.
func (c *Context) takeLost() {
	w := &c.loss
	if w.dev == nil {
		return
	}
	n := w.dev.PeersLost()
	if n == w.seen {
		return
	}
	w.seen = n
	w.buf = w.dev.LostPeers(w.buf[:0])
	for _, l := range w.buf {
		if int(l.Peer) < c.cfg.Size && l.Peer != c.rank {
			c.rel.failPeer(l.Peer, l.Err.Error())
		}
	}
	clear(w.buf) // the errors: nothing kept alive until the next loss
}
