package lapi

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/weft-hpc/weft/hal"
)

// triggerSet holds the operations armed on counters (PutWhen, GetWhen,
// third-party transfers' reports) and lapi's own spare counters.
type triggerSet struct {
	c          *Context
	triggers   []*trigger  // operations armed on counters
	spareCntrs []*Counter  // lapi's own counters, free for another transfer (thirdparty.go)
	trigDue    atomic.Bool // a counter with triggers was incremented
}

// Conditional RDMA (the IBM seed's triggered operations): a Put or Get
// armed on a counter of this rank starts when the counter reaches a value,
// in whichever goroutine is making progress then: a waiter, the completion
// runner, or over an unreliable device lapi's own background goroutine. A
// pipelined collective arms "when the chunk from my parent has landed
// (its target counter reached 1), forward it to my children" and never
// polls for it in the user's goroutine.
//
// A counter with triggers armed on it raises trigDue when it is
// incremented (one atomic load per increment otherwise); the next
// progress pass, or the completion runner, takes the triggers that are
// due and queues them as completions, so that the operation starts
// outside the progress lock as a caller's would.

// trigger is one armed operation.
type trigger struct {
	c    *Context
	k    *Counter
	at   int64
	fn   func(err error) // lapi's own use: run this instead of a Put or Get (thirdparty.go)
	get  bool
	tgt  hal.Rank
	pvo  hal.PVO
	buf  []byte
	opts SendOpts
}

// ErrTrigger is wrapped by the errors of arming an operation on a counter
// that cannot trigger it.
var ErrTrigger = errors.New("lapi: bad trigger")

// PutWhen arms a Put (see Put) that starts once when, a counter of this
// context, has reached at; if it has already, the Put starts now; if an
// operation counted on when fails first, the Put fails with its error. The
// counter's value is read, not consumed. The Put's own outcome is told as
// a Put's is: o.Origin, o.Completion, o.Notify (a failure to start, too:
// a peer failed meanwhile, RDMA off). src must stay untouched until the
// Put's origin counter fires. Triggers not yet fired when the context
// closes fail with ErrClosed.
func (c *Context) PutWhen(when *Counter, at int64, tgt hal.Rank, dst hal.PVO, src []byte, o SendOpts) error {
	return c.trg.arm(&trigger{k: when, at: at, tgt: tgt, pvo: dst, buf: src, opts: o})
}

// GetWhen is Get (see Get) armed on a counter as PutWhen arms a Put.
func (c *Context) GetWhen(when *Counter, at int64, tgt hal.Rank, src hal.PVO, dst []byte, o SendOpts) error {
	if err := fetchOpts("get", o); err != nil {
		return err // now, not when it fires
	}
	return c.trg.arm(&trigger{k: when, at: at, get: true, tgt: tgt, pvo: src, buf: dst, opts: o})
}

// arm checks t and arms it, or starts it at once when its counter has
// reached its value.
func (ts *triggerSet) arm(t *trigger) error {
	c := ts.c
	switch {
	case t.k == nil || t.k.c != c:
		return fmt.Errorf("lapi: arm: the trigger is not a counter of this context: %w", ErrTrigger)
	case int(t.tgt) >= c.cfg.Size:
		return fmt.Errorf("lapi: arm toward %d of %d: %w", t.tgt, c.cfg.Size, ErrBadRank)
	}
	t.c = c
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if t.k.v.Load() >= t.at {
		c.mu.Unlock()
		t.Complete(nil)
		return nil
	}
	t.k.armed.Add(1)
	ts.triggers = append(ts.triggers, t)
	// An increment between the check and the arming found armed zero:
	// look again at the next pass.
	ts.trigDue.Store(true)
	c.mu.Unlock()
	return nil
}

// fireTriggers queues the triggers whose counter has reached their value
// (c.mu held).
func (ts *triggerSet) fireTriggers() {
	c := ts.c
	ts.trigDue.Store(false)
	keep := ts.triggers[:0]
	for _, t := range ts.triggers {
		if t.k.v.Load() < t.at && t.k.err == nil {
			keep = append(keep, t)
			continue
		}
		t.k.armed.Add(-1)
		c.am.done = append(c.am.done, completion{notify: t})
	}
	clear(ts.triggers[len(keep):])
	ts.triggers = keep
}

// dropTriggers fails every armed trigger with err (c.mu held, closing).
func (ts *triggerSet) dropTriggers(err error) {
	c := ts.c
	for _, t := range ts.triggers {
		t.k.armed.Add(-1)
		if t.fn != nil {
			t.k.fail(err)
			c.am.done = append(c.am.done, completion{notify: t})
			continue
		}
		t.fail(err)
	}
	clear(ts.triggers)
	ts.triggers = ts.triggers[:0]
}

// Complete starts the armed operation: the completion runner calls it,
// outside the progress lock, once the trigger fired. A trigger whose
// counter failed (an operation counted on it failed) does not start it:
// the operation fails with that error.
func (t *trigger) Complete(err error) {
	if t.fn != nil {
		t.c.mu.Lock()
		kerr := t.k.err
		t.c.mu.Unlock()
		t.fn(kerr)
		return
	}
	if err == nil {
		t.c.mu.Lock()
		err = t.k.err
		t.c.mu.Unlock()
	}
	if err == nil {
		if t.get {
			err = t.c.Get(t.tgt, t.pvo, t.buf, t.opts)
		} else {
			err = t.c.Put(t.tgt, t.pvo, t.buf, t.opts)
		}
	}
	if err != nil {
		t.c.mu.Lock()
		t.fail(err)
		t.c.pr.wakeLocked()
		t.c.mu.Unlock()
	}
}

// fail tells the operation's counters and completer that it never started
// (c.mu held).
func (t *trigger) fail(err error) {
	op := "put"
	if t.get {
		op = "get"
	}
	err = fmt.Errorf("lapi: triggered %s toward rank %d: %w", op, t.tgt, err)
	t.opts.Origin.fail(err)
	t.opts.Completion.fail(err)
	if t.opts.Notify != nil {
		t.c.am.note(t.opts.Notify, err)
	}
}

// armFnLocked has fn run (in the completion runner) once k, a counter
// of c, reaches at, or fails (c.mu held): the triggers of lapi's own
// collectives.
func (ts *triggerSet) armFnLocked(k *Counter, at int64, fn func(error)) {
	c := ts.c
	k.armed.Add(1)
	ts.triggers = append(ts.triggers, &trigger{c: c, k: k, at: at, fn: fn})
	ts.trigDue.Store(true) // it may have been reached already
}
