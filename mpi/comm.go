package mpi

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/weft-hpc/weft/internal/trace"
	"github.com/weft-hpc/weft/internal/track"
	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/shmcoll"
)

// Comm is a communicator: a group of ranks with its own matching context,
// so traffic on one never matches receives on another. Collectives use a
// second context (ctx|1) so they never match point-to-point traffic.
type Comm struct {
	w     *World
	ctx   uint32 // even: point-to-point; ctx|1: collectives
	rank  int
	size  int
	group []int // communicator rank → world rank

	accIn  []*lapi.Counter // half-RDMA reductions (accumulate.go)
	accOut *lapi.Counter
	// dirCntr counts the reads of direct reductions (direct.go).
	dirCntr *lapi.Counter
	// rput is the state of the Alltoalls and Allgathers by Puts
	// (alltoall_rdma.go).
	rput *putColl
	tmp  []byte // scratch for the collectives' receives (scratch)
	// sh runs the small collectives through the device's shared block
	// (package shmcoll, shmcoll.go); nil: through messages.
	sh *shmcoll.Group
	// coll numbers the collectives and keeps their signatures, so that
	// ranks that disagree about one are told (agree.go). A hierarchical
	// collective's sub-communicators share their parent's (hier.go).
	coll *collState
	// hier runs the collectives node by node when the members span
	// nodes (hier.go); nil: flat, as on one node.
	hier *hierarchy
	// winSync is the communicator the windows made over this one
	// synchronise on (win.go), while any is open; nil: none.
	winSync *winSync
	// freed: Free has run. trk is the communicator's record
	// (Options.Track) from Dup or Split until Free.
	freed bool
	trk   track.ID
}

// scratchMax is the largest scratch buffer a communicator keeps.
const scratchMax = 4 << 20

// scratch is a buffer of n bytes for a collective's incoming data. A rank
// runs one collective on a communicator at a time (MPI's rule), and each
// has received all it asked for when it returns, so up to scratchMax bytes
// are reused from call to call instead of allocated (fresh pages cost
// a fault each, and the garbage collector must return them).
func (c *Comm) scratch(n int) []byte {
	if n > scratchMax {
		return make([]byte, n)
	}
	if cap(c.tmp) < n {
		c.tmp = make([]byte, n, max(n, 64))
	}
	return c.tmp[:n]
}

func newComm(w *World, ctx uint32, rank int, group []int) *Comm {
	c := &Comm{w: w, ctx: ctx, rank: rank, size: len(group), group: group, coll: new(collState)}
	c.coll.c = c
	c.sh = newShComm(c, int(ctx/2))
	c.coll.timer = time.AfterFunc(time.Hour, c.coll.tick)
	c.coll.timer.Stop()
	if w.nodes != nil {
		c.hier = newHierarchy(c)
	}
	w.commsMu.Lock()
	w.comms[ctx] = c
	pend := w.pendingAborts[ctx]
	delete(w.pendingAborts, ctx)
	w.commsMu.Unlock()
	for _, a := range pend { // members that began its calls before this rank made it
		c.coll.aborted(a.k, a.cause, a.msg)
	}
	return c
}

// unlink forgets c's context: the agreement's messages for it are no
// longer taken.
func (c *Comm) unlink() {
	c.coll.timer.Stop()
	c.w.commsMu.Lock()
	delete(c.w.comms, c.ctx)
	c.w.commsMu.Unlock()
}

// Rank is this process's rank in the communicator; -1 in a nil
// communicator (Split's for a negative color, MPI_COMM_NULL), of which
// it is no member.
func (c *Comm) Rank() int {
	if c == nil {
		return -1
	}
	return c.rank
}

// Size is the number of ranks in the communicator; 0 for a nil one.
func (c *Comm) Size() int {
	if c == nil {
		return 0
	}
	return c.size
}

// World is the world this communicator belongs to; nil for a nil
// communicator.
func (c *Comm) World() *World {
	if c == nil {
		return nil
	}
	return c.w
}

// errNilComm is the error of call on a nil communicator: what Split
// gives a rank of a negative color (MPI_COMM_NULL), on which every call
// fails, as MPI's with MPI_ERR_COMM, rather than crash.
func errNilComm(call string) error {
	return fmt.Errorf("mpi: %s: a nil communicator (Split's for color -1): %w", call, ErrArg)
}

// Dup makes a communicator with the same group and a new context
// (collective).
func (c *Comm) Dup() (*Comm, error) {
	if c == nil {
		return nil, errNilComm("Dup")
	}
	if err := c.w.finalized("dup"); err != nil {
		return nil, err
	}
	ctx, err := c.agreeContext()
	if err != nil {
		return nil, fmt.Errorf("mpi: dup: %w", err)
	}
	d := newComm(c.w, ctx, c.rank, slices.Clone(c.group))
	if t := c.w.trk; t != nil {
		d.trk = t.Add(fmt.Sprintf("communicator %d from Dup (%d ranks)", ctx/2, d.size), 0)
	}
	return d, nil
}

