package lapi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
)

// lapi's own handlers, below firstUserHandler.
const (
	hNotify HandlerID = 1 + iota // completion (or fault) for an origin counter
	hPut                         // data for a registered region
	hGet                         // ask for a region's bytes
	hReply                       // a get's bytes or an rmw's previous value, or a fault
	hRmw                         // read-modify-write on 8 bytes
	hXchg                        // address exchange
	hFence                       // fence probe
	hRTS                         // a large active message's header: read its data
	hRvFin                       // the target has taken a large message's data
	hThird                       // a third-party transfer for this rank to carry out
	hBcast                       // a broadcast's ready and have messages (bcast.go)
)

// RmwOp is a read-modify-write operation on an 8-byte, 8-aligned int64.
type RmwOp uint8

// Read-modify-write operations (LAPI_Rmw).
const (
	Swap           RmwOp = 1 + iota // store operand
	CompareAndSwap                  // store operand if the value equals compare
	FetchAndAdd                     // add operand
	FetchAndOr                      // or operand in
)

// faultChecks maps a protection check to the code carried in a fault.
var faultChecks = [...]string{"", "entry", "key", "bounds", "access", "align"}

func faultCode(err error) uint8 {
	var pe *hal.ProtectionError
	if errors.As(err, &pe) {
		for i, s := range faultChecks {
			if s == pe.Check {
				return uint8(i)
			}
		}
	}
	return uint8(len(faultChecks) - 1)
}

// faultErr is the origin-side error for a fault code from peer.
func faultErr(peer hal.Rank, code uint8) error {
	switch code {
	case codeFailed:
		return fmt.Errorf("lapi: transfer carried out by rank %d failed there: %w", peer, ErrThirdParty)
	case codeRefused:
		return fmt.Errorf("lapi: rank %d's FIFO source refused the read: %w", peer, ErrProtection)
	}
	check := "unknown"
	if int(code) < len(faultChecks) {
		check = faultChecks[code]
	}
	return fmt.Errorf("lapi: remote access at rank %d: %s check failed: %w", peer, check, ErrProtection)
}

type notifyHandler struct{ c *Context }

func (h notifyHandler) OnHeader(src hal.Rank, uhdr []byte, _ int) ([]byte, any) {
	if len(uhdr) != 5 {
		return nil, nil
	}
	k := h.c.am.counter(binary.LittleEndian.Uint32(uhdr))
	if k != nil {
		h.c.am.awaited(src, k)
		if uhdr[4] != 0 {
			k.fail(faultErr(src, uhdr[4]))
		}
	}
	return nil, k
}

func (h notifyHandler) OnComplete(_ hal.Rank, cookie any) {
	if k, _ := cookie.(*Counter); k != nil {
		k.incr()
	}
}

type nopHandler struct{}

func (nopHandler) OnHeader(hal.Rank, []byte, int) ([]byte, any) { return nil, nil }
func (nopHandler) OnComplete(hal.Rank, any)                     {}

// Put writes src into the region dst names at tgt. o.Origin fires when src
// may be reused, o.Completion when the data is in place at tgt (or with an
// error naming the failed protection check). With o.NoCompletion nothing
// is sent back (see SendOpts).
func (c *Context) Put(tgt hal.Rank, dst hal.PVO, src []byte, o SendOpts) error {
	if err := checkNone(&o); err != nil {
		return err
	}
	if done, err := c.cm.cmaTransfer(tgt, dst, src, true, o); done {
		return err
	}
	if c.rd.useRDMA(tgt, len(src)) {
		return c.rd.putRDMA(tgt, dst, src, o)
	}
	return c.putAM(tgt, dst, src, o)
}

// PutPlaced is Put with one outcome, told to done: nil once the data is
// placed at the target (when Put's Completion counter would fire), or
// the error that ended it (failing to start, too). Notify, by contrast,
// fires once src may be reused, which for a small Put that lapi copies
// is at once, before the data has left: a caller that must tell the
// target "it is in" after the data (mpi's split rendezvous) waits for
// this. done runs as Notify's completers do.
func (c *Context) PutPlaced(tgt hal.Rank, dst hal.PVO, src []byte, done Completer) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	k := c.trg.spareCounter()
	c.trg.armFnLocked(k, 1, func(err error) {
		done.Complete(err)
		if err == nil {
			c.trg.recycle(k)
		}
	})
	c.mu.Unlock()
	if err := c.Put(tgt, dst, src, SendOpts{Completion: k}); err != nil {
		c.mu.Lock()
		k.fail(err) // the trigger tells done
		c.mu.Unlock()
		c.am.runCompletions()
	}
	return nil
}

