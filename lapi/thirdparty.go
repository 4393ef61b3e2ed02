package lapi

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/weft-hpc/weft/hal"
)

// Third-party RDMA (the IBM seed's): rank A asks rank B to move data
// between a region of B's and a region of rank C's, B's CPU doing nothing
// but start the transfer. B checks the request against its own TPT (A
// must hold a PVO of B's region, handed out by B) and carries it out as
// its own Put or Get, so lapi's reliability, redrive and single-copy
// paths apply; when it is done at C, B tells A (a completion, or a fault
// naming the check that failed), and can count it at B and, for a write,
// at C.

// ErrThirdParty: the rank asked to carry out a transfer could not (its
// transfer to or from the other rank failed: a peer failed, restarted, or
// RDMA toward it was off).
var ErrThirdParty = errors.New("lapi: third-party transfer failed")

// codeFailed is the fault code of a third-party transfer that failed for
// another reason than a protection check (faultErr).
const codeFailed = 0xff

// ThirdPartyOpts say who hears of a third-party transfer.
type ThirdPartyOpts struct {
	// Completion, a counter of this rank, is incremented when the
	// transfer is done at both ends, or fails with the reason.
	Completion *Counter
	// ByTarget is the ID of a counter at the rank carrying the transfer
	// out, incremented there when it is done.
	ByTarget uint32
	// OtherTarget is the ID of a counter at the other rank, incremented
	// there when a write has landed (a read leaves it alone).
	OtherTarget uint32
}

// thirdLen is a request's user header: own PVO, other's PVO, other rank,
// length, flags, and the three counter IDs.
const thirdLen = 2*hal.PVOLen + 4 + 8 + 1 + 3*4

// ThirdParty asks rank by to copy n bytes between its own region named by
// local and rank other's region named by remote: with write, local into
// remote (by's Put into other); without, remote into local (by's Get from
// other). by may be this rank; other must not be by. The request goes as a
// message to by, which checks local against its TPT: a PVO by did not hand
// out, or a region too small or without the access, fails o.Completion
// with ErrProtection naming the check, as a failure of by's transfer
// fails it with ErrThirdParty.
func (c *Context) ThirdParty(by hal.Rank, local hal.PVO, other hal.Rank, remote hal.PVO, n uint64, write bool, o ThirdPartyOpts) error {
	switch {
	case int(by) >= c.cfg.Size || int(other) >= c.cfg.Size:
		return fmt.Errorf("lapi: third party: ranks %d and %d of %d: %w", by, other, c.cfg.Size, ErrBadRank)
	case by == other:
		return fmt.Errorf("lapi: third party: rank %d asked to copy to itself: %w", by, ErrBadRank)
	case n == 0:
		return fmt.Errorf("lapi: third party: no bytes to copy: %w", ErrTooLarge)
	case o.Completion != nil && o.Completion.c != c:
		return fmt.Errorf("lapi: third party: the completion counter is not this context's: %w", ErrTrigger)
	}
	var u [thirdLen]byte
	hal.PutPVO(u[:], local)
	hal.PutPVO(u[hal.PVOLen:], remote)
	b := u[2*hal.PVOLen:]
	binary.LittleEndian.PutUint32(b, uint32(other))
	binary.LittleEndian.PutUint64(b[4:], n)
	if write {
		b[12] = 1
	}
	var ccntr uint32
	if o.Completion != nil {
		ccntr = o.Completion.id
	}
	binary.LittleEndian.PutUint32(b[13:], ccntr)
	binary.LittleEndian.PutUint32(b[17:], o.ByTarget)
	binary.LittleEndian.PutUint32(b[21:], o.OtherTarget)
	c.mu.Lock()
	if o.Completion != nil {
		c.am.await(by, o.Completion) // fails if by does
	}
	err := c.am.amsendLocked(by, hThird, u[:], nil, &SendOpts{})
	if err != nil && o.Completion != nil {
		c.am.awaited(by, o.Completion)
	}
	c.mu.Unlock()
	if by == c.rank {
		c.am.runCompletions() // the request to itself was delivered at once
	}
	if err != nil {
		return fmt.Errorf("lapi: third party: %w", err)
	}
	return nil
}

