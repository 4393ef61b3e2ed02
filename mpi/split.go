package mpi

import (
	"encoding/binary"
	"fmt"

	"github.com/weft-hpc/weft/lapi"
)

// Split rendezvous: a large message (WEFT_SPLIT bytes or more; by default
// 256 KiB, and between ranks with single-copy transfers twice the
// single-copy size but at least 128 KiB, so that each part is one copy)
// is copied by both ends at once. The receiver registers the
// upper part of its buffer and sends a CTS naming it, then reads the lower
// part from the sender's buffer; the sender, which is waiting anyway,
// writes the upper part into the receiver's buffer (lapi Put) and says so
// with a PUTFIN. On shared memory each part is one cross-memory-attach
// copy, so two cores copy instead of one, which moves more than one
// process_vm_readv does. The receive completes when
// both parts are in, and its FIN releases the sender as before.
//
// Over hardware RDMA (lapi.Context.OneSided) there is no copy to share:
// the adapters move the data, and a Read may be much slower than a Write
// (soft-RoCE's runs at a quarter of it). There every rendezvous is a write
// rendezvous instead: the CTS offers the whole buffer (split 0), the
// receiver reads nothing, and the sender writes it all.
//
//	CTS    receiver → sender   sreq u32, rreq u32, split u64, end u64, pvo (lapi.PVOLen)
//	PUTFIN sender → receiver   rreq u32, sreq u32, failed u8

const (
	splitDefault = 256 << 10
	// splitNode is the least split size between ranks with single-copy
	// transfers: from it, two copies at once beat one read.
	splitNode = 128 << 10
	ctsLen    = 24 + lapi.PVOLen
	putFinLen = 9
)

// splitState is a split rendezvous' state. Receive: parts not yet in, the
// first error, whether the sender said its part failed. Send: writing
// buf[split:end] to dst, for the receive rreq.
type splitState struct {
	parts      int
	err        error
	putFailed  bool
	putting    bool
	split, end int
	rreq       uint32
	dst        lapi.PVO
}

// splits reports whether a rendezvous receive of n bytes from world rank
// from is split between the two ends.
func (w *World) splits(n, from int) bool {
	least := w.splitMin
	if w.far != nil && w.far[from] {
		least = w.splitFar
	}
	return least > 0 && n >= max(least, 16<<10) && from != w.rank
}

// startSplit starts a split rendezvous receive of n bytes (w.mu not
// held): the upper part is offered to the sender, the lower part read
// (in a write rendezvous, all of it is offered and nothing read).
func (w *World) startSplit(r *request, n int) {
	a := r.rts
	half, parts := n/2&^4095, 2 // the parts meet on a page boundary
	if w.writeRendezvous {
		half, parts = 0, 1
	}
	pvo, err := w.lc.Register(r.buf[half:n], lapi.AccessWrite)
	if err != nil {
		w.failGet(r, err)
		return
	}
	w.mu.Lock()
	r.pvo, r.sp, r.peer = pvo, &splitState{parts: parts}, int(a.from)
	w.reqs.add(r)
	w.mu.Unlock()
	var cts [ctsLen]byte
	u := cts[:]
	le := binary.LittleEndian
	le.PutUint32(u[0:], a.env.sreq)
	le.PutUint32(u[4:], r.id)
	le.PutUint64(u[8:], uint64(half))
	le.PutUint64(u[16:], uint64(n))
	lapi.PutPVO(u[24:], pvo)
	if err := w.lc.Amsend(a.from, w.hCTS, u, nil, lapi.SendOpts{}); err != nil {
		w.mu.Lock()
		r.sp.parts = 1 // the sender will write nothing, and nothing is read
		w.mu.Unlock()
		r.Complete(fmt.Errorf("mpi: rendezvous receive from rank %d: %w", a.env.src, err))
		return
	}
	if half == 0 {
		return
	}
	if err := w.lc.Get(a.from, a.env.pvo, r.buf[:half], lapi.SendOpts{Notify: r}); err != nil {
		r.Complete(err)
	}
}

