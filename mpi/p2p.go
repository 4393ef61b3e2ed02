package mpi

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/weft-hpc/weft/lapi"
)

// Send sends buf to dest with tag and returns when buf may be reused.
func Send[T Elem](c *Comm, buf []T, dest, tag int) error {
	if c == nil {
		return errNilComm("Send")
	}
	return c.send(asBytes(buf), dest, tag, c.ctx)
}

// Recv receives into buf a message from source (or AnySource) with tag (or
// AnyTag). A longer message fills buf and fails with ErrTruncate.
func Recv[T Elem](c *Comm, buf []T, source, tag int) (Status, error) {
	if c == nil {
		return Status{}, errNilComm("Recv")
	}
	r, err := c.irecv(asBytes(buf), sizeOf[T](), source, tag, c.ctx)
	if err != nil {
		return Status{}, err
	}
	return r.waitRecycle()
}

// Isend starts sending buf; buf must not change until the request completes.
func Isend[T Elem](c *Comm, buf []T, dest, tag int) (*Request, error) {
	if c == nil {
		return nil, errNilComm("Isend")
	}
	r, err := c.startSend(asBytes(buf), dest, tag)
	switch {
	case err != nil:
		return nil, err
	case r == nil:
		// Complete once lapi has copied buf: the shared copiedSend
		// handle, no allocation (a window of small Isends would
		// otherwise run the garbage collector every few milliseconds).
		return copiedSend, nil
	}
	if c.w.trk != nil {
		c.w.trackReq(r, "Isend")
	}
	return &Request{op: r}, nil
}

// Irecv starts receiving into buf.
func Irecv[T Elem](c *Comm, buf []T, source, tag int) (*Request, error) {
	if c == nil {
		return nil, errNilComm("Irecv")
	}
	r, err := c.irecv(asBytes(buf), sizeOf[T](), source, tag, c.ctx)
	if err != nil {
		return nil, err
	}
	if c.w.trk != nil {
		c.w.trackReq(r, "Irecv")
	}
	return &Request{op: r}, nil
}

// IsendInto is Isend into a Request the caller provides, as MPI_Isend
// fills an MPI_Request: a window of sends into an array of Requests,
// reused window after window, allocates nothing, where an Irecv's handle
// is a new allocation each time. q must be free: never used, or waited
// for (Wait, WaitAll, or a Test that reported it done).
func IsendInto[T Elem](q *Request, c *Comm, buf []T, dest, tag int) error {
	if c == nil {
		return errNilComm("IsendInto")
	}
	if err := q.free("IsendInto"); err != nil {
		return err
	}
	r, err := c.startSend(asBytes(buf), dest, tag)
	if err != nil {
		return err
	}
	*q = Request{op: r} // nil when lapi copied buf: complete already
	if r != nil && c.w.trk != nil {
		c.w.trackReq(r, "IsendInto")
	}
	return nil
}

// IrecvInto is Irecv into a Request the caller provides; see IsendInto.
func IrecvInto[T Elem](q *Request, c *Comm, buf []T, source, tag int) error {
	if c == nil {
		return errNilComm("IrecvInto")
	}
	if err := q.free("IrecvInto"); err != nil {
		return err
	}
	r, err := c.irecv(asBytes(buf), sizeOf[T](), source, tag, c.ctx)
	if err != nil {
		return err
	}
	*q = Request{op: r}
	if c.w.trk != nil {
		c.w.trackReq(r, "IrecvInto")
	}
	return nil
}

// startSend starts a nonblocking send of b on the communicator's context.
// It returns no operation when lapi copied b: the send is then complete.
func (c *Comm) startSend(b []byte, dest, tag int) (*request, error) {
	if c.copies(len(b), dest) {
		return nil, c.sendCopied(b, dest, tag, c.ctx)
	}
	return c.isend(b, dest, tag, c.ctx)
}

