package mpi

import (
	"context"
	"fmt"

	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/shmcoll"
)

// Shared-memory collectives: when lapi's device maps one block of memory
// in every rank of the node (lapi.Devices.SharedBlock), the small
// collectives of a communicator of 2-16 ranks go through it (package
// shmcoll), the communicator being the group's Host: it waits as a
// message wait does (progress, yielding or blocking, WEFT_TIMEOUT,
// reports), nudges a member that blocked with an empty message, and
// numbers the calls (collState.seq).
//
// A communicator's area of the block is its context id / 2 (the world's
// is 0). A communicator that spans nodes has no shared collectives; its
// area goes to its node's part (hier.go), whose members are some of its
// own.

// shSlot is the most data per member a shared collective moves: larger
// ones use messages.
const shSlot = shmcoll.SlotLen

// shTags are the collectives' tags in reports.
var shTags = shmcoll.Tags{Barrier: tagBarrier, Allreduce: tagAllreduce, Reduce: tagReduce,
	Bcast: tagBcast, Gather: tagGather, Allgather: tagAllgather, Scatter: tagScatter, Alltoall: tagAlltoall}

// shHost is a communicator's side of its shared-memory collectives.
type shHost struct {
	c *Comm
	g *shmcoll.Group

	// The current wait, here so that waiting allocates nothing.
	reported bool // the wait was published (reportWait)
	condFn   func() (bool, error)
	reportFn func()          // h.reportWait, built once
	peerFn   func(int) error // h.peerErr, built once
	armCtx   context.Context // lapi.WithArm(arm)
	report   request         // what the wait is for, for Waiting and timeouts
}

// newShComm sets c up for shared-memory collectives in area of the
// world's block, or returns nil (shmcoll.NewGroup says when).
func newShComm(c *Comm, area int) *shmcoll.Group {
	if c.w.sh == nil {
		return nil
	}
	h := &shHost{c: c}
	h.g = shmcoll.NewGroup(c.w.sh, shmcoll.Config{Members: c.group, Me: c.rank, Area: area,
		ErrArg: ErrArg, Tags: shTags}, h)
	if h.g == nil {
		return nil
	}
	h.condFn, h.reportFn, h.peerFn = h.cond, h.reportWait, h.peerErr
	h.armCtx = lapi.WithArm(context.Background(), h.g.Arm)
	h.report = request{w: c.w, comm: c, recv: true, ctx: c.ctx | 1}
	return h.g
}

// shared reports whether a collective moving n bytes per member goes
// through the block: not from the call an abort named on (shFrom).
func (c *Comm) shared(n int) bool { return c.sh != nil && n <= shSlot && !c.coll.callShOff }

// Wait waits until the group's stamps arrive, making progress and
// yielding or blocking as a message wait does (shmcoll.Host).
func (h *shHost) Wait(op string, tag int) error {
	w := h.c.w
	h.report.op, h.report.tag = op, tag
	ctx, cancel := w.deadline(h.armCtx)
	defer cancel()
	err := w.lc.WaitReport(ctx, h.condFn, h.reportFn)
	h.g.Disarm()
	if h.reported {
		h.reported = false
		w.waiting.Store(nil)
		h.c.coll.unwatch()
	}
	if err != nil {
		h.report.src = h.g.WaitedFor()
		return w.waitErr(ctx, &h.report, err)
	}
	return nil
}

// Nudge sends member m an empty message, which wakes it if it blocked
// waiting for a stamp. An error is ignored: m cannot be reached (it
// failed, or this rank is closing), and the members waiting for it fail
// for that.
func (h *shHost) Nudge(m int) {
	w := h.c.w
	_ = w.lc.Amsend(lapi.Rank(h.c.group[m]), w.hNudge, nil, nil, lapi.SendOpts{})
}

// Begin starts a shared collective: the identity of the communicator's
// collective call in progress, its number (14 bits of it) and its digest
// (callDigest) above, so that members that disagree on the op or the
// root fail with ErrArg instead of reducing each with its own; none once
// the world is finalized (the block may be unmapped).
func (h *shHost) Begin() (uint32, error) {
	if h.c.w.closed.Load() {
		return 0, ErrFinalized
	}
	s := h.c.coll
	return s.seq.Load()&(1<<14-1) | s.digest.Load()<<14, nil
}

// cond is the wait's condition (under lapi's lock): the stamps, or the
// failure of a member not yet seen, or an abort, or an abort's word that
// the running call goes by messages (errByMessages: the members that
// know it never stamp the round).
func (h *shHost) cond() (bool, error) {
	if h.g.Arrived() {
		return true, nil
	}
	if err := h.g.Pending(h.peerFn); err != nil {
		return false, err
	}
	s := h.c.coll
	if err := s.abortedNow(); err != nil {
		return false, err
	}
	if s.offAt(s.seq.Load()) {
		return false, errByMessages
	}
	return false, nil
}

// reportWait is the wait's report: the wait stopped spinning, so what it
// waits for is worth naming.
func (h *shHost) reportWait() {
	h.report.src = h.g.WaitedFor() // only this goroutine moves it
	h.reported = true
	h.c.w.waiting.Store(h.report.note())
	h.c.coll.watch()
}

// peerErr is member m's failure (under lapi's lock).
func (h *shHost) peerErr(m int) error {
	if err := h.c.w.lc.PeerErr(lapi.Rank(h.c.group[m])); err != nil {
		return fmt.Errorf("mpi: rank %d: %w", m, err)
	}
	return nil
}

// nudgeHandler takes nudges: their arrival is what wakes a blocked wait,
// and there is nothing else to do.
type nudgeHandler struct{}

func (nudgeHandler) OnHeader(lapi.Rank, []byte, int) ([]byte, any) { return nil, nil }
func (nudgeHandler) OnComplete(lapi.Rank, any)                     {}
