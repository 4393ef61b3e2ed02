package mpi

import (
	"context"
	"sync/atomic"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/lapi"
)

// Large broadcasts by lapi's broadcast RDMA (lapi.Broadcast): the data
// streams down a chain of the members in chunks, each rank's lapi
// forwarding a chunk to the next as soon as it has landed (conditional
// RDMA), so that every rank receives and sends the message once, with no
// handshake per step and no call of the rank's in the path. The
// scatter-allgather it replaces moves about 2x the message through each
// rank, in 2 log2(n)+n-1 synchronised steps.

// bcastRDMALarge is the smallest Bcast (bytes) that goes by broadcast
// RDMA, with more than 2 ranks: below it the ready messages and the
// pipeline's start cost more than they save.
const bcastRDMALarge = 1 << 20

// bcastRDMAChunk is the pipeline's unit.
const bcastRDMAChunk = 256 << 10

// bcastRDMA reports whether a Bcast of n bytes goes by broadcast RDMA.
func (c *Comm) bcastRDMA(n int) bool {
	return n >= bcastRDMALarge && c.size > 2
}

// bcastChain broadcasts b from root by lapi.Broadcast along a chain of
// the members in rank order from root.
func (c *Comm) bcastChain(b []byte, root int) error {
	w := c.w
	group := make([]hal.Rank, c.size)
	for i, wr := range c.group {
		group[i] = hal.Rank(wr)
	}
	// The communicator's context and the call's number name the
	// broadcast at every member, and no other in flight.
	k := c.coll.seq.Load()
	id := uint64(c.ctx)<<32 | uint64(k)
	var done bcastDone
	if err := w.lc.Broadcast(group, root, id, b, lapi.BcastOpts{Tree: lapi.BcastChain, Chunk: bcastRDMAChunk, Notify: &done}); err != nil {
		return err
	}
	ctx, cancel := w.deadline(context.Background())
	defer cancel()
	err := w.lc.Wait(ctx, func() (bool, error) {
		if done.fin.Load() {
			return true, nil
		}
		// A member that disagreed about the call aborts it: the chain
		// may wait for it in vain.
		return false, c.coll.abortOf(k)
	})
	if err == nil {
		err = done.err
	}
	if err != nil {
		// Nothing more may land in b once the call has returned.
		w.lc.AbortBroadcast(id, err)
		return c.stepErr(ctx, err, "bcast", c.rankBefore(root))
	}
	return nil
}

// bcastDone hears that this rank's part of a broadcast is over.
type bcastDone struct {
	err error // written before fin
	fin atomic.Bool
}

// Complete is told by lapi, in its completion runner.
func (d *bcastDone) Complete(err error) {
	d.err = err
	d.fin.Store(true)
}

// rankBefore is this rank's parent in the chain from root: the rank a
// stalled broadcast waits for.
func (c *Comm) rankBefore(root int) int {
	if c.rank == root {
		return (root + 1) % c.size
	}
	return (c.rank - 1 + c.size) % c.size
}
