package lapi

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// reintDriver runs the reintegration protocol (hal.Reintegration) of a
// context that reintegrates: epochs, joins, and the reset of a peer that
// restarted.
type reintDriver struct {
	c         *Context
	reint     *hal.Reintegration
	reintBuf  [hal.HeaderLen + hal.ReintPayloadLen]byte
	reintIdle bool // the protocol has settled: no timer to run until a frame of it comes
	// lives[p] is hal.LifeOf the epoch last heard from peer p (0: none),
	// what onFrame compares every frame's life with; handle refreshes it,
	// as only the protocol's frames change a peer's epoch.
	lives []uint32
}

// isReintFrame reports whether a frame belongs to the reintegration
// protocol rather than to lapi's packets.
func isReintFrame(t hal.FrameType) bool {
	return t >= hal.FrameBooting && t <= hal.FrameRDMAReady
}

// applyReint sends the protocol's frames and performs its actions.
func (rg *reintDriver) applyReint(msgs []hal.ReintMsg, acts []hal.ReintAction) {
	c := rg.c
	for _, a := range acts {
		if trace.On(trace.Rare) {
			c.tr.traceReintAct(a) // a give-up at level 1, the other steps at 3
		}
		switch a.Kind {
		case hal.ActClearPeer:
			rg.resetPeer(a.Peer)
		case hal.ActEnablePeer:
			c.cm.resyncTPT(a.Peer) // its replica of us starts afresh
			c.pr.wakeLocked()      // waiters for RDMAReady
		case hal.ActReady:
			c.pr.wakeLocked()
		case hal.ActRefused:
			c.rel.failPeer(a.Peer, "it refused this rank's join (BOOT_NACK): its device is shutting down")
			c.pr.wakeLocked()
		}
	}
	for _, m := range msgs {
		b := rg.reintBuf[:]
		h := hal.Header{Type: m.Type, JobKey: c.cfg.JobKey, Src: c.rank, Dst: m.Peer, Len: hal.ReintPayloadLen, Life: c.life}
		hal.EncodeHeader(b, &h)
		hal.EncodeReint(b[hal.HeaderLen:], m)
		if !c.reliableTo(m.Peer) {
			hal.Seal(b[:hal.HeaderLen], b[hal.HeaderLen:])
		}
		// A lost protocol frame is resent by the protocol's own timer.
		err := c.dev.Send(b[:hal.HeaderLen], b[hal.HeaderLen:])
		if err == nil {
			c.dev.Flush()
		}
		if trace.On(trace.Internal) {
			c.tr.traceReintSend(m, err)
		}
	}
}

// resetPeer forgets everything about peer's earlier life: what was queued
// or in flight toward it fails with ErrPeerRestarted, its half-received
// messages are dropped, and both sequence spaces start again from zero, as
// the new life's do; OnPeerRestarted's callbacks then run.
func (rg *reintDriver) resetPeer(peer hal.Rank) {
	c := rg.c
	err := fmt.Errorf("lapi: rank %d: %w", peer, ErrPeerRestarted)
	c.rel.dropPeer(peer, err)
	c.rd.eng.ResetPeer(peer)
	if c.cm.keep {
		c.cm.replicas[peer].Clear()
	}
	if !c.reliable {
		c.rel.links[peer].init(peer, c.cfg.Window)
	}
	c.am.nextMsg[peer], c.fenceMark[peer], c.fenceOwed[peer] = 0, 0, false
	if c.peerFault(peer) != nil {
		c.faults[peer].Store(nil) // alive again
		c.failures.Add(-1)
	}
	if int(peer) < len(rg.lives) && rg.lives[peer] != 0 { // a restart, not the peer's first join
		for _, f := range c.onRestart {
			f(&c.tx, peer, err)
		}
	}
}

// RDMAReady reports whether Put, Get and Rmw toward peer are enabled: the
// reintegration protocol has finished here and at peer (always true when
// the context does not reintegrate).
func (c *Context) RDMAReady(peer hal.Rank) bool {
	if c.ri.reint == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return peer == c.rank && c.ri.reint.Ready() || c.ri.reint.RDMATo(peer)
}

