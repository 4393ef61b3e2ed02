package lapi

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/weft-hpc/weft/hal"
)

// Half-RDMA, after the IBM seed: RDMA at one end of a transfer and the
// FIFO (the processor, copying or parsing packets as they come) at the
// other. The target of an RDMA write or the origin of a read places the
// data, checked against its TPT, or hands each packet to its ULP:
//
//   - half-receive RDMA write (PutFromFIFO): the origin copies unregistered
//     memory into packets, the target's engine places them into its
//     registered region;
//   - half-send RDMA write (PutToFIFO; Accumulate is one): the origin's
//     engine streams its registered region, the target's ULP takes each
//     packet through a FIFOHandler;
//   - half-send RDMA read (GetToFIFO): the target's engine streams its
//     registered region, the origin's ULP takes each packet through a
//     FIFOHandler, with nothing registered at the origin;
//   - half-receive RDMA read (GetFromFIFO): the target's ULP answers
//     through a FIFOSource with bytes from wherever it keeps them, which
//     its processor copies into RDMA packets, and the origin's engine
//     places them into the origin's registered region.
//
// Each is lapi's RDMA transfer (rdma.go): chunks on rCxts, redriven
// under new tids, exactly once per packet at the end that takes them.

// Half is a context's half-RDMA: c.Half().PutFromFIFO(...) and the other
// modes above, and the registration of the FIFO handlers and sources they
// name. A Half is a view of its context, free to copy.
type Half struct{ c *Context }

// Half is this context's half-RDMA.
func (c *Context) Half() Half { return Half{c} }

// lapi's handlers of half-RDMA (below firstUserHandler, after mcast.go's).
const (
	hFIFO     = hMcast + 1 // a half-send write sent as an active message (fifoAM)
	hFIFORead = hMcast + 2 // a half-receive read's request (GetFromFIFO)
)

// codeRefused is the fault code of a half-receive read its target's
// FIFOSource refused, or that named no source there.
const codeRefused = codeFailed - 1

// ErrBadOpts: SendOpts that contradict each other or the operation.
var ErrBadOpts = errors.New("lapi: contradictory send options")

// FIFOHandler takes the packets of a half-RDMA transfer that come through
// this rank's FIFO: OnFIFO runs once per packet, in any order, with data,
// the bytes at offset off of the transfer, and dst, the same length of
// this rank's region the packet is addressed to (PutToFIFO; the engine
// checked it as for a write) or nil (GetToFIFO). It runs in the progress
// engine with the lock held, must not block or call into the context,
// and data is valid only during the call.
type FIFOHandler interface {
	OnFIFO(src hal.Rank, off uint64, dst, data []byte)
}

// FIFOID names a FIFOHandler for PutToFIFO. Every rank registers the same
// handlers in the same order, so an ID means the same handler everywhere.
type FIFOID uint16

// NoFIFO is what RegisterFIFO and RegisterFIFOSource return for nil, and
// once their 16-bit ID space is used up (65,535 each); PutToFIFO and
// GetFromFIFO refuse it.
const NoFIFO FIFOID = 1<<16 - 1

// An RDMA write's arg word, as lapi uses it: an Accumulate's operation
// and type (accArg, below 1<<16), or fifoArgBit with a FIFOID in the low
// 16 bits and the chunk's index in its transfer above them.
const (
	fifoArgBit     = 1 << 31
	fifoChunkShift = 16
	maxFIFOChunks  = 1 << (31 - fifoChunkShift)
)

// FIFOSource answers GetFromFIFO reads at this rank, from its FIFO: OnRead
// returns the n bytes a read from src with arg asks for, copied or
// gathered from wherever they are, or an error to refuse it (the origin's
// counter then fails with ErrProtection). data must stay unchanged until
// Released gives it back, once the transfer no longer reads it. Both run
// in the completion runner, outside the progress lock, and must not
// block.
type FIFOSource interface {
	OnRead(src hal.Rank, arg uint32, n uint64) (data []byte, err error)
	Released(data []byte)
}

