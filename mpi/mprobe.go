package mpi

import (
	"context"
	"fmt"

	"github.com/weft-hpc/weft/lapi"
)

// Message is a message that Mprobe or Improbe took out of matching
// (MPI_Message): no receive can match it any more, and Mrecv or Imrecv
// receives it, once. In a program whose goroutines probe the same source,
// this is what keeps another goroutine's receive from taking the message
// between a Probe and the Recv it sized.
type Message struct {
	c  *Comm
	a  *arrival
	st Status
}

// Mprobe blocks until a message from source (or AnySource) with tag (or
// AnyTag) has arrived, takes it out of matching and returns it with its
// description (Count in bytes, as Probe's).
func (c *Comm) Mprobe(source, tag int) (*Message, Status, error) {
	if c == nil {
		return nil, Status{}, errNilComm("Mprobe")
	}
	if err := c.checkSource(source, tag, c.ctx); err != nil {
		return nil, Status{}, err
	}
	w := c.w
	if err := w.finalized("mprobe"); err != nil {
		return nil, Status{}, err
	}
	var m *Message
	probe := &request{w: w, comm: c, recv: true, ctx: c.ctx, src: source, tag: tag, op: "Mprobe"}
	ctx, cancel := w.deadline(context.Background())
	defer cancel()
	w.waiting.Store(probe.note())
	err := w.lc.Wait(ctx, func() (bool, error) {
		var err error
		m, err = c.takeLocked(source, tag)
		return m != nil, err
	})
	w.waiting.Store(nil)
	if err != nil {
		return nil, Status{}, w.waitErr(ctx, probe, err)
	}
	return m, m.st, nil
}

// Improbe is Mprobe that does not block: it makes progress once and
// takes the message if one has arrived.
func (c *Comm) Improbe(source, tag int) (found bool, m *Message, st Status, err error) {
	if c == nil {
		return false, nil, Status{}, errNilComm("Improbe")
	}
	if err := c.checkSource(source, tag, c.ctx); err != nil {
		return false, nil, Status{}, err
	}
	w := c.w
	if err := w.finalized("improbe"); err != nil {
		return false, nil, Status{}, err
	}
	w.lc.Progress()
	w.lc.Atomically(func(*lapi.Tx) { m, err = c.takeLocked(source, tag) })
	if m == nil {
		return false, nil, Status{}, err
	}
	return true, m, m.st, nil
}

// takeLocked takes the first unexpected message from source with tag out
// of the matcher (lapi's lock held), or reports a failed named source
// with none waiting.
func (c *Comm) takeLocked(source, tag int) (*Message, error) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if a := w.m.unexpected.take(func(a *arrival) bool { return a.env.matches(c.ctx, source, tag) }); a != nil {
		return &Message{c: c, a: a, st: Status{Source: a.env.src, Tag: a.env.tag, Count: int(a.env.size)}}, nil
	}
	if source != AnySource {
		return nil, w.lc.PeerErr(lapi.Rank(c.group[source]))
	}
	return nil, nil
}

// Mrecv receives message m into buf (MPI_Mrecv): a buffer shorter than the
// message fails with ErrTruncate, as Recv's does.
func Mrecv[T Elem](m *Message, buf []T) (Status, error) {
	r, err := m.recv(asBytes(buf), sizeOf[T]())
	if err != nil {
		return Status{}, err
	}
	return r.waitRecycle()
}

// Imrecv starts receiving message m into buf (MPI_Imrecv).
func Imrecv[T Elem](m *Message, buf []T) (*Request, error) {
	r, err := m.recv(asBytes(buf), sizeOf[T]())
	if err != nil {
		return nil, err
	}
	return &Request{op: r}, nil
}

// recv binds a receive of b to m's arrival, as a receive posted after the
// message came binds to it (irecv).
func (m *Message) recv(b []byte, elem int) (*request, error) {
	if m == nil || m.a == nil {
		return nil, fmt.Errorf("mpi: receive of a Message already received, or nil: %w", ErrArg)
	}
	c, a := m.c, m.a
	m.a = nil
	w := c.w
	var (
		r   *request
		get bool
	)
	w.lc.Atomically(func(*lapi.Tx) {
		if w.closed.Load() {
			return
		}
		r = w.newRequestLocked()
		r.w, r.comm, r.recv, r.ctx, r.src, r.tag, r.buf, r.elem, r.peer, r.op = w, c, true, a.env.ctx, a.env.src, a.env.tag, b, elem, -1, "Mrecv"
		get = w.bindLocked(r, a)
	})
	if r == nil {
		return nil, fmt.Errorf("mpi: receive: %w", ErrFinalized)
	}
	if get {
		w.startGet(r)
	}
	return r, nil
}