// Sendrecv sends and receives at once, so that pairs of ranks exchanging
// with each other cannot deadlock. send and recv may be the same buffer,
// or overlap, as in MPI_Sendrecv_replace: the message sent is what send
// held before the call.
func Sendrecv[T Elem](c *Comm, send []T, dest, sendTag int, recv []T, source, recvTag int) (Status, error) {
	if c == nil {
		return Status{}, errNilComm("Sendrecv")
	}
	return c.sendrecv(asBytes(send), dest, sendTag, asBytes(recv), sizeOf[T](), source, recvTag, c.ctx)
}

// sendrecv is Sendrecv on context ctx, the receive buffer holding
// elements of elem bytes.
func (c *Comm) sendrecv(sb []byte, dest, sendTag int, rb []byte, elem, source, recvTag int, ctx uint32) (Status, error) {
	// Both ends' arguments first: a bad source must not fail the call
	// after its message went.
	if err := c.checkDest(dest, sendTag, ctx); err != nil {
		return Status{}, err
	}
	if err := c.checkSource(source, recvTag, ctx); err != nil {
		return Status{}, err
	}
	if c.copies(len(sb), dest) {
		// An eager send completes at once: it goes first, so that the
		// peer's wait ends sooner; posting the receive overlaps its
		// flight. The peer's message may then come unexpected, which
		// for a message this small costs a copy of it.
		if err := c.send(sb, dest, sendTag, ctx); err != nil {
			return Status{}, err
		}
		rr, err := c.irecv(rb, elem, source, recvTag, ctx)
		if err != nil {
			return Status{}, err
		}
		return rr.waitRecycle()
	}
	if overlap(sb, rb) {
		// The receive would overwrite what the send has yet to read
		// (MPI_Sendrecv_replace's case): the send goes from a copy.
		sb = append([]byte(nil), sb...)
	}
	rr, err := c.irecv(rb, elem, source, recvTag, ctx)
	if err != nil {
		return Status{}, err
	}
	sr, err := c.isend(sb, dest, sendTag, ctx)
	if err != nil {
		// The receive must not outlive the failed call: it would take
		// a message into a buffer its caller believes free. Unposted,
		// or, if it matched already, waited for.
		rr.cancel()
		_, _ = rr.waitRecycle()
		return Status{}, err
	}
	st, rerr := rr.waitRecycle()
	if _, err := sr.waitRecycle(); err != nil && rerr == nil {
		rerr = err
	}
	return st, rerr
}

// overlap reports whether a and b share some memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// Probe blocks until a message from source with tag can be received and
// describes it; Count is in bytes.
func (c *Comm) Probe(source, tag int) (Status, error) {
	if c == nil {
		return Status{}, errNilComm("Probe")
	}
	if err := c.checkSource(source, tag, c.ctx); err != nil {
		return Status{}, err
	}
	w := c.w
	if err := w.finalized("probe"); err != nil {
		return Status{}, err
	}
	var st Status
	probe := &request{w: w, comm: c, recv: true, ctx: c.ctx, src: source, tag: tag, op: "Probe"}
	ctx, cancel := w.deadline(context.Background())
	defer cancel()
	w.waiting.Store(probe.note())
	err := w.lc.Wait(ctx, func() (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if a := w.m.probe(c.ctx, source, tag); a != nil {
			st = Status{Source: a.env.src, Tag: a.env.tag, Count: int(a.env.size)}
			return true, nil
		}
		if source != AnySource {
			if err := w.lc.PeerErr(lapi.Rank(c.group[source])); err != nil {
				return false, err
			}
		}
		return false, nil
	})
	w.waiting.Store(nil)
	if err != nil {
		return Status{}, w.waitErr(ctx, probe, err)
	}
	return st, nil
}

