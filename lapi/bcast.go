package lapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/weft-hpc/weft/hal"
)

// Broadcast RDMA (the IBM seed's): one source region placed into a region
// of the same length at every member of a group. No weft device has
// hardware broadcast (hal.Caps.Broadcast), so lapi builds it as a tree of
// its own RDMA Puts, with their redrive: the data is cut into chunks, each
// receiver registers its buffer and tells its parent where the chunks go
// and which of its counters each one bumps (a ready message), and the
// parent arms one conditional Put per chunk and child on the counter of
// that chunk's own arrival (PutWhen), so a chunk is forwarded as soon as
// it has landed, by whichever goroutine makes progress: no call of the
// user's is in the path, and the chunks stream down the tree pipelined.
// When a receiver's whole subtree has the data it tells its parent (a
// have message), so the root learns when every member has it; a
// receiver whose part fails before then tells its parent instead (a lost
// message), and a parent watches each child for failure until its have
// came, so the root's All fails rather than waits. A receiver of 0 bytes
// says so too (its ready), and its parent answers with an offer of
// nothing when its length agrees.
//
// With BcastOpts.Pull the receivers read instead: a parent tells each
// child where its buffer is (an offer message) and when each chunk is
// there (a counter of the child's, bumped by a notification), and the
// child reads the chunk with a Get armed on that counter (as GetWhen arms
// one, but ended with the child's part: see AbortBroadcast); the
// parent's buffer is released once every child has said it has it all (a
// got message). Where a transfer is one copy by the rank that starts it
// (cross-memory attach, a shared address space), this spreads the copies
// over the receivers instead of leaving them all to the parents.
//
// A receiver's region is registered for the broadcast alone and released
// once every chunk has landed; a chunk's later drives are answered as
// completed transfers by hal's engine (never placed again) and an earlier
// drive's packets are stale by their tid, so nothing is written into the
// buffer after it was reported complete.

// BcastTree is the shape of a broadcast's tree.
type BcastTree uint8

// Broadcast trees.
const (
	// BcastChain: each member forwards to the next, pipelined by chunk.
	// Every member receives and sends the data once, which is what a
	// network (or a processor) shared by all the members wants.
	BcastChain BcastTree = iota
	// BcastBinomial: a binomial tree, pipelined by chunk: log2(n) hops
	// from the root to any member, but the root and the upper members
	// send the data several times.
	BcastBinomial
)

// DefaultBcastChunk is the broadcast chunk when BcastOpts.Chunk is 0.
const DefaultBcastChunk = 256 << 10

// BcastOpts are a broadcast's shape and counters. All counters are
// optional and of the calling context.
type BcastOpts struct {
	// Tree is the tree's shape (default BcastChain).
	Tree BcastTree
	// Chunk is the pipelining unit, bytes (default DefaultBcastChunk, at
	// most 1 MiB: one RDMA context each). Every member must use the same.
	Chunk int
	// Window is how many chunks may be in flight to a child at once
	// (default 2; negative: no bound). Chunks queued far ahead of a
	// child wait behind each other, and the first ones, which the
	// child forwards, land later.
	Window int
	// Landed, at a receiver, is incremented when its buffer holds the
	// root's data.
	Landed *Counter
	// Done is incremented when this member no longer needs its buffer:
	// a receiver's has landed, and everything this member sends to its
	// children has landed there. Then buf may be reused.
	Done *Counter
	// All, at the root, is incremented when every member has the data.
	All *Counter
	// Pull has each receiver read its chunks from its parent (Get)
	// instead of the parent writing them (Put). Every member must use
	// the same.
	Pull bool
	// Notify, if set, is told when Done would fire, or that the
	// broadcast failed. It runs in the completion runner and must not
	// block or call into the context.
	Notify Completer
}

// ErrBcast is wrapped by errors of a broadcast that is not well formed.
var ErrBcast = errors.New("lapi: bad broadcast")

// BcastLengthError is the failure of a broadcast whose members disagree
// about its length: a child's ready message names another length than
// its parent's, and both fail with it.
type BcastLengthError struct {
	Peer       hal.Rank // the member that disagrees with this one
	Len, Other int      // this member's length, and the peer's
}

