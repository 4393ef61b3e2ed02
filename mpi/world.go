package mpi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/internal/track"
	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/shmcoll"
)

// World is one rank's MPI instance: its lapi context, matching state and
// communicators.
type World struct {
	lc   *lapi.Context
	rank int
	size int

	mu      sync.Mutex // arrivals, request table (the matcher is lapi's lock's: see matcher)
	m       matcher
	reqs    reqTable
	seqOut  []uint32 // per destination world rank, under lapi's lock
	nextCtx uint32   // lowest context id this rank has not used
	comm    *Comm
	commsMu sync.Mutex
	comms   map[uint32]*Comm // by context, for the agreement handlers (agree.go)
	// pendingAborts are aborts of communicators not made here yet, by
	// context (commsMu; agree.go's commOrKeep).
	pendingAborts map[uint32][]pendingAbort
	closed        atomic.Bool // Finalize ran: the device may have unmapped the shared block

	hEager, hRTS, hFin lapi.HandlerID
	hCTS, hPutFin      lapi.HandlerID
	hNudge             lapi.HandlerID // wakes a rank blocked in a shared-memory collective (shmcoll.go)
	hAgree, hAbort     lapi.HandlerID // collectives' signatures and aborts (agree.go)
	sh                 *shmcoll.Block // the device's shared block; nil: collectives use messages
	nodes              []int          // node of each world rank (its lowest world rank); nil: one node
	hierCalls          atomic.Int64   // collectives run node by node (hier.go), for tests
	agreeSent          atomic.Uint64  // signatures sent to compare a blocked call (agree.go), for tests
	eagerLimit         int
	// far, over a route, marks the world ranks no single-copy read
	// reaches (another node's), nil when there are none or single copies
	// reach none: toward them eager messages and whole rendezvous go up
	// to eagerFar and splitFar, the thresholds without single copies.
	far                []bool
	eagerFar, splitFar int
	splitMin           int    // rendezvous bytes from which both ends copy (split.go); 0: never
	writeRendezvous    bool   // a split rendezvous offers the whole buffer to the sender (hardware RDMA; split.go)
	oversub            bool   // more ranks than cores on this node: every step may wait for a context switch
	oversubAt          []bool // oversub of each world rank's node, agreed at Init (Comm.oversubscribed); nil: oversub everywhere
	accumulateMin      int    // Allreduce bytes from which half-RDMA reduces; 0: never
	bcastRDMAMin       int    // Bcast bytes from which broadcast RDMA carries it; 0: never
	directMin          int    // Allreduce bytes from which direct reads reduce (direct.go); 0: never
	allgatherPutMin    int    // Allgather bytes per rank from which Puts carry it (allgather_rdma.go); 0: never
	alltoallPutMin     int    // Alltoall bytes per peer from which Puts carry it (alltoall_rdma.go); 0: never
	timeout            time.Duration
	waiting            atomic.Pointer[waitNote] // what a blocked call waits for, for reports
	spare              *request                 // a recycled request, under lapi's lock (request.go)
	deferred           []*request               // rendezvous reads to start outside lapi's lock
	freeArr            *arrival                 // recycled arrivals (w.mu)
	onClose            []func() error
	// icoll runs the nonblocking collectives' schedules (icoll.go).
	icoll icollState
	// win holds the one-sided windows' state (win.go).
	win winState
	// trk records live resources with their creation sites
	// (Options.Track, track.go); nil when tracking is off.
	trk *track.Registry
	// snap is where state snapshots go (snapshot.go).
	snap snapState
}

// newWorld sets MPI up over an open lapi context, with opts' thresholds.
// nodes[r] is the node of world rank r, named by the lowest world rank on
// it; nil means every rank is on this node. When the job spans nodes, the
// device's shared block (lapi.Devices.SharedBlock) is the node's: its shares
// belong to the node's ranks in ascending world-rank order. Every rank
// registers the same handlers in the same order.
func newWorld(lc *lapi.Context, opts Options, nodes []int) (*World, error) {
	return newWorldLayout(lc, opts, layout{nodes: nodes})
}

// layout is where a world's ranks run: their nodes, and the share of
// the device's shared block each rank of this node writes.
type layout struct {
	nodes []int // node by world rank; nil: one node
	// slots is the share of the block by world rank, -1 for a rank off
	// this node, and nslots how many shares the block is cut into. nil:
	// from nodes (the node's ranks in order; every rank when nodes is
	// nil). mpi.Run's test hook sets them: its block is one for all.
	slots  []int
	nslots int
}