// checkSource checks a receive's or probe's source and tag on context
// ctx. Only a collective context (odd) may be used once c is freed: by
// the later rounds of a nonblocking collective started before Free,
// which go on to complete.
func (c *Comm) checkSource(src, tag int, ctx uint32) error {
	if c.freed && ctx&1 == 0 {
		return c.freedErr()
	}
	if src != AnySource && (src < 0 || src >= c.size) {
		return fmt.Errorf("mpi: source %d in a communicator of %d: %w", src, c.size, ErrRank)
	}
	if tag < 0 && tag != AnyTag || tag > MaxTag {
		return fmt.Errorf("mpi: tag %d: want 0 to MaxTag (%d), or AnyTag: %w", tag, MaxTag, ErrArg)
	}
	return nil
}

// checkDest is checkSource for a send.
func (c *Comm) checkDest(dest, tag int, ctx uint32) error {
	if c.freed && ctx&1 == 0 {
		return c.freedErr()
	}
	if dest < 0 || dest >= c.size {
		return fmt.Errorf("mpi: send to rank %d in a communicator of %d: %w", dest, c.size, ErrRank)
	}
	if tag < 0 || tag > MaxTag {
		return fmt.Errorf("mpi: send with tag %d: want 0 to MaxTag (%d): %w", tag, MaxTag, ErrArg)
	}
	return nil
}

// send sends b on context ctx and returns when b may be reused. A message
// that lapi copies (eager, at most its CopyThreshold) is complete once lapi
// has it, so it needs no request and no wait: the blocking send of a small
// message is one call into lapi.
func (c *Comm) send(b []byte, dest, tag int, ctx uint32) error {
	if c.copies(len(b), dest) {
		return c.sendCopied(b, dest, tag, ctx)
	}
	r, err := c.isendWaits(b, dest, tag, ctx, true)
	if err != nil {
		return err
	}
	_, err = r.waitRecycle()
	return err
}

// sendCopied sends b, which lapi copies (see copies): the send is
// complete when it returns.
func (c *Comm) sendCopied(b []byte, dest, tag int, ctx uint32) error {
	if err := c.checkDest(dest, tag, ctx); err != nil {
		return err
	}
	w := c.w
	if w.closed.Load() {
		return fmt.Errorf("mpi: send to rank %d: %w", dest, ErrFinalized)
	}
	wd := c.group[dest]
	var hdr [envEagerLen]byte
	// The sequence number is taken under lapi's lock, which the send
	// holds anyway: no atomic add of its own. (isend's eager branch does
	// the same with its options: a helper shared by both, with the
	// options as a parameter, cost this path 25 instructions.)
	var (
		err    error
		behind bool
	)
	w.lc.Atomically(func(tx *lapi.Tx) {
		putEager(hdr[:], ctx, c.rank, tag, w.nextSeqLocked(wd))
		err = tx.Amsend(lapi.Rank(wd), w.hEager, hdr[:], b, lapi.SendOpts{})
		behind = tx.Backlog(lapi.Rank(wd)) > maxBacklog
	})
	if err != nil {
		return fmt.Errorf("mpi: send to rank %d: %w", dest, err)
	}
	if behind {
		return w.holdBack(wd)
	}
	return nil
}

// maxBacklog bounds the packets lapi holds toward one peer for room in
// its device: an eager send is complete once lapi has copied it, so a rank
// that never waits (a Bcast root in a loop, a Reduce leaf) would otherwise
// queue without bound while a slower peer's ring or inbox is full.
const maxBacklog = 4096

// holdBack makes progress until the backlog toward world rank wd is down
// to half of maxBacklog (as MPI lets a standard send block until the
// receiver takes its message), bounded by Options.Timeout.
func (w *World) holdBack(wd int) error {
	ctx, cancel := w.deadline(context.Background())
	defer cancel()
	err := w.lc.WaitTx(ctx, func(tx *lapi.Tx) (bool, error) {
		if err := tx.PeerErr(lapi.Rank(wd)); err != nil {
			return false, err
		}
		return tx.Backlog(lapi.Rank(wd)) <= maxBacklog/2, nil
	})
	if err != nil {
		return fmt.Errorf("mpi: send to rank %d, %d messages behind: %w", wd, maxBacklog, err)
	}
	return nil
}

