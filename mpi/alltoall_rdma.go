package mpi

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/weft-hpc/weft/lapi"
)

// Large Alltoalls and Allgathers by RDMA Puts: every rank registers its
// receive buffer, the ranks exchange the buffers' PVOs (one small message
// to each peer, all in flight at once), and then each rank Puts its
// blocks straight into the peers' receive buffers, each Put bumping a
// counter at its target as it lands. A rank is done when its own Puts
// have left its send buffer and every peer's block has landed in its
// receive buffer. No handshake per pair and no step waits for the one
// before: the pairwise exchange (Alltoall) and the ring (Allgather) it
// replaces take p-1 synchronised steps, each a rendezvous whose
// handshake waits for both ranks to be scheduled. Every rank still sends
// and receives p-1 blocks, as in those.

// putCollLen is a rank's record in the exchange: its receive buffer's
// PVO, the ID of the counter the Puts into it bump, and its length.
const putCollLen = lapi.PVOLen + 4 + 8

// putColl is a communicator's state for these collectives, reused from
// call to call (collectives on a communicator run one at a time). A call
// that fails drops it, so that what its Puts report late lands in the
// dropped one, never in a later call's.
type putColl struct {
	in   *lapi.Counter // bumped by each peer's Put into this rank's receive buffer
	sent putSent       // this rank's Puts
	me   [putCollLen]byte
	all  []byte // every member's record, member q's at q*putCollLen
}

// putSent counts a call's Puts whose data has left the send buffer, and
// keeps the first failure.
type putSent struct {
	n   atomic.Int32
	err atomic.Pointer[error]
}

// Complete is told by lapi of each Put (SendOpts.Notify).
func (s *putSent) Complete(err error) {
	if err != nil {
		s.err.CompareAndSwap(nil, &err)
	}
	s.n.Add(1)
}

// putState is the communicator's putColl, made on first use.
func (c *Comm) putState() *putColl {
	if c.rput == nil {
		c.rput = &putColl{in: c.w.lc.NewCounter(), all: make([]byte, c.size*putCollLen)}
	}
	return c.rput
}

// alltoallRDMALarge is the default smallest Alltoall block (bytes per
// peer) that goes by Puts (WEFT_ALLTOALL_RDMA sets it; 0 turns it off):
// from 64 KiB they beat the pairwise exchange on 4 and 8 ranks over shm,
// udp and udp across hosts; at 16 and 32 KiB across hosts they lost
// (bench/results/allgather-rdma.md).
const alltoallRDMALarge = 64 << 10

// putCollOneHostMax bounds the blocks that go by Puts among ranks of one
// host that no single copy reaches (UDP over loopback): there, each
// rank's p-1 Puts at once lost to the ring and the pairwise exchange
// from 1 MiB on 8 ranks (bench/results/allgather-rdma.md). Where single
// copies reach the members (shm, mpi.Run) Puts won at every size up to
// 4 MiB, and so did Alltoall's across hosts (2 ranks on each of 2).
const putCollOneHostMax = 1 << 20

// alltoallPut reports whether an Alltoall of n bytes per peer goes by
// Puts (alltoallRDMA).
func (c *Comm) alltoallPut(n int) bool { return c.usePuts(n, c.w.alltoallPutMin) }

// usePuts reports whether blocks of n bytes go by Puts on c, from least
// bytes (0: never): below putCollOneHostMax, or where the members span
// hosts (what was measured across hosts), or, on one host, where single
// copies reach them. Every member decides alike: from the block's size,
// the communicator's layout and, on one host only, the host's single
// copies, which a member alone on its host, reached by plain UDP, lacks
// while the others have them.
func (c *Comm) usePuts(n, least int) bool {
	return least > 0 && n >= least && c.size > 1 &&
		(n < putCollOneHostMax || spansNodes(c) || c.w.lc.SingleCopy() > 0)
}

// alltoallRDMA is Alltoall by Puts: block q of send goes to member q's
// recv at this rank's block.
func (c *Comm) alltoallRDMA(send, recv []byte) error {
	n := len(send) / c.size
	return c.putBlocks("alltoall", recv, n, func(q int) []byte { return send[q*n : (q+1)*n] })
}

// putBlocks Puts src(q) into member q's recv at block c.rank (blocks of
// n bytes; recv holds c.size of them) for every member q, and waits until
// every member's block is in this rank's recv (op names the call in
// errors). src(c.rank) is copied into recv here.
func (c *Comm) putBlocks(op string, recv []byte, n int, src func(q int) []byte) (err error) {
	w, p := c.w, c.size
	lc := w.lc
	st := c.putState()
	defer func() {
		if err != nil {
			c.rput = nil // late reports of this call's Puts land in st
		}
	}()
	region, err := lc.Register(recv, lapi.AccessWrite)
	if err != nil {
		return fmt.Errorf("register the receive buffer: %w", err)
	}
	defer lc.Deregister(region)
	// Nothing of this call lands before the peers have the PVO, which
	// goes out below: every earlier call's Puts into this rank have
	// landed (it waited for them), so base counts none of this one's.
	base := st.in.Value()
	st.sent.n.Store(0)
	le := binary.LittleEndian
	lapi.PutPVO(st.me[:], region)
	le.PutUint32(st.me[lapi.PVOLen:], st.in.ID())
	le.PutUint64(st.me[lapi.PVOLen+4:], uint64(len(recv)))
	if err := exchangePVOs(c, st.me[:], st.all); err != nil {
		return err
	}
	for q := range p {
		if m := int(le.Uint64(st.all[q*putCollLen+lapi.PVOLen+4:])); m != len(recv) {
			return fmt.Errorf("ranks disagree: rank %d receives %d bytes, rank %d %d: %w", q, m, c.rank, len(recv), ErrArg)
		}
	}
	copy(recv[c.rank*n:(c.rank+1)*n], src(c.rank))
	at := uint64(c.rank * n)
	for i := 1; i < p; i++ {
		// Each rank starts with its right neighbour, so that the first
		// Puts spread over the ranks instead of all going to rank 0.
		q := (c.rank + i) % p
		rec := st.all[q*putCollLen:]
		err := lc.Put(lapi.Rank(c.group[q]), lapi.GetPVO(rec).Add(at), src(q),
			lapi.SendOpts{Target: le.Uint32(rec[lapi.PVOLen:]), Notify: &st.sent})
		if err != nil {
			return fmt.Errorf("put to rank %d: %w", q, err)
		}
	}
	want := int64(p - 1)
	ctx, cancel := w.deadline(context.Background())
	defer cancel()
	watched := false
	err = lc.WaitReport(ctx, func() (bool, error) {
		if e := st.sent.err.Load(); e != nil {
			return false, *e
		}
		if st.sent.n.Load() >= int32(want) && st.in.Value()-base >= want {
			return true, nil
		}
		for q, wr := range c.group {
			if q != c.rank {
				if err := lc.PeerErr(lapi.Rank(wr)); err != nil {
					return false, fmt.Errorf("rank %d: %w", q, err)
				}
			}
		}
		return false, c.coll.abortedNow()
	}, func() {
		watched = true
		c.coll.watch() // members that chose another algorithm wait in vain
	})
	if watched {
		c.coll.unwatch()
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", &TimeoutError{Rank: w.rank, Waiting: fmt.Sprintf("%s by RDMA: %d of %d peers' blocks landed here, %d of %d Puts sent",
			op, st.in.Value()-base, want, st.sent.n.Load(), want)}, ctx.Err())
	}
	return err
}
