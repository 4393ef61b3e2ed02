package lapi

import (
	"errors"
	"fmt"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/lazyreg"
)

// Hardware RDMA: over a device that does RDMA Write and Read itself
// (hal.OneSided, the verbs device's reliable-connected queue pairs), large
// Put and Get are one work request each, placed by the adapters with no
// packet of the software engine. The origin names the target's memory by
// address and the adapter's rkey, which it takes from its replica of the
// target's TPT, kept as for cross-memory attach (cma.go): each rank
// registers every region it enters in its TPT with the device too,
// through a registration cache (lazyreg), and carries the registration's
// rkey in the TPT update (hal.TPTEntry.RKey). The replica checks the PVO
// (key, bounds, access) before anything is posted, and the adapter checks
// the rkey: a PVO the replica does not hold, or an entry without an rkey,
// goes by the software engine, which the target's own TPT decides; one
// the replica refuses fails with ErrProtection; an rkey the target's
// adapter no longer honours fails with ErrProtection too, and nothing is
// written. A transfer the device flushed because its connection broke
// under it (on another transfer's fault) is done again by the software
// engine.
//
// The origin's own buffer is registered through the same cache for the
// transfer, so repeated transfers from one buffer register it once. A
// region's registration may outlive its TPT entry in the cache (lazy
// deregistration): as with cross-memory attach, a peer whose replica has
// not yet heard of a deregistration may still reach the memory, which the
// cache keeps alive and pinned; deregister only what no peer is using.

// nativeState is a context's hardware RDMA state.
type nativeState struct {
	c     *Context
	dev   hal.OneSided // nil: not available
	cache *lazyreg.Cache[hal.MR]
	regs  map[uint32]nativeReg // TPT entry → its registration (c.cm.mu)
	ops   []nativeOp           // transfers in flight, by id (c.mu)
	free  []uint32             // ids of ops not in use: len(ops)-len(free) are in flight
	queue []uint32             // transfers the device had no room for, oldest first (c.mu)
	done  func(id uint64, err error)
	stats OneSidedStats
}

// nativeReg is the registration behind one TPT entry.
type nativeReg struct {
	key uint64 // the entry's TPT key
	r   lazyreg.Region[hal.MR]
}

// nativeOp is one Put or Get in flight on the device.
type nativeOp struct {
	o     SendOpts
	reg   lazyreg.Region[hal.MR]
	pvo   hal.PVO
	buf   []byte
	raddr uint64 // where at the target, and under which rkey
	rkey  uint32
	peer  hal.Rank
	write bool
	used  bool
}

// nativeRetry does again, by the software engine, a transfer the device
// gave up because its connection broke under it (hal.ErrNotConnected):
// a Completer, so that it runs outside the progress lock.
type nativeRetry struct {
	c  *Context
	op nativeOp
}

// Complete starts the retry; a failure to start it fails the transfer.
func (r *nativeRetry) Complete(error) {
	c, op := r.c, r.op
	var err error
	if op.write {
		err = c.rd.putRDMA(op.peer, op.pvo, op.buf, op.o)
	} else {
		err = c.rd.getRDMA(op.peer, op.pvo, op.buf, op.o)
	}
	if err != nil {
		c.mu.Lock()
		c.am.doneHere(&op.o, err)
		c.mu.Unlock()
	}
}

// OneSidedStats are a context's hardware RDMA counters.
type OneSidedStats struct {
	Writes, Reads uint64 // Puts and Gets the adapters moved
	Bytes         uint64
	Fallbacks     uint64 // large Puts and Gets that went by the software engine: no connection yet, no rkey, no registration
	Queued        uint64 // transfers that waited for room in the device (it said hal.ErrNoResource)
	Retries       uint64 // transfers done again by the software engine: the connection broke under them
	Faults        uint64 // transfers the target's adapter refused
	Cache         lazyreg.Stats
}

// OneSided reports whether large Puts and Gets go by hardware RDMA (a
// hal.OneSided device): the adapters move them, so a layer above that
// splits a copy between the two ends' processors has no reason to, and
// an RDMA Read may be slower than a Write (soft-RoCE's is a quarter).
func (c *Context) OneSided() bool { return c.nat.dev != nil }

// nativeSingleCopy is the default SingleCopyThreshold over a OneSided
// device: below it the software engine's few packets cost less than a
// registration lookup and a completion.
const nativeSingleCopy = 64 << 10

// initNative turns hardware RDMA on when the device offers it (initCMA,
// for a device that has no cross-memory attach), and reports whether it
// did.
func (nv *nativeState) initNative() bool {
	c := nv.c
	os, ok := c.dev.(hal.OneSided)
	if !ok || c.cfg.Size < 2 || c.cfg.SingleCopyThreshold < 0 || hal.MaxTPTEntries(c.mtu) < 1 {
		return false
	}
	if _, route := c.dev.(hal.Router); route {
		return false // not per member yet
	}
	cache, err := lazyreg.New[hal.MR](os, lazyreg.Options{})
	if err != nil {
		return false
	}
	if c.cfg.SingleCopyThreshold == 0 {
		c.cfg.SingleCopyThreshold = nativeSingleCopy
	}
	nv.dev, nv.cache = os, cache
	nv.regs = make(map[uint32]nativeReg)
	nv.done = nv.nativeDone
	c.cm.keepReplicas()
	c.tpt.Watch(nv.tptChanged)
	return true
}