// nextSeqLocked takes the next sequence number toward world rank wd,
// under lapi's lock.
func (w *World) nextSeqLocked(wd int) uint32 {
	s := w.seqOut[wd]
	w.seqOut[wd] = s + 1
	return s
}

// copies reports whether a send of n bytes to member dest is eager and
// copied by lapi, and so complete as soon as lapi has it.
func (c *Comm) copies(n, dest int) bool { return n <= c.eagerTo(dest) && n <= c.w.lc.CopyThreshold() }

// eagerTo is the eager limit toward member dest: over a route, a rank of
// another node is reached by no single-copy read, so rendezvous does not
// start where single copies pay (World.far).
func (c *Comm) eagerTo(dest int) int {
	w := c.w
	if w.far != nil && dest >= 0 && dest < len(c.group) && w.far[c.group[dest]] {
		return w.eagerFar
	}
	return w.eagerLimit
}

// isend starts a send on context ctx (the communicator's, or its
// collective context).
func (c *Comm) isend(b []byte, dest, tag int, ctx uint32) (*request, error) {
	return c.isendWaits(b, dest, tag, ctx, false)
}

// isendWaits is isend; waitsNow says the caller waits for the request at
// once (a blocking send), which lets lapi copy a larger eager message
// toward the network rather than hold the send for its acknowledgement
// (lapi.SendOpts.WaitsNow).
func (c *Comm) isendWaits(b []byte, dest, tag int, ctx uint32, waitsNow bool) (*request, error) {
	if err := c.checkDest(dest, tag, ctx); err != nil {
		return nil, err
	}
	w := c.w
	if w.closed.Load() {
		return nil, fmt.Errorf("mpi: send to rank %d: %w", dest, ErrFinalized)
	}
	wd := c.group[dest]
	r := w.newRequest()
	r.w, r.comm, r.ctx, r.src, r.tag, r.peer, r.op = w, c, ctx, dest, tag, wd, "Send"
	if len(b) <= c.eagerTo(dest) {
		o := lapi.SendOpts{WaitsNow: waitsNow}
		copied := len(b) <= w.lc.CopyThreshold()
		if !copied {
			o.Notify = r // done when lapi no longer needs b
		}
		var hdr [envEagerLen]byte
		var (
			err    error
			behind bool
		)
		w.lc.Atomically(func(tx *lapi.Tx) {
			err = tx.Amsend(lapi.Rank(wd), w.hEager, putEager(hdr[:], ctx, c.rank, tag, w.nextSeqLocked(wd)), b, o)
			// A blocking send lapi may have copied (WaitsNow) returns at
			// once too: it is held back like a copied one.
			behind = (copied || waitsNow) && tx.Backlog(lapi.Rank(wd)) > maxBacklog
		})
		if err != nil {
			return nil, fmt.Errorf("mpi: send to rank %d: %w", dest, err)
		}
		if copied {
			r.finish(Status{}, nil) // lapi copied b: the send is complete
		}
		if behind {
			if err := w.holdBack(wd); err != nil {
				return nil, err
			}
		}
		return r, nil
	}
	pvo, err := w.lc.Register(b, lapi.AccessRead)
	if err != nil {
		return nil, fmt.Errorf("mpi: send to rank %d: %w", dest, err)
	}
	r.pvo, r.buf = pvo, b
	w.mu.Lock()
	w.reqs.add(r)
	w.mu.Unlock()
	env := envelope{kind: kindRTS, ctx: ctx, src: c.rank, tag: tag, sreq: r.id, size: uint64(len(b)), pvo: pvo}
	var hdr [envRTSLen]byte
	w.lc.Atomically(func(tx *lapi.Tx) {
		if err = c.coll.abortedLocked(ctx, tag); err == nil {
			env.seq = w.nextSeqLocked(wd)
			err = tx.Amsend(lapi.Rank(wd), w.hRTS, env.encode(hdr[:]), nil, lapi.SendOpts{})
		}
	})
	if err != nil {
		w.mu.Lock()
		w.reqs.remove(r)
		w.mu.Unlock()
		w.lc.Deregister(pvo)
		return nil, fmt.Errorf("mpi: send to rank %d: %w", dest, err)
	}
	return r, nil
}