// putAM is Put by active message (hPut): lapi's own packets, placed by
// the target's put handler. Fire-and-forget (o.NoCompletion) goes
// eagerly, never by rendezvous, whose target answers.
func (c *Context) putAM(tgt hal.Rank, dst hal.PVO, src []byte, o SendOpts) error {
	var u [hal.PVOLen + 4]byte
	hal.PutPVO(u[:], dst)
	if o.Completion != nil {
		binary.LittleEndian.PutUint32(u[hal.PVOLen:], o.Completion.id)
	}
	o2 := o
	o2.Completion = nil // the put handler answers itself, with a fault code if need be
	c.mu.Lock()
	err := c.ri.rdmaCheck(tgt)
	if err == nil && o.Completion != nil {
		c.am.await(tgt, o.Completion) // the put handler owes it, not lapi's generic path
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if o.NoCompletion {
		c.mu.Lock()
		err := c.am.amsendLocked(tgt, hPut, u[:], src, &o2)
		c.unlockRun()
		return err
	}
	if err := c.Amsend(tgt, hPut, u[:], src, o2); err != nil {
		if o.Completion != nil {
			c.mu.Lock()
			c.am.awaited(tgt, o.Completion)
			c.mu.Unlock()
		}
		return err
	}
	return nil
}

// putDone is the target-side state of a put: where to report completion.
type putDone struct {
	ccntr uint32
	code  uint8
}

type putHandler struct{ c *Context }

func (h putHandler) OnHeader(src hal.Rank, uhdr []byte, n int) ([]byte, any) {
	if len(uhdr) != hal.PVOLen+4 {
		return nil, nil
	}
	d := putDone{ccntr: binary.LittleEndian.Uint32(uhdr[hal.PVOLen:])}
	mem, err := h.c.tpt.Resolve(hal.GetPVO(uhdr), uint64(n), hal.AccessWrite)
	if err != nil {
		h.c.stats.BadPackets++ // counted as a protection fault below as well
		d.code = faultCode(err)
	}
	if d.ccntr == 0 {
		if d.code != 0 {
			h.c.rd.stats.Faults++ // no counter to tell: counted here alone
		}
		return mem, nil
	}
	return mem, d
}

func (h putHandler) OnComplete(src hal.Rank, cookie any) {
	if d, ok := cookie.(putDone); ok {
		h.c.mu.Lock()
		h.c.am.notifyCode(src, d.ccntr, d.code)
		h.c.mu.Unlock()
	}
}

// getSlot is an origin-side get or rmw waiting for its reply.
type getSlot struct {
	buf    []byte
	prev   *int64
	cntr   *Counter
	cmp    *Counter // a rendezvous send's completion counter
	notify Completer
	err    error
	peer   hal.Rank
	rv     bool    // a rendezvous send (rendezvous.go) waiting for its FIN
	local  hal.PVO // its data, registered for the target to read
	idx    uint32
	gen    uint32
	used   bool
}

// finish reports a get, rmw or rendezvous send done (or failed, with
// s.err) to its counters and completer.
func (s *getSlot) finish(c *Context) {
	if s.rv {
		c.tpt.Deregister(s.local)
	}
	if s.err != nil {
		s.cntr.fail(s.err)
		s.cmp.fail(s.err)
	}
	if s.cntr != nil {
		s.cntr.incr()
	}
	if s.cmp != nil {
		s.cmp.incr()
	}
	c.am.note(s.notify, s.err)
}

// getTable holds outstanding gets, rmws and rendezvous sends, named by
// index and generation so a late reply for a reused slot is recognised
// and dropped.
type getTable struct {
	slots []*getSlot // pointers: a reply holds one between its handlers
	free  []uint32
}

const slotBits = 20

func (t *getTable) take(v getSlot) uint32 {
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		i = uint32(len(t.slots))
		t.slots = append(t.slots, &getSlot{idx: i})
	}
	s := t.slots[i]
	v.idx, v.gen, v.used = i, s.gen+1, true
	*s = v
	return i | s.gen<<slotBits
}