func (e *BcastLengthError) Error() string {
	return fmt.Sprintf("lapi: broadcast of %d bytes here, of %d at rank %d", e.Len, e.Other, e.Peer)
}

// Unwrap makes errors.Is(err, ErrBcast) true.
func (e *BcastLengthError) Unwrap() error { return ErrBcast }

// Broadcast places the bytes of buf at group[root] into buf at every
// other member of group (ranks of this context's job, this rank among
// them). Every member calls it, with the same group, root, id, length of
// buf and options' Tree and Chunk; id names the broadcast among those in
// flight between these ranks (a member may call before its parent or its
// children have). It does not block: the counters of o tell when it is
// done, or fail with the reason (a member failed, a protection check). buf
// must not be touched until o.Done fires.
//
// After a member's part failed or was aborted, the messages its peers
// still send for id are dropped there until it calls with id again (for
// the last 1024 such ids): an id is best not reused after a failed
// broadcast, as a message of the new one that comes before this member
// has called is taken for a late one, and a late one that comes after for
// the new one's.
func (c *Context) Broadcast(group []hal.Rank, root int, id uint64, buf []byte, o BcastOpts) error {
	me, err := c.coll.groupIndex("broadcast", group, root)
	if err != nil {
		return err
	}
	if err := checkBcastOpts(&o, len(buf)); err != nil {
		return err
	}
	if err := c.coll.ownCounters("broadcast", o.Landed, o.Done, o.All); err != nil {
		return err
	}
	st, err := c.coll.newBcast(group, root, me, id, buf, o)
	if err != nil {
		return err
	}
	t := c.coll.bcastTable()
	c.mu.Lock()
	if err := c.coll.enterBcast(t, st); err != nil {
		c.mu.Unlock()
		if st.registered {
			c.tpt.Deregister(st.pvo)
		}
		return err
	}
	ids, local := st.armLocked(), st.pvo
	early := t.early[id]
	delete(t.early, id)
	var starts []func()
	for _, m := range early {
		starts = append(starts, st.applyLocked(m)...)
	}
	st.progressLocked()
	c.mu.Unlock()
	if st.vr != 0 {
		st.sendReady(ids, local)
	}
	for _, f := range starts {
		f()
	}
	c.am.runCompletions()
	return nil
}

// checkBcastOpts gives o's zero fields their defaults and checks it for a
// broadcast of n bytes.
func checkBcastOpts(o *BcastOpts, n int) error {
	if o.Chunk == 0 {
		o.Chunk = DefaultBcastChunk
	}
	if o.Window == 0 {
		o.Window = 2
	}
	switch {
	case o.Chunk < 0 || o.Chunk > rdmaChunk:
		return fmt.Errorf("lapi: broadcast: chunk of %d bytes (at most %d): %w", o.Chunk, rdmaChunk, ErrBcast)
	case o.Chunk > 0 && n/o.Chunk >= maxBcastChunks:
		return fmt.Errorf("lapi: broadcast: %d bytes in chunks of %d: %w", n, o.Chunk, ErrBcast)
	case o.Tree > BcastBinomial:
		return fmt.Errorf("lapi: broadcast: tree %d: %w", o.Tree, ErrBcast)
	}
	return nil
}

// newBcast makes the state of broadcast id at member me: its place in the
// tree, and buf registered if a peer reaches it by RDMA.
func (co *collectives) newBcast(group []hal.Rank, root, me int, id uint64, buf []byte, o BcastOpts) (*bcastState, error) {
	c := co.c
	p := len(group)
	vr := (me - root + p) % p
	st := &bcastState{c: c, id: id, group: group, root: root, vr: vr, buf: buf, chunk: o.Chunk, o: o,
		n: (len(buf) + o.Chunk - 1) / o.Chunk}
	for _, v := range bcastChildren(o.Tree, vr, p) {
		st.kids = append(st.kids, bcastKid{rank: group[(v+root)%p]})
	}
	if vr != 0 {
		st.parent = group[(bcastParent(o.Tree, vr)+root)%p]
	}
	if o.Pull && len(st.kids) > 0 && st.n > 0 || !o.Pull && vr != 0 && st.n > 0 {
		acc := hal.AccessWrite // a parent writes it
		if o.Pull {
			acc = hal.AccessRead // the children read it
		}
		local, err := c.tpt.Register(buf, acc)
		if err != nil {
			return nil, fmt.Errorf("lapi: broadcast: %w", err)
		}
		st.pvo, st.registered = local, true
	}
	return st, nil
}

