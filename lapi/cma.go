package lapi

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/weft-hpc/weft/hal"
)

// Cross-memory attach: over a device that can copy straight between
// processes (hal.CrossMemory, the shm device), large Put and Get are one
// process_vm_writev or process_vm_readv, single-copy, with no packet and
// no completion message. The kernel protects nothing, so this rank checks
// every access against its replica of the target's TPT, which each rank
// keeps up to date by pushing its registrations and deregistrations to its
// peers (FrameTPTUpdate) before anything that could carry a new PVO
// leaves: a peer has the entry before it can know the PVO from this rank.
// A PVO the replica does not hold (no entry, or another registration's
// key) goes by the software engine, which checks it at the target: it may
// have come another way, through a third rank or shared memory, ahead of
// its owner's update, or be stale, and only the owner's TPT can tell.
//
// A region deregistered while a peer is writing it may still be written
// until the removal reaches that peer: as with hardware RDMA, deregister
// only what no peer is using.
//
// Over a device whose peers share this process (hal.SharedAddressSpace,
// the inproc device) the same Put and Get are one memory copy, checked by
// the target's own TPT, which needs no replica and is exact.

// cmaState is a context's cross-memory attach state.
type cmaState struct {
	c        *Context
	shared   hal.SharedAddressSpace // nil: peers are not in this process
	dev      hal.CrossMemory        // nil: not available
	keep     bool                   // replicas are kept: cross-memory attach, or hardware RDMA (native.go)
	to       []bool                 // per peer, over a route: dev reaches it; nil: every peer
	replicas []hal.Replica          // per peer (c.mu)
	mu       sync.Mutex             // guards out: the TPT's watcher runs in any goroutine
	out      []hal.TPTEntry         // changes the watcher saw, not yet in log
	pending  atomic.Bool
	// log holds the changes some peer has not been sent yet, the first
	// being change number logBase; sentTo[p] is how many changes peer p
	// has been sent (c.mu). A peer is sent its changes just before
	// anything else goes to it, not every change to every peer at once: a
	// rendezvous send registers its buffer, and only its receiver needs
	// to hear of it.
	log     []hal.TPTEntry
	logBase uint64
	sentTo  []uint64
	buf     []byte         // update frame (c.mu)
	decoded []hal.TPTEntry // onTPTUpdate's scratch (c.mu)
}

// tptLogMax bounds the log: past it, every peer that lags is sent its
// changes at the next progress pass.
const tptLogMax = 1024

// The default SingleCopyThreshold in a shared address space and through
// cross-memory attach (see Config).
const (
	sharedSingleCopy = 16 << 10
	cmaSingleCopy    = 64 << 10
)

// initCMA turns cross-memory attach on when the device offers it.
func (cs *cmaState) initCMA() {
	c := cs.c
	if sa, ok := c.dev.(hal.SharedAddressSpace); ok && c.cfg.SingleCopyThreshold >= 0 {
		if c.cfg.SingleCopyThreshold == 0 {
			c.cfg.SingleCopyThreshold = sharedSingleCopy
		}
		sa.ShareTPT(c.tpt)
		cs.shared = sa
		return
	}
	cm, ok := c.dev.(hal.CrossMemory)
	if !ok && c.nat.initNative() {
		return
	}
	if !ok || !cm.CMA() || c.cfg.Size < 2 || c.cfg.SingleCopyThreshold < 0 || hal.MaxTPTEntries(c.mtu) < 1 {
		return
	}
	if c.cfg.SingleCopyThreshold == 0 {
		c.cfg.SingleCopyThreshold = cmaSingleCopy
	}
	if r, ok := c.dev.(hal.Router); ok {
		cs.to = make([]bool, c.cfg.Size)
		for p := range cs.to {
			m, ok := r.Route(hal.Rank(p)).(hal.CrossMemory)
			cs.to[p] = ok && m.CMA()
		}
	}
	cs.dev = cm
	cs.keepReplicas()
	c.tpt.Watch(cs.tptChanged)
}

// tptChanged is the TPT's watcher, in the goroutine that changed it: it
// queues the change for the peers. A removal may be queued after the
// registration that took its entry next; it carries the key it removed,
// so the peers' replicas leave that registration (hal.Replica.Apply).
func (cs *cmaState) tptChanged(e hal.TPTEntry) {
	cs.mu.Lock()
	cs.out = append(cs.out, e)
	cs.pending.Store(true)
	cs.mu.Unlock()
}

