package lapi

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/weft-hpc/weft/hal"
)

// The half-receive RDMA read: the origin asks (an active message), the
// target's FIFOSource answers with the bytes, and the target writes them
// by RDMA into the origin's registered region, naming the origin's counter
// as the write's target counter: the origin keeps no state for the read,
// its engine places the packets and bumps the counter when the last one
// has landed (or fails it when its TPT refuses them).

// fifoReadLen is a GetFromFIFO request's user header: the origin's region
// (PVO), the length (8), the source's ID (2), its arg (4) and the origin's
// counter (4).
const fifoReadLen = hal.PVOLen + 18

// GetFromFIFO is the half-receive RDMA read: it asks tgt's FIFOSource
// src (RegisterFIFOSource) for n bytes with arg, which tgt's processor
// copies into RDMA packets from wherever it keeps them, and this rank's
// engine places them into the region dst names here (registered for
// writes), in any order, whatever the losses. o.Origin fires when every
// byte is in place, and fails when tgt's source refused the read
// (ErrProtection), this rank's TPT refused the packets, or tgt failed. A
// read's Completion is its Origin; o.Notify and o.NoCompletion do not
// apply (ErrBadOpts): the origin keeps no state for the read, only the
// counter.
func (hf Half) GetFromFIFO(tgt hal.Rank, dst hal.PVO, n uint64, src FIFOID, arg uint32, o SendOpts) error {
	c := hf.c
	if src == NoFIFO {
		return fmt.Errorf("lapi: get from FIFO source NoFIFO at rank %d: %w", tgt, ErrNoHandler)
	}
	if o.NoCompletion || o.Notify != nil {
		return fmt.Errorf("lapi: get from FIFO with NoCompletion or a Completer: %w", ErrBadOpts)
	}
	if err := hf.checkHalf(tgt, n, &o); err != nil {
		return err
	}
	if tgt == c.rank {
		return hf.getFromFIFOHere(dst, n, src, arg, o.Origin)
	}
	var u [fifoReadLen]byte
	hal.PutPVO(u[:], dst)
	binary.LittleEndian.PutUint64(u[hal.PVOLen:], n)
	binary.LittleEndian.PutUint16(u[hal.PVOLen+8:], uint16(src))
	binary.LittleEndian.PutUint32(u[hal.PVOLen+10:], arg)
	if o.Origin != nil {
		binary.LittleEndian.PutUint32(u[hal.PVOLen+14:], o.Origin.id)
	}
	c.mu.Lock()
	err := c.ri.rdmaCheck(tgt)
	if err == nil && o.Origin != nil {
		c.am.await(tgt, o.Origin) // tgt owes it: it fails if tgt does
	}
	if err == nil {
		err = c.am.amsendLocked(tgt, hFIFORead, u[:], nil, &SendOpts{})
		if err != nil && o.Origin != nil {
			c.am.awaited(tgt, o.Origin)
		}
	}
	c.unlockRun()
	return err
}

// getFromFIFOHere is GetFromFIFO of this rank's own source: one copy.
func (hf Half) getFromFIFOHere(dst hal.PVO, n uint64, src FIFOID, arg uint32, k *Counter) error {
	c := hf.c
	mem, err := c.tpt.Resolve(dst, n, hal.AccessWrite)
	if err != nil {
		return fmt.Errorf("lapi: get from FIFO: %w", err)
	}
	c.mu.Lock()
	s := c.rd.source(src)
	c.mu.Unlock()
	if s == nil {
		return fmt.Errorf("lapi: get from FIFO: no source %d here: %w", src, ErrBadOpts)
	}
	data, err := s.OnRead(c.rank, arg, n)
	if err == nil && uint64(len(data)) != n {
		err = fmt.Errorf("lapi: FIFO source %d answered %d bytes for %d: %w", src, len(data), n, ErrProtection)
	}
	if err != nil {
		return fmt.Errorf("lapi: get from FIFO: %w", err)
	}
	copy(mem, data)
	s.Released(data)
	c.mu.Lock()
	c.am.doneHere(&SendOpts{Origin: k}, nil)
	c.unlockRun()
	return nil
}

// source is the FIFOSource registered as id, or nil (c.mu held).
func (r *rdmaState) source(id FIFOID) FIFOSource {
	if int(id) >= len(r.sources) {
		return nil
	}
	return r.sources[id]
}

// fifoReadHandler serves GetFromFIFO requests.
type fifoReadHandler struct{ c *Context }

// fifoReadReq is a request between the handler's halves.
type fifoReadReq struct {
	dst  hal.PVO
	n    uint64
	src  FIFOID
	arg  uint32
	cntr uint32
	s    FIFOSource
	data []byte // the source's answer, until the write no longer reads it
	lent bool   // the source answered: data goes back to it (Released)
}

// fifoReadReqs are requests done with, for the next ones: one per read
// would be an allocation per GetFromFIFO at its target.
var fifoReadReqs = sync.Pool{New: func() any { return new(fifoReadReq) }}

// release gives the answer back to its source and the request to the
// pool: the write is over, or never started.
func (r *fifoReadReq) release() {
	if r.lent {
		r.s.Released(r.data)
	}
	*r = fifoReadReq{}
	fifoReadReqs.Put(r)
}

// Complete hands the answer back to its source: the write is over.
func (r *fifoReadReq) Complete(error) { r.release() }

func (h fifoReadHandler) OnHeader(src hal.Rank, uhdr []byte, n int) ([]byte, any) {
	c := h.c
	if len(uhdr) != fifoReadLen || n != 0 {
		c.stats.BadPackets++
		return nil, nil
	}
	b := uhdr[hal.PVOLen:]
	r := fifoReadReqs.Get().(*fifoReadReq)
	*r = fifoReadReq{dst: hal.GetPVO(uhdr), n: binary.LittleEndian.Uint64(b), src: FIFOID(binary.LittleEndian.Uint16(b[8:])),
		arg: binary.LittleEndian.Uint32(b[10:]), cntr: binary.LittleEndian.Uint32(b[14:])}
	r.s = c.rd.source(r.src)
	return nil, r
}

// OnComplete asks the source and writes its answer (the completion
// runner calls it, outside the progress lock).
func (h fifoReadHandler) OnComplete(src hal.Rank, cookie any) {
	r, ok := cookie.(*fifoReadReq)
	if !ok {
		return
	}
	c := h.c
	err := ErrProtection // no such source, or a read too long
	if r.s != nil && r.n <= maxFIFOChunks*rdmaChunk {
		r.data, err = r.s.OnRead(src, r.arg, r.n)
		if err == nil && uint64(len(r.data)) != r.n {
			r.s.Released(r.data)
			err = ErrProtection // answered the wrong length
		}
	}
	if err != nil {
		c.mu.Lock()
		c.rd.stats.Faults++
		if r.cntr != 0 {
			c.am.notifyCode(src, r.cntr, codeRefused)
		}
		c.unlockRun()
		r.release()
		return
	}
	// The write's Notify gives the data back to the source when done,
	// failed or not; a write that does not start gives it back now.
	r.lent = true
	if err := c.rd.write(opWrite, src, hal.RDMAHdr{PVO: r.dst}, r.data, &SendOpts{Target: r.cntr, Notify: r}); err != nil {
		r.release()
	}
	c.am.runCompletions()
}