// irecv posts a receive on context ctx.
func (c *Comm) irecv(b []byte, elem, src, tag int, ctx uint32) (*request, error) {
	if err := c.checkSource(src, tag, ctx); err != nil {
		return nil, err
	}
	w := c.w
	// The matcher's queues are under lapi's lock (see matcher). A peer
	// failure is declared under it too: either this receive sees the
	// peer's error, or peerFailed sees the receive posted.
	var (
		r   *request
		get bool
		err error
	)
	w.lc.Atomically(func(tx *lapi.Tx) {
		if w.closed.Load() {
			err = fmt.Errorf("mpi: receive: %w", ErrFinalized)
			return
		}
		if src != AnySource {
			if err = tx.PeerErr(lapi.Rank(c.group[src])); err != nil {
				err = fmt.Errorf("mpi: receive from rank %d: %w", src, err)
				return
			}
		}
		if err = c.coll.abortedLocked(ctx, tag); err != nil {
			return
		}
		r = w.newRequestLocked()
		r.w, r.comm, r.recv, r.ctx, r.src, r.tag, r.buf, r.elem, r.peer, r.op = w, c, true, ctx, src, tag, b, elem, -1, "Recv"
		if a := w.m.post(r); a != nil {
			get = w.bindLocked(r, a)
		}
	})
	if err != nil {
		return nil, err
	}
	if get {
		w.startGet(r)
	}
	return r, nil
}

// bindLocked gives the unexpected message a to receive r (lapi's lock
// held): one whose data has all come is delivered now, and a rendezvous
// reports that its read is to be started (startGet) once out of lapi's
// lock. a's fields are w.mu's, since its OnComplete runs outside lapi's
// lock.
func (w *World) bindLocked(r *request, a *arrival) (get bool) {
	w.mu.Lock()
	a.req = r
	if a.complete {
		if a.env.kind == kindRTS && a.failed == nil {
			r.rts, get = a, true
		} else {
			w.finishRecv(a)
		}
	}
	w.mu.Unlock()
	return get
}

// finishRecv completes a matched eager receive whose data has all arrived,
// or fails it with its sender's failure, which left the data incomplete.
func (w *World) finishRecv(a *arrival) {
	r := a.req
	if a.failed != nil {
		r.finish(Status{}, fmt.Errorf("mpi: receive of a message from rank %d (tag %d) its sender did not finish: %w", a.env.src, a.env.tag, a.failed))
		w.freeArrival(a)
		return
	}
	n := min(int(a.env.size), len(r.buf))
	if !a.inPlace {
		copy(r.buf, a.data[:min(n, len(a.data))])
	}
	r.finish(w.status(r, &a.env, n))
	w.freeArrival(a)
}

// newArrival takes an arrival from the free list (w.mu held).
func (w *World) newArrival() *arrival {
	a := w.freeArr
	if a == nil {
		return new(arrival)
	}
	w.freeArr = a.next
	own := a.own
	*a = arrival{}
	a.own = own
	return a
}

// freeArrival returns a finished arrival (w.mu held). It is not cleared
// here: the matcher may still read its sender after placing it.
func (w *World) freeArrival(a *arrival) {
	a.req, a.data = nil, nil
	a.next = w.freeArr
	w.freeArr = a
}

