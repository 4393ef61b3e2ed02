package lapi

import "github.com/weft-hpc/weft/hal"

// Tx is the dispatcher's side of a context, lent to code that runs
// atomically with it: Atomically's fn, a WaitTx condition, and
// OnPeerFailed's callbacks. Such code runs as lapi's handlers do, between
// one message's dispatch and the next, so state that it shares with an
// upper layer's handlers needs no lock of its own (mpi's matcher and
// sequence numbers are kept this way). A *Tx is valid only until the call
// that lent it returns; it must not be kept, nor used from another
// goroutine.
type Tx struct {
	c *Context
}

// Atomically runs fn atomically with the dispatcher: no handler, Wait
// condition or progress pass runs while fn does, on any goroutine. fn must
// be quick and must not call the context's own methods (only tx's, and
// PeerErr); completions that what fn did queued (a message to self, a send
// that finished at once) run after fn returns, outside the dispatcher.
func (c *Context) Atomically(fn func(tx *Tx)) {
	c.mu.Lock()
	fn(&c.tx)
	c.unlockRun()
}

// unlockRun releases the progress lock, then runs the completions that
// what was done under it queued.
func (c *Context) unlockRun() {
	pending := len(c.am.done) > 0
	c.mu.Unlock()
	if pending {
		c.am.runCompletions()
	}
}

// Amsend is Context.Amsend from inside the dispatcher: the caller may then
// number its messages in the order they leave, with no atomic counter of
// its own. Completions it queues run when the dispatcher is left.
func (tx *Tx) Amsend(tgt hal.Rank, h HandlerID, uhdr, data []byte, o SendOpts) error {
	return tx.c.am.amsendTx(tgt, h, uhdr, data, o)
}

// Backlog is how many packets wait toward peer for room in the device or
// the window: a sender that does not wait for its peer (an eager message
// is complete once lapi has it) can use it to hold back rather than queue
// without bound.
func (tx *Tx) Backlog(peer hal.Rank) int {
	c := tx.c
	if int(peer) >= len(c.rel.queues) {
		return 0
	}
	return c.rel.queues[peer].n
}

// PeerErr is Context.PeerErr; inside the dispatcher it sees every failure
// declared so far, as handlers do.
func (tx *Tx) PeerErr(peer hal.Rank) error { return tx.c.PeerErr(peer) }

// Snapshot is Context.Snapshot from inside the dispatcher.
func (tx *Tx) Snapshot() Snapshot { return tx.c.snapshotTx() }

// fault is a declared failure, as PeerErr reads it without the lock.
type fault struct{ err error }
