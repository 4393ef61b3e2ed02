package mpi

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/weft-hpc/weft/internal/track"
	"github.com/weft-hpc/weft/lapi"
)

// Request is a nonblocking operation in progress, as Isend and Irecv
// return it. It is a handle on the operation: once a Wait or Test has
// seen the operation complete, its state goes back to the rank for the
// next one and the handle keeps the status and error, which a later Wait
// or Test reports again. One goroutine at a time may wait for a Request.
// Once waited for, a Request of the caller's own may take a new operation
// (IsendInto, IrecvInto).
type Request struct {
	op  *request // nil once done and given back
	st  Status
	err error
}

// copiedSend is the handle of every Isend whose data lapi copied: such a
// send is complete when Isend returns. It is never written.
var copiedSend = &Request{}

// free reports why q cannot take a new operation (IsendInto, IrecvInto):
// it is nil, still has one that no Wait or Test has seen complete, or is
// the handle every copied Isend shares.
func (q *Request) free(call string) error {
	switch {
	case q == nil:
		return fmt.Errorf("mpi: %s into a nil Request: %w", call, ErrArg)
	case q.op != nil:
		return fmt.Errorf("mpi: %s into a Request still in use (wait for it first): %w", call, ErrArg)
	case q == copiedSend:
		return fmt.Errorf("mpi: %s into the Request an Isend returned: it is shared; use one of your own: %w", call, ErrArg)
	}
	return nil
}

// settle takes a completed operation's status and error into the handle
// and gives the operation back.
func (q *Request) settle() {
	q.st, q.err = q.op.giveBack()
	q.op = nil
}

// Wait blocks until the request completes and returns its status.
func (q *Request) Wait() (Status, error) { return q.WaitContext(context.Background()) }

// WaitContext is Wait that gives up when ctx ends (the request stays
// pending).
func (q *Request) WaitContext(ctx context.Context) (Status, error) {
	if q == nil {
		return Status{}, nil
	}
	if r := q.op; r != nil {
		var err error
		if r.sched != nil {
			err = r.sched.wait(ctx)
		} else {
			err = r.w.wait(ctx, r, nil)
		}
		if err != nil {
			return Status{}, err
		}
		q.settle()
	}
	return q.st, q.err
}

// Test makes progress once and reports whether the request has completed.
func (q *Request) Test() (done bool, st Status, err error) {
	if q == nil {
		return true, Status{}, nil
	}
	if r := q.op; r != nil {
		if !r.done.Load() {
			r.progress()
		}
		if !r.done.Load() {
			return false, Status{}, nil
		}
		q.settle()
	}
	return true, q.st, q.err
}

// progress makes one pass of the progress engine for r, and advances r's
// schedule if it is a nonblocking collective's.
func (r *request) progress() {
	if s := r.sched; s != nil {
		s.tryAdvance()
		r.w.lc.Progress()
		s.tryAdvance()
		s.watch()
		return
	}
	r.w.lc.Progress()
}

// Cancel takes back a receive that no message has matched yet
// (MPI_Cancel): it completes at once, its Status saying Cancelled, and
// the next matching message goes to another receive. A receive already
// matched, a send, a collective, or a request that has completed go on
// as they are: Cancel does nothing to them, and their Status says they
// were not cancelled. Either way, Wait or Test must still see the request
// complete.
func (q *Request) Cancel() error {
	if q == nil || q.op == nil || q.op.done.Load() {
		return nil
	}
	r := q.op
	if !r.recv || r.sched != nil {
		return nil
	}
	r.cancel()
	return nil
}

// cancel unposts receive r and completes it as cancelled, unless a
// message has matched it already.
func (r *request) cancel() {
	w := r.w
	w.lc.Atomically(func(*lapi.Tx) {
		if w.m.cancelPosted(r) {
			r.finish(Status{Source: AnySource, Tag: AnyTag, Cancelled: true}, nil)
		}
	})
}