// partDone counts one part of a split receive in (w.mu held) and reports
// whether the receive is now complete. The first error sticks.
func (w *World) partDone(r *request, err error) bool {
	if err != nil && r.sp.err == nil {
		r.sp.err = err
	}
	if r.sp.parts--; r.sp.parts > 0 {
		return false
	}
	w.endSplit(r)
	return true
}

// endSplit releases what a split receive holds (w.mu held): its table
// slot and the registration of its upper part.
func (w *World) endSplit(r *request) {
	r.sp.parts = 0
	w.reqs.remove(r)
	w.lc.Deregister(r.pvo)
}

// ctsHandler takes a CTS at the sender: its OnComplete writes the upper
// part, outside lapi's lock.
type ctsHandler struct{ w *World }

func (h ctsHandler) OnHeader(src lapi.Rank, uhdr []byte, n int) ([]byte, any) {
	if len(uhdr) != ctsLen || n != 0 {
		return nil, nil
	}
	w := h.w
	le := binary.LittleEndian
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.reqs.get(le.Uint32(uhdr[0:]))
	split, end := le.Uint64(uhdr[8:]), le.Uint64(uhdr[16:])
	if r == nil || r.recv || r.peer != int(src) || r.done.Load() || r.sp != nil || split > end || end > uint64(len(r.buf)) {
		return nil, nil // stale, or not ours: ignored
	}
	r.sp = &splitState{putting: true, split: int(split), end: int(end), rreq: le.Uint32(uhdr[4:]), dst: lapi.GetPVO(uhdr[24:])}
	return nil, r
}

func (h ctsHandler) OnComplete(src lapi.Rank, cookie any) {
	r, ok := cookie.(*request)
	if !ok {
		return
	}
	// PUTFIN goes once the part is placed, not once the buffer may be
	// reused: a part lapi copies (up to its copy threshold) would be
	// "done" at once, and PUTFIN, over a device that reorders, overtook
	// the data: the receive completed without its upper part.
	if err := h.w.lc.PutPlaced(src, r.sp.dst, r.buf[r.sp.split:r.sp.end], r); err != nil {
		r.Complete(err)
	}
}

// putDone runs (w.mu held) when the sender's part is written: it tells
// the receiver, failed or not.
func (w *World) putDone(r *request, err error) {
	r.sp.putting = false
	if err != nil {
		r.sp.err = err
	}
	var fin [putFinLen]byte
	u := fin[:]
	binary.LittleEndian.PutUint32(u[0:], r.sp.rreq)
	binary.LittleEndian.PutUint32(u[4:], r.id)
	if err != nil {
		u[8] = 1
	}
	w.mu.Unlock() // never hold w.mu across a call into lapi
	w.lc.Amsend(lapi.Rank(r.peer), w.hPutFin, u, nil, lapi.SendOpts{})
	w.mu.Lock()
}

// putFinHandler takes a PUTFIN at the receiver: the sender's part is in.
type putFinHandler struct{ w *World }

func (h putFinHandler) OnHeader(src lapi.Rank, uhdr []byte, n int) ([]byte, any) {
	if len(uhdr) != putFinLen || n != 0 || uhdr[8] > 1 {
		return nil, nil
	}
	w := h.w
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.reqs.get(binary.LittleEndian.Uint32(uhdr[0:]))
	if r == nil || !r.recv || r.rts == nil || r.rts.from != src || r.rts.env.sreq != binary.LittleEndian.Uint32(uhdr[4:]) || r.sp == nil || r.sp.parts == 0 {
		return nil, nil
	}
	r.sp.putFailed = uhdr[8] == 1
	return nil, r
}

func (h putFinHandler) OnComplete(_ lapi.Rank, cookie any) {
	r, ok := cookie.(*request)
	if !ok {
		return
	}
	w := h.w
	w.mu.Lock()
	defer w.mu.Unlock()
	var err error
	if r.sp.putFailed {
		err = fmt.Errorf("mpi: rendezvous receive from rank %d: the sender could not write its part", r.rts.env.src)
	}
	w.getDone(r, err)
}