// thirdReq is a third-party request at the rank that carries it out.
type thirdReq struct {
	from          hal.Rank
	local, remote hal.PVO
	other         hal.Rank
	n             uint64
	write         bool
	ccntr, bycntr uint32
	othercntr     uint32
}

type thirdHandler struct{ c *Context }

func (h thirdHandler) OnHeader(src hal.Rank, uhdr []byte, n int) ([]byte, any) {
	if len(uhdr) != thirdLen || n != 0 {
		h.c.stats.BadPackets++
		return nil, nil
	}
	b := uhdr[2*hal.PVOLen:]
	return nil, &thirdReq{from: src, local: hal.GetPVO(uhdr), remote: hal.GetPVO(uhdr[hal.PVOLen:]),
		other: hal.Rank(binary.LittleEndian.Uint32(b)), n: binary.LittleEndian.Uint64(b[4:]), write: b[12] != 0,
		ccntr: binary.LittleEndian.Uint32(b[13:]), bycntr: binary.LittleEndian.Uint32(b[17:]),
		othercntr: binary.LittleEndian.Uint32(b[21:])}
}

// OnComplete carries the request out (the completion runner calls it,
// outside the progress lock).
func (h thirdHandler) OnComplete(_ hal.Rank, cookie any) {
	r, ok := cookie.(*thirdReq)
	if !ok {
		return
	}
	c := h.c
	acc := hal.AccessWrite
	if r.write {
		acc = hal.AccessRead
	}
	mem, err := c.tpt.Resolve(r.local, r.n, acc)
	if err != nil {
		c.trg.thirdDone(r, faultCode(err))
		return
	}
	if int(r.other) >= c.cfg.Size || r.other == c.rank {
		c.trg.thirdDone(r, codeFailed)
		return
	}
	// A counter of this rank's own counts the transfer; when it is done
	// (or fails) at the other rank, a trigger on it reports to the asker.
	c.mu.Lock()
	k := c.trg.spareCounter()
	c.trg.armFnLocked(k, 1, func(err error) {
		code := uint8(0)
		if err != nil {
			code = faultCode(err)
			if !errors.Is(err, ErrProtection) {
				code = codeFailed
			}
		}
		c.trg.thirdDone(r, code)
		if err == nil {
			c.trg.recycle(k)
		}
	})
	c.mu.Unlock()
	if r.write {
		err = c.Put(r.other, r.remote, mem, SendOpts{Completion: k, Target: r.othercntr})
	} else {
		err = c.Get(r.other, r.remote, mem, SendOpts{Origin: k})
	}
	if err != nil {
		c.mu.Lock()
		k.fail(err)
		c.mu.Unlock()
		c.am.runCompletions()
	}
}

// recycle gives back a spare counter that its one operation incremented
// and never will again, for another (c.mu not held). One whose operation
// failed is left to the collector: a late increment could still come.
func (ts *triggerSet) recycle(k *Counter) {
	c := ts.c
	c.mu.Lock()
	k.v.Store(0)
	ts.spareCntrs = append(ts.spareCntrs, k)
	c.mu.Unlock()
}

// spareCounter is a counter for lapi's own use, recycled (c.mu held).
func (ts *triggerSet) spareCounter() *Counter {
	c := ts.c
	if n := len(ts.spareCntrs); n > 0 {
		k := ts.spareCntrs[n-1]
		ts.spareCntrs = ts.spareCntrs[:n-1]
		return k
	}
	return c.am.newCounterLocked()
}

// thirdDone reports a third-party transfer to the rank that asked, and
// counts it here.
func (ts *triggerSet) thirdDone(r *thirdReq, code uint8) {
	c := ts.c
	c.mu.Lock()
	if code == 0 && r.bycntr != 0 {
		if k := c.am.counter(r.bycntr); k != nil {
			k.incr()
		}
	}
	if r.ccntr != 0 {
		c.am.notifyCode(r.from, r.ccntr, code)
	}
	c.pr.wakeLocked()
	c.mu.Unlock()
	c.am.runCompletions()
}
