package mpi

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/weft-hpc/weft/internal/track"
	"github.com/weft-hpc/weft/lapi"
)

// One-sided communication (MPI 4.1 chapter 12): a window is a []T every
// rank of a communicator exposes, registered with lapi so that peers can
// name it (a lapi.PVO). Put and Get are lapi's Put and Get on it (RDMA for
// large transfers, one copy within a node from lapi's SingleCopyThreshold),
// Accumulate is lapi's half-RDMA accumulate (the target reduces each
// packet as it lands). Each origin counts what it started toward each
// target on a lapi counter of its own, which the operations bump once
// complete at the target (Put, Accumulate) or in the origin's buffer
// (Get): Fence, Flush and Unlock wait for those counts.
//
// Passive-target locks are a word in a small registered block at every
// rank, taken and released with lapi's Rmw (win_lock.go). The target runs
// neither the lock nor the data movement itself: its lapi progress engine
// does, which on the reliable devices (inproc, shm) only runs while some
// goroutine of the rank is inside lapi. So while a window exists, every
// rank keeps a progress goroutine in lapi (winState.progress), which
// blocks in the device when nothing arrives.

// winState is a world's one-sided windows: how many are open, the
// progress goroutine that runs while there are any, and counters of
// freed windows for the next ones (lapi never frees a counter).
type winState struct {
	mu    sync.Mutex
	open  int                // windows created and not yet freed, over communicators of 2 or more ranks
	stop  context.CancelFunc // ends the progress goroutine
	done  chan struct{}      // closed when it has ended
	spare []*lapi.Counter    // at zero and unfailed, from freed windows
}

// counter returns a counter at zero, a spare one if there is one.
func (s *winState) counter(lc *lapi.Context) *lapi.Counter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.spare); n > 0 {
		k := s.spare[n-1]
		s.spare = s.spare[:n-1]
		return k
	}
	return lc.NewCounter()
}

// giveBack keeps k for a later window if nothing more is owed to it.
func (s *winState) giveBack(k *lapi.Counter) {
	if k == nil || k.Value() != 0 {
		return
	}
	s.mu.Lock()
	s.spare = append(s.spare, k)
	s.mu.Unlock()
}

// opened counts a new window; the first starts the progress goroutine.
func (w *World) winOpened() {
	s := &w.win
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open++
	if s.open > 1 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop, s.done = cancel, make(chan struct{})
	go w.winProgress(ctx, s.done)
}

// winClosed counts a freed window; the last stops the progress
// goroutine, once it has left lapi.
func (w *World) winClosed() {
	s := &w.win
	s.mu.Lock()
	s.open--
	var done chan struct{}
	if s.open == 0 {
		s.stop()
		done, s.stop, s.done = s.done, nil, nil
	}
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}

// winProgress makes lapi progress for this rank while its application
// goroutine may be elsewhere (computing, or blocked outside mpi): a
// passive-target Lock, Put, Get or Accumulate toward this rank needs this
// rank's progress engine to answer it. It waits in lapi as any blocked
// call does: it polls while frames come, and when none do it blocks in
// the device (or behind a goroutine already blocked there), costing
// nothing. Not lapi's WaitQuiet, which blocks at once: toward a rank
// computing outside mpi, every frame of an epoch would then wake a
// sleeping thread. It ends when ctx is cancelled or the
// context is closed.
func (w *World) winProgress(ctx context.Context, done chan struct{}) {
	defer close(done)
	never := func() (bool, error) { return false, nil }
	for ctx.Err() == nil {
		if err := w.lc.Wait(ctx, never); err != nil && ctx.Err() == nil {
			return // closed: Finalize, or mpi.Run's end, with the window never freed
		}
	}
}