// check validates l for a world of size ranks and fills in the slots.
// A layout with every rank on one node becomes the empty one: today's
// path, exactly.
func (l layout) check(rank, size int) (layout, error) {
	if l.nodes == nil {
		return layout{}, nil
	}
	if len(l.nodes) != size {
		return layout{}, fmt.Errorf("mpi: %d node ids for %d ranks: %w", len(l.nodes), size, ErrArg)
	}
	one := true
	for r, n := range l.nodes {
		if n < 0 || n > r || l.nodes[n] != n {
			return layout{}, fmt.Errorf("mpi: rank %d on node %d: a node is named by its lowest rank: %w", r, n, ErrArg)
		}
		one = one && n == 0
	}
	if one {
		return layout{}, nil
	}
	if l.slots != nil {
		return l, nil
	}
	l.slots = make([]int, size)
	for r, n := range l.nodes {
		l.slots[r] = -1
		if n == l.nodes[rank] {
			l.slots[r] = l.nslots
			l.nslots++
		}
	}
	return l, nil
}

// newWorldLayout is newWorld with ranks placed by l.
func newWorldLayout(lc *lapi.Context, opts Options, l layout) (*World, error) {
	w := &World{
		lc:              lc,
		rank:            int(lc.Rank()),
		size:            lc.Size(),
		seqOut:          make([]uint32, lc.Size()),
		nextCtx:         2,
		eagerLimit:      64 << 10,
		splitMin:        splitDefault,
		accumulateMin:   accumulateLarge,
		directMin:       directLarge,
		bcastRDMAMin:    bcastRDMALarge,
		allgatherPutMin: allgatherRDMALarge,
		alltoallPutMin:  alltoallRDMALarge,
	}
	l, err := l.check(w.rank, w.size)
	if err != nil {
		return nil, err
	}
	w.nodes = l.nodes
	w.setThresholds(opts)
	w.timeout = opts.Timeout
	w.trk = lc.Tracker() // Options.Track, given to lapi by Init and Run (track.go)
	w.snap.dir = opts.SnapshotDir
	w.m.init(w.rank, w.size)
	w.registerHandlers()
	w.comms = make(map[uint32]*Comm)
	lc.OnPeerFailed(w.peerFailed)
	lc.OnPeerRestarted(w.peerRestarted)
	if mem := lc.Devices().SharedBlock(); mem != nil {
		nslots := w.size
		if l.slots != nil {
			nslots = l.nslots
		}
		if !opts.NoShmColl {
			w.sh = shmcoll.NewBlock(mem, nslots, l.slots)
		}
	}
	group := make([]int, w.size)
	for i := range group {
		group[i] = i
	}
	w.comm = newComm(w, 0, w.rank, group)
	return w, nil
}

// setThresholds sets the sizes where the point-to-point protocols and
// the large collectives change, from what the device and lapi offer,
// then from opts.
func (w *World) setThresholds(opts Options) {
	lc := w.lc
	if sc := lc.SingleCopy(); sc > 0 {
		// Split where each part is one copy: two cores copying at once.
		w.splitMin = max(2*sc, splitNode)
	}
	if lc.OneSided() {
		// Every rendezvous the hardware moves is written by the sender
		// (split.go): the least split size is any size, whatever the
		// eager limit becomes below.
		w.writeRendezvous = true
		w.splitMin = 1
	}
	w.splitMin = orDefault(opts.Split, w.splitMin)
	w.accumulateMin = orDefault(opts.Accumulate, w.accumulateMin)
	w.directMin = orDefault(opts.Direct, w.directMin)
	w.bcastRDMAMin = orDefault(opts.BcastRDMA, w.bcastRDMAMin)
	w.allgatherPutMin = orDefault(opts.AllgatherRDMA, w.allgatherPutMin)
	w.alltoallPutMin = orDefault(opts.AlltoallRDMA, w.alltoallPutMin)
	if sc := lc.SingleCopy(); sc > 0 && sc <= w.eagerLimit {
		// A rendezvous read is one copy here: from its size up that
		// beats copying through the device and out again, where every
		// line of an eager message is written by one core and read by
		// the other.
		w.eagerLimit = sc - 1
	}
	if opts.Eager > 0 {
		w.eagerLimit = opts.Eager
	}
	if lc.SingleCopy() > 0 {
		for r := range w.size {
			if r != w.rank && lc.SingleCopyTo(lapi.Rank(r)) == 0 {
				if w.far == nil {
					w.far = make([]bool, w.size)
					w.eagerFar = orDefault(opts.Eager, 64<<10)
					w.splitFar = orDefault(opts.Split, splitDefault)
				}
				w.far[r] = true
			}
		}
	}
}