// RegisterFIFOSource registers s to answer GetFromFIFO reads from this
// rank and returns its ID (an ID space of its own, apart from
// RegisterFIFO's).
func (hf Half) RegisterFIFOSource(s FIFOSource) FIFOID {
	c := hf.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == nil || len(c.rd.sources) >= int(NoFIFO) {
		return NoFIFO
	}
	c.rd.sources = append(c.rd.sources, s)
	return FIFOID(len(c.rd.sources) - 1)
}

// RegisterFIFO registers h to take PutToFIFO transfers into this rank and
// returns its ID. Packets that came for the ID before (a faster peer's)
// were kept, and h takes them now.
func (hf Half) RegisterFIFO(h FIFOHandler) FIFOID {
	c := hf.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if h == nil || len(c.rd.fifos) >= int(NoFIFO) {
		return NoFIFO
	}
	c.rd.fifos = append(c.rd.fifos, h)
	if !c.closed {
		c.rd.deliverEarlyFIFO() // early.go
	}
	return FIFOID(len(c.rd.fifos) - 1)
}

// checkNone refuses options that ask for a completion and for none.
func checkNone(o *SendOpts) error {
	if o.NoCompletion && o.Completion != nil {
		return fmt.Errorf("lapi: a Completion counter with NoCompletion: %w", ErrBadOpts)
	}
	return nil
}

// noneByAM reports whether a write of n bytes to tgt is fire-and-forget
// (o.NoCompletion) and goes as lapi's sequenced, acknowledged packets
// rather than as RDMA packets: toward a peer over an unreliable device,
// where RDMA's only repair is a redrive that needs the completion; and
// where a Target counter must fire once for a transfer of several chunks,
// which only the origin, hearing each chunk's completion, could otherwise
// order.
func (r *rdmaState) noneByAM(tgt hal.Rank, n int, o *SendOpts) bool {
	return o.NoCompletion && (!r.c.reliableTo(tgt) || o.Target != 0 && n > rdmaChunk)
}

// PutFromFIFO is the half-receive RDMA write: the origin's processor
// copies src, ordinary unregistered memory, into RDMA packets (its send
// FIFO), and the target's engine places them into the region dst names,
// checked against its TPT, in any order and whatever the losses. It is
// Put without Put's choice of path: always RDMA packets (lapi's own
// packets when fire-and-forget over an unreliable device, see SendOpts),
// never a single copy or the device's hardware RDMA. o.Origin fires when
// src may be reused, o.Completion when the data is in place at tgt (or
// with an error naming the failed protection check), o.Target at tgt then.
func (hf Half) PutFromFIFO(tgt hal.Rank, dst hal.PVO, src []byte, o SendOpts) error {
	c := hf.c
	if err := hf.checkHalf(tgt, uint64(len(src)), &o); err != nil {
		return err
	}
	if tgt == c.rank || c.rd.noneByAM(tgt, len(src), &o) {
		return c.putAM(tgt, dst, src, o)
	}
	return c.rd.write(opWrite, tgt, hal.RDMAHdr{PVO: dst}, src, &o)
}

