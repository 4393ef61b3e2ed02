//go:build verbs && linux && cgo

package verbs

import (
	"fmt"
	"time"

	"github.com/weft-hpc/weft/hal"
	"golang.org/x/sys/unix"
)

// Finding a lost peer without a send (hal.PeerLoss). A reliable
// connection learns that its peer is gone only when it sends: the
// adapter's retries run out. A rank that only waits for a dead peer would
// wait for ever, so connLoop watches the connections: a peer it has heard
// nothing from (no hello on the UD queue pair) for a sixth of
// Options.PeerTimeout is asked to answer, and one silent for all of it is
// lost. The peer's connLoop answers whether or not its user polls. A
// device that closes says so (a hello with Bye), so that a peer that
// finished is not taken for one that died.

var _ hal.PeerLoss = (*Device)(nil)

// pingsPerTimeout is how many times a silent peer is asked to answer
// before it is declared lost.
const pingsPerTimeout = 6

// byeCopies is how many Bye hellos a closing device sends each peer: a
// datagram may be lost, and a peer that misses them all declares this
// rank lost after Options.PeerTimeout.
const byeCopies = 2

// failConn records why the connection to peer is lost, once, and queues
// the loss for LostPeers, waking a Wait.
func (d *Device) failConn(peer hal.Rank, err error) {
	if !d.fc[peer].failed.CompareAndSwap(nil, &err) {
		return
	}
	d.lossMu.Lock()
	d.lossNew = append(d.lossNew, hal.LostPeer{Peer: peer, Err: err})
	d.lossMu.Unlock()
	d.nlost.Add(1)
	var one = [8]byte{1}
	_, _ = unix.Write(d.efd, one[:])
}

// PeersLost counts the peers whose frame connection was found lost,
// by a send or by connLoop's watch (hal.PeerLoss).
func (d *Device) PeersLost() uint64 { return d.nlost.Load() }

// LostPeers appends the peers found lost since the last call, each with
// an error wrapping ErrPeerLost (hal.PeerLoss).
func (d *Device) LostPeers(dst []hal.LostPeer) []hal.LostPeer {
	d.lossMu.Lock()
	dst = append(dst, d.lossNew...)
	d.lossNew = d.lossNew[:0]
	d.lossMu.Unlock()
	return dst
}

// lossUnseen reports, once per new loss, that a peer was found lost
// since Wait last said so: Wait then returns, so that its caller looks
// at PeersLost.
func (d *Device) lossUnseen() bool {
	n := d.nlost.Load()
	if n == d.lossSeen.Load() {
		return false
	}
	d.lossSeen.Store(n)
	return true
}

// watchPeers asks the connected peers it has not heard from lately to
// answer and declares lost those silent for Options.PeerTimeout
// (connTick, rc.connMu held). It returns how long until it must run
// again.
func (d *Device) watchPeers(now time.Time) time.Duration {
	timeout := d.opts.PeerTimeout
	if timeout < 0 {
		return maxBlock
	}
	every := timeout / pingsPerTimeout
	for i := range d.fc {
		p := &d.fc[i]
		if hal.Rank(i) == d.cfg.Rank || !p.ready.Load() || p.bye || p.failed.Load() != nil {
			continue
		}
		if p.heard.IsZero() {
			p.heard = now
		}
		silent := now.Sub(p.heard)
		if silent >= timeout {
			d.failConn(hal.Rank(i), fmt.Errorf("verbs: %s: rank %d answered nothing for %v (its process or host is gone, or the link is down): %w",
				d.devName, i, silent.Round(time.Millisecond), ErrPeerLost))
			continue
		}
		if silent >= every && now.Sub(p.pinged) >= every {
			p.pinged = now
			d.sendFrameHello(hal.Rank(i), true, false)
		}
	}
	return every
}

// sayBye tells every connected peer that this device is closing
// (connLoop, as it returns), and waits briefly for the datagrams to
// leave before the queue pair is destroyed.
func (d *Device) sayBye() {
	if d.opts.noBye {
		return
	}
	d.rc.connMu.Lock()
	defer d.rc.connMu.Unlock()
	for i := range d.fc {
		p := &d.fc[i]
		if hal.Rank(i) == d.cfg.Rank || !p.ready.Load() || p.failed.Load() != nil {
			continue
		}
		for range byeCopies {
			d.sendFrameHello(hal.Rank(i), false, true)
		}
	}
	for start := time.Now(); d.tx.tail != d.tx.posted && time.Since(start) < 20*time.Millisecond; {
		if d.reap() != nil {
			return
		}
	}
}