func (t *getTable) lookup(id uint32) *getSlot {
	i := id & (1<<slotBits - 1)
	if int(i) >= len(t.slots) {
		return nil
	}
	s := t.slots[i]
	if !s.used || s.gen&(1<<(32-slotBits)-1) != id>>slotBits {
		return nil
	}
	return s
}

// failPeer fails every get and rmw outstanding at peer.
func (t *getTable) failPeer(c *Context, peer hal.Rank, err error) {
	for _, s := range t.slots {
		if s.used && s.peer == peer {
			s.err = err
			s.finish(c)
			t.put(s)
		}
	}
}

// cancelGets ends the gets waiting for their reply whose Origin counter
// is k, failing them with err (c.mu held): their reply, or the rest of
// one arriving, is dropped, so nothing more is written into their
// buffers (a collective's part that failed or was aborted).
func (c *Context) cancelGets(k *Counter, err error) {
	for _, s := range c.gets.slots {
		if !s.used || s.rv || s.cntr != k {
			continue
		}
		for key, m := range c.am.reasm {
			if m.cookie == any(s) {
				m.buf, m.cookie = nil, nil // the rest is counted, not placed
				c.am.reasm[key] = m
			}
		}
		s.err = err
		s.finish(c)
		c.gets.put(s)
	}
}

func (t *getTable) put(s *getSlot) {
	*s = getSlot{gen: s.gen, idx: s.idx}
	t.free = append(t.free, s.idx)
}

// Get reads len(dst) bytes from the region src names at tgt into dst.
// o.Origin fires when dst is filled (or fails with the protection check
// that refused the read).
func (c *Context) Get(tgt hal.Rank, src hal.PVO, dst []byte, o SendOpts) error {
	if err := fetchOpts("get", o); err != nil {
		return err
	}
	if uint64(len(dst)) > 1<<32-1 {
		return fmt.Errorf("lapi: get of %d bytes: %w", len(dst), ErrTooLarge)
	}
	if done, err := c.cm.cmaTransfer(tgt, src, dst, false, o); done {
		return err
	}
	if c.rd.useRDMA(tgt, len(dst)) {
		return c.rd.getRDMA(tgt, src, dst, o)
	}
	var u [hal.PVOLen + 8]byte
	hal.PutPVO(u[:], src)
	binary.LittleEndian.PutUint32(u[hal.PVOLen:], uint32(len(dst)))
	return c.am.request(tgt, hGet, u[:], hal.PVOLen+4, dst, nil, o)
}

// fetchOpts refuses the counters a get or rmw (op) would never increment:
// their data lands at the origin, where Origin (or Notify) counts it, and
// the target keeps no counter for them. They were accepted and ignored,
// and a caller waiting on one waited for ever.
func fetchOpts(op string, o SendOpts) error {
	if o.Completion != nil || o.Target != 0 {
		return fmt.Errorf("lapi: %s with a Completion or Target counter (Origin counts the data here): %w", op, ErrBadOpts)
	}
	return nil
}

// getReq is the target-side state of a get or rmw between its header and
// completion handlers.
type getReq struct {
	id   uint32
	mem  []byte
	old  int64
	code uint8
}

type getHandler struct{ c *Context }

func (h getHandler) OnHeader(src hal.Rank, uhdr []byte, _ int) ([]byte, any) {
	if len(uhdr) != hal.PVOLen+8 {
		return nil, nil
	}
	r := &getReq{id: binary.LittleEndian.Uint32(uhdr[hal.PVOLen+4:])}
	n := binary.LittleEndian.Uint32(uhdr[hal.PVOLen:])
	mem, err := h.c.tpt.Resolve(hal.GetPVO(uhdr), uint64(n), hal.AccessRead)
	if err != nil {
		r.code = faultCode(err)
	}
	r.mem = mem
	return nil, r
}

func (h getHandler) OnComplete(src hal.Rank, cookie any) {
	if r, ok := cookie.(*getReq); ok {
		h.c.am.reply(src, r, r.mem)
	}
}

const replyLen = 13

// replyHandler takes the answer to a get or an rmw.
type replyHandler struct{ c *Context }