// PutToFIFO is the half-send RDMA write: the origin's engine streams n
// bytes of its own region src (resolved, and checked for reading, when
// the call is made), and the target takes each packet through the
// FIFOHandler it registered as h, with the slice of its region dst (which
// must admit writes) the packet is addressed to: the handler parses,
// scatters or reduces the data as it arrives, as Accumulate's does. Each
// packet goes to the handler once. o.Origin fires when src may be
// reused, o.Completion when every packet has been handed to the handler
// (or with an error naming the failed protection check), o.Target at tgt
// then. A handler ID tgt does not know is counted there (Stats.BadPackets)
// and the transfer completes.
func (hf Half) PutToFIFO(tgt hal.Rank, dst, src hal.PVO, n uint64, h FIFOID, o SendOpts) error {
	c := hf.c
	if h == NoFIFO {
		return fmt.Errorf("lapi: put to FIFO NoFIFO at rank %d: %w", tgt, ErrNoHandler)
	}
	if err := hf.checkHalf(tgt, n, &o); err != nil {
		return err
	}
	mem, err := c.tpt.Resolve(src, n, hal.AccessRead)
	if err != nil {
		return fmt.Errorf("lapi: put to FIFO: %w", err)
	}
	arg := fifoArgBit | uint32(h)
	if tgt == c.rank || c.rd.noneByAM(tgt, len(mem), &o) {
		return c.fifoAM(tgt, dst, mem, arg, o)
	}
	return c.rd.write(opFIFOWrite, tgt, hal.RDMAHdr{PVO: dst, Place: hal.PlaceFIFO, Arg: arg}, mem, &o)
}

// GetToFIFO is the half-send RDMA read: the target's engine streams n
// bytes of its region src, and this rank takes each packet through h, with
// the packet's offset in the read, once, in any order, whatever the
// losses and redrives; nothing is registered here, and h may scatter the
// data wherever it wants. o.Origin fires (or fails, with the protection
// check that refused the read) once h has had every packet; a read's
// Completion is its Origin. o.NoCompletion does not apply to a read.
func (hf Half) GetToFIFO(tgt hal.Rank, src hal.PVO, n uint64, h FIFOHandler, o SendOpts) error {
	c := hf.c
	if o.NoCompletion {
		return fmt.Errorf("lapi: get with NoCompletion: %w", ErrBadOpts)
	}
	if err := hf.checkHalf(tgt, n, &o); err != nil {
		return err
	}
	if h == nil {
		return fmt.Errorf("lapi: get to FIFO without a handler: %w", ErrBadOpts)
	}
	if tgt == c.rank {
		mem, err := c.tpt.Resolve(src, n, hal.AccessRead)
		if err != nil {
			return fmt.Errorf("lapi: get to FIFO: %w", err)
		}
		c.mu.Lock()
		if n > 0 {
			h.OnFIFO(tgt, 0, nil, mem)
		}
		c.am.doneHere(&SendOpts{Origin: o.Origin, Notify: o.Notify}, nil)
		c.unlockRun()
		return nil
	}
	c.mu.Lock()
	g := c.rd.newGroup(opFIFORead, tgt, &o)
	g.cmp, g.fifo = nil, h
	err := c.rd.startTransfer(g, hal.FrameRDMAReadReq, hal.RDMAHdr{Total: n, PVO: src, Place: hal.PlaceFIFO}, nil)
	c.mu.Unlock()
	return err
}

// checkHalf checks what every half-RDMA call must have right.
func (hf Half) checkHalf(tgt hal.Rank, n uint64, o *SendOpts) error {
	c := hf.c
	switch {
	case int(tgt) >= c.cfg.Size:
		return fmt.Errorf("lapi: half-RDMA with %d of %d: %w", tgt, c.cfg.Size, ErrBadRank)
	case n > maxFIFOChunks*rdmaChunk:
		return fmt.Errorf("lapi: half-RDMA of %d bytes: %w", n, ErrTooLarge)
	}
	return checkNone(o)
}