// enterBcast enters st in t's broadcasts in flight (c.mu held), unless
// the context is closed or another with its id is in flight.
func (co *collectives) enterBcast(t *bcastTable, st *bcastState) error {
	if co.c.closed {
		return ErrClosed
	}
	if t.live[st.id] != nil {
		return fmt.Errorf("lapi: broadcast %#x is already in flight: %w", st.id, ErrBcast)
	}
	t.live[st.id] = st
	t.ended.remove(st.id) // its messages are this call's now
	return nil
}

// armLocked arms the counters of st's transfers (c.mu held): each child's
// count of what was sent to it, and each chunk's arrival from the parent.
// It returns the chunks' counter IDs, for the parent, or nil at the root.
func (st *bcastState) armLocked() (ids []byte) {
	c, o := st.c, st.o
	for i := range st.kids {
		k := &st.kids[i]
		// A child that fails before its subtree has the data fails
		// the broadcast, before or after this member's Done.
		k.have = c.trg.spareCounter()
		c.am.await(k.rank, k.have)
		c.trg.armFnLocked(k.have, 1, st.kidHave)
		if st.n == 0 {
			continue
		}
		k.sent = c.trg.spareCounter()
		at := int64(st.n) // every Put's completion
		if o.Pull {
			at = 1 // the child's got message
		}
		c.trg.armFnLocked(k.sent, at, st.kidSent)
	}
	if len(st.kids) == 0 || st.n == 0 {
		st.sentAll = true
	}
	if st.vr == 0 {
		st.landedAll = true
		return nil
	}
	if st.n == 0 {
		// Nothing to receive: it has landed once the parent took its
		// length (an offer), unless the parent fails first.
		st.accepted = c.trg.spareCounter()
		c.am.await(st.parent, st.accepted)
		c.trg.armFnLocked(st.accepted, 1, st.acceptedFn)
		return nil
	}
	st.cntrs = make([]*Counter, st.n)
	ids = make([]byte, 4*st.n)
	if o.Pull {
		st.avail, st.has = make([]*Counter, st.n), make([]bool, st.n)
	}
	for i := range st.cntrs {
		k := c.trg.spareCounter()
		st.cntrs[i] = k
		id := k.id // the parent's Put bumps it
		if o.Pull {
			st.avail[i] = c.trg.spareCounter()
			id = st.avail[i].id // the parent's notification bumps it
		}
		binary.LittleEndian.PutUint32(ids[4*i:], id)
		c.am.await(st.parent, k) // a parent that fails fails the chunk
		c.trg.armFnLocked(k, 1, st.chunkLanded(i))
	}
	return ids
}

// sendReady tells st's parent that this member is ready for its chunks,
// with ids the counters they bump and local its registered buffer; a
// failure to send fails the broadcast.
func (st *bcastState) sendReady(ids []byte, local hal.PVO) {
	c := st.c
	var u [bcastMsgLen]byte
	m := bcastMsg{kind: bcastReady, id: st.id, pvo: local, chunks: uint32(st.n), total: uint64(len(st.buf))}
	if st.o.Pull {
		m.pvo = hal.PVO{} // it reads: nothing is written into it
	}
	encodeBcastMsg(u[:], m)
	if err := c.Amsend(st.parent, hBcast, u[:], ids, SendOpts{}); err != nil {
		c.mu.Lock()
		st.failLocked(fmt.Errorf("lapi: broadcast: ready to rank %d: %w", st.parent, err))
		st.progressLocked()
		c.mu.Unlock()
	}
}

// ErrBcastAborted is wrapped by the errors of a broadcast that
// AbortBroadcast ended.
var ErrBcastAborted = errors.New("lapi: broadcast aborted")

// ErrBcastLost is wrapped by the error of a broadcast member whose child
// reported that its part failed or was aborted before every member of
// its subtree had the data.
var ErrBcastLost = errors.New("lapi: a broadcast member below failed or gave up")