// Win is a one-sided window: a []T that every rank of a communicator
// exposes, read and written by the others with Put, Get and Accumulate
// (MPI_Win_create). The window is base itself, not a copy: between
// epochs the owner reads and writes base directly.
//
// Operations go in epochs. Active target: Fence, collective over the
// window's communicator, ends one epoch and opens the next, and every
// operation issued before it is complete everywhere once it returns.
// Passive target: Lock(target) opens an epoch toward target alone, which
// target takes no part in (it need not call mpi at all); Flush(target)
// completes the operations toward it so far, Unlock(target) completes
// them and ends the epoch. Put, Get and Accumulate may return before the
// data moved: the origin buffer must not be changed (Put, Accumulate) or
// read (Get) until the operation is complete.
//
// Displacements are in elements of the target's window. A target outside
// the communicator fails with ErrRank; a range outside the target's
// window, a call outside an epoch, Unlock or Flush without Lock, a second
// Lock of one target, Fence during a passive epoch, a user op (NewOp) in
// Accumulate and any call after Free fail with ErrArg; none of these
// changes anything. A window is for one goroutine of its rank at a time.
//
// While a window exists, a goroutine of each rank waits in lapi to answer
// passive-target operations when the rank's own goroutine is outside
// mpi. With one processor (GOMAXPROCS 1: gorun gives each rank one core
// when there are as many ranks as cores) it runs only when the
// computation is preempted, every 10 ms or so: a program whose targets
// compute while others lock them wants WEFT_ASYNC_PROGRESS=1 or more
// cores per rank.
type Win[T Elem] struct {
	// c is the communicator the window synchronises on (sync's): the
	// ranks of the one it was made over, in its order.
	c     *Comm
	sync  *winSync
	lc    *lapi.Context
	base  []T
	mem   []byte   // base's bytes
	es    int      // element size
	reg   lapi.PVO // base, registered; zero when base is empty
	lockw []int64  // this rank's lock word (win_lock.go)
	lreg  lapi.PVO // lockw, registered
	peers []winPeer
	// k[t] counts the operations toward rank t (of c) as they complete
	// (nil until the first); pend[t] is how many were started and not
	// yet waited for.
	k    []*lapi.Counter
	pend []int64
	// acc[t] bounds the elements of t's window that accumulates still in
	// flight toward t change (empty: none), for their ordering.
	acc []accRange
	// Epochs: fence says a Fence opened an active-target epoch,
	// fenceOps that operations were issued in it since; locked[t] is
	// the lock this rank holds on t (lockNone, lockShared,
	// lockExclusive), nlocked how many it holds.
	fence    bool
	fenceOps bool
	locked   []uint8
	nlocked  int
	rmw      *lapi.Counter // the lock's read-modify-writes (win_lock.go)
	prev     *int64        // where an rmw's previous value lands
	// rel counts the answers to lock releases, which Unlock does not
	// wait for; relPend is how many are owed.
	rel     *lapi.Counter
	relPend int64
	freed   bool
	trk     track.ID // the window's record (Options.Track), until Free
}

// accRange is a run of window elements [lo, hi).
type accRange struct{ lo, hi int }

// winPeer is what an origin knows of a target's window.
type winPeer struct {
	base lapi.PVO // its window; zero when it is empty
	lock lapi.PVO // its lock word
	n    int      // its length in elements
	rank lapi.Rank
}

// winRecLen is a rank's record in NewWin's exchange: its window's PVO, its
// lock word's PVO, the window's length in elements, its element type and
// its next free context id (for the window's own communicator).
const winRecLen = 2*lapi.PVOLen + 16

