package mpi

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/weft-hpc/weft/lapi"
)

// Half-RDMA reductions: in the ring reduce-scatter of a large Allreduce,
// each rank accumulates its block straight into its right neighbour's
// buffer (lapi.Accumulate), which reduces each packet as it lands instead
// of receiving the whole block and then reducing it: the reduction
// overlaps the transfer, and the block is copied once instead of twice.

// accumulateLarge is the default smallest Allreduce (bytes) that reduces
// by half-RDMA (WEFT_ACCUMULATE sets it; 0 turns half-RDMA off): below it,
// exchanging the neighbours' addresses does not pay for itself.
const accumulateLarge = 1 << 20

// accCounters are the communicator's counters for half-RDMA: one per
// ring step for the left neighbour's accumulates (they may complete out of
// order, so each step has its own), and the one this rank's own
// accumulates complete on. Collectives on a communicator run one at a
// time, so they are reused.
func accCounters(c *Comm) (in []*lapi.Counter, out *lapi.Counter) {
	if c.accIn == nil {
		c.accIn = make([]*lapi.Counter, c.size-1)
		for i := range c.accIn {
			c.accIn[i] = c.w.lc.NewCounter()
		}
		c.accOut = c.w.lc.NewCounter()
	}
	return c.accIn, c.accOut
}

// allreduceAccumulate is allreduceRing with the reduce-scatter done by
// half-RDMA: at step s, rank r accumulates block r-s into its right
// neighbour's block r-s, after waiting for its left neighbour's
// accumulate into that block (step s-1) to have completed.
func allreduceAccumulate(c *Comm, acc []byte, es int, red reducer) error {
	w := c.w
	lc := w.lc
	p := c.size
	count := len(acc) / es
	off := func(i int) int { return i * count / p * es }
	block := func(i int) []byte { return acc[off(i):off(i+1)] }
	right, left := (c.rank+1)%p, (c.rank-1+p)%p
	mine, sent := accCounters(c)
	region, err := lc.Register(acc, lapi.AccessWrite)
	if err != nil {
		return err
	}
	defer lc.Deregister(region)
	// Tell the left neighbour where to accumulate and which counter each
	// step bumps; learn the same of the right one.
	me, them := make([]byte, lapi.PVOLen+4*(p-1)), make([]byte, lapi.PVOLen+4*(p-1))
	lapi.PutPVO(me, region)
	for i, k := range mine {
		binary.LittleEndian.PutUint32(me[lapi.PVOLen+4*i:], k.ID())
	}
	if err := c.csendrecv(me, left, them, right, tagAllreduce); err != nil {
		return err
	}
	rpvo := lapi.GetPVO(them)
	rcntr := func(step int) uint32 { return binary.LittleEndian.Uint32(them[lapi.PVOLen+4*step:]) }
	rr := lapi.Rank(c.group[right])
	ctx, cancel := w.deadline(context.Background())
	defer cancel()
	for step := 0; step < p-1; step++ {
		i := (c.rank - step + p) % p
		if step > 0 {
			if err := mine[step-1].Wait(ctx, 1); err != nil { // left's block i is in
				return stepErr(c, ctx, err, "allreduce accumulate", left)
			}
		}
		if err := lc.Accumulate(rr, rpvo.Add(uint64(off(i))), block(i), red.op, red.t,
			lapi.SendOpts{Completion: sent, Target: rcntr(step)}); err != nil {
			return err
		}
	}
	// This rank's own block (rank+1) is complete once left's last
	// accumulate is in; its blocks may be overwritten by the allgather
	// once its own accumulates have all landed.
	if err := mine[p-2].Wait(ctx, 1); err != nil {
		return stepErr(c, ctx, err, "allreduce accumulate", left)
	}
	if err := sent.Wait(ctx, int64(p-1)); err != nil {
		return stepErr(c, ctx, err, "allreduce accumulate", right)
	}
	for step := 0; step < p-1; step++ {
		sb, rb := block((c.rank-step+1+p)%p), block((c.rank-step+p)%p)
		if err := c.csendrecv(sb, right, rb, left, tagAllreduce); err != nil {
			return err
		}
	}
	return nil
}

// stepErr names a timeout of a one-sided step of a collective: what
// (such as "allreduce accumulate") with rank peer of the communicator.
func stepErr(c *Comm, ctx context.Context, err error, what string, peer int) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", &TimeoutError{Rank: c.w.rank,
			Waiting: fmt.Sprintf("%s with rank %d", what, c.group[peer])}, ctx.Err())
	}
	return err
}