// AbortBroadcast ends this member's part of broadcast id (a caller that
// gave up on it: the layer above aborted the call): its buffer is
// released, so nothing more is written into it (a parent's later chunks
// fail there with a protection fault, which ends the parent's part; a
// pulling receiver's reads in flight are ended and their answers
// dropped), and its counters fail with cause, wrapping ErrBcastAborted.
// A broadcast not in flight here is left alone.
func (c *Context) AbortBroadcast(id uint64, cause error) {
	t := c.coll.bcastTable()
	c.mu.Lock()
	delete(t.early, id)
	t.ended.add(id) // what its peers still send is dropped
	if st := t.live[id]; st != nil {
		st.failLocked(fmt.Errorf("%w: %w", ErrBcastAborted, cause))
		st.progressLocked()
		// A read another goroutine is starting ends once started (its
		// starter sees the failure); it must not land after this
		// returns.
		for st.starting > 0 {
			c.coll.startedCond().Wait()
		}
	}
	c.mu.Unlock()
	c.am.runCompletions()
}

// bcastParent and bcastChildren are a tree's edges in ranks relative to
// the root (0).
func bcastParent(t BcastTree, vr int) int {
	if t == BcastChain {
		return vr - 1
	}
	return vr & (vr - 1)
}

func bcastChildren(t BcastTree, vr, p int) []int {
	if t == BcastChain {
		if vr+1 < p {
			return []int{vr + 1}
		}
		return nil
	}
	// Binomial: vr+m for every power of two m below vr's lowest set bit
	// (every m for the root), the largest subtree first so that the
	// deepest path starts first.
	low := p
	if vr != 0 {
		low = vr & -vr
	}
	var kids []int
	m := 1
	for m*2 < low {
		m *= 2
	}
	for ; m > 0; m /= 2 {
		if m < low && vr+m < p {
			kids = append(kids, vr+m)
		}
	}
	return kids
}

// bcastState is one member's part of one broadcast (guarded by c.mu).
type bcastState struct {
	c          *Context
	id         uint64
	group      []hal.Rank
	root, vr   int
	parent     hal.Rank
	buf        []byte
	chunk, n   int
	o          BcastOpts
	pvo        hal.PVO    // a receiver's buffer, registered
	registered bool       // until every chunk has landed
	cntrs      []*Counter // a receiver's: chunk i's arrival
	accepted   *Counter   // a receiver of nothing's: its parent took its length
	avail      []*Counter // a pulling receiver's: chunk i is at the parent
	has        []bool     // a pulling receiver's: chunk i has landed
	ppvo       hal.PVO    // a pulling receiver's: the parent's buffer
	gotSent    bool       // a pulling receiver told its parent it has it all
	starting   int        // a pulling receiver's reads being started, outside c.mu
	landed     int
	kids       []bcastKid
	ready      int // children that sent where their chunks go
	haves      int // children whose subtree has the data
	kidsSent   int // children every Put to which has landed
	landedAll  bool
	landedTold bool // Landed was told
	sentAll    bool
	doneSent   bool // Done was told
	haveSent   bool // the parent was told (or All, at the root)
	over       bool // forgotten by the table
	err        error
}

type bcastKid struct {
	rank  hal.Rank
	sent  *Counter // the Completion of every Put to the child
	have  *Counter // bumped by its have message; fails if it fails first
	pvo   hal.PVO
	cntrs []uint32
	ready bool
	has   bool
}

// chunkLanded is the trigger of chunk i's arrival at a receiver.
func (st *bcastState) chunkLanded(i int) func(error) {
	return func(err error) {
		c := st.c
		c.mu.Lock()
		c.am.awaited(st.parent, st.cntrs[i])
		if err != nil {
			st.failLocked(err)
		}
		st.landed++
		if st.o.Pull && err == nil {
			st.has[i] = true
			for _, k := range st.kids {
				if k.ready {
					c.am.notifyLocked(k.rank, k.cntrs[i]) // the child may read it
				}
			}
		}
		if st.landed == st.n {
			st.landedAll = true
			if st.registered && !st.o.Pull {
				st.registered = false
				c.tpt.Deregister(st.pvo)
			}
		}
		st.progressUnlock()
	}
}