// WaitAll waits for every request and returns the first error.
func WaitAll(reqs ...*Request) error {
	var first error
	for _, q := range reqs {
		if _, err := q.Wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// request is an operation's state: what matching, lapi's notifications
// and the request table refer to. Blocking calls and collectives use it
// directly; Isend and Irecv hand it out behind a Request.
type request struct {
	w    *World
	comm *Comm
	done atomic.Bool
	st   Status
	err  error

	// receive side
	recv     bool
	ctx      uint32
	src, tag int
	buf      []byte
	elem     int      // element size, for Status.Count: a power of two (Elem's)
	op       string   // "Send", "Recv", "Probe": for reports
	next     *request // posted queue

	// send side (rendezvous): the registered buffer and the peer
	pvo    lapi.PVO
	peer   int // world rank of the peer, for failure; -1 when none
	id     uint32
	tabled bool
	// get: the rendezvous arrival whose data this receive is reading
	rts *arrival
	// sp is a split rendezvous' state (split.go), nil for any other.
	sp *splitState
	// sched is the schedule of a nonblocking collective whose completion
	// this is (schedule.go); such a request is never recycled, since the
	// progress goroutine may still look at it.
	sched *schedule
	// trk is the request's record in the world's registry (track.go),
	// from Isend, Irecv or a nonblocking collective until a Wait or Test
	// settles it and gives it back; 0 when tracking is off.
	trk track.ID
}

// reqPool recycles requests: those of blocking calls (Send, Recv, and the
// collectives' steps), and those a Request handle gave back: a blocking call
// costs no allocation. A blocking receive's request goes back under lapi's
// lock, as its wait ends, into World.spare, which the next receive takes
// under that lock again: a ping-pong's request goes round with no atomic
// instruction (the pool's fast path has none either, but costs more).
var reqPool = sync.Pool{New: func() any { return new(request) }}

// newRequest returns a zeroed request.
func (w *World) newRequest() *request {
	r := reqPool.Get().(*request)
	*r = request{}
	return r
}

// newRequestLocked is newRequest under lapi's lock: the spare first.
func (w *World) newRequestLocked() *request {
	r := w.spare
	if r == nil {
		return w.newRequest()
	}
	w.spare = nil
	*r = request{}
	return r
}

// recycleLocked is recycle under lapi's lock, for a request known done and
// not tabled.
func (w *World) recycleLocked(r *request) {
	if w.spare == nil {
		w.spare = r
	} else {
		reqPool.Put(r)
	}
}

// recycle returns a completed request for reuse, unless a peer may still
// name it (tabled).
func (r *request) recycle() {
	if r != nil && r.done.Load() && !r.tabled && r.sched == nil {
		reqPool.Put(r)
	}
}

// waitRecycle waits for a request of a blocking call and gives it back;
// one whose wait failed is still pending, and is not reused. Not yet done,
// the common case of a blocking receive, it is given back by the wait's
// condition, under lapi's lock (recycleLocked); done already, or tabled
// (a split rendezvous receive goes into the table), by giveBack.
func (r *request) waitRecycle() (Status, error) {
	var g gaveBack
	if err := r.w.wait(context.Background(), r, &g); err != nil {
		return Status{}, err
	}
	if !g.back {
		return r.giveBack()
	}
	return g.st, g.err
}

// gaveBack is what a wait that gave its request back took from it.
type gaveBack struct {
	st   Status
	err  error
	back bool // given back; false: the request was tabled
}

// giveBack returns a completed request's status and error, and gives the
// request back for reuse: after it, r belongs to the next operation.
func (r *request) giveBack() (Status, error) {
	r.release()
	st, err := r.st, r.err
	r.recycle()
	return st, err
}

// finish completes the request once. Called with w.mu held or from a
// completer; the done flag is what waiters poll.
func (r *request) finish(st Status, err error) {
	if r.done.Load() {
		return
	}
	r.st, r.err = st, err
	r.done.Store(true)
}

// describe says what the request waits for, in the world's ranks.
func (r *request) describe() string { return r.note().describe() }

// waitNote is what a blocked call waits for, copied from its request when
// it blocks: a report reads it from another goroutine, while the request
// itself may already be recycled and reused (World.waiting).
type waitNote struct {
	op       string
	src, tag int
	ctx      uint32
	recv     bool
	comm     *Comm
}

// note copies what describe needs of r.
func (r *request) note() *waitNote {
	return &waitNote{op: r.op, src: r.src, tag: r.tag, ctx: r.ctx, recv: r.recv, comm: r.comm}
}

// describe says what the request waits for: "Recv from rank 1, tag 7,
// communicator 0".
func (r *waitNote) describe() string {
	peer := func(p int) string {
		if p == AnySource {
			return "any source"
		}
		return fmt.Sprintf("rank %d", p)
	}
	tag := "any tag"
	if r.tag != AnyTag {
		tag = fmt.Sprintf("tag %d", r.tag)
	}
	where := fmt.Sprintf("communicator %d", r.ctx&^1)
	if r.ctx&1 == 1 {
		where += " (collective)"
	}
	if r.recv {
		return fmt.Sprintf("%s from %s, %s, %s", r.op, peer(r.src), tag, where)
	}
	return fmt.Sprintf("%s to %s, %s, %s", r.op, peer(r.src), tag, where)
}

// release drops the request from the world's table, and from the
// registry of live resources, once it is done.
func (r *request) release() {
	if r.tabled {
		r.w.mu.Lock()
		r.w.reqs.remove(r)
		r.w.mu.Unlock()
	}
	// A tracked request leaves the registry here, as it is given back:
	// not in Request.settle, which stays small enough to be inlined into
	// Wait and Test, nor above in giveBack, whose calls stay on the lines
	// the profile (bench/default.pgo) knows.
	if r.trk != 0 {
		r.w.trk.Remove(r.trk)
	}
}

// waitAll waits for the requests of a collective step, recycling each,
// and returns the first error.
func waitAll(reqs []*request) error {
	var first error
	for _, r := range reqs {
		c, recv, want, src := r.comm, r.recv, len(r.buf), r.src
		st, err := r.waitRecycle()
		if recv {
			err = c.exact(st, err, src, want)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Complete is lapi's notification that a send's buffer may be reused (an
// eager send is then done) or that the operation failed.
func (r *request) Complete(err error) {
	w := r.w // once finished, r may be recycled by its waiter at once
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.sp != nil && r.sp.putting {
		w.putDone(r, err)
		return
	}
	if r.rts != nil {
		w.getDone(r, err)
		return
	}
	r.finish(r.st, err)
}

// reqTable names requests that a peer refers to (rendezvous sends awaiting
// FIN) and tracks live ones for failure and leak reports.
type reqTable struct {
	slots []*request
	free  []uint32
}

func (t *reqTable) add(r *request) {
	if len(t.free) > 0 {
		r.id = t.free[len(t.free)-1]
		t.free = t.free[:len(t.free)-1]
		t.slots[r.id] = r
	} else {
		r.id = uint32(len(t.slots))
		t.slots = append(t.slots, r)
	}
	r.tabled = true
}

func (t *reqTable) get(id uint32) *request {
	if int(id) < len(t.slots) {
		return t.slots[id]
	}
	return nil
}

func (t *reqTable) remove(r *request) {
	if !r.tabled || t.slots[r.id] != r {
		return
	}
	t.slots[r.id] = nil
	t.free = append(t.free, r.id)
	r.tabled = false
}

func (t *reqTable) each(f func(*request)) {
	for _, r := range t.slots {
		if r != nil {
			f(r)
		}
	}
}

// live counts the point-to-point requests in the table: a collective
// context's belong to a nonblocking collective's schedule, which counts
// as one (icollState.inFlight).
func (t *reqTable) live() int {
	n := 0
	t.each(func(r *request) {
		if r.ctx&1 == 0 {
			n++
		}
	})
	return n
}