// tptChanged is the TPT's watcher, in the goroutine that changed it: it
// registers an added region with the device or gives back a removed one's
// registration, and queues the change, with the rkey, for the peers.
func (nv *nativeState) tptChanged(e hal.TPTEntry) {
	c := nv.c
	if e.Key != 0 {
		e.RKey = nv.registerEntry(e)
	}
	c.cm.mu.Lock()
	if e.Key == 0 {
		nv.releaseEntry(e.Entry, e.Removed)
	}
	c.cm.out = append(c.cm.out, e)
	c.cm.pending.Store(true)
	c.cm.mu.Unlock()
}

// registerEntry registers a TPT entry's region with the device (the TPT's
// watcher, in the registering goroutine) and returns its rkey, or 0 when
// it cannot be registered: peers then reach it by the software engine.
func (nv *nativeState) registerEntry(e hal.TPTEntry) uint32 {
	c := nv.c
	mem, err := c.tpt.Resolve(hal.PVO{Entry: e.Entry, Key: e.Key}, e.Len, e.Access)
	if err != nil || len(mem) == 0 {
		return 0 // deregistered meanwhile, or empty
	}
	r, err := nv.cache.Acquire(mem)
	if err != nil {
		return 0
	}
	if r.Key.Addr+r.Offset != e.Addr {
		_ = nv.cache.Release(r) // cannot happen: the cache registers at the memory's own addresses
		return 0
	}
	c.cm.mu.Lock()
	if g, ok := nv.regs[e.Entry]; ok {
		// An earlier registration at this entry, whose removal this
		// registration overtook: that removal, when it comes, finds
		// this registration's key and leaves it.
		_ = nv.cache.Release(g.r)
	}
	nv.regs[e.Entry] = nativeReg{key: e.Key, r: r}
	c.cm.mu.Unlock()
	return r.Key.RKey
}

// releaseEntry gives back the registration of a TPT entry removed under
// key (c.cm.mu held); a registration under another key is the entry's
// next one, whose addition this removal's watcher call came after, and
// stays.
func (nv *nativeState) releaseEntry(entry uint32, key uint64) {
	if g, ok := nv.regs[entry]; ok && g.key == key {
		delete(nv.regs, entry)
		_ = nv.cache.Release(g.r)
	}
}

// withRKeys fills in the rkeys of entries read from the TPT (c.mu held):
// a peer that starts afresh gets every entry at once.
func (nv *nativeState) withRKeys(es []hal.TPTEntry) []hal.TPTEntry {
	c := nv.c
	if nv.dev == nil {
		return es
	}
	c.cm.mu.Lock()
	for i := range es {
		if g, ok := nv.regs[es[i].Entry]; ok && g.key == es[i].Key {
			es[i].RKey = g.r.Key.RKey
		}
	}
	c.cm.mu.Unlock()
	return es
}

// nativeTransfer is Put (write) or Get by the device's hardware RDMA.
// done is false when it does not apply (no connection yet, a PVO the
// replica does not know or without an rkey, the device's queue full):
// the caller takes the software engine's path.
func (nv *nativeState) nativeTransfer(tgt hal.Rank, p hal.PVO, buf []byte, write bool, o SendOpts) (done bool, err error) {
	c := nv.c
	if tgt == c.rank || int(tgt) >= c.cfg.Size || len(buf) < c.cfg.SingleCopyThreshold {
		return false, nil
	}
	acc, err := c.cm.lockForTransfer(tgt, write)
	if err != nil {
		return true, err
	}
	e, ok := c.cm.replicas[tgt].Entry(p)
	if !ok || e.RKey == 0 || !nv.dev.OneSidedReady(tgt) {
		if !ok {
			c.rd.stats.CMAMisses++
		}
		nv.stats.Fallbacks++
		c.mu.Unlock()
		return false, nil
	}
	addr, cerr := c.cm.replicas[tgt].Check(p, uint64(len(buf)), acc)
	if cerr != nil {
		cerr = fmt.Errorf("lapi: RDMA at rank %d: %s check failed against its TPT replica: %w",
			tgt, hal.FaultCheck(hal.FaultCode(cerr)), ErrProtection)
		c.rd.stats.Faults++
		c.am.doneHere(&o, cerr)
		c.pr.wakeLocked()
		c.mu.Unlock()
		c.am.runCompletions()
		return true, nil
	}
	c.mu.Unlock()

	// Registration may call into the kernel: outside the lock.
	reg, err := nv.cache.Acquire(buf)
	if err != nil {
		c.mu.Lock()
		nv.stats.Fallbacks++
		c.mu.Unlock()
		return false, nil
	}
	c.mu.Lock()
	var id uint32
	if n := len(nv.free); n > 0 {
		id = nv.free[n-1]
		nv.free = nv.free[:n-1]
	} else {
		id = uint32(len(nv.ops))
		nv.ops = append(nv.ops, nativeOp{})
	}
	nv.ops[id] = nativeOp{o: o, reg: reg, pvo: p, buf: buf, raddr: uint64(addr), rkey: e.RKey, peer: tgt, write: write, used: true}
	if len(nv.queue) == 0 {
		err = nv.postNative(id)
	}
	if len(nv.queue) > 0 || errors.Is(err, hal.ErrNoResource) {
		// The device is full: the transfer waits for room, behind
		// those already waiting, and goes as completions free some.
		nv.queue = append(nv.queue, id)
		nv.stats.Queued++
		c.mu.Unlock()
		return true, nil
	}
	if err != nil {
		nv.ops[id] = nativeOp{}
		nv.free = append(nv.free, id)
		nv.stats.Fallbacks++
		c.mu.Unlock()
		_ = nv.cache.Release(reg)
		if errors.Is(err, hal.ErrNotConnected) {
			return false, nil // the connection broke since OneSidedReady
		}
		return true, fmt.Errorf("lapi: RDMA at rank %d: %w", tgt, err)
	}
	c.mu.Unlock()
	return true, nil
}