func (h replyHandler) OnHeader(src hal.Rank, uhdr []byte, n int) ([]byte, any) {
	if len(uhdr) != replyLen {
		return nil, nil
	}
	id := binary.LittleEndian.Uint32(uhdr)
	s := h.c.gets.lookup(id)
	if s == nil || s.rv || s.peer != src {
		return nil, nil // late, for a failed or reused slot, or not a reply's
	}
	if uhdr[4] != 0 {
		s.err = faultErr(src, uhdr[4])
		s.cntr.fail(s.err)
	} else if s.prev != nil {
		*s.prev = int64(binary.LittleEndian.Uint64(uhdr[5:]))
	}
	return s.buf, s
}

func (h replyHandler) OnComplete(_ hal.Rank, cookie any) {
	s, ok := cookie.(*getSlot)
	if !ok {
		return
	}
	h.c.mu.Lock()
	if s.used {
		s.finish(h.c)
		h.c.gets.put(s)
	}
	h.c.pr.wakeLocked()
	h.c.mu.Unlock()
	h.c.am.runCompletions()
}

// Rmw applies op to the int64 at dst on tgt and stores the previous value
// in *prev (if prev is not nil) before o.Origin fires.
func (c *Context) Rmw(tgt hal.Rank, op RmwOp, dst hal.PVO, operand, compare int64, prev *int64, o SendOpts) error {
	if op < Swap || op > FetchAndOr {
		return fmt.Errorf("lapi: rmw: unknown operation %d", op)
	}
	if err := fetchOpts("rmw", o); err != nil {
		return err
	}
	var u [hal.PVOLen + 21]byte
	hal.PutPVO(u[:], dst)
	u[hal.PVOLen] = byte(op)
	binary.LittleEndian.PutUint64(u[hal.PVOLen+1:], uint64(operand))
	binary.LittleEndian.PutUint64(u[hal.PVOLen+9:], uint64(compare))
	return c.am.request(tgt, hRmw, u[:], hal.PVOLen+17, nil, prev, o)
}

type rmwHandler struct{ c *Context }

func (h rmwHandler) OnHeader(src hal.Rank, uhdr []byte, _ int) ([]byte, any) {
	if len(uhdr) != hal.PVOLen+21 {
		return nil, nil
	}
	r := &getReq{id: binary.LittleEndian.Uint32(uhdr[hal.PVOLen+17:])}
	mem, err := h.c.tpt.Resolve(hal.GetPVO(uhdr), 8, hal.AccessRead|hal.AccessWrite)
	if err == nil && uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		err = &hal.ProtectionError{Check: "align", PVO: hal.GetPVO(uhdr), Len: 8}
	}
	if err != nil {
		r.code = faultCode(err)
		return nil, r
	}
	p := (*int64)(unsafe.Pointer(&mem[0]))
	operand := int64(binary.LittleEndian.Uint64(uhdr[hal.PVOLen+1:]))
	compare := int64(binary.LittleEndian.Uint64(uhdr[hal.PVOLen+9:]))
	switch RmwOp(uhdr[hal.PVOLen]) {
	case Swap:
		r.old = atomic.SwapInt64(p, operand)
	case CompareAndSwap:
		for {
			r.old = atomic.LoadInt64(p)
			if r.old != compare || atomic.CompareAndSwapInt64(p, compare, operand) {
				break
			}
		}
	case FetchAndAdd:
		r.old = atomic.AddInt64(p, operand) - operand
	case FetchAndOr:
		r.old = atomic.OrInt64(p, operand)
	default:
		r.code = uint8(len(faultChecks) - 1)
	}
	return nil, r
}

func (h rmwHandler) OnComplete(src hal.Rank, cookie any) {
	if r, ok := cookie.(*getReq); ok {
		h.c.am.reply(src, r, nil)
	}
}

