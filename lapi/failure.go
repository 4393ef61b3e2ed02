package lapi

import (
	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// peerFault is the error peer was declared failed with, or nil.
func (c *Context) peerFault(peer hal.Rank) error {
	if f := c.faults[peer].Load(); f != nil {
		return f.err
	}
	return nil
}

// failPeer declares peer failed: its queued and unacknowledged packets are
// dropped, counters waiting on them fail, and OnPeerFailed callbacks run.
func (rl *reliability) failPeer(peer hal.Rank, cause string) {
	c := rl.c
	if c.peerFault(peer) != nil {
		return
	}
	err := &PeerError{Peer: peer, Cause: cause}
	c.faults[peer].Store(&fault{err})
	if trace.On(trace.Rare) {
		trace.Printf(trace.Rare, "lapi %d: rank %d failed: %s", c.rank, peer, cause)
	}
	c.failures.Add(1)
	rl.dropPeer(peer, err)
	for _, f := range c.onFail {
		f(&c.tx, peer, err)
	}
}

// dropPeer abandons everything under way with peer, failing it with err:
// queued and unacknowledged packets, half-received messages, gets and rmws.
func (rl *reliability) dropPeer(peer hal.Rank, err error) {
	c := rl.c
	drop := func(p *outPkt) {
		if m := p.msg; m != nil && m.pending > 0 {
			m.pending = 0 // report once, however many packets it had
			m.org.fail(err)
			c.am.note(m.notify, err)
		}
		p.msg = nil
		rl.putPkt(p)
	}
	for p := rl.queues[peer].pop(); p != nil; p = rl.queues[peer].pop() {
		drop(p)
	}
	if !c.reliable {
		l := &rl.links[peer]
		for i, p := range l.inflight {
			if p != nil {
				l.inflight[i] = nil
				drop(p)
			}
		}
		l.una = l.nextSeq
	}
	for k, m := range c.am.reasm {
		if k.src == peer {
			delete(c.am.reasm, k)
			if ah, ok := m.h.(AbortHandler); ok {
				ah.OnAbort(peer, m.cookie, err) // its OnComplete never comes
			}
		}
	}
	c.am.dropEarly(peer)
	c.gets.failPeer(c, peer, err)
	c.rd.dropRDMA(peer, err)
	if c.am.awaiting != nil {
		for k := range c.am.awaiting[peer] {
			k.fail(err)
		}
		c.am.awaiting[peer] = nil
	}
	c.pr.wakeLocked()
}