// fifoPacket hands one packet of a half-send write to its taker (c.mu
// held): an Accumulate's reduction, or a registered FIFOHandler. dst was
// checked when the packet came, and place is where it is: an Accumulate
// reduces into place resolved again with the table held, so that nothing
// lands in a region whose Deregister (which takes no progress lock) has
// returned since. A FIFOHandler gets dst, and is the one to keep its
// regions registered while packets for them may come, since it may
// deregister from inside OnFIFO.
func (r *rdmaState) fifoPacket(src hal.Rank, arg uint32, off uint64, dst []byte, place hal.PVO, data []byte) {
	c := r.c
	if arg&fifoArgBit == 0 {
		mem, err := c.tpt.Hold(place, uint64(len(dst)), hal.AccessWrite)
		if err != nil {
			r.stats.Faults++ // deregistered since: fire-and-forget, no one to tell
			return
		}
		err = reduceInto(mem, data, arg)
		c.tpt.Unhold()
		if err != nil {
			c.stats.BadPackets++
		}
		return
	}
	id := arg & (1<<fifoChunkShift - 1)
	if len(data) == 0 {
		return // a transfer of no bytes: its handler sees no packet
	}
	if int(id) >= len(r.fifos) {
		r.keepEarlyFIFO(src, arg, off, dst, place, data) // early.go
		return
	}
	chunk := uint64(arg&^fifoArgBit) >> fifoChunkShift
	r.fifos[id].OnFIFO(src, chunk*rdmaChunk+off, dst, data)
}

// fifoAM sends a half-send write (an Accumulate's, or PutToFIFO's) as one
// active message of lapi's own packets, to this rank or fire-and-forget
// over an unreliable device: the target hands it to its taker whole.
func (c *Context) fifoAM(tgt hal.Rank, dst hal.PVO, src []byte, arg uint32, o SendOpts) error {
	var u [hal.PVOLen + 4]byte
	hal.PutPVO(u[:], dst)
	binary.LittleEndian.PutUint32(u[hal.PVOLen:], arg)
	c.mu.Lock()
	err := c.ri.rdmaCheck(tgt)
	if err == nil {
		err = c.am.amsendLocked(tgt, hFIFO, u[:], src, &o)
	}
	c.unlockRun()
	return err
}

// fifoAMHandler takes fifoAM's messages: the data lands in a buffer of
// its own and goes to its taker when whole.
type fifoAMHandler struct{ c *Context }

// fifoMsg is a fifoAM message between its handlers.
type fifoMsg struct {
	dst, buf []byte
	place    hal.PVO
	arg      uint32
}

func (h fifoAMHandler) OnHeader(src hal.Rank, uhdr []byte, n int) ([]byte, any) {
	c := h.c
	if len(uhdr) != hal.PVOLen+4 {
		c.stats.BadPackets++
		return nil, nil
	}
	mem, err := c.tpt.Resolve(hal.GetPVO(uhdr), uint64(n), hal.AccessWrite)
	if err != nil {
		c.rd.stats.Faults++ // fire-and-forget: no one to tell
		return nil, nil
	}
	var m *fifoMsg
	r := &c.rd
	if k := len(r.fifoFree); k > 0 {
		m, r.fifoFree = r.fifoFree[k-1], r.fifoFree[:k-1]
	} else {
		m = new(fifoMsg)
	}
	if cap(m.buf) < n {
		m.buf = make([]byte, n)
	}
	m.dst, m.buf, m.place, m.arg = mem, m.buf[:n], hal.GetPVO(uhdr), binary.LittleEndian.Uint32(uhdr[hal.PVOLen:])
	return m.buf, m
}

func (h fifoAMHandler) OnComplete(src hal.Rank, cookie any) {
	m, ok := cookie.(*fifoMsg)
	if !ok {
		return
	}
	c := h.c
	c.mu.Lock()
	c.rd.fifoPacket(src, m.arg, 0, m.dst, m.place, m.buf)
	m.dst = nil
	if r := &c.rd; len(r.fifoFree) < maxFIFOFree && cap(m.buf) <= maxFIFOFreeBuf {
		r.fifoFree = append(r.fifoFree, m)
	}
	c.mu.Unlock()
}

// A few fifoAM messages' buffers are kept for the next ones (c.mu held):
// a fire-and-forget stream of them then allocates nothing. Larger ones
// go: at most 2 MiB stays kept per context.
const (
	maxFIFOFree    = 8
	maxFIFOFreeBuf = 256 << 10
)
