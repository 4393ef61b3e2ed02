package mpi

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/weft-hpc/weft/lapi"
)

// A nonblocking collective is a schedule: rounds of sends and receives,
// each followed by a local step (a reduction, a copy), built whole when
// the call starts. Nothing runs it on a goroutine of its own. Whoever
// makes progress advances it: the caller's Test and Wait, and while any
// schedule is in flight one progress goroutine per rank, which blocks in
// lapi until a round may have completed (lapi.Context.WaitQuiet), so that
// a collective proceeds while the caller computes and costs no processor
// time while nothing arrives. A round's operations are posted when the
// round before has completed and its local step has run; when the last
// round has, the Request completes.
//
// Its messages go on the communicator's collective context with tags that
// carry the call's number, as the blocking collectives' do: calls in
// flight together never match each other's messages, and an abort of one
// (agree.go) fails only its operations.

// tagNonblocking marks the kind of a nonblocking call's step, so that a
// rank's Ibarrier never matches another's Barrier of the same number
// (ranks that call those disagree, and are told so by agree.go).
const tagNonblocking = 0x80

// round is one step of a schedule.
type round struct {
	ops []xfer
	// then runs once every operation of the round has completed (nil:
	// nothing to do).
	then func() error
}

// xfer is a send or a receive of a round, or a read: a receive must get
// exactly len(b) bytes; a read (src not nil) fills b from the peer's
// memory that src names once an earlier round has learnt it.
type xfer struct {
	b    []byte
	peer int // rank in the communicator
	tag  int // the kind of step (tagBarrier, ...)
	recv bool
	src  func() lapi.PVO
}

// schedule is a nonblocking collective in flight.
type schedule struct {
	c      *Comm
	k      uint32 // the call's number, which its tags carry
	digest uint8  // and its callDigest
	name   string // "Iallreduce", for errors and reports
	rounds []round

	mu  sync.Mutex // the advancer: one goroutine at a time
	cur int        // the round posted or next to post (mu)
	// ops holds the posted round's operations, replaced (never changed)
	// as rounds go, so that a waiter may look at them without mu. They
	// are not recycled: a waiter may still be reading an old round's.
	ops atomic.Pointer[[]*request]
	// fin completes when the schedule does: what the caller's Request
	// holds, so Wait, Test, WaitAny and TestAll see it as any other.
	fin *request
	// cleanup, if set, runs once as the schedule ends, either way (it
	// releases registrations).
	cleanup func()
}

// icollState is a rank's nonblocking collectives in flight and its
// progress goroutine.
type icollState struct {
	mu      sync.Mutex
	pending []*schedule // in flight, oldest first (mu)
	running bool        // the progress goroutine runs (mu)
	// added counts schedules started, for the progress goroutine to see
	// a new one while it waits.
	added atomic.Uint64
}

// roundDone reports whether every operation of the posted round has
// completed, or the schedule has.
func (s *schedule) roundDone() bool {
	if s.fin.done.Load() {
		return true
	}
	ops := s.ops.Load()
	if ops == nil {
		return false
	}
	for _, r := range *ops {
		if !r.done.Load() {
			return false
		}
	}
	return true
}

// startSchedule builds the Request of a schedule for the call begun last, named
// name, and posts its first round; cleanup, if set, runs as it ends.
func startSchedule(c *Comm, name string, rounds []round, cleanup func()) *Request {
	w := c.w
	s := &schedule{c: c, k: c.coll.seq.Load(), digest: uint8(c.coll.digest.Load()), name: name, rounds: rounds, cleanup: cleanup}
	c.coll.hold(s.k) // for a comparison after the ring has moved on
	s.fin = &request{w: w, comm: c, ctx: c.ctx | 1, op: name, src: -1, tag: c.ctag(0), peer: -1, sched: s}
	s.mu.Lock()
	s.advanceLocked()
	done := s.fin.done.Load()
	s.mu.Unlock()
	q := &Request{op: s.fin}
	if w.trk != nil {
		w.trackReq(s.fin, name)
	}
	if done {
		return q
	}
	ic := &w.icoll
	ic.mu.Lock()
	ic.pending = append(ic.pending, s)
	run := !ic.running
	ic.running = true
	ic.mu.Unlock()
	ic.added.Add(1)
	if run {
		go ic.progress(w)
	} else {
		// The progress goroutine may be asleep in the device: it must
		// take the new schedule in.
		w.lc.Wake()
	}
	return q
}

