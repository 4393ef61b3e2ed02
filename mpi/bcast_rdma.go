package mpi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/weft-hpc/weft/lapi"
)

// Large broadcasts by lapi's broadcast RDMA (lapi.Broadcast): the data
// streams down a binomial tree of the members in chunks, each rank's lapi
// forwarding a chunk to its children as soon as it has landed
// (conditional RDMA), with no handshake per step and no call of the
// rank's in the path. The scatter-allgather it replaces takes
// 2 log2(n)+n-1 synchronised steps, each of which may wait for a rank to
// be scheduled.
//
// lapi also has a chain, where every rank receives and sends the data
// once; with more ranks than cores (bench/results/bcast-rdma.md) the
// chain's n-1 hops, each a wake-up, lost to the tree's log2(n).
//
// Where every rank's device broadcasts (Options.BcastMcast: UDP devices
// in the job's multicast group), the same Bcasts go by lapi.Multicast
// instead: the root sends the data once, the link carries it to every
// rank, and each rank reads by RDMA what it lost. Init has every rank
// choose alike (lapi.SetMulticast).

// bcastRDMALarge is the default smallest Bcast (bytes) that goes by
// broadcast RDMA, with more than 2 ranks (WEFT_BCAST_RDMA sets it; 0
// turns it off): from 128 KiB it beat the binomial tree of messages on 4
// and 8 ranks over udp and shm, at 64 KiB it lost
// (bench/results/bcast-rdma.md).
const bcastRDMALarge = 128 << 10

// bcastRDMAChunk is the pipeline's unit: 256 KiB and 1 MiB chunks were
// slower on 8 ranks over udp (bench/results/bcast-rdma.md).
const bcastRDMAChunk = 512 << 10

// bcastSingleCopyMax bounds the broadcasts that go by broadcast RDMA
// where every member is reached by single copy (one node: cross-memory
// attach, or mpi.Run's goroutines). There the sender of a Put does the
// copy, so the tree's root copies the message log2(n) times on its one
// core, while scatter-allgather's rendezvous split each copy between both
// ends: on 8 ranks over shm, from 8 MiB the last rank had the data later
// (6.7 ms against 5.3 at 8 MiB, 14.3 against 11.7 at 16 MiB).
const bcastSingleCopyMax = 8 << 20

// bcastRDMA reports whether a Bcast of n bytes goes by broadcast RDMA.
// Every member decides alike, as for direct reads (direct.go): across
// hosts every one of them takes it, on one node their single copies are
// the same.
func bcastRDMA(c *Comm, n int) bool {
	w := c.w
	if w.bcastRDMAMin <= 0 || n < w.bcastRDMAMin || c.size <= 2 {
		return false
	}
	return n < bcastSingleCopyMax || w.lc.SingleCopy() <= 0 || spansFar(c)
}

// bcastMcast reports whether a Bcast of n bytes goes by multicast: the
// sizes broadcast RDMA takes, where the job's devices broadcast (then
// ahead of the hierarchy of hosts, which the link makes moot), on a
// communicator of every rank of the job: the group is the job's, and the
// ranks outside a smaller communicator would each receive the stream
// only to drop it.
func bcastMcast(c *Comm, n int) bool {
	w := c.w
	return w.bcastRDMAMin > 0 && n >= w.bcastRDMAMin && c.size > 2 && c.size == w.size && w.lc.CanMulticast()
}

// bcastDigestShift places a call's digest in a broadcast id's context
// half: above any context a job makes (two per communicator).
const bcastDigestShift = 32 - 6

// bcastTree broadcasts b from root by lapi.Broadcast down a binomial
// tree of the members, relative to root, or by lapi.Multicast when mcast
// (bcastMcast's choice, which every member makes alike).
func bcastTree(c *Comm, b []byte, root int, mcast bool) error {
	w := c.w
	group := make([]lapi.Rank, c.size)
	for i, wr := range c.group {
		group[i] = lapi.Rank(wr)
	}
	// The communicator's context and the call's number name the
	// broadcast at every member, and no other in flight; the call's digest
	// (of its kind and root) in the context's top bits sets apart members
	// that disagree about the root. Their trees may be alike (the node
	// step of a node-aware Bcast broadcasts from the node's leader
	// whatever root was named), and a broadcast they all took part in would
	// complete, with one root's data where another's was asked for.
	k := c.coll.seq.Load()
	d := uint32(c.coll.digest.Load() & digestMask)
	id := uint64(c.ctx^d<<bcastDigestShift)<<32 | uint64(k)
	var done bcastDone
	abort, waitOn := w.lc.AbortBroadcast, parentIn(c, root)
	if mcast {
		abort, waitOn = w.lc.AbortMulticast, root
		if c.rank == root {
			waitOn = c.abs(1, root)
		}
		if err := w.lc.Multicast(group, root, id, b, lapi.McastOpts{Notify: &done}); err != nil {
			return err
		}
	} else if err := w.lc.Broadcast(group, root, id, b, lapi.BcastOpts{Tree: lapi.BcastBinomial, Chunk: bcastRDMAChunk, Notify: &done}); err != nil {
		return err
	}
	ctx, cancel := w.deadline(context.Background())
	defer cancel()
	watched := false
	err := w.lc.WaitReport(ctx, func() (bool, error) {
		if done.fin.Load() {
			return true, nil
		}
		// A member that disagreed about the call aborts it: the tree
		// may wait for it in vain.
		return false, c.coll.abortOf(k)
	}, func() {
		// Blocked: are the members in the same call? (Members that
		// name different roots build trees that wait for each other.)
		watched = true
		c.coll.watchCall(k)
	})
	if watched {
		c.coll.unwatch()
	}
	if err == nil {
		err = done.err
	}
	if err != nil {
		// Nothing more may land in b once the call has returned.
		abort(id, err)
		var le *lapi.BcastLengthError
		switch {
		case errors.As(err, &le):
			return fmt.Errorf("ranks disagree: rank %d broadcasts %d bytes, rank %d %d: %w",
				slices.Index(c.group, int(le.Peer)), le.Other, c.rank, le.Len, ErrArg)
		case errors.Is(err, lapi.ErrBcast) || errors.Is(err, lapi.ErrProtection):
			// A tree that does not fit (members that disagree about the
			// root), or a member that gave up on the call and released
			// its buffer under a chunk: the only regions the broadcast
			// names are its members' buffers.
			return fmt.Errorf("ranks disagree about the broadcast (its root?): %w (%w)", ErrArg, err)
		}
		return stepErr(c, ctx, err, "bcast", waitOn)
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

// parentIn is the rank this rank receives from in the binomial tree from
// root (root's first child at root): the rank a stalled broadcast waits
// for.
func parentIn(c *Comm, root int) int {
	vr := c.rel(root)
	if vr == 0 {
		return c.abs(1, root)
	}
	return c.abs(vr&(vr-1), root)
}
