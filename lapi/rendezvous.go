package lapi

import (
	"encoding/binary"
	"fmt"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// Rendezvous for large active messages: the origin registers the data and
// sends only the header (RTS: the user's handler and header, the length,
// the data's PVO); the target's header handler chooses the buffer as for
// any message, the target reads the data into it by RDMA, runs the
// completion handler, and tells the origin (FIN), which may then reuse
// the data. The data crosses the network once, placed directly, and a
// receiver that is not ready to take it is never flooded with it.

// RTS user header, little-endian: the handler, the origin's rendezvous ID,
// the target counter to bump, the data's length and PVO, then the user's
// header.
const (
	rtsLen   = 2 + 4 + 4 + 8 + hal.PVOLen
	rvFinLen = 5 // ID, fault code
)

// rtsHandler takes an RTS at the target: it asks the user's handler for a
// buffer and reads the data into it.
type rtsHandler struct{ c *Context }

// rvRecv is a rendezvous receive between its read and its completion.
type rvRecv struct {
	c      *Context
	src    hal.Rank
	h      AMHandler
	cookie any
	id     uint32
	tcntr  uint32
}

func (r rtsHandler) OnHeader(src hal.Rank, uhdr []byte, _ int) ([]byte, any) {
	c := r.c
	if len(uhdr) < rtsLen {
		c.stats.BadPackets++
		return nil, nil
	}
	hid := HandlerID(binary.LittleEndian.Uint16(uhdr))
	if int(hid) >= len(c.am.handlers) || hid < firstUserHandler || c.am.handlers[hid].h == nil {
		c.stats.BadPackets++
		return nil, nil
	}
	rv := &rvRecv{c: c, src: src, h: c.am.handlers[hid].h, id: binary.LittleEndian.Uint32(uhdr[2:]),
		tcntr: binary.LittleEndian.Uint32(uhdr[6:])}
	total := binary.LittleEndian.Uint64(uhdr[10:])
	remote := hal.GetPVO(uhdr[18:])
	buf, cookie := rv.h.OnHeader(src, uhdr[rtsLen:], int(total))
	rv.cookie = cookie
	n := min(uint64(len(buf)), total)
	if trace.On(trace.Internal) {
		trace.Printf(trace.Internal, "lapi %d: rendezvous %d from rank %d: RTS for %d bytes, reading %d", c.rank, rv.id, src, total, n)
	}
	if n == 0 {
		c.am.note(rv, nil) // nothing to read: complete at once
		return nil, nil
	}
	local, err := c.tpt.RegisterLocal(buf[:n], hal.AccessWrite)
	if err != nil {
		c.am.note(rv, err)
		return nil, nil
	}
	g := c.rd.newGroup(opRead, src, &SendOpts{Notify: rv})
	g.local = local
	if err := c.rd.startTransfer(g, hal.FrameRDMAReadReq, hal.RDMAHdr{Total: n, PVO: remote, Local: local}, nil); err != nil {
		c.tpt.Deregister(local)
		c.am.note(rv, err)
	}
	return nil, nil
}

func (rtsHandler) OnComplete(hal.Rank, any) {}

// Complete runs when the read has placed the data (or failed): the user's
// completion handler runs (OnAbort, for a handler that has one, when the
// read failed: its OnComplete never comes), the target counter is bumped
// and the origin told, with the fault code of a failed read.
func (rv *rvRecv) Complete(err error) {
	c := rv.c
	if err == nil {
		rv.h.OnComplete(rv.src, rv.cookie)
	} else if ah, ok := rv.h.(AbortHandler); ok {
		c.mu.Lock() // OnAbort runs as it does from the progress engine
		ah.OnAbort(rv.src, rv.cookie, err)
		c.mu.Unlock()
	}
	var u [rvFinLen]byte
	binary.LittleEndian.PutUint32(u[:], rv.id)
	if err != nil {
		u[4] = hal.FaultCode(err)
	}
	c.mu.Lock()
	if trace.On(trace.Internal) {
		trace.Printf(trace.Internal, "lapi %d: rendezvous %d from rank %d: read finished (err %v), FIN sent", c.rank, rv.id, rv.src, err)
	}
	if k := c.am.counter(rv.tcntr); k != nil && err == nil {
		k.incr()
	}
	c.am.amsendLocked(rv.src, hRvFin, u[:], nil, &SendOpts{})
	c.mu.Unlock()
}

// rvFinHandler takes a FIN at the origin: the data may be reused.
type rvFinHandler struct{ c *Context }

func (r rvFinHandler) OnHeader(src hal.Rank, uhdr []byte, _ int) ([]byte, any) {
	c := r.c
	if len(uhdr) != rvFinLen {
		c.stats.BadPackets++
		return nil, nil
	}
	s := c.gets.lookup(binary.LittleEndian.Uint32(uhdr))
	if s == nil || !s.rv || s.peer != src {
		return nil, nil // late: the send already failed
	}
	if uhdr[4] != 0 {
		s.err = fmt.Errorf("lapi: large message to rank %d: data read failed (%s check): %w", src, hal.FaultCheck(uhdr[4]), ErrProtection)
	}
	if trace.On(trace.Internal) {
		trace.Printf(trace.Internal, "lapi %d: rendezvous %d to rank %d: FIN received, finished (err %v)",
			c.rank, binary.LittleEndian.Uint32(uhdr), src, s.err)
	}
	s.finish(c)
	c.gets.put(s)
	c.pr.wakeLocked()
	return nil, nil
}

func (rvFinHandler) OnComplete(hal.Rank, any) {}

// useRendezvous reports whether an active message goes by rendezvous.
func (ad *dispatcher) useRendezvous(tgt hal.Rank, n, uhdr int) bool {
	c := ad.c
	return tgt != c.rank && int(tgt) < c.cfg.Size && c.cfg.AMRendezvous >= 0 &&
		n >= c.cfg.AMRendezvous && uhdr <= MaxUhdr-rtsLen && (!c.rdvReliable || c.relTo[tgt])
}

// amRendezvousLocked is amsendTx for a large message. The
// registration's lock and the TPT watcher's come after the progress lock,
// as everywhere (see takeTPTChanges).
func (ad *dispatcher) amRendezvousLocked(tgt hal.Rank, h HandlerID, uhdr, data []byte, o SendOpts) error {
	c := ad.c
	local, err := c.tpt.Register(data, hal.AccessRead)
	if err != nil {
		return fmt.Errorf("lapi: send to %d: %w", tgt, err)
	}
	var u [MaxUhdr]byte
	binary.LittleEndian.PutUint16(u[0:], uint16(h))
	binary.LittleEndian.PutUint32(u[6:], o.Target)
	binary.LittleEndian.PutUint64(u[10:], uint64(len(data)))
	hal.PutPVO(u[18:], local)
	n := rtsLen + copy(u[rtsLen:], uhdr)
	id := c.gets.take(getSlot{peer: tgt, rv: true, local: local, cntr: o.Origin, cmp: o.Completion, notify: o.Notify})
	binary.LittleEndian.PutUint32(u[2:], id)
	err = ad.amsendLocked(tgt, hRTS, u[:n], nil, &SendOpts{})
	if err != nil {
		c.tpt.Deregister(local)
		c.gets.put(c.gets.lookup(id))
	}
	if trace.On(trace.Internal) {
		trace.Printf(trace.Internal, "lapi %d: rendezvous %d to rank %d: RTS for %d bytes sent (err %v)", c.rank, id, tgt, len(data), err)
	}
	return err
}