// progressUnlock tells the counters what is done, releases c.mu (held)
// and runs the completions that queued.
func (st *bcastState) progressUnlock() {
	st.progressLocked()
	st.c.mu.Unlock()
	st.c.am.runCompletions()
}

// kidSent is the trigger of every Put to a child having landed.
func (st *bcastState) kidSent(err error) {
	c := st.c
	c.mu.Lock()
	if err != nil {
		st.failLocked(err)
	}
	st.kidsSent++
	st.sentAll = st.kidsSent == len(st.kids)
	st.progressUnlock()
}

// acceptedFn is the trigger of a receiver of nothing being accepted by
// its parent, or of the parent's failure before.
func (st *bcastState) acceptedFn(err error) {
	st.c.mu.Lock()
	if err != nil {
		st.failLocked(err)
	}
	st.progressUnlock()
}

// kidHave is the trigger of a child's have message, or of its failure
// before it.
func (st *bcastState) kidHave(err error) {
	st.c.mu.Lock()
	if err != nil {
		st.failLocked(err)
	} else {
		st.haves++
	}
	st.progressUnlock()
}

func (st *bcastState) failLocked(err error) {
	if st.err == nil {
		st.err = fmt.Errorf("lapi: broadcast %#x: %w", st.id, err)
	}
}

// progressLocked moves the broadcast on after a change (c.mu held): it
// tells the counters what is done, and the parent when the subtree has
// the data.
func (st *bcastState) progressLocked() {
	c := st.c
	if st.err != nil && !st.over {
		// A failure ends this member's part: its counters not told yet
		// fail (All too after Done: a member may fail once its data
		// landed), and its parent is told that this subtree will not
		// have the data (a lost message), so that the root's All fails.
		var landed, done, all *Counter
		var n Completer
		if !st.landedTold || st.vr == 0 {
			landed = st.o.Landed
		}
		if !st.doneSent {
			done, n = st.o.Done, st.o.Notify
		}
		if !st.haveSent {
			all = st.o.All
			if st.vr != 0 {
				var u [bcastMsgLen]byte
				encodeBcastMsg(u[:], bcastMsg{kind: bcastLost, id: st.id})
				c.am.amsendLocked(st.parent, hBcast, u[:], nil, &SendOpts{}) // a failed parent needs it not
			}
		}
		st.doneSent, st.haveSent = true, true
		c.coll.failCallerLocked(st.err, n, landed, done, all)
		// The triggers still armed on its own counters (forwards,
		// reads, window) fire with the error and are dropped, rather
		// than wait for ever for chunks that will not come.
		for _, k := range st.cntrs {
			k.fail(st.err)
		}
		for _, k := range st.avail {
			k.fail(st.err)
		}
		if k := st.accepted; k != nil && k.v.Load() == 0 {
			k.fail(st.err)
			c.am.awaited(st.parent, k)
		}
		for _, k := range st.kids {
			k.sent.fail(st.err)
			k.have.fail(st.err)
			if !k.has {
				c.am.awaited(k.rank, k.have)
			}
		}
		if st.registered {
			st.registered = false
			c.tpt.Deregister(st.pvo)
		}
		st.endReadsLocked()
		st.forget()
		c.pr.wakeLocked()
		return
	}
	if st.o.Pull && st.landedAll && st.vr != 0 && st.n > 0 && !st.gotSent {
		st.gotSent = true
		var u [bcastMsgLen]byte
		encodeBcastMsg(u[:], bcastMsg{kind: bcastGot, id: st.id})
		if err := c.am.amsendLocked(st.parent, hBcast, u[:], nil, &SendOpts{}); err != nil {
			st.failLocked(fmt.Errorf("got to rank %d: %w", st.parent, err))
			st.progressLocked()
			return
		}
	}
	if st.o.Pull && st.sentAll && st.registered {
		st.registered = false // every child has read it all
		c.tpt.Deregister(st.pvo)
	}
	if st.landedAll && !st.landedTold {
		st.landedTold = true
		if st.vr != 0 && st.o.Landed != nil {
			st.o.Landed.incr()
			c.pr.wakeLocked()
		}
	}
	if st.landedAll && st.sentAll && st.ready == len(st.kids) && !st.doneSent {
		st.doneSent = true
		if st.o.Done != nil {
			st.o.Done.incr()
		}
		c.am.note(st.o.Notify, nil)
		c.pr.wakeLocked()
	}
	if st.landedAll && st.haves == len(st.kids) && !st.haveSent {
		st.haveSent = true
		if st.vr == 0 {
			if st.o.All != nil {
				st.o.All.incr()
			}
			c.pr.wakeLocked()
		} else {
			var u [bcastMsgLen]byte
			encodeBcastMsg(u[:], bcastMsg{kind: bcastHave, id: st.id})
			if err := c.am.amsendLocked(st.parent, hBcast, u[:], nil, &SendOpts{}); err != nil {
				st.failLocked(fmt.Errorf("have to rank %d: %w", st.parent, err))
				st.progressLocked()
				return
			}
		}
	}
	if st.doneSent && st.haveSent {
		st.forget()
	}
}