// NewWin makes base the calling rank's part of a window over c
// (MPI_Win_create); collective over c. Every rank learns every other's
// length, so a range outside a target's window fails at the origin
// before anything moves. Ranks may expose windows of different lengths,
// empty ones included, but of one element type. The windows over c
// synchronise on a communicator of their own, of c's ranks in c's order
// (MPI_Win_create duplicates c): c may be freed while a window lives, and
// Fence and Free are no collective calls on c, whose order against c's
// own collectives (nonblocking ones in flight) is free. That communicator
// is shared by c's windows, so that ranks fencing different windows of c
// are told they disagree instead of waiting for each other.
func NewWin[T Elem](c *Comm, base []T) (*Win[T], error) {
	if c == nil {
		return nil, errNilComm("NewWin")
	}
	w := c.w
	if err := w.finalized("new window"); err != nil {
		return nil, err
	}
	lc := w.lc
	win := &Win[T]{
		c: c, lc: lc, base: base, mem: asBytes(base), es: sizeOf[T](),
		lockw:  make([]int64, 1),
		peers:  make([]winPeer, c.size),
		k:      make([]*lapi.Counter, c.size),
		pend:   make([]int64, c.size),
		acc:    make([]accRange, c.size),
		prev:   new(int64),
		locked: make([]uint8, c.size),
	}
	var err error
	if len(win.mem) > 0 {
		if win.reg, err = lc.Register(win.mem, lapi.AccessRead|lapi.AccessWrite); err != nil {
			return nil, fmt.Errorf("mpi: new window: %w", err)
		}
	}
	if win.lreg, err = lc.Register(asBytes(win.lockw), lapi.AccessRead|lapi.AccessWrite); err != nil {
		win.deregister()
		return nil, fmt.Errorf("mpi: new window: %w", err)
	}
	var me [winRecLen]byte
	lapi.PutPVO(me[:], win.reg)
	lapi.PutPVO(me[lapi.PVOLen:], win.lreg)
	binary.LittleEndian.PutUint64(me[2*lapi.PVOLen:], uint64(len(base)))
	binary.LittleEndian.PutUint32(me[2*lapi.PVOLen+8:], uint32(elemTypeOf[T]()))
	w.mu.Lock()
	binary.LittleEndian.PutUint32(me[2*lapi.PVOLen+12:], w.nextCtx)
	ws := c.winSync
	w.mu.Unlock()
	all := make([]byte, c.size*winRecLen)
	// Each record comes straight from its owner (exchangePVOs), so that
	// the PVOs are in the receivers' replicas of its TPT by then.
	err = c.collective("new window", collAllgather, 0, 0, winRecLen, func() error {
		return exchangePVOs(c, me[:], all)
	})
	var ctx uint32 // the window's communicator's: as agreeContext agrees one
	if err == nil {
		for q := range c.size {
			r := all[q*winRecLen:]
			ctx = max(ctx, binary.LittleEndian.Uint32(r[2*lapi.PVOLen+12:]))
			// The element type, not only its size: an int64 Accumulate
			// into another rank's float64 would add integer bits to a
			// float's without an error.
			if t := lapi.ElemType(binary.LittleEndian.Uint32(r[2*lapi.PVOLen+8:])); t != elemTypeOf[T]() {
				err = fmt.Errorf("mpi: new window: rank %d's elements are %v, rank %d's %v: %w", q, t, c.rank, elemTypeOf[T](), ErrArg)
				break
			}
			win.peers[q] = winPeer{
				base: lapi.GetPVO(r), lock: lapi.GetPVO(r[lapi.PVOLen:]),
				n: int(binary.LittleEndian.Uint64(r[2*lapi.PVOLen:])), rank: lapi.Rank(c.group[q]),
			}
		}
	}
	if err != nil {
		win.deregister()
		return nil, err
	}
	// c's first open window (at every rank: NewWin and Free are
	// collective over c) makes the windows' communicator, on the context
	// agreed in the exchange.
	first := ws == nil
	if first {
		ws = &winSync{c: newComm(w, ctx, c.rank, slices.Clone(c.group)), of: c}
	}
	w.mu.Lock()
	if first {
		w.nextCtx = max(w.nextCtx, ctx+2)
		c.winSync = ws
	}
	ws.open++
	w.mu.Unlock()
	win.c, win.sync = ws.c, ws
	win.rmw, win.rel = w.win.counter(lc), w.win.counter(lc)
	if c.size > 1 {
		w.winOpened()
	}
	if w.trk != nil {
		var zero T
		win.trk = w.trk.Add(fmt.Sprintf("window of %d %T", len(base), zero), 0)
	}
	return win, nil
}