// keepReplicas has the context keep a replica of each peer's TPT and send
// the peers the changes to its own (cross-memory attach, or hardware RDMA:
// initNative); the caller watches the TPT for them.
func (cs *cmaState) keepReplicas() {
	c := cs.c
	cs.keep = true
	cs.replicas = make([]hal.Replica, c.cfg.Size)
	cs.sentTo = make([]uint64, c.cfg.Size)
	cs.buf = make([]byte, c.mtu+hal.HeaderLen)
}

// takeTPTChanges moves what the watcher saw into the log (c.mu held) and
// returns the log's end.
func (cs *cmaState) takeTPTChanges() uint64 {
	if cs.pending.Load() {
		cs.mu.Lock()
		cs.log = append(cs.log, cs.out...)
		cs.out = cs.out[:0]
		cs.pending.Store(false)
		cs.mu.Unlock()
	}
	return cs.logBase + uint64(len(cs.log))
}

// pushTPT sends peer the TPT changes it has not been sent (c.mu held) and
// reports whether none is left: callers send peer nothing else until
// then, so no PVO overtakes its entry.
func (cs *cmaState) pushTPT(peer hal.Rank) bool {
	c := cs.c
	if !cs.tptBehind(peer) {
		return true
	}
	end := cs.takeTPTChanges()
	if from := cs.sentTo[peer]; from < end && peer != c.rank && c.peerFault(peer) == nil {
		// A peer that has had nothing yet, or restarted, or failed and
		// came back after the log moved on without it, gets every entry
		// there is (the net effect of the log, and no longer); the
		// others get the changes they have not had.
		var es []hal.TPTEntry
		if from == 0 || from < cs.logBase {
			es = c.nat.withRKeys(c.tpt.Entries())
		} else {
			es = cs.log[from-cs.logBase:]
		}
		if !cs.sendTPT(peer, es) {
			return false // the device is full: try again at the next pass
		}
	}
	cs.sentTo[peer] = end
	cs.trimTPTLog()
	return true
}

// tptBehind reports whether peer has TPT changes of this rank still to be
// sent (c.mu held).
func (cs *cmaState) tptBehind(peer hal.Rank) bool {
	return cs.keep && (cs.to == nil || cs.to[peer]) &&
		(cs.pending.Load() || cs.sentTo[peer] < cs.logBase+uint64(len(cs.log)))
}

// catchUpTPT sends every peer that lags its changes once the log has
// grown past tptLogMax (c.mu held): peers this rank does not talk to
// would otherwise keep it growing.
func (cs *cmaState) catchUpTPT() {
	c := cs.c
	if !cs.keep {
		return
	}
	if cs.takeTPTChanges() < cs.logBase+tptLogMax {
		return
	}
	for p := range c.cfg.Size {
		if !cs.pushTPT(hal.Rank(p)) {
			return
		}
	}
}

// trimTPTLog drops the changes every live peer has been sent.
func (cs *cmaState) trimTPTLog() {
	c := cs.c
	low := cs.logBase + uint64(len(cs.log))
	for p, s := range cs.sentTo {
		if hal.Rank(p) != c.rank && c.peerFault(hal.Rank(p)) == nil && s < low && (cs.to == nil || cs.to[p]) {
			low = s
		}
	}
	if n := int(low - cs.logBase); n > 0 {
		cs.log = cs.log[:copy(cs.log, cs.log[n:])]
		cs.logBase = low
	}
}

// resyncTPT sends peer, whose replica of this rank starts afresh (it
// restarted), every entry this rank has (c.mu held): from change 0, which
// pushTPT answers with all entries; if the device is full now, the next
// push to peer does it.
func (cs *cmaState) resyncTPT(peer hal.Rank) {
	if cs.keep {
		cs.sentTo[peer] = 0
		cs.pushTPT(peer)
	}
}

// sendTPT sends entries to peer's replica (c.mu held); false: the device
// had no room (what was sent is applied again harmlessly on a retry).
func (cs *cmaState) sendTPT(peer hal.Rank, es []hal.TPTEntry) bool {
	c := cs.c
	per := hal.MaxTPTEntries(c.mtu)
	for len(es) > 0 {
		n := min(per, len(es))
		b := cs.buf
		l := hal.EncodeTPTUpdate(b[hal.HeaderLen:], es[:n])
		h := hal.Header{Type: hal.FrameTPTUpdate, JobKey: c.cfg.JobKey, Src: c.rank, Dst: peer, Len: uint16(l), Life: c.life}
		hal.EncodeHeader(b, &h)
		if !c.reliableTo(peer) {
			hal.Seal(b[:hal.HeaderLen], b[hal.HeaderLen:hal.HeaderLen+l])
		}
		err := c.dev.Send(b[:hal.HeaderLen], b[hal.HeaderLen:hal.HeaderLen+l])
		if err == nil {
			err = c.dev.Flush() // the buffer is reused for the next frame
		}
		if errors.Is(err, hal.ErrNoResource) {
			return false
		}
		if err != nil {
			c.rel.failPeer(peer, err.Error())
			return true
		}
		c.rel.countSent(peer, 0)
		es = es[n:]
	}
	return true
}