// postNative hands transfer id to the device (c.mu held).
func (nv *nativeState) postNative(id uint32) error {
	op := &nv.ops[id]
	if op.write {
		return nv.dev.Write(op.peer, uint64(id), op.buf, op.reg.Key, op.raddr, op.rkey)
	}
	return nv.dev.Read(op.peer, uint64(id), op.buf, op.reg.Key, op.raddr, op.rkey)
}

// postQueued hands the device the transfers that waited for room, in
// order, until it is full again (c.mu held). One it refuses otherwise
// completes with that error (nativeDone: a broken connection's is done
// again by the software engine).
func (nv *nativeState) postQueued() {
	for len(nv.queue) > 0 {
		id := nv.queue[0]
		err := nv.postNative(id)
		if errors.Is(err, hal.ErrNoResource) {
			return
		}
		nv.queue = nv.queue[:copy(nv.queue, nv.queue[1:])]
		if err != nil {
			nv.nativeDone(uint64(id), err)
		}
	}
}

// nativeQueued reports whether transfers wait for room in the device
// (c.mu held): a waiter keeps polling for it rather than sleeping.
func (nv *nativeState) nativeQueued() bool { return len(nv.queue) > 0 }

// pollNative reports the transfers the device has completed (c.mu held):
// a pass of the progress engine.
func (nv *nativeState) pollNative() {
	c := nv.c
	if len(nv.free) == len(nv.ops) { // no transfer in flight, posted or queued
		return
	}
	if _, err := nv.dev.PollOneSided(nv.done); err != nil && !c.closed {
		c.closed = true // the device is gone: nothing more can progress
	}
	if len(nv.queue) > 0 {
		nv.postQueued()
	}
}

// nativeDone completes one transfer (c.mu held).
func (nv *nativeState) nativeDone(id uint64, err error) {
	c := nv.c
	if id >= uint64(len(nv.ops)) || !nv.ops[id].used {
		return
	}
	op := nv.ops[id]
	nv.ops[id] = nativeOp{}
	nv.free = append(nv.free, uint32(id))
	_ = nv.cache.Release(op.reg)
	if errors.Is(err, hal.ErrNotConnected) && c.peerFault(op.peer) == nil && !c.closed {
		nv.stats.Retries++
		op.reg = lazyreg.Region[hal.MR]{}
		c.am.note(&nativeRetry{c: c, op: op}, nil)
		return
	}
	if err != nil {
		c.rd.stats.Faults++
		if errors.Is(err, hal.ErrRemoteAccess) {
			nv.stats.Faults++
			err = fmt.Errorf("lapi: RDMA at rank %d refused by its adapter (a stale key): %w: %w", op.peer, ErrProtection, err)
		} else {
			err = fmt.Errorf("lapi: RDMA at rank %d: %w", op.peer, err)
		}
	} else {
		if op.write {
			nv.stats.Writes++
		} else {
			nv.stats.Reads++
		}
		nv.stats.Bytes += uint64(len(op.buf))
		if op.write && op.o.Target != 0 {
			c.am.notifyLocked(op.peer, op.o.Target) // the data is in place: say so
		}
	}
	c.am.doneHere(&op.o, err)
}

// OneSidedStats returns a snapshot of the hardware RDMA counters, with
// the registration cache's.
func (c *Context) OneSidedStats() OneSidedStats {
	c.mu.Lock()
	s := c.nat.stats
	c.mu.Unlock()
	if c.nat.cache != nil {
		s.Cache = c.nat.cache.Stats()
	}
	return s
}
