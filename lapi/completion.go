package lapi

import (
	"context"
	"sync/atomic"

	"github.com/weft-hpc/weft/hal"
)

// originDone reports that the origin buffer may be reused.
func (ad *dispatcher) originDone(o *SendOpts) {
	c := ad.c
	if o.Origin != nil {
		o.Origin.incr()
		c.pr.progressed() // another goroutine may wait on the counter
	}
	ad.note(o.Notify, nil)
}

// doneHere reports an operation this rank finished itself, at once (on
// its own memory, or by cross-memory attach): origin and completion
// counters and the completer, failed with err if it is not nil.
func (ad *dispatcher) doneHere(o *SendOpts, err error) {
	c := ad.c
	if err != nil {
		o.Origin.fail(err)
		o.Completion.fail(err)
	}
	if o.Origin != nil {
		o.Origin.incr()
	}
	if o.Completion != nil {
		o.Completion.incr()
	}
	ad.note(o.Notify, err)
	// Done on the caller's goroutine, with no frame to wake the others:
	// one of them may wait on these counters (or the target's, when the
	// target is this rank).
	c.pr.progressed()
}

// note queues a Completer call to run outside the progress lock.
func (ad *dispatcher) note(n Completer, err error) {
	if n != nil {
		ad.done = append(ad.done, completion{notify: n, err: err})
	}
}

// await records that peer owes k a completion, so that k fails if peer
// fails or restarts before sending it.
func (ad *dispatcher) await(peer hal.Rank, k *Counter) {
	c := ad.c
	if peer == c.rank {
		return
	}
	if ad.awaiting == nil {
		ad.awaiting = make([]map[*Counter]int, c.cfg.Size)
	}
	if ad.awaiting[peer] == nil {
		ad.awaiting[peer] = make(map[*Counter]int)
	}
	ad.awaiting[peer][k]++
}

// awaited records a completion peer sent for k.
func (ad *dispatcher) awaited(peer hal.Rank, k *Counter) {
	if ad.awaiting == nil || ad.awaiting[peer] == nil {
		return
	}
	if n := ad.awaiting[peer][k] - 1; n > 0 {
		ad.awaiting[peer][k] = n
	} else {
		delete(ad.awaiting[peer], k)
	}
}

func (ad *dispatcher) complete(h AMHandler, src hal.Rank, cookie any, tcntr, ccntr uint32) {
	c := ad.c
	c.stats.MessagesIn++
	c.peerStats[src].MessagesIn++
	ad.done = append(ad.done, completion{h: h, src: src, cookie: cookie, tcntr: tcntr, ccntr: ccntr})
}

// runCompletions runs queued completion handlers and Completer calls
// outside the progress lock, so that they may call back into the context
// (send a reply, start a get), then bumps target counters and tells origins
// that asked.
func (ad *dispatcher) runCompletions() bool {
	c := ad.c
	// The queue is swapped out whole rather than copied: completions hold
	// pointers, and copying them costs write barriers and clearing. A
	// handler may call back in here; the nested call finds c.spare taken
	// and its batch is left to the garbage collector.
	ran := false
	var batch []completion
	for {
		c.mu.Lock()
		if c.trg.trigDue.Load() {
			c.trg.fireTriggers() // a completion of the last batch reached one
		}
		if batch != nil && ad.spare == nil {
			ad.spare = batch[:0]
		}
		batch = ad.done
		if len(batch) == 0 {
			if ran {
				c.pr.wakeLocked()
			}
			c.mu.Unlock()
			return ran
		}
		ad.done, ad.spare = ad.spare, nil
		c.mu.Unlock()
		ran = true
		for i := range batch {
			x := &batch[i]
			if x.notify != nil {
				x.notify.Complete(x.err)
				*x = completion{}
				continue
			}
			x.h.OnComplete(x.src, x.cookie)
			if x.tcntr != 0 || x.ccntr != 0 {
				c.mu.Lock()
				if k := ad.counter(x.tcntr); k != nil {
					k.incr()
				}
				if x.ccntr != 0 {
					ad.notifyLocked(x.src, x.ccntr)
				}
				c.mu.Unlock()
			}
			*x = completion{}
		}
	}
}

// newCounterLocked is NewCounter with c.mu held.
func (ad *dispatcher) newCounterLocked() *Counter {
	c := ad.c
	k := &Counter{c: c, id: uint32(len(ad.counters))}
	ad.counters = append(ad.counters, k)
	return k
}

// counter resolves a counter ID carried in a packet; unknown IDs are ignored
// (a peer cannot name memory we did not hand out).
func (ad *dispatcher) counter(id uint32) *Counter {
	if id == 0 || int(id) >= len(ad.counters) {
		return nil
	}
	return ad.counters[id]
}

// Counter is a LAPI counter: operations increment it, Wait consumes it.
type Counter struct {
	c     *Context
	id    uint32
	v     atomic.Int64
	armed atomic.Int32 // operations armed on it (trigger.go)
	err   error        // guarded by c.mu: set when an operation on it failed
}

// NewCounter makes a counter of this context. Its ID may be handed to peers
// (SendOpts.Target) to be incremented remotely.
func (c *Context) NewCounter() *Counter {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.am.newCounterLocked()
}

// ID names the counter for peers.
func (k *Counter) ID() uint32 { return k.id }

// Value is the counter's current value.
func (k *Counter) Value() int64 { return k.v.Load() }

// Wait makes progress until the counter reaches val, then subtracts val
// (LAPI_Waitcntr). It fails if an operation counted on it failed, or ctx ends.
func (k *Counter) Wait(ctx context.Context, val int64) error {
	err := k.c.Wait(ctx, func() (bool, error) {
		if k.err != nil {
			return false, k.err
		}
		return k.v.Load() >= val, nil
	})
	if err != nil {
		return err
	}
	k.v.Add(-val)
	return nil
}

func (k *Counter) incr() {
	k.v.Add(1)
	if k.armed.Load() != 0 {
		k.c.trg.trigDue.Store(true) // the next pass fires what is due (trigger.go)
	}
}

func (k *Counter) fail(err error) {
	if k != nil && k.err == nil {
		k.err = err
		if k.armed.Load() != 0 {
			k.c.trg.trigDue.Store(true) // what is armed on it fails (trigger.go)
		}
	}
}