// winSync is the communicator the windows over a communicator (of)
// synchronise on, and how many of them are open.
type winSync struct {
	c    *Comm
	of   *Comm
	open int
}

// release is a window's Free: the last one unlinks the communicator, and
// the next window over the same one makes another.
func (s *winSync) release(w *World) {
	w.mu.Lock()
	s.open--
	last := s.open == 0
	if last && s.of.winSync == s {
		s.of.winSync = nil
	}
	w.mu.Unlock()
	if last {
		s.c.unlink()
	}
}

// deregister releases the window's registrations.
func (win *Win[T]) deregister() {
	if win.reg != (lapi.PVO{}) {
		win.lc.Deregister(win.reg)
	}
	if win.lreg != (lapi.PVO{}) {
		win.lc.Deregister(win.lreg)
	}
}

// Free releases the window (MPI_Win_free); collective over its
// communicator. It completes this rank's outstanding operations and waits
// until every rank has, so none reaches a window after its owner freed
// it; base is the caller's again. It fails with ErrArg while this rank
// holds a lock, before taking part in anything.
func (win *Win[T]) Free() error {
	if err := win.usable("free"); err != nil {
		return err
	}
	if win.nlocked > 0 {
		return fmt.Errorf("mpi: window free: %s locked by this rank (Unlock first): %w", win.lockedRanks(), ErrArg)
	}
	if err := win.completeAll(); err != nil {
		return fmt.Errorf("mpi: window free: %w", err)
	}
	// The targets' lock blocks go with their windows.
	if err := win.released(); err != nil {
		return fmt.Errorf("mpi: window free: %w", err)
	}
	if err := win.together(winFree); err != nil {
		return fmt.Errorf("mpi: window free: %w", err)
	}
	win.freed = true
	win.sync.release(win.c.w)
	win.c.w.trk.Remove(win.trk)
	win.deregister()
	s := &win.c.w.win
	for _, k := range win.k {
		s.giveBack(k)
	}
	s.giveBack(win.rmw)
	s.giveBack(win.rel)
	if win.c.size > 1 {
		win.c.w.winClosed()
	}
	return nil
}

// Fence ends the active-target epoch and opens the next (MPI_Win_fence);
// collective over the window's communicator. Once it returns, every Put
// and Accumulate any rank issued before it is in its target's window and
// every Get has filled its origin buffer. It fails with ErrArg while this
// rank holds a lock.
func (win *Win[T]) Fence() error {
	if err := win.usable("fence"); err != nil {
		return err
	}
	if win.nlocked > 0 {
		return fmt.Errorf("mpi: window fence: %s locked by this rank (a passive-target epoch is open; Unlock first): %w",
			win.lockedRanks(), ErrArg)
	}
	if err := win.completeAll(); err != nil {
		return fmt.Errorf("mpi: window fence: %w", err)
	}
	if err := win.together(winFence); err != nil {
		return fmt.Errorf("mpi: window fence: %w", err)
	}
	win.fence, win.fenceOps = true, false
	return nil
}

// The calls that synchronise every rank of a window (together).
const (
	winFence = 1
	winFree  = 2
)

// together is the collective step of Fence and Free: where a Barrier
// would do, the ranks reduce which call each makes on which window (its
// identity: the key of rank 0's lock word, the same at every rank), so
// that a rank calling Fence while another calls Free, or Fence on another
// window, fails with ErrArg at both instead of pairing up with it (a Put
// into the freed window would then vanish without an error).
func (win *Win[T]) together(call int64) error {
	sig := call<<56 | int64(win.peers[0].lock.Key&(1<<56-1))
	v := [2]int64{sig, -sig}
	var r [2]int64
	if err := Allreduce(win.c, v[:], r[:], Max); err != nil {
		return err
	}
	if r[0] != -r[1] {
		this, other := "Fence", "Free"
		if call == winFree {
			this, other = other, this
		}
		return fmt.Errorf("the ranks disagree: this rank calls %s on this window, another calls %s, or calls on another window: %w",
			this, other, ErrArg)
	}
	return nil
}

