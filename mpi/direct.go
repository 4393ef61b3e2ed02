package mpi

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/weft-hpc/weft/lapi"
)

// Direct-read reductions: where a Get is one copy (ranks of one node,
// through cross-memory attach or a shared address space), a large
// Allreduce reads instead of sending. Each rank owns one block of the
// result: it reads that block of every other rank's send buffer and
// reduces it into its receive buffer, then, once every rank has done so,
// reads the other blocks from their owners' receive buffers. Every byte
// crosses between ranks once each way, with no copy through the device
// and no copy of send into recv; and each block is reduced by one rank
// only, so every rank ends with the same bits.

// directLarge is the default smallest Allreduce (bytes) that reduces by
// direct reads (WEFT_DIRECT sets it; 0 turns them off): from here they
// beat the message algorithms with 2 ranks and with 4 on 2 cores, below
// it not.
const directLarge = 128 << 10

// direct reports whether an Allreduce of n bytes of elements of es bytes
// reduces by direct reads. With more ranks than cores too: each of its
// three synchronisations may wait for a context switch, but so does every
// step of the ring, and the ring moves every byte twice more. Every
// member decides alike: on one node its members share the single copies;
// across hosts none reads another's by single copy, a member with single
// copies sees one it cannot reach (spansFar), and one without has none.
func direct(c *Comm, n, es int) bool {
	w := c.w
	return w.directMin > 0 && n >= w.directMin && n/es >= c.size && w.lc.SingleCopy() > 0 && !spansFar(c)
}

// spansFar reports whether a member of c is a rank no single-copy read
// reaches (World.far).
func spansFar(c *Comm) bool {
	if c.w.far == nil {
		return false
	}
	for _, wr := range c.group {
		if c.w.far[wr] {
			return true
		}
	}
	return false
}

// directCounter is the communicator's counter for the reads of direct
// reductions; collectives on a communicator run one at a time.
func directCounter(c *Comm) *lapi.Counter {
	if c.dirCntr == nil {
		c.dirCntr = c.w.lc.NewCounter()
	}
	return c.dirCntr
}

// allreduceDirect reduces send into recv (the same length, and either the
// same buffer or not overlapping it) by direct reads.
func allreduceDirect(c *Comm, recv, send []byte, es int, red reducer) error {
	lc, p := c.w.lc, c.size
	count := len(recv) / es
	off := func(i int) int { return i * count / p * es }
	mine := recv[off(c.rank):off(c.rank+1)]
	inPlace := &recv[0] == &send[0]
	spvo, rpvo, release, err := registerBoth(c, send, recv)
	if err != nil {
		return err
	}
	defer release()
	// Each rank's two PVOs and its length: ranks that disagree on it
	// stop here, before any read.
	var me [2*lapi.PVOLen + 8]byte
	lapi.PutPVO(me[:], spvo)
	lapi.PutPVO(me[lapi.PVOLen:], rpvo)
	binary.LittleEndian.PutUint64(me[2*lapi.PVOLen:], uint64(len(recv)))
	// The scratch holds every rank's two PVOs, then a block to read into.
	scratch := c.scratch(p*len(me) + len(mine))
	pvos, tmp := scratch[:p*len(me)], scratch[p*len(me):]
	if err := exchangePVOs(c, me[:], pvos); err != nil {
		return err
	}
	pvo := func(q, which int) lapi.PVO { return lapi.GetPVO(pvos[q*len(me)+which*lapi.PVOLen:]) }
	for q := range p {
		if n := int(binary.LittleEndian.Uint64(pvos[q*len(me)+2*lapi.PVOLen:])); n != len(recv) {
			return fmt.Errorf("ranks disagree: rank %d reduces %d bytes, rank %d %d: %w", q, n, c.rank, len(recv), ErrArg)
		}
	}
	k := directCounter(c)
	ctx, cancel := c.w.deadline(context.Background())
	defer cancel()
	get := func(q int, src lapi.PVO, dst []byte) error {
		if err := lc.Get(lapi.Rank(c.group[q]), src, dst, lapi.SendOpts{Origin: k}); err != nil {
			return err
		}
		if err := k.Wait(ctx, 1); err != nil {
			return stepErr(c, ctx, err, "allreduce read", q)
		}
		return nil
	}
	// Reduce-scatter: the first peer's block lands in mine, unless mine
	// is still this rank's own send; the others land in tmp.
	own := inPlace
	for i := 1; i < p; i++ {
		q := (c.rank + i) % p
		dst := tmp[:len(mine)]
		if !own {
			dst = mine
		}
		if err := get(q, pvo(q, 0).Add(uint64(off(c.rank))), dst); err != nil {
			return err
		}
		if !own {
			red.reduce(mine, send[off(c.rank):off(c.rank+1)])
			own = true
		} else {
			red.reduce(mine, dst)
		}
	}
	// Every block is reduced (and no send buffer is read any more) once
	// every rank is past this barrier.
	if err := c.barrier(); err != nil {
		return err
	}
	for i := 1; i < p; i++ {
		q := (c.rank + i) % p
		if err := get(q, pvo(q, 1).Add(uint64(off(q))), recv[off(q):off(q+1)]); err != nil {
			return err
		}
	}
	// Nobody may change or release its buffers before the others have
	// read them.
	return c.barrier()
}

// registerBoth registers send and recv for the peers' reads (once when
// they are the same buffer) and returns their PVOs and what releases them.
func registerBoth(c *Comm, send, recv []byte) (spvo, rpvo lapi.PVO, release func(), err error) {
	lc := c.w.lc
	if spvo, err = lc.Register(send, lapi.AccessRead); err != nil {
		return
	}
	if &recv[0] == &send[0] {
		return spvo, spvo, func() { lc.Deregister(spvo) }, nil
	}
	if rpvo, err = lc.Register(recv, lapi.AccessRead); err != nil {
		lc.Deregister(spvo)
		return
	}
	return spvo, rpvo, func() { lc.Deregister(spvo); lc.Deregister(rpvo) }, nil
}

// exchangePVOs sends me to every other rank and receives theirs into all
// (rank q's at q*len(me)), each straight from its owner. lapi sends a
// peer the TPT updates it lacks ahead of any frame to it, so a PVO that
// comes in its owner's frame is in the receiver's replica of the owner's
// TPT, and the reads go by cross-memory attach. One forwarded by a third
// rank (as Bruck's allgather does) or read from the shared block could
// overtake the update, and the read would fall back to packets.
//
// All the receives are posted before the sends, so the exchanges overlap
// (pairwise steps, as alltoall's, were slower).
func exchangePVOs(c *Comm, me, all []byte) error {
	n, p := len(me), c.size
	copy(all[c.rank*n:], me)
	reqs := make([]*request, 0, p-1)
	for i := 1; i < p; i++ {
		q := (c.rank - i + p) % p
		r, err := c.irecv(all[q*n:(q+1)*n], 1, q, c.ctag(tagPVOs), c.ctx|1)
		if err != nil {
			return err
		}
		reqs = append(reqs, r)
	}
	for i := 1; i < p; i++ {
		if err := c.csend(me, (c.rank+i)%p, tagPVOs); err != nil {
			return err
		}
	}
	return waitAll(reqs)
}