// onTPTUpdate applies a peer's TPT changes to its replica (c.mu held).
func (cs *cmaState) onTPTUpdate(src hal.Rank, payload []byte) {
	c := cs.c
	if !cs.keep || cs.to != nil && !cs.to[src] {
		c.stats.BadPackets++
		return
	}
	es, err := hal.DecodeTPTUpdate(payload, cs.decoded[:0])
	cs.decoded = es[:0]
	if err != nil {
		c.stats.BadPackets++
		return
	}
	for _, e := range es {
		cs.replicas[src].Apply(e)
	}
	if c.nat.dev != nil {
		// src registered memory this rank may soon reach: have the
		// connection toward it started (a hint; the answer waits).
		c.nat.dev.OneSidedReady(src)
	}
}

// lockForTransfer is what a one-copy transfer (cross-memory attach, or
// hardware RDMA) checks first toward tgt: the access it needs, and
// whether the context is closed or the peer failed. It takes c.mu and
// holds it on return when the error is nil.
func (cs *cmaState) lockForTransfer(tgt hal.Rank, write bool) (hal.Access, error) {
	c := cs.c
	acc := hal.AccessRead
	if write {
		acc = hal.AccessWrite
	}
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return acc, ErrClosed
	case c.peerFault(tgt) != nil:
		err := c.peerFault(tgt)
		c.mu.Unlock()
		return acc, err
	}
	if err := c.ri.rdmaCheck(tgt); err != nil {
		c.mu.Unlock()
		return acc, err
	}
	return acc, nil
}

// cmaTransfer is Put (write) or Get by cross-memory attach. done is false
// when it does not apply (no CMA, a PVO the replica does not know yet):
// the caller takes the software engine's path.
func (cs *cmaState) cmaTransfer(tgt hal.Rank, p hal.PVO, buf []byte, write bool, o SendOpts) (done bool, err error) {
	c := cs.c
	if c.nat.dev != nil {
		return c.nat.nativeTransfer(tgt, p, buf, write, o)
	}
	if cs.dev == nil && cs.shared == nil || tgt == c.rank || int(tgt) >= c.cfg.Size || len(buf) < c.cfg.SingleCopyThreshold ||
		cs.to != nil && !cs.to[tgt] {
		return false, nil
	}
	acc, err := cs.lockForTransfer(tgt, write)
	if err != nil {
		return true, err
	}
	var cerr error
	if cs.shared != nil {
		c.mu.Unlock()
		t := cs.shared.PeerTPT(tgt)
		if t == nil {
			return false, nil // not shared (yet): the engine's frames find out
		}
		if cerr = t.Copy(p, buf, acc); cerr != nil {
			cerr = fmt.Errorf("lapi: RDMA at rank %d: %s check failed: %w",
				tgt, hal.FaultCheck(hal.FaultCode(cerr)), ErrProtection)
		}
	} else {
		rep := &cs.replicas[tgt]
		if !rep.Has(p) {
			// The replica has no entry under p's key: the update may
			// still be on its way (a PVO can come by another route
			// than its owner's frames), or p is stale. The engine's
			// frames let the target's own TPT decide.
			c.rd.stats.CMAMisses++
			c.mu.Unlock()
			return false, nil
		}
		var addr uintptr
		addr, cerr = rep.Check(p, uint64(len(buf)), acc)
		c.mu.Unlock()
		if cerr != nil {
			cerr = fmt.Errorf("lapi: RDMA at rank %d: %s check failed against its TPT replica: %w",
				tgt, hal.FaultCheck(hal.FaultCode(cerr)), ErrProtection)
		} else if write {
			cerr = cs.dev.WriteTo(tgt, addr, buf)
		} else {
			cerr = cs.dev.ReadFrom(tgt, addr, buf)
		}
	}
	c.mu.Lock()
	if cerr == nil {
		if write {
			c.rd.stats.CMAWrites++
		} else {
			c.rd.stats.CMAReads++
		}
		c.rd.stats.CMABytes += uint64(len(buf))
		c.peerStats[tgt].SingleCopyBytes += uint64(len(buf))
		if o.Target != 0 {
			c.am.notifyLocked(tgt, o.Target) // the data is in place: say so
		}
	} else {
		c.rd.stats.Faults++
	}
	c.am.doneHere(&o, cerr) // the completer hears the error too
	c.pr.wakeLocked()
	c.mu.Unlock()
	c.am.runCompletions()
	return true, nil
}