// registerHandlers registers MPI's active-message handlers with lapi.
// Every rank registers the same handlers in the same order.
func (w *World) registerHandlers() {
	lc := w.lc
	w.hEager = lc.RegisterHandler(eagerHandler{w})
	w.hRTS = lc.RegisterHandler(eagerHandler{w})
	w.hFin = lc.RegisterHandler(finHandler{w})
	w.hCTS = lc.RegisterHandler(ctsHandler{w})
	w.hPutFin = lc.RegisterHandler(putFinHandler{w})
	w.hNudge = lc.RegisterHandler(nudgeHandler{})
	w.hAgree = lc.RegisterHandler(agreeHandler{w})
	w.hAbort = lc.RegisterHandler(abortHandler{w})
}

// Comm is the world communicator.
func (w *World) Comm() *Comm { return w.comm }

// Finalize ends this rank's participation: a barrier, then the resources
// are released. It fails if requests were never waited for; with
// Options.Track (WEFT_TRACK) the error names every request, window,
// communicator, registration, RDMA transfer and shared-memory segment
// still live, with the file:line of the call that made it: "mpi:
// finalize: 2 resources leaked: Irecv request (from rank 1 tag 7)
// created at main.go:42; window of 100 int32 created at main.go:30".
// It fails with ErrArg if ranks were found to disagree about an earlier
// collective on the world's communicator that no later call reported
// (doc.go). Every call after it that would communicate, Finalize
// included, fails with an error wrapping ErrFinalized.
func (w *World) Finalize() error {
	if err := w.finalized("finalize"); err != nil {
		return err
	}
	err := w.comm.Barrier()
	if err == nil {
		// A disagreement found during that Barrier (stray.go) has no
		// later call on the world's communicator to report it.
		if e := w.comm.coll.takeLate(); e != nil {
			err = fmt.Errorf("mpi: finalize: %w", e)
		}
	}
	leaks := w.postedLeft()
	w.mu.Lock()
	leaks += w.reqs.live() + w.icoll.inFlight()
	w.closed.Store(true)
	w.mu.Unlock()
	for _, f := range w.onClose {
		if e := f(); err == nil {
			err = e
		}
	}
	if report := w.leakReport(leaks); err == nil && report != "" {
		err = fmt.Errorf("mpi: finalize: %s", report)
	}
	return err
}

// finalized is the error of a call (op names it) made after Finalize, or
// nil before.
func (w *World) finalized(op string) error {
	if w.closed.Load() {
		return fmt.Errorf("mpi: %s: %w", op, ErrFinalized)
	}
	return nil
}

// wait makes progress until r completes, honouring ctx and
// Options.Timeout. Without a timeout it has no deferred cancel to run,
// which keeps a blocking receive's fast path short. With g, see waitFor.
func (w *World) wait(ctx context.Context, r *request, g *gaveBack) error {
	if r.done.Load() {
		return nil
	}
	if w.timeout > 0 {
		return w.waitTimed(ctx, r, g)
	}
	return w.waitFor(ctx, r, g)
}

// waitTimed is wait under Options.Timeout.
func (w *World) waitTimed(ctx context.Context, r *request, g *gaveBack) error {
	ctx, cancel := w.deadline(ctx)
	defer cancel()
	return w.waitFor(ctx, r, g)
}

// waitFor makes progress until r completes or ctx ends. With g, r is given
// back once complete, its status and error into g, unless it is tabled
// (which, done, it no longer becomes: only its waiter takes it out).
func (w *World) waitFor(ctx context.Context, r *request, g *gaveBack) error {
	// What the rank waits for is published only once the wait stops
	// spinning: a short wait, such as a ping-pong's, then pays no locked
	// store for it.
	reported := false
	// A collective step's communicator, taken now: once done, r may be
	// recycled by the condition and reused by another goroutine.
	var coll *Comm
	if r.ctx&1 != 0 {
		coll = r.comm
	}
	err := w.lc.WaitReport(ctx, func() (bool, error) {
		if r.done.Load() {
			if g != nil && !r.tabled {
				g.st, g.err, g.back = r.st, r.err, true
				w.recycleLocked(r)
			}
			return true, nil
		}
		if coll != nil {
			// A collective's step whose call was aborted, in a state
			// the abort could not reach (a rendezvous read under way).
			return false, coll.coll.abortedNow()
		}
		return false, nil
	}, func() {
		w.waiting.Store(r.note())
		reported = true
		if coll != nil {
			coll.coll.watch() // are the ranks in the same call?
		}
	})
	if reported {
		w.waiting.Store(nil)
		if coll != nil {
			coll.coll.unwatch()
		}
	}
	if err != nil {
		return w.waitErr(ctx, r, err)
	}
	return nil
}