// forget drops the broadcast from the table and recycles its counters
// once nothing can bump them any more (c.mu held).
func (st *bcastState) forget() {
	if st.over {
		return
	}
	st.over = true
	c := st.c
	t := c.coll.bcastTable()
	if t.live[st.id] == st {
		delete(t.live, st.id)
	}
	if st.err != nil {
		t.ended.add(st.id) // its peers' late messages are dropped
		return             // a late increment could still come: left to the collector
	}
	for _, k := range st.cntrs {
		k.v.Store(0)
		c.trg.spareCntrs = append(c.trg.spareCntrs, k)
	}
	for _, k := range st.avail {
		k.v.Store(0)
		c.trg.spareCntrs = append(c.trg.spareCntrs, k)
	}
	if k := st.accepted; k != nil {
		k.v.Store(0)
		c.trg.spareCntrs = append(c.trg.spareCntrs, k)
	}
	for _, k := range st.kids {
		for _, kk := range []*Counter{k.sent, k.have} {
			if kk != nil {
				kk.v.Store(0)
				c.trg.spareCntrs = append(c.trg.spareCntrs, kk)
			}
		}
	}
}

// applyLocked acts on a child's control message (c.mu held) and returns
// what to start once the lock is released.
func (st *bcastState) applyLocked(m bcastMsg) []func() {
	switch m.kind {
	case bcastReady:
		return st.readyLocked(m)
	case bcastOffer:
		return st.offerLocked(m)
	case bcastRefuse:
		if m.from == st.parent && st.vr != 0 {
			st.failLocked(&BcastLengthError{Peer: m.from, Len: len(st.buf), Other: int(m.total)})
			return nil
		}
		st.c.stats.BadPackets++
		return nil
	case bcastGot:
		for i := range st.kids {
			if k := &st.kids[i]; k.rank == m.from && k.ready && st.o.Pull && st.n > 0 {
				k.sent.incr()
				return nil
			}
		}
		st.c.stats.BadPackets++
		return nil
	case bcastLost:
		for i := range st.kids {
			if k := &st.kids[i]; k.rank == m.from && !k.has {
				st.failLocked(fmt.Errorf("rank %d: %w", m.from, ErrBcastLost))
				return nil
			}
		}
		st.c.stats.BadPackets++
		return nil
	}
	for i := range st.kids {
		// A have from a child that never said it was ready is no
		// child's of this broadcast: its length was never checked.
		if k := &st.kids[i]; k.rank == m.from && k.ready && !k.has {
			k.has = true
			st.c.am.awaited(k.rank, k.have)
			k.have.incr()
			return nil
		}
	}
	st.c.stats.BadPackets++
	return nil
}