// Fence waits until every operation this context started has completed at
// its target (LAPI_Fence), and every peer's replica of this rank's TPT
// has the regions registered or released before it.
func (c *Context) Fence(ctx context.Context) error {
	// RDMA transfers are complete at their target when their completion
	// comes back.
	if err := c.Wait(ctx, func() (bool, error) {
		return c.rd.groups == 0, nil
	}); err != nil {
		return err
	}
	if !c.reliable {
		// On an unordered device a probe could overtake earlier packets:
		// first wait until every packet is acknowledged, hence placed.
		err := c.Wait(ctx, func() (bool, error) {
			for _, p := range c.rel.active {
				if c.rel.links[p].inFlight() > 0 || c.rel.queues[p].head != nil {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			return err
		}
	}
	k := c.fenceCntr
	c.mu.Lock()
	n := 0
	for p := 0; p < c.cfg.Size; p++ {
		if hal.Rank(p) == c.rank || c.peerFault(hal.Rank(p)) != nil {
			continue
		}
		if c.am.nextMsg[p] != c.fenceMark[p] || c.fenceOwed[p] || c.cm.tptBehind(hal.Rank(p)) {
			c.fenceMark[p], c.fenceOwed[p] = c.am.nextMsg[p]+1, false
			if err := c.am.amsendLocked(hal.Rank(p), hFence, nil, nil, &SendOpts{Completion: k}); err != nil {
				c.mu.Unlock()
				return err
			}
			n++
		}
	}
	// Probes an earlier Fence sent and gave up waiting for (its ctx
	// ended) are waited for too: they may stand for its operations.
	n += c.fenceUnheard
	c.fenceUnheard = 0
	c.mu.Unlock()
	if err := k.Wait(ctx, int64(n)); err != nil {
		c.mu.Lock()
		c.fenceUnheard += n
		c.mu.Unlock()
		return err
	}
	return nil
}

func (ad *dispatcher) installInternalHandlers() {
	c := ad.c
	ad.handlers[hNotify] = newHandlerEntry(notifyHandler{c})
	ad.handlers[hPut] = newHandlerEntry(putHandler{c})
	ad.handlers[hGet] = newHandlerEntry(getHandler{c})
	ad.handlers[hReply] = newHandlerEntry(replyHandler{c})
	ad.handlers[hRmw] = newHandlerEntry(rmwHandler{c})
	ad.handlers[hXchg] = newHandlerEntry(&c.xchg)
	ad.handlers[hFence] = newHandlerEntry(nopHandler{})
	ad.handlers[hRTS] = newHandlerEntry(rtsHandler{c})
	ad.handlers[hRvFin] = newHandlerEntry(rvFinHandler{c})
	ad.handlers[hThird] = newHandlerEntry(thirdHandler{c})
	ad.handlers[hBcast] = newHandlerEntry(newBcastTable(c))
	ad.handlers[hFIFO] = newHandlerEntry(fifoAMHandler{c})
	ad.handlers[hFIFORead] = newHandlerEntry(fifoReadHandler{c})
	c.xchg.c = c
}

// notifyLocked tells peer's counter id that a message completed (code 0) or
// faulted.
func (ad *dispatcher) notifyLocked(peer hal.Rank, id uint32) { ad.notifyCode(peer, id, 0) }

func (ad *dispatcher) notifyCode(peer hal.Rank, id uint32, code uint8) {
	c := ad.c
	if peer == c.rank {
		if k := ad.counter(id); k != nil {
			if code != 0 {
				k.fail(faultErr(peer, code))
			}
			k.incr()
		}
		return
	}
	var u [5]byte
	binary.LittleEndian.PutUint32(u[:], id)
	u[4] = code
	ad.amsendLocked(peer, hNotify, u[:], nil, &SendOpts{})
}

// request sends a get or rmw: it takes a reply slot, writes its ID into
// uhdr at idAt, and sends; the slot is given back if the send fails.
func (ad *dispatcher) request(tgt hal.Rank, h HandlerID, uhdr []byte, idAt int, buf []byte, prev *int64, o SendOpts) error {
	c := ad.c
	c.mu.Lock()
	if err := c.ri.rdmaCheck(tgt); err != nil {
		c.mu.Unlock()
		return err
	}
	id := c.gets.take(getSlot{peer: tgt, buf: buf, prev: prev, cntr: o.Origin, notify: o.Notify})
	binary.LittleEndian.PutUint32(uhdr[idAt:], id)
	err := ad.amsendLocked(tgt, h, uhdr, nil, &SendOpts{})
	if err != nil {
		c.gets.put(c.gets.lookup(id))
	}
	c.mu.Unlock()
	if err == nil && tgt == c.rank {
		ad.runCompletions()
	}
	return err
}

// reply answers a get or rmw: the request's ID, its fault code, the
// previous value (rmw), and the data (get).
func (ad *dispatcher) reply(src hal.Rank, r *getReq, data []byte) {
	c := ad.c
	var u [replyLen]byte
	binary.LittleEndian.PutUint32(u[:], r.id)
	u[4] = r.code
	binary.LittleEndian.PutUint64(u[5:], uint64(r.old))
	c.mu.Lock()
	ad.amsendLocked(src, hReply, u[:], data, &SendOpts{})
	c.mu.Unlock()
}