// deadline applies Options.Timeout to a context that has no deadline.
func (w *World) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if w.timeout > 0 {
		if _, ok := ctx.Deadline(); !ok {
			return context.WithTimeout(ctx, w.timeout)
		}
	}
	return ctx, func() {}
}

// waitErr turns a failed wait into the error the caller sees: a timeout
// names what the rank was waiting for. A timeout, or a peer's failure,
// writes the rank's snapshot if none was yet.
func (w *World) waitErr(ctx context.Context, r *request, err error) error {
	if ctx.Err() != nil {
		w.snapTimeout(r) // the first timeout writes a state snapshot (snapshot.go)
		return fmt.Errorf("%w (%w)", &TimeoutError{Rank: w.rank, Waiting: r.describe()}, ctx.Err())
	}
	if errors.Is(err, ErrPeerFailed) {
		w.snapFailedWait(r, err) // the first such failure writes a state snapshot
	}
	return err
}

// Waiting says what this rank is blocked on, or "" when it is not.
func (w *World) Waiting() string {
	if r := w.waiting.Load(); r != nil {
		return r.describe()
	}
	return ""
}

// peerFailed runs under lapi's lock when a peer is declared failed: every
// request that involves it fails, as do wildcard receives, which it might
// have matched.
func (w *World) peerFailed(tx *lapi.Tx, peer lapi.Rank, err error) {
	w.snapFatal(tx, peer, err) // what was pending, before it fails (snapshot.go)
	w.mu.Lock()
	defer w.mu.Unlock()
	// Receives posted from now on see lapi's error for peer (irecv).
	var failed []*request
	w.m.posted.take(func(r *request) bool {
		if r.src == AnySource || r.comm.group[r.src] == int(peer) {
			failed = append(failed, r)
		}
		return false
	})
	for _, r := range failed {
		w.m.cancelPosted(r)
		r.finish(Status{}, fmt.Errorf("mpi: receive from rank %d: %w", peer, err))
	}
	w.endWith(peer, err)
}

// endWith fails what is under way with peer, which failed or restarted
// (w.mu held): sends to it, receives whose data it was sending (split
// receives), and its messages queued as unexpected whose data has not
// all come (a probe sees them, a receive that matches one fails).
func (w *World) endWith(peer lapi.Rank, err error) {
	w.reqs.each(func(r *request) {
		switch {
		case r.peer != int(peer):
		case r.recv: // a split receive: the sender's part will not come
			w.endSplit(r)
			r.finish(Status{}, fmt.Errorf("mpi: receive from rank %d: %w", peer, err))
		default:
			r.finish(Status{}, fmt.Errorf("mpi: send to rank %d: %w", peer, err))
		}
	})
	for a := w.m.unexpected.head; a != nil; a = a.next {
		if a.from == peer && !a.complete {
			a.complete, a.failed = true, err // it never will
		}
	}
}

// peerRestarted runs under lapi's lock when a new life of peer joined
// after an earlier one: the earlier life's messages still on their way
// are gone, and the new life numbers its messages from 0, so this rank's
// numbering toward it and what it expects from it start afresh. Messages
// held back behind one of the earlier life that will never come are
// dropped; sends to it and rendezvous receives from it under way fail
// (err wraps lapi.ErrPeerRestarted); receives posted for it stay posted,
// for the new life to match; whole messages of the earlier life already
// queued stay, as sent before it ended.
func (w *World) peerRestarted(_ *lapi.Tx, peer lapi.Rank, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seqOut[peer] = 0
	w.m.expect[peer] = 0
	for k, a := range w.m.held {
		if k.from == peer {
			delete(w.m.held, k)
			if a.complete {
				w.freeArrival(a) // its data is gone with it; lapi has no hold on it
			}
		}
	}
	w.endWith(peer, err)
}