// Flush completes the operations this rank issued toward target
// (MPI_Win_flush): Puts and Accumulates are in its window, Gets have
// filled their buffers. Only within a passive-target epoch toward target.
func (win *Win[T]) Flush(target int) error {
	if err := win.usable("flush"); err != nil {
		return err
	}
	if err := win.checkRank("flush", target); err != nil {
		return err
	}
	if win.locked[target] == lockNone {
		return fmt.Errorf("mpi: window flush of rank %d, which this rank has not locked: %w", target, ErrArg)
	}
	if err := win.complete(target); err != nil {
		return fmt.Errorf("mpi: window flush of rank %d: %w", target, err)
	}
	return nil
}

// Put writes origin into target's window from element disp on
// (MPI_Put). origin must stay unchanged until the operation completes.
func (win *Win[T]) Put(origin []T, target, disp int) error {
	p, err := win.access("put", target, disp, len(origin))
	if err != nil || len(origin) == 0 {
		return err
	}
	src := asBytes(origin)
	if target == win.c.rank {
		copy(win.mem[disp*win.es:], src)
		return nil
	}
	k := win.counterOf(target)
	if err := win.lc.Put(p.rank, p.base.Add(uint64(disp*win.es)), src, lapi.SendOpts{Completion: k}); err != nil {
		return fmt.Errorf("mpi: window put to rank %d: %w", target, err)
	}
	win.pend[target]++
	return nil
}

// Get reads len(origin) elements of target's window from element disp on
// into origin (MPI_Get). origin holds them once the operation completes.
func (win *Win[T]) Get(origin []T, target, disp int) error {
	p, err := win.access("get", target, disp, len(origin))
	if err != nil || len(origin) == 0 {
		return err
	}
	dst := asBytes(origin)
	if target == win.c.rank {
		copy(dst, win.mem[disp*win.es:])
		return nil
	}
	k := win.counterOf(target)
	if err := win.lc.Get(p.rank, p.base.Add(uint64(disp*win.es)), dst, lapi.SendOpts{Origin: k}); err != nil {
		return fmt.Errorf("mpi: window get from rank %d: %w", target, err)
	}
	win.pend[target]++
	return nil
}

// Accumulate combines origin into target's window from element disp on,
// window[disp+i] = window[disp+i] op origin[i] (MPI_Accumulate), element
// by element atomically with respect to other Accumulates. op is one of
// the predefined ops, on the types each takes as in a reduction (MaxLoc
// and MinLoc on (value, index) pairs, the bitwise and logical ops on
// integers, none but Sum and Prod on complex numbers): a user op (NewOp)
// fails with ErrArg, as in MPI. origin must stay unchanged until the
// operation completes.
func (win *Win[T]) Accumulate(origin []T, target, disp int, op Op) error {
	if err := win.usable("accumulate"); err != nil {
		return err
	}
	if lookupOp(op) != nil {
		return fmt.Errorf("mpi: window accumulate: %v is a user op; Accumulate takes the predefined ops only: %w", op, ErrArg)
	}
	red, err := reducerFor[T](op, len(origin))
	if err != nil {
		return fmt.Errorf("mpi: window accumulate: %w", err)
	}
	p, err := win.access("accumulate", target, disp, len(origin))
	if err != nil || len(origin) == 0 {
		return err
	}
	k := win.counterOf(target)
	if target == win.c.rank {
		// lapi reduces under its lock, as it reduces the packets of
		// other ranks' accumulates, so concurrent ones stay atomic.
		k = nil
	} else if a := &win.acc[target]; a.hi > a.lo && disp < a.hi && a.lo < disp+len(origin) {
		// Accumulates from one origin to one location apply in the
		// order issued (MPI's default accumulate_ordering), but lapi
		// places packets in any order, a lost one's resend after its
		// successors: one that overlaps an earlier one still in flight
		// waits for it.
		if err := win.complete(target); err != nil {
			return fmt.Errorf("mpi: window accumulate to rank %d: waiting for an earlier one: %w", target, err)
		}
	}
	err = win.lc.Accumulate(p.rank, p.base.Add(uint64(disp*win.es)), asBytes(origin), red.op, red.t,
		lapi.SendOpts{Completion: k})
	if err != nil {
		return fmt.Errorf("mpi: window accumulate to rank %d: %w", target, err)
	}
	if k != nil {
		win.pend[target]++
		a := &win.acc[target]
		if a.hi <= a.lo {
			a.lo, a.hi = disp, disp
		}
		a.lo, a.hi = min(a.lo, disp), max(a.hi, disp+len(origin))
	}
	return nil
}