// Split partitions the communicator by color, ordering each part by key
// (then by old rank). A negative color leaves this rank out: it gets nil
// (MPI_COMM_NULL), on which every call fails with ErrArg. Collective over
// c.
func (c *Comm) Split(color, key int) (*Comm, error) {
	if c == nil {
		return nil, errNilComm("Split")
	}
	if err := c.w.finalized("split"); err != nil {
		return nil, err
	}
	mine := make([]int64, 2)
	mine[0], mine[1] = int64(color), int64(key)
	all := make([]int64, 2*c.size)
	if err := Allgather(c, mine, all); err != nil {
		return nil, fmt.Errorf("mpi: split: %w", err)
	}
	ctx, err := c.agreeContext()
	if err != nil {
		return nil, fmt.Errorf("mpi: split: %w", err)
	}
	if color < 0 {
		return nil, nil
	}
	type member struct{ key, old int }
	var ms []member
	for r := 0; r < c.size; r++ {
		if all[2*r] == int64(color) {
			ms = append(ms, member{int(all[2*r+1]), r})
		}
	}
	slices.SortStableFunc(ms, func(a, b member) int {
		if a.key != b.key {
			return cmp.Compare(a.key, b.key) // (a difference overflows for extreme keys)
		}
		return a.old - b.old
	})
	group := make([]int, len(ms))
	rank := -1
	for i, m := range ms {
		group[i] = c.group[m.old]
		if m.old == c.rank {
			rank = i
		}
	}
	d := newComm(c.w, ctx, rank, group)
	if t := c.w.trk; t != nil {
		d.trk = t.Add(fmt.Sprintf("communicator %d from Split (color %d, %d of %d ranks)", ctx/2, color, d.size, c.size), 0)
	}
	return d, nil
}

// Free releases a communicator that Dup or Split made (MPI_Comm_free).
// Every member calls it, as MPI's is collective, but it sends nothing:
// context ids are never reused, so no later communicator's traffic can
// match this one's. Operations started on it go on to complete; the
// communicator must not be used for anything else afterwards. Freeing
// the world's communicator, or one twice, fails with ErrArg.
func (c *Comm) Free() error {
	if c == nil {
		return errNilComm("free")
	}
	w := c.w
	switch {
	case c == w.comm:
		return fmt.Errorf("mpi: free: the world's communicator is freed by Finalize: %w", ErrArg)
	case c.freed:
		return fmt.Errorf("mpi: free: communicator %d freed already: %w", c.ctx/2, ErrArg)
	}
	c.freed = true
	if !c.coll.freeing() {
		c.unlink()
	} // else the last nonblocking call in flight unlinks it: a member's abort of it must still be heard
	w.trk.Remove(c.trk)
	return nil
}

// freedErr is the error of a call on c after Free (MPI calls it
// erroneous): the communicator's context is gone, so a message sent on it
// would wait unmatched at a peer that freed it too.
func (c *Comm) freedErr() error {
	return fmt.Errorf("mpi: communicator %d was freed: %w", c.ctx/2, ErrArg)
}

// agreeContext picks a context id no member has used: the maximum of the
// members' next free ids. Every member then moves past it.
func (c *Comm) agreeContext() (uint32, error) {
	w := c.w
	w.mu.Lock()
	next := w.nextCtx
	w.mu.Unlock()
	v := []uint32{next}
	if err := Allreduce(c, v, v, Max); err != nil {
		return 0, err
	}
	w.mu.Lock()
	w.nextCtx = max(w.nextCtx, v[0]+2)
	w.mu.Unlock()
	return v[0], nil
}

// Collective tags, on the collective context. Every rank calls collectives
// in the same order and messages between a pair are matched in order, so
// one tag per kind of step is enough.
const (
	tagBarrier = iota + 1
	tagBcast
	tagReduce
	tagAllreduce
	tagGather
	tagScatter
	tagAllgather
	tagAlltoall
	tagPVOs // direct.go's exchange
)

// csend sends a step of the running collective (tag: its kind of step).
func (c *Comm) csend(b []byte, dest, tag int) error { return c.send(b, dest, c.ctag(tag), c.ctx|1) }

// crecv receives exactly len(b) bytes from src: a collective's ranks
// that disagree on the length fail with ErrArg.
func (c *Comm) crecv(b []byte, src, tag int) error {
	_, err := c.crecvStatus(b, src, tag)
	return err
}

// csendrecv exchanges with two peers at once, receiving exactly len(rb)
// bytes.
func (c *Comm) csendrecv(sb []byte, dest int, rb []byte, src, tag int) error {
	tag = c.ctag(tag)
	st, err := c.sendrecv(sb, dest, tag, rb, 1, src, tag, c.ctx|1)
	return c.exact(st, err, src, len(rb))
}

// exact checks that a collective's receive from src got the want bytes
// this rank expects.
func (c *Comm) exact(st Status, err error, src, want int) error {
	if errors.Is(err, ErrTruncate) || err == nil && st.Count != want {
		return c.mismatch(src, st.Count, want, err)
	}
	return err
}

// Barrier blocks until every rank of the communicator has entered it
// (dissemination: ceil(log2 n) rounds of one message each).
func (c *Comm) Barrier() error {
	if c == nil {
		return errNilComm("Barrier")
	}
	if err := c.w.finalized("barrier"); err != nil {
		return err
	}
	if trace.On(trace.Internal) {
		return c.traceCollective("barrier", collBarrier, 0, 0, 0, c.barrier)
	}
	return c.collective("barrier", collBarrier, 0, 0, 0, c.barrier)
}

// barrier is Barrier's algorithm, also a step of other collectives.
func (c *Comm) barrier() error {
	if c.hier != nil {
		return c.hier.barrier()
	}
	if c.shared(0) {
		return c.sh.Barrier()
	}
	for k := 1; k < c.size; k <<= 1 {
		if err := c.csendrecv(nil, (c.rank+k)%c.size, nil, (c.rank-k+c.size)%c.size, tagBarrier); err != nil {
			return err
		}
	}
	return nil
}