// readyLocked records a child's ready message and returns the Puts that
// send it the chunks (c.mu held; they start once it is released).
func (st *bcastState) readyLocked(m bcastMsg) []func() {
	c := st.c
	ki := -1
	for i := range st.kids {
		if st.kids[i].rank == m.from && !st.kids[i].ready {
			ki = i
		}
	}
	if ki >= 0 && m.total != uint64(len(st.buf)) {
		// The child expects another length: it and this member fail.
		var u [bcastMsgLen]byte
		encodeBcastMsg(u[:], bcastMsg{kind: bcastRefuse, id: st.id, total: uint64(len(st.buf))})
		c.am.amsendLocked(m.from, hBcast, u[:], nil, &SendOpts{})
		st.failLocked(&BcastLengthError{Peer: m.from, Len: len(st.buf), Other: int(m.total)})
		return nil
	}
	if ki < 0 || int(m.chunks) != st.n || len(m.cntrs) != st.n {
		c.stats.BadPackets++
		st.failLocked(fmt.Errorf("rank %d is not a child expecting %d chunks: %w", m.from, st.n, ErrBcast))
		return nil
	}
	k := &st.kids[ki]
	k.ready, k.pvo, k.cntrs = true, m.pvo, m.cntrs
	st.ready++
	if st.n == 0 {
		// Nothing to send: the offer tells the child its length is
		// this member's.
		var u [bcastMsgLen]byte
		encodeBcastMsg(u[:], bcastMsg{kind: bcastOffer, id: st.id})
		if err := c.am.amsendLocked(k.rank, hBcast, u[:], nil, &SendOpts{}); err != nil {
			st.failLocked(fmt.Errorf("offer to rank %d: %w", k.rank, err))
		}
		return nil
	}
	if st.o.Pull {
		// Tell the child where to read, then which chunks are here.
		var u [bcastMsgLen]byte
		encodeBcastMsg(u[:], bcastMsg{kind: bcastOffer, id: st.id, pvo: st.pvo})
		if err := c.am.amsendLocked(k.rank, hBcast, u[:], nil, &SendOpts{}); err != nil {
			st.failLocked(fmt.Errorf("offer to rank %d: %w", k.rank, err))
			return nil
		}
		for i := range st.n {
			if st.vr == 0 || st.has[i] {
				c.am.notifyLocked(k.rank, k.cntrs[i])
			}
		}
		return nil
	}
	var starts []func()
	w := st.o.Window
	for i := range st.n {
		off := i * st.chunk
		src := st.buf[off:min(off+st.chunk, len(st.buf))]
		dst, tgt, o := k.pvo.Add(uint64(off)), k.rank, SendOpts{Target: k.cntrs[i], Completion: k.sent}
		sent := k.sent
		start := func() {
			var err error
			if st.vr == 0 {
				err = c.Put(tgt, dst, src, o)
			} else {
				// Forwarded when it has landed here.
				err = c.PutWhen(st.cntrs[i], 1, tgt, dst, src, o)
			}
			if err != nil {
				c.mu.Lock()
				sent.fail(err)
				c.mu.Unlock()
				c.am.runCompletions()
			}
		}
		if w <= 0 || i < w {
			starts = append(starts, start)
			continue
		}
		// Chunk i goes once chunk i-w has landed at the child: at
		// most w chunks in flight to it.
		c.trg.armFnLocked(sent, int64(i-w+1), func(err error) {
			if err == nil {
				start()
			}
		})
	}
	return starts
}

// offerLocked arms a pulling receiver's reads of its parent's buffer,
// each on the counter the parent bumps when that chunk is there (c.mu
// held); to a receiver of nothing, it says its parent took its length.
func (st *bcastState) offerLocked(m bcastMsg) []func() {
	c := st.c
	if m.from == st.parent && st.vr != 0 && st.n == 0 && !st.landedAll && m.pvo == (hal.PVO{}) {
		st.landedAll = true // the parent took its length: nothing to receive
		c.am.awaited(st.parent, st.accepted)
		st.accepted.incr()
		return nil
	}
	if !st.o.Pull || m.from != st.parent || st.vr == 0 || st.n == 0 || st.ppvo != (hal.PVO{}) {
		c.stats.BadPackets++
		return nil
	}
	st.ppvo = m.pvo
	for i := range st.n {
		c.trg.armFnLocked(st.avail[i], 1, st.readChunk(i))
	}
	return nil
}