func (w *World) status(r *request, env *envelope, n int) (Status, error) {
	// Element sizes are powers of two: a shift, where n/elem would be a
	// 64-bit divide on every receive's way to its caller. Bytes that are
	// not a whole number of elements have no count (MPI_UNDEFINED).
	shift := bits.TrailingZeros(uint(max(r.elem, 1)))
	count := n >> shift
	if n&(1<<shift-1) != 0 {
		count = -1
	}
	st := Status{Source: env.src, Tag: env.tag, Count: count}
	if int(env.size) > len(r.buf) {
		return st, fmt.Errorf("mpi: message of %d bytes from rank %d (tag %d) into a buffer of %d: %w",
			env.size, env.src, env.tag, len(r.buf), ErrTruncate)
	}
	return st, nil
}

// startGet reads a matched rendezvous message from the sender's buffer.
func (w *World) startGet(r *request) {
	a := r.rts
	n := min(int(a.env.size), len(r.buf))
	if w.splits(n, int(a.from)) {
		w.startSplit(r, n)
		return
	}
	if err := w.lc.Get(a.from, a.env.pvo, r.buf[:n], lapi.SendOpts{Notify: r}); err != nil {
		w.failGet(r, err)
	}
}

// failGet fails a rendezvous receive before anything was asked of the
// sender (w.mu not held).
func (w *World) failGet(r *request, err error) {
	w.mu.Lock()
	r.finish(Status{}, fmt.Errorf("mpi: rendezvous receive from rank %d: %w", r.rts.env.src, err))
	w.mu.Unlock()
}

// getDone runs (w.mu held) when a rendezvous Get finished: the receive
// completes and the sender is told it may release its buffer.
func (w *World) getDone(r *request, err error) {
	if r.sp != nil && r.sp.parts > 0 {
		if !w.partDone(r, err) {
			return
		}
		err = r.sp.err
	}
	a := r.rts
	r.rts = nil
	if err != nil {
		r.finish(Status{}, fmt.Errorf("mpi: rendezvous receive from rank %d: %w", a.env.src, err))
	} else {
		r.finish(w.status(r, &a.env, min(int(a.env.size), len(r.buf))))
	}
	var u [4]byte
	binary.LittleEndian.PutUint32(u[:], a.env.sreq)
	from := a.from
	w.freeArrival(a)
	w.mu.Unlock() // never hold w.mu across a call into lapi
	w.lc.Amsend(from, w.hFin, u[:], nil, lapi.SendOpts{})
	w.mu.Lock()
}

// eagerHandler takes the first packet of an eager or rendezvous message.
type eagerHandler struct{ w *World }

func (h eagerHandler) OnHeader(src lapi.Rank, uhdr []byte, n int) ([]byte, any) {
	w := h.w
	var env envelope
	if env.decode(uhdr, n) != nil || int(src) >= w.size {
		return nil, nil
	}
	w.mu.Lock()
	a := w.newArrival()
	a.env, a.from = env, src
	w.m.arrive(a, w.place)
	if a.data == nil && a.env.kind == kindEager && !a.inPlace {
		a.data = a.temp(n) // held back, or unexpected: a temporary
	}
	w.mu.Unlock()
	return a.data, a
}

// OnWhole takes an eager message that arrived in one packet, in lapi's
// progress engine: matched, it is copied straight into the receive buffer
// and the receive completes; otherwise it is kept (copied) as unexpected or
// held back. Rendezvous headers go the OnHeader/OnComplete way, which can
// start the read.
func (h eagerHandler) OnWhole(src lapi.Rank, uhdr, data []byte) bool {
	w := h.w
	var env envelope
	if env.decode(uhdr, len(data)) != nil || env.kind != kindEager || int(src) >= w.size {
		return false
	}
	// lapi's lock, held here, guards the matcher: a message matched to a
	// posted receive takes no lock of mpi's (two locked instructions
	// fewer between an 8-byte message's frame and the reply).
	if r, ok := w.m.matchNext(&env, src); ok {
		// Its turn, and nothing held back: no arrival to keep order with.
		if r != nil {
			n := min(len(data), len(r.buf))
			copy(r.buf, data[:n])
			r.finish(w.status(r, &env, n))
			return true
		}
		w.mu.Lock() // arrivals are w.mu's
		a := w.newArrival()
		a.env, a.from, a.complete = env, src, true
		a.data = a.keep(data)
		w.m.unexpected.push(a)
		if env.ctx&1 != 0 {
			w.strayCheck(a)
		}
		w.mu.Unlock()
		return true
	}
	if env.seq == w.m.expect[src] {
		// Its turn, with later messages held back behind it: they become
		// matchable now, and a rendezvous among them has its read started
		// outside lapi's lock, by an OnComplete (startDeferred), which a
		// message taken whole never gets. It goes the OnHeader way.
		return false
	}
	w.mu.Lock()
	a := w.newArrival()
	a.env, a.from, a.data, a.complete = env, src, data, true
	w.m.arrive(a, w.place)
	if a.data != nil {
		// Not finished (a finished arrival was freed, its data cleared):
		// kept as unexpected or held, it must outlive the packet.
		a.data = a.keep(data)
	}
	w.mu.Unlock()
	return true
}