// advanceLocked moves s on as far as it can without waiting: while the
// posted round has completed, it checks what the round received, runs its
// local step and posts the next (s.mu held).
func (s *schedule) advanceLocked() {
	for !s.fin.done.Load() {
		if ops := s.ops.Load(); ops != nil {
			for _, r := range *ops {
				if !r.done.Load() {
					return
				}
			}
			if err := s.settle(*ops); err != nil {
				s.fail(err)
				return
			}
			if then := s.rounds[s.cur].then; then != nil {
				if err := then(); err != nil {
					s.fail(err)
					return
				}
			}
			s.ops.Store(nil)
			s.cur++
		}
		if s.cur == len(s.rounds) {
			s.complete(nil)
			return
		}
		if err := s.post(); err != nil {
			s.fail(err)
			return
		}
	}
}

// settle checks a completed round: a send's error, a receive's error or
// length.
func (s *schedule) settle(ops []*request) error {
	var first error
	for _, r := range ops {
		r.release()
		err := r.err
		if r.recv {
			err = s.c.exact(r.st, err, r.src, len(r.buf))
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// post posts the operations of round s.cur: receives first, so that the
// peers' messages find them.
func (s *schedule) post() error {
	c := s.c
	if err := c.coll.abortOf(s.k); err != nil {
		return err
	}
	rd := s.rounds[s.cur]
	ops := make([]*request, 0, len(rd.ops))
	tag := callTag(s.k, s.digest) | tagNonblocking
	var err error
posting:
	for _, recv := range []bool{true, false} {
		for _, x := range rd.ops {
			if x.recv != recv {
				continue
			}
			var r *request
			switch {
			case recv:
				r, err = c.irecv(x.b, 1, x.peer, x.tag|tag, c.ctx|1)
			case x.src != nil:
				r, err = s.read(x.b, x.peer, x.src())
			default:
				r, err = c.isend(x.b, x.peer, x.tag|tag, c.ctx|1)
			}
			if err != nil {
				// The round fails with it: a send posted after a failed
				// receive would overwrite err, and the round complete
				// without the data it never received.
				break posting
			}
			ops = append(ops, r)
		}
	}
	s.ops.Store(&ops)
	// A device may hold what was sent until lapi's next pass flushes it
	// (shm publishes and wakes the peer then): the caller may compute
	// now, and the progress goroutine sleeps until a frame comes.
	c.w.lc.Progress()
	return err
}

// read starts a lapi Get of len(b) bytes from peer's memory at src into
// b, which completes the request it returns.
func (s *schedule) read(b []byte, peer int, src lapi.PVO) (*request, error) {
	c := s.c
	w := c.w
	r := w.newRequest()
	r.w, r.comm, r.ctx, r.src, r.tag, r.peer, r.op = w, c, c.ctx|1, peer, -1, c.group[peer], "Read"
	if err := w.lc.Get(lapi.Rank(c.group[peer]), src, b, lapi.SendOpts{Notify: r}); err != nil {
		reqPool.Put(r) // lapi refused it: nobody names it
		return nil, fmt.Errorf("mpi: read from rank %d: %w", peer, err)
	}
	return r, nil
}

// fail ends s with err: the call is aborted on every member (which fails
// this rank's operations of it that are still posted), and the Request
// completes with the error.
func (s *schedule) fail(err error) {
	c := s.c
	if c.size > 1 && c.coll.abortOf(s.k) == nil {
		c.coll.abort(s.k, abortCause(err), fmt.Sprintf("rank %d: %v", c.rank, err))
	}
	s.complete(fmt.Errorf("mpi: %s: %w", s.name, err))
}

// watch has the members compare their signatures of s's call if it stays
// unfinished for agreeAfter (collState.watchCall), as Wait does: for a
// rank that waits for it by Test, TestAll or WaitAny instead, ranks that
// disagree on the call would otherwise wait for each other for ever.
func (s *schedule) watch() {
	if !s.fin.done.Load() && s.c.coll.blocked.Load() != s.k {
		s.c.coll.watchCall(s.k)
	}
}

// complete ends s with err. A goroutine waiting for s in lapi (WaitAny,
// or the caller's Wait while the progress goroutine advanced s) is told:
// this happened outside lapi's progress, which wakes waiters by itself.
func (s *schedule) complete(err error) {
	if s.cleanup != nil {
		s.cleanup()
		s.cleanup = nil
	}
	s.fin.finish(Status{}, err)
	s.c.coll.blocked.CompareAndSwap(s.k, 0) // (watch's, or a Wait's about to unwatch)
	s.c.coll.release(s.k)
	s.c.w.lc.Wake()
}

// tryAdvance advances s unless another goroutine is doing it.
func (s *schedule) tryAdvance() {
	if s.mu.TryLock() {
		s.advanceLocked()
		s.mu.Unlock()
	}
}

// wait advances s until it completes or ctx ends: what Wait does for a
// nonblocking collective's Request.
func (s *schedule) wait(ctx context.Context) error {
	w := s.c.w
	ctx, cancel := w.deadline(ctx) // WEFT_TIMEOUT, as every blocking wait
	defer cancel()
	reported := false
	defer func() {
		if reported {
			w.waiting.Store(nil)
			s.c.coll.unwatch()
		}
	}()
	for {
		s.mu.Lock()
		s.advanceLocked()
		s.mu.Unlock()
		if s.fin.done.Load() {
			return nil
		}
		err := w.lc.WaitReport(ctx, func() (bool, error) {
			if s.roundDone() {
				return true, nil
			}
			return false, s.c.coll.abortOf(s.k)
		}, func() {
			if reported {
				return
			}
			reported = true
			w.waiting.Store(s.note())
			s.c.coll.watchCall(s.k) // are the ranks in the same call?
		})
		if err != nil {
			if ctx.Err() != nil {
				w.snapTimeout(s.fin) // the first timeout writes a state snapshot
				return fmt.Errorf("%w (%w)", &TimeoutError{Rank: w.rank, Waiting: s.note().describe()}, ctx.Err())
			}
			s.mu.Lock()
			if !s.fin.done.Load() {
				s.fail(err)
			}
			s.mu.Unlock()
			return nil
		}
	}
}

// note says what s waits for: the first operation of its round that has
// not completed.
func (s *schedule) note() *waitNote {
	if ops := s.ops.Load(); ops != nil {
		for _, r := range *ops {
			if !r.done.Load() {
				n := r.note()
				n.op = s.name + ": " + n.op
				return n
			}
		}
	}
	n := s.fin.note()
	n.src = AnySource
	return n
}

// progress is the progress goroutine: while schedules are in flight it
// advances those whose round has completed, then sleeps in lapi until
// one may have. It ends when none is left, or the rank is finalized.
func (ic *icollState) progress(w *World) {
	var list []*schedule
	for {
		ic.mu.Lock()
		keep := ic.pending[:0]
		for _, s := range ic.pending {
			if !s.fin.done.Load() {
				keep = append(keep, s)
			}
		}
		clear(ic.pending[len(keep):])
		ic.pending = keep
		if len(keep) == 0 || w.closed.Load() {
			ic.running = false
			ic.mu.Unlock()
			return
		}
		list = append(list[:0], keep...)
		ic.mu.Unlock()
		seen := ic.added.Load()
		for _, s := range list {
			if s.roundDone() {
				// Lock, not TryLock: a caller advancing s (a reduction
				// may take a while) is waited for, not spun around.
				s.mu.Lock()
				s.advanceLocked()
				s.mu.Unlock()
			}
		}
		clear(list)
		err := w.lc.WaitQuiet(context.Background(), func() (bool, error) {
			if ic.added.Load() != seen || w.closed.Load() {
				return true, nil
			}
			ic.mu.Lock()
			defer ic.mu.Unlock()
			for _, s := range ic.pending {
				if s.roundDone() {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			// The device is gone: the waits of the schedules left fail
			// by themselves.
			ic.mu.Lock()
			ic.running = false
			ic.mu.Unlock()
			return
		}
	}
}

// inFlight is how many nonblocking collectives have not completed.
func (ic *icollState) inFlight() int {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	n := 0
	for _, s := range ic.pending {
		if !s.fin.done.Load() {
			n++
		}
	}
	return n
}