// rdmaCheck refuses an RDMA-style operation toward a peer that is not
// ready (c.mu held).
func (rg *reintDriver) rdmaCheck(peer hal.Rank) error {
	c := rg.c
	if rg.reint == nil || peer == c.rank && rg.reint.Ready() || rg.reint.RDMATo(peer) {
		return nil
	}
	return fmt.Errorf("lapi: RDMA to rank %d: %w", peer, ErrNotReady)
}

// WaitRDMAReady makes progress until RDMA toward peer is enabled. It fails
// with the peer's error when the peer failed, or refused this rank's join
// (BOOT_NACK: it is shutting down).
func (c *Context) WaitRDMAReady(ctx context.Context, peer hal.Rank) error {
	return c.Wait(ctx, func() (bool, error) {
		if int(peer) < len(c.faults) && c.peerFault(peer) != nil {
			return false, c.peerFault(peer) // failed, or refused this rank's join
		}
		return c.ri.rdmaCheck(peer) == nil, nil
	})
}

// reintTick runs the protocol's timer (c.mu held) and folds its deadline
// into nextTick.
func (rg *reintDriver) reintTick(now time.Time) {
	c := rg.c
	msgs, acts, next := rg.reint.Tick(now)
	rg.reintIdle = next.IsZero() && len(msgs) == 0 && len(acts) == 0
	rg.applyReint(msgs, acts)
	if !next.IsZero() && (c.rel.nextTick.IsZero() || next.Before(c.rel.nextTick)) {
		c.rel.nextTick = next
	}
}

// dstEpoch is the incarnation of peer to address packets to (c.mu held):
// the low half of what the reintegration protocol has heard, 0 if nothing.
func (rg *reintDriver) dstEpoch(peer hal.Rank) uint32 {
	if rg.reint == nil {
		return 0
	}
	return uint32(rg.reint.PeerEpoch(peer))
}

// staleEpoch reports whether a packet whose header names the
// destination's epoch dstEp was addressed to an earlier life of this rank
// (c.mu held).
func (rg *reintDriver) staleEpoch(dstEp uint32) bool {
	return rg.reint != nil && dstEp != 0 && dstEp != uint32(rg.reint.Epoch())
}

// staleLife reports whether a frame from peer that says it comes from
// life l (hal.Header.Life, not 0) comes from another life of peer than
// the one this rank knows (c.mu held): an earlier one's, delayed. (A later
// life's frame that overtook its BOOTING is dropped too, and sent again:
// over a reliable device, which keeps order, BOOTING comes first.)
func (rg *reintDriver) staleLife(peer hal.Rank, l uint32) bool {
	if int(peer) >= len(rg.lives) {
		return false // no reintegration, or no such peer (route drops it)
	}
	known := rg.lives[peer]
	return known != 0 && known != l
}

// handle runs the protocol on one of its frames from peer and applies
// what it says (c.mu held).
func (rg *reintDriver) handle(peer hal.Rank, t hal.FrameType, payload []byte) {
	rg.reintIdle = false // its timers may run again
	rg.applyReint(rg.reint.Handle(peer, t, payload, rg.c.now()))
	if ep := rg.reint.PeerEpoch(peer); ep != 0 {
		rg.lives[peer] = hal.LifeOf(ep)
	}
}

// newReintegration starts the reintegration protocol of cfg's rank, in
// cfg.Epoch or, if that is 0, a random epoch.
func newReintegration(cfg *Config) *hal.Reintegration {
	ep := cfg.Epoch
	for ep == 0 {
		var b [8]byte
		crand.Read(b[:])
		ep = binary.LittleEndian.Uint64(b[:])
	}
	return hal.NewReintegration(cfg.Rank, cfg.Size, ep, hal.ReintConfig{Retry: max(cfg.InitRTO, time.Millisecond)})
}