// readChunk is the trigger of chunk i's being at a pulling receiver's
// parent: it reads the chunk into the buffer, unless this member's part
// has ended. The read starts outside c.mu: an abort meanwhile waits for
// it (st.starting), and the read is ended as soon as it has started.
func (st *bcastState) readChunk(i int) func(error) {
	return func(err error) {
		c := st.c
		off := i * st.chunk
		dst, landed := st.buf[off:min(off+st.chunk, len(st.buf))], st.cntrs[i]
		c.mu.Lock()
		if err == nil && st.err != nil {
			err = st.err
		}
		if err != nil {
			landed.fail(err)
			c.mu.Unlock()
			c.am.runCompletions()
			return
		}
		st.starting++
		c.mu.Unlock()
		err = c.Get(st.parent, st.ppvo.Add(uint64(off)), dst, SendOpts{Origin: landed})
		c.mu.Lock()
		st.starting--
		if err != nil {
			landed.fail(err)
		} else if st.err != nil {
			st.endReadsLocked() // ended while it started
		}
		if st.starting == 0 && st.err != nil {
			c.coll.startedCond().Broadcast()
		}
		c.mu.Unlock()
		c.am.runCompletions()
	}
}

// endReadsLocked ends a pulling receiver's reads in flight, after its part
// failed (c.mu held): their answers are dropped, so nothing more is
// written into its buffer once its Done has failed.
func (st *bcastState) endReadsLocked() {
	if !st.o.Pull || st.vr == 0 {
		return
	}
	c := st.c
	for i, k := range st.cntrs {
		if !st.has[i] {
			c.rd.cancelReads(k, st.err)
			c.cancelGets(k, st.err)
		}
	}
}

// bcastTable holds a context's broadcasts in flight, and the ready
// messages of children whose parent has not called Broadcast yet.
type bcastTable struct {
	c     *Context
	live  map[uint64]*bcastState
	early map[uint64][]bcastMsg
	ended endedIDs // broadcasts whose part here failed or was aborted
}

func (co *collectives) bcastTable() *bcastTable {
	c := co.c
	return c.am.handlers[hBcast].h.(*bcastTable)
}

func newBcastTable(c *Context) *bcastTable {
	return &bcastTable{c: c, live: make(map[uint64]*bcastState), early: make(map[uint64][]bcastMsg)}
}

// dropEarly forgets the messages kept for broadcast id from rank from
// (c.mu held).
func (t *bcastTable) dropEarly(id uint64, from hal.Rank) {
	keep := slices.DeleteFunc(t.early[id], func(m bcastMsg) bool { return m.from == from })
	if len(keep) == 0 {
		delete(t.early, id)
	} else {
		t.early[id] = keep
	}
}

// OnHeader takes a control message (c.mu held).
func (t *bcastTable) OnHeader(src hal.Rank, uhdr []byte, n int) ([]byte, any) {
	m, err := decodeBcastMsg(uhdr)
	if err != nil || m.kind != bcastReady && n != 0 || m.kind == bcastReady && n != 4*int(m.chunks) {
		t.c.stats.BadPackets++
		return nil, nil
	}
	m.from = src
	p := &m
	if n == 0 {
		return nil, p
	}
	buf := make([]byte, n)
	m.raw = buf
	return buf, p
}

// OnComplete acts on a control message (the completion runner calls it,
// outside the progress lock).
func (t *bcastTable) OnComplete(_ hal.Rank, cookie any) {
	m, ok := cookie.(*bcastMsg)
	if !ok {
		return
	}
	c := t.c
	if m.kind == bcastReady {
		m.cntrs = make([]uint32, m.chunks)
		for i := range m.cntrs {
			m.cntrs[i] = binary.LittleEndian.Uint32(m.raw[4*i:])
		}
		m.raw = nil
	}
	c.mu.Lock()
	st := t.live[m.id]
	var starts []func()
	switch {
	case st == nil && t.ended.has(m.id):
		// Late, for a part that failed or was aborted here: dropped.
	case st == nil && m.kind == bcastLost:
		t.dropEarly(m.id, m.from) // a child that gave up before this member called
	case st == nil && m.kind == bcastReady:
		t.early[m.id] = append(t.early[m.id], *m) // this member has not called yet
	case st == nil:
		// Every other message answers one of this member's, so it is
		// for a part no longer here: nothing can use it.
	case st.err == nil:
		starts = st.applyLocked(*m)
		st.progressLocked()
	}
	c.mu.Unlock()
	for _, f := range starts {
		f()
	}
	c.am.runCompletions()
}