// usable fails once the window is freed or the world finalized.
func (win *Win[T]) usable(op string) error {
	switch {
	case win.freed:
		return fmt.Errorf("mpi: window %s after Free: %w", op, ErrArg)
	case win.c.w.closed.Load():
		return win.c.w.finalized("window " + op)
	}
	return nil
}

// checkRank fails for a target outside the communicator.
func (win *Win[T]) checkRank(op string, target int) error {
	if target < 0 || target >= win.c.size {
		return fmt.Errorf("mpi: window %s: rank %d of %d: %w", op, target, win.c.size, ErrRank)
	}
	return nil
}

// access checks an operation (op names it) of n elements at disp in
// target's window, before anything moves: the window is usable, target
// is a rank of the communicator, an epoch toward it is open, and the
// range is inside its window. It returns the target's record.
func (win *Win[T]) access(op string, target, disp, n int) (*winPeer, error) {
	if win.freed || win.c.w.closed.Load() {
		return nil, win.usable(op)
	}
	if target < 0 || target >= win.c.size {
		return nil, win.checkRank(op, target)
	}
	fenced := win.locked[target] == lockNone
	if fenced && (!win.fence || win.nlocked > 0) {
		return nil, win.noEpoch(op, target)
	}
	p := &win.peers[target]
	if disp < 0 || disp > p.n || n > p.n-disp {
		return nil, fmt.Errorf("mpi: window %s: elements [%d, %d) are outside rank %d's window of %d: %w",
			op, disp, disp+n, target, p.n, ErrArg)
	}
	if fenced {
		win.fenceOps = true // (not for a refused one, which changes nothing)
	}
	return p, nil
}

// noEpoch is the error of an operation toward target outside an epoch.
func (win *Win[T]) noEpoch(op string, target int) error {
	if win.nlocked > 0 {
		return fmt.Errorf("mpi: window %s to rank %d, which this rank has not locked (it holds locks on %s): %w",
			op, target, win.lockedRanks(), ErrArg)
	}
	return fmt.Errorf("mpi: window %s to rank %d outside an epoch: call Fence, or Lock(%d), first: %w",
		op, target, target, ErrArg)
}

// counterOf is the counter of the operations toward target.
func (win *Win[T]) counterOf(target int) *lapi.Counter {
	k := win.k[target]
	if k == nil {
		k = win.c.w.win.counter(win.lc)
		win.k[target] = k
	}
	return k
}

// complete waits until every operation this rank issued toward target is
// complete.
func (win *Win[T]) complete(target int) error {
	n := win.pend[target]
	if n == 0 {
		return nil
	}
	win.acc[target] = accRange{} // (also when the wait fails: nothing more is owed)
	ctx, cancel := win.c.w.deadline(context.Background())
	defer cancel()
	win.pend[target] = 0
	if err := win.k[target].Wait(ctx, n); err != nil {
		win.k[target] = nil // it owes n still, or failed: not to be reused
		if ctx.Err() != nil {
			return fmt.Errorf("%w (%w)", &TimeoutError{Rank: win.c.w.rank,
				Waiting: fmt.Sprintf("%d window operations toward rank %d to complete", n, win.c.group[target])}, ctx.Err())
		}
		return err
	}
	return nil
}

// completeAll completes the operations toward every target.
func (win *Win[T]) completeAll() error {
	for t := range win.pend {
		if err := win.complete(t); err != nil {
			return err
		}
	}
	return nil
}