// place decides where a newly matchable arrival's data goes.
func (w *World) place(a *arrival) {
	if a.complete && a.req != nil {
		// It was held back and has all arrived meanwhile: finish it now,
		// or (rendezvous) start its read once out of the progress engine.
		if a.env.kind == kindRTS {
			a.req.rts = a
			w.deferred = append(w.deferred, a.req)
		} else {
			w.finishRecv(a)
		}
		return
	}
	if a.req == nil && a.env.ctx&1 != 0 {
		w.strayCheck(a) // a collective step queued as unexpected
	}
	if a.data != nil {
		return // held with a temporary buffer, still arriving
	}
	if a.req != nil && a.env.kind == kindEager {
		a.data = a.req.buf[:min(int(a.env.size), len(a.req.buf))]
		a.inPlace = true
	}
}

func (h eagerHandler) OnComplete(_ lapi.Rank, cookie any) {
	a, ok := cookie.(*arrival)
	if !ok {
		return
	}
	w := h.w
	w.mu.Lock()
	a.complete = true
	if r := a.req; r != nil {
		if a.env.kind == kindRTS {
			r.rts = a
			w.deferred = append(w.deferred, r)
		} else {
			w.finishRecv(a)
		}
	}
	w.startDeferred()
}

// OnAbort (lapi.AbortHandler) takes a message whose sender failed before
// all its data came: a receive it matched fails with the sender's error,
// and one that matches it later will (finishRecv), never with part of the
// data as if it were whole.
func (h eagerHandler) OnAbort(_ lapi.Rank, cookie any, err error) {
	a, ok := cookie.(*arrival)
	if !ok {
		return
	}
	w := h.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if a.complete {
		return
	}
	a.complete, a.failed = true, err
	if a.req != nil {
		w.finishRecv(a)
	}
}

// startDeferred starts the rendezvous reads queued while lapi's lock was
// held. Called with w.mu held; returns with it released.
func (w *World) startDeferred() {
	for len(w.deferred) > 0 {
		r := w.deferred[0]
		w.deferred = w.deferred[1:]
		w.mu.Unlock()
		w.startGet(r)
		w.mu.Lock()
	}
	w.deferred = w.deferred[:0]
	w.mu.Unlock()
}

// finHandler takes a receiver's FIN: the rendezvous send is complete.
type finHandler struct{ w *World }

func (h finHandler) OnHeader(_ lapi.Rank, uhdr []byte, _ int) ([]byte, any) {
	if len(uhdr) != 4 {
		return nil, nil
	}
	w := h.w
	w.mu.Lock()
	r := w.reqs.get(binary.LittleEndian.Uint32(uhdr))
	if r != nil && !r.recv && (r.sp == nil || !r.sp.putting) {
		w.lc.Deregister(r.pvo)
		var err error
		if r.sp != nil {
			err = r.sp.err // its part could not be written
		}
		r.finish(Status{}, err)
	}
	w.mu.Unlock()
	return nil, nil
}

func (finHandler) OnComplete(lapi.Rank, any) {}
