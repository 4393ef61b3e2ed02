package lapi

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// Multicast RDMA (the IBM seed's): broadcast over a device that sends one
// frame to every peer (hal.Broadcaster: IP multicast on udp), with lapi's
// reliability repairing what each receiver lost. The receivers are the
// ranks that posted the broadcast's id (the rCxt's role) and were told
// its stream: a multicast frame of a stream a rank was not told, or whose
// part is over, is dropped and counted (McastStats.Unposted), never
// placed.
//
// The protocol, for a broadcast of len(buf) bytes among a group:
//
//  1. Each receiver posts its buffer under the id and tells the root it
//     is ready (an active message, exactly once, with its length). The
//     root answers each with a go message naming this call's stream: a
//     tag the root makes fresh for each call, which its frames carry as
//     their id. A receiver places only the frames of the stream it was
//     told, so a frame of an earlier call with the same id, late on the
//     wire, is never placed.
//  2. Once every receiver has taken its go, the root streams its buffer as
//     multicast frames of one device MTU each, paced by the device: a
//     full queue (hal.ErrNoResource) is flushed and the stream goes on
//     once it has room, polling meanwhile.
//  3. When the whole stream is on the wire the root tells each receiver
//     it has ended (an active message with the PVO of the root's buffer,
//     registered for reading while the broadcast lasts).
//  4. Each receiver reads with Get, over lapi's reliable RDMA, every
//     range no frame of the stream filled, then tells the root it is
//     done; a receiver that has every frame before the end message is
//     done at once, and ignores the message.
//  5. The root is done when every receiver is.
//
// A receiver stops placing frames at the end message: from then on its
// Gets alone write into its buffer, and after its last Get nothing does.

// McastOpts are a multicast broadcast's counters, all optional and of the
// calling context (BcastOpts' meanings).
type McastOpts struct {
	// Landed, at a receiver, is incremented when its buffer holds the
	// root's data.
	Landed *Counter
	// Done is incremented when this member no longer needs its buffer:
	// a receiver's has landed; at the root, every receiver's has.
	Done *Counter
	// All, at the root, is incremented when every member has the data.
	All *Counter
	// Notify, if set, is told when Done would fire, or that the
	// broadcast failed. It runs in the completion runner and must not
	// block or call into the context.
	Notify Completer
}

// McastStats count a context's multicast broadcasts.
type McastStats struct {
	// FramesSent counts the multicast frames this rank sent as root.
	FramesSent uint64
	// Placed counts the frames placed into a posted buffer.
	Placed uint64
	// Duplicates counts frames of a posted broadcast that brought nothing
	// new (a duplicate, or a frame after the end message).
	Duplicates uint64
	// Unposted counts frames of a stream this rank was not told (it is
	// not a receiver, it has not called yet, the frame is of an earlier
	// call) or whose part is over here: dropped.
	Unposted uint64
	// Bad counts frames whose header does not fit the posted broadcast
	// (another length, another sender, a malformed header): dropped.
	Bad uint64
	// Repairs counts the Gets receivers issued for what they lost, and
	// RepairBytes their bytes.
	Repairs, RepairBytes uint64
}

// hMcast is lapi's handler of multicast control messages (below
// firstUserHandler, after rma.go's).
const hMcast = hBcast + 1

// mcastDrainPolls bounds the polls a receiver makes, at the end message,
// for frames of the stream still queued in the device: a 16 MiB stream is
// 12,000 frames of an Ethernet MTU, and a poll takes at most a few
// hundred.
const mcastDrainPolls = 1 << 12

// mcastBurst is how many frames the root queues on the device between two
// flushes: each needs its own header until the flush that sends it.
const mcastBurst = 64

// CanMulticast reports whether Multicast works on this context's device:
// it sends to every peer at once (hal.Broadcaster, with Caps.Broadcast),
// and SetMulticast has not turned it off.
func (c *Context) CanMulticast() bool {
	_, ok := c.coll.broadcaster()
	return ok
}

// SetMulticast turns Multicast off (false), or back on where the device
// can broadcast (true, as a context opens). A layer above whose ranks must
// all choose alike turns it off where some member's device cannot
// broadcast: whether one can is a property of its host's link.
func (c *Context) SetMulticast(on bool) {
	t := c.coll.mcastTable()
	c.mu.Lock()
	t.off = !on
	c.mu.Unlock()
}

func (co *collectives) broadcaster() (hal.Broadcaster, bool) {
	c := co.c
	b, ok := c.dev.(hal.Broadcaster)
	if !ok || !c.dev.Caps().Broadcast {
		return nil, false
	}
	t := co.mcastTable()
	c.mu.Lock()
	off := t.off
	c.mu.Unlock()
	return b, !off
}

// McastStats returns a snapshot of the multicast counters.
func (c *Context) McastStats() McastStats {
	t := c.coll.mcastTable()
	c.mu.Lock()
	defer c.mu.Unlock()
	return t.stats
}

// Multicast places the bytes of buf at group[root] into buf at every
// other member of group, as Broadcast does, by the device's multicast
// (see CanMulticast) and Gets of what each receiver lost. Every member
// calls it with the same group, root, id and length of buf; id names the
// broadcast among those in flight between these ranks. It does not
// block: the counters of o tell when it is done, or fail with the reason
// (a member failed, members that disagree about the length:
// *BcastLengthError). buf must not be touched until o.Done fires.
//
// After a member's part failed or was aborted, its peers' late messages
// for id are dropped there as Broadcast's are, and id is best not reused
// for the same reason.
func (c *Context) Multicast(group []hal.Rank, root int, id uint64, buf []byte, o McastOpts) error {
	b, ok := c.coll.broadcaster()
	if !ok {
		return fmt.Errorf("lapi: multicast: the device cannot send to every peer at once: %w", ErrBcast)
	}
	me, err := c.coll.groupIndex("multicast", group, root)
	if err != nil {
		return err
	}
	if err := c.coll.ownCounters("multicast", o.Landed, o.Done, o.All); err != nil {
		return err
	}
	st := &mcastState{c: c, b: b, id: id, group: group, root: group[root], isRoot: me == root, buf: buf, o: o,
		seg: uint32(min(c.dev.Caps().MTU, hal.MaxPayload) - hal.McastHdrLen)}
	if st.isRoot && len(buf) > 0 {
		var err error
		if st.pvo, err = c.tpt.Register(buf, hal.AccessRead); err != nil {
			return fmt.Errorf("lapi: multicast: %w", err)
		}
		st.registered = true
	}
	if trace.On(trace.Internal) {
		st.start = time.Now()
	}
	t := c.coll.mcastTable()
	c.mu.Lock()
	if st.isRoot {
		st.tag = t.newStream()
	}
	switch {
	case c.closed:
		st.releaseLocked()
		c.mu.Unlock()
		return ErrClosed
	case t.live[id] != nil:
		st.releaseLocked()
		c.mu.Unlock()
		return fmt.Errorf("lapi: multicast %#x is already in flight: %w", id, ErrBcast)
	}
	t.live[id] = st
	t.ended.remove(id) // its messages are this call's now
	var start bool
	if st.isRoot {
		st.kids = make(map[hal.Rank]*mcastKid, len(group)-1)
		for _, r := range group {
			if r != c.rank {
				k := &mcastKid{done: c.trg.spareCounter()}
				st.kids[r] = k
				c.am.await(r, k.done) // a receiver that fails fails the broadcast
				c.trg.armFnLocked(k.done, 1, st.kidDone)
			}
		}
		if len(st.kids) > 0 {
			// The stream starts once every receiver has taken its go
			// (the go's completion), knowing its frames.
			st.went = c.trg.spareCounter()
			c.trg.armFnLocked(st.went, int64(len(st.kids)), st.wentAll)
		}
		for _, m := range t.early[id] {
			st.applyLocked(m)
		}
		delete(t.early, id)
		start = st.readyAllLocked()
	} else {
		st.end = c.trg.spareCounter()
		c.am.await(st.root, st.end) // a root that fails fails the broadcast
		c.trg.armFnLocked(st.end, 1, st.ended)
		var u [mcastMsgLen]byte
		encodeMcastMsg(u[:], mcastMsg{kind: mcastReady, id: id, total: uint64(len(buf))})
		if err := c.am.amsendLocked(st.root, hMcast, u[:], nil, &SendOpts{}); err != nil {
			st.failLocked(fmt.Errorf("ready to rank %d: %w", st.root, err))
		}
	}
	st.progressLocked()
	c.mu.Unlock()
	if start {
		st.stream()
	}
	c.am.runCompletions()
	return nil
}

// AbortMulticast ends this member's part of multicast id (a caller that
// gave up on it): no frame is placed in its buffer any more, a root's
// buffer is released (receivers' repairs then fail with a protection
// fault), and its counters fail with cause, wrapping ErrBcastAborted. A
// receiver's repair Gets already issued may still land. A broadcast not
// in flight here is left alone.
func (c *Context) AbortMulticast(id uint64, cause error) {
	t := c.coll.mcastTable()
	c.mu.Lock()
	delete(t.early, id)
	t.ended.add(id) // what its peers still send is dropped
	if st := t.live[id]; st != nil {
		st.failLocked(fmt.Errorf("%w: %w", ErrBcastAborted, cause))
		st.progressLocked()
	}
	c.mu.Unlock()
	c.am.runCompletions()
}

// mcastState is one member's part of one multicast broadcast (guarded by
// c.mu).
type mcastState struct {
	c          *Context
	b          hal.Broadcaster
	id         uint64
	group      []hal.Rank
	root       hal.Rank
	isRoot     bool
	buf        []byte
	o          McastOpts
	seg        uint32 // data bytes per frame (the root's; a receiver's once it has heard)
	tag        uint64 // this call's stream: the root's tag, a receiver's once told (go, or end)
	pvo        hal.PVO
	registered bool
	err        error
	start      time.Time // when this member called, for the trace
	over       bool      // forgotten by the table
	finished   bool      // counters told

	// The root's.
	kids      map[hal.Rank]*mcastKid
	went      *Counter // the completions of the go messages
	goneAll   bool     // every receiver took its go
	dones     int      // receivers done
	streaming bool     // the stream has started
	next      uint64
	queued    int // frames on the device since its last flush
	hdrs      [][]byte
	endsSent  bool

	// A receiver's.
	end      *Counter // the end message came
	rx       mcastMap
	endHeard bool     // the end message came
	endSeen  bool     // and the device was drained after it: frames no longer placed
	repairs  *Counter // its Gets' origin counter
	landed   bool
}

// mcastKid is a receiver, as its root sees it.
type mcastKid struct {
	ready bool
	got   bool     // its done message came
	done  *Counter // bumped by the done message: a trigger counts it
}

func (st *mcastState) failLocked(err error) {
	if st.err == nil {
		st.err = fmt.Errorf("lapi: multicast %#x: %w", st.id, err)
	}
}

// releaseLocked deregisters the root's buffer (c.mu held, or before the
// state is shared).
func (st *mcastState) releaseLocked() {
	if st.registered {
		st.registered = false
		st.c.tpt.Deregister(st.pvo)
	}
}

// readyAllLocked reports whether the root may start its stream: every
// receiver took its go and it has not started (c.mu held).
func (st *mcastState) readyAllLocked() bool {
	if st.err != nil || st.streaming || len(st.kids) > 0 && !st.goneAll {
		return false
	}
	st.streaming = true
	return true
}

// wentAll is the trigger of every receiver's having taken its go (or of
// a failure before): the root streams.
func (st *mcastState) wentAll(err error) {
	c := st.c
	c.mu.Lock()
	if err != nil {
		st.failLocked(err)
	}
	st.goneAll = true
	start := st.readyAllLocked()
	st.progressLocked()
	c.mu.Unlock()
	if start {
		st.stream()
	}
	c.am.runCompletions()
}

// applyLocked acts on a control message (c.mu held).
func (st *mcastState) applyLocked(m mcastMsg) {
	c := st.c
	switch {
	case m.kind == mcastReady && st.isRoot:
		k := st.kids[m.from]
		if k == nil || k.ready {
			c.coll.mcastTable().stats.Bad++
			st.failLocked(fmt.Errorf("rank %d is not a receiver to be ready: %w", m.from, ErrBcast))
			return
		}
		if m.total != uint64(len(st.buf)) {
			var u [mcastMsgLen]byte
			encodeMcastMsg(u[:], mcastMsg{kind: mcastRefuse, id: st.id, total: uint64(len(st.buf))})
			c.am.amsendLocked(m.from, hMcast, u[:], nil, &SendOpts{})
			st.failLocked(&BcastLengthError{Peer: m.from, Len: len(st.buf), Other: int(m.total)})
			return
		}
		var u [mcastMsgLen]byte
		encodeMcastMsg(u[:], mcastMsg{kind: mcastGo, id: st.id, stream: st.tag})
		if err := c.am.amsendLocked(m.from, hMcast, u[:], nil, &SendOpts{Completion: st.went}); err != nil {
			st.failLocked(fmt.Errorf("go to rank %d: %w", m.from, err))
			return
		}
		k.ready = true
	case m.kind == mcastDone && st.isRoot:
		if k := st.kids[m.from]; k != nil && k.ready && !k.got && m.stream == st.tag {
			k.got = true
			c.am.awaited(m.from, k.done)
			k.done.incr()
			return
		}
		c.coll.mcastTable().stats.Bad++
	case m.kind == mcastEnd && !st.isRoot && m.from == st.root:
		if st.tag == 0 {
			st.hearStream(m.stream) // it overtook the go
		}
		if m.stream != st.tag {
			c.coll.mcastTable().stats.Bad++ // an earlier call's
			return
		}
		if st.endHeard {
			return // every frame came before it, and the receiver went on
		}
		st.endHeard = true // frames still placed until ended has drained the device
		st.pvo, st.seg = m.pvo, m.seg
		c.am.awaited(st.root, st.end)
		st.end.incr()
	case m.kind == mcastRefuse && !st.isRoot && m.from == st.root:
		st.failLocked(&BcastLengthError{Peer: m.from, Len: len(st.buf), Other: int(m.total)})
	default:
		c.coll.mcastTable().stats.Bad++
	}
}

// stream sends the root's buffer as multicast frames, then the end
// messages. It runs outside the progress lock (Multicast, or the
// completion runner once the last receiver took its go) and holds it while
// it talks to the device, for a burst of mcastBurst frames at a time;
// between bursts, and while the device is full, it makes progress passes
// (acknowledgements, arrivals), so that a long stream does not hold up
// what the rank owes its peers.
func (st *mcastState) stream() {
	c := st.c
	if trace.On(trace.Internal) {
		st.trace("every receiver ready, streaming %d bytes", len(st.buf))
	}
	for {
		c.mu.Lock()
		if st.err != nil || st.over || c.closed {
			c.mu.Unlock()
			return
		}
		more, err := st.pumpLocked()
		if err != nil {
			st.failLocked(err)
			st.progressUnlock()
			return
		}
		if !more {
			if trace.On(trace.Internal) {
				st.trace("stream sent (%d frames so far from this rank), end messages go", c.coll.mcastTable().stats.FramesSent)
			}
			st.sendEndsLocked()
			st.progressUnlock()
			return
		}
		full := st.queued > 0 // the device said ErrNoResource, not a burst's end
		c.pr.progressLocked()
		c.mu.Unlock()
		c.am.runCompletions()
		if full {
			runtime.Gosched()
		}
	}
}

// pumpLocked queues frames of the stream on the device and flushes them,
// until the stream has gone (false) or the device is full (true) (c.mu
// held).
func (st *mcastState) pumpLocked() (more bool, err error) {
	c := st.c
	if st.hdrs == nil {
		st.hdrs = make([][]byte, mcastBurst)
		for i := range st.hdrs {
			st.hdrs[i] = make([]byte, hal.HeaderLen+hal.McastHdrLen)
		}
	}
	total := uint64(len(st.buf))
	for st.next < total {
		if st.queued == len(st.hdrs) {
			if err := c.dev.Flush(); err != nil {
				return mcastFull(err)
			}
			st.queued = 0
			return true, nil // a progress pass between bursts: acknowledgements, readies, reads
		}
		data := st.buf[st.next:min(st.next+uint64(st.seg), total)]
		hdr := st.hdrs[st.queued]
		hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameMcast, Len: uint16(hal.McastHdrLen + len(data)),
			JobKey: c.cfg.JobKey, Src: c.rank, Dst: hal.BroadcastRank, Life: c.life})
		hal.EncodeMcast(hdr[hal.HeaderLen:], &hal.McastHdr{ID: st.tag, Total: total, Offset: st.next, Seg: st.seg})
		hal.Seal(hdr, data)
		if err := st.b.SendBroadcast(hdr, data); err != nil {
			if !errors.Is(err, hal.ErrNoResource) {
				return false, fmt.Errorf("send: %w", err)
			}
			if err := c.dev.Flush(); err != nil {
				return mcastFull(err)
			}
			st.queued = 0
			continue
		}
		st.queued++
		st.next += uint64(len(data))
		c.coll.mcastTable().stats.FramesSent++
	}
	if st.queued > 0 {
		if err := c.dev.Flush(); err != nil {
			return mcastFull(err)
		}
		st.queued = 0
	}
	return false, nil
}

// mcastFull sorts a flush's error: a full device means more to do later,
// anything else ends the stream.
func mcastFull(err error) (bool, error) {
	if errors.Is(err, hal.ErrNoResource) {
		return true, nil
	}
	return false, fmt.Errorf("flush: %w", err)
}

// sendEndsLocked tells every receiver the stream has ended and where to
// read what it lost (c.mu held).
func (st *mcastState) sendEndsLocked() {
	c := st.c
	st.endsSent = true
	var u [mcastMsgLen]byte
	encodeMcastMsg(u[:], mcastMsg{kind: mcastEnd, id: st.id, total: uint64(len(st.buf)), pvo: st.pvo, seg: st.seg, stream: st.tag})
	for _, r := range st.group {
		if r == c.rank {
			continue
		}
		if err := c.am.amsendLocked(r, hMcast, u[:], nil, &SendOpts{}); err != nil {
			st.failLocked(fmt.Errorf("end to rank %d: %w", r, err))
			return
		}
	}
}

// kidDone is the trigger of a receiver's done message at the root.
func (st *mcastState) kidDone(err error) {
	c := st.c
	c.mu.Lock()
	if err != nil {
		st.failLocked(err)
	} else {
		st.dones++
	}
	st.progressUnlock()
}

// ended is the trigger of the end message at a receiver: it reads what
// the stream did not bring.
func (st *mcastState) ended(err error) {
	c := st.c
	c.mu.Lock()
	if err != nil {
		st.failLocked(err)
	}
	// The stream went before the end message, but its frames may wait in
	// another queue of the device (the group's socket) than the one that
	// brought the end: take what is there before judging what is lost.
	for range mcastDrainPolls {
		if st.err != nil || c.closed || c.pr.pollLocked() == 0 {
			break
		}
	}
	st.endSeen = true
	if st.err != nil {
		st.progressUnlock()
		return
	}
	t := c.coll.mcastTable()
	if trace.On(trace.Internal) {
		st.trace("end message from rank %d", st.root)
	}
	type span struct{ off, end uint64 }
	var gets []span
	st.rx.missing(uint64(len(st.buf)), st.seg, func(off, end uint64) {
		gets = append(gets, span{off, end})
		t.stats.Repairs++
		t.stats.RepairBytes += end - off
	})
	if len(gets) == 0 {
		st.landed = true
		st.progressUnlock()
		return
	}
	if trace.On(trace.Internal) {
		st.trace("reading %d lost ranges from rank %d", len(gets), st.root)
	}
	st.repairs = c.trg.spareCounter()
	c.trg.armFnLocked(st.repairs, int64(len(gets)), st.repaired)
	k, pvo := st.repairs, st.pvo
	c.mu.Unlock()
	for _, g := range gets {
		if err := c.Get(st.root, pvo.Add(g.off), st.buf[g.off:g.end], SendOpts{Origin: k}); err != nil {
			c.mu.Lock()
			k.fail(fmt.Errorf("repair from rank %d: %w", st.root, err))
			c.mu.Unlock()
			break
		}
	}
	c.am.runCompletions()
}

// repaired is the trigger of a receiver's last repair Get.
func (st *mcastState) repaired(err error) {
	c := st.c
	c.mu.Lock()
	if err != nil {
		st.failLocked(err)
	} else {
		st.landed = true
	}
	st.progressUnlock()
}

// progressUnlock is progressLocked, then the lock released and the
// completions it queued run.
func (st *mcastState) progressUnlock() {
	st.progressLocked()
	st.c.mu.Unlock()
	st.c.am.runCompletions()
}

// progressLocked tells the counters what is done, and the root when a
// receiver has the data (c.mu held).
func (st *mcastState) progressLocked() {
	c := st.c
	if st.finished {
		return
	}
	if st.err != nil {
		st.finished = true
		c.coll.failCallerLocked(st.err, st.o.Notify, st.o.Landed, st.o.Done, st.o.All)
		// Triggers still armed on its own counters fire with the error
		// and are dropped.
		st.end.fail(st.err)
		st.repairs.fail(st.err)
		st.went.fail(st.err)
		for _, k := range st.kids {
			k.done.fail(st.err)
		}
		st.releaseLocked()
		st.forget()
		c.pr.wakeLocked()
		return
	}
	switch {
	case st.isRoot && st.endsSent && st.dones == len(st.kids):
		st.finished = true
		st.releaseLocked()
		if st.o.All != nil {
			st.o.All.incr()
		}
		if st.o.Done != nil {
			st.o.Done.incr()
		}
	case !st.isRoot && st.landed:
		st.finished = true
		var u [mcastMsgLen]byte
		encodeMcastMsg(u[:], mcastMsg{kind: mcastDone, id: st.id, stream: st.tag})
		if err := c.am.amsendLocked(st.root, hMcast, u[:], nil, &SendOpts{}); err != nil {
			st.finished = false
			st.failLocked(fmt.Errorf("done to rank %d: %w", st.root, err))
			st.progressLocked()
			return
		}
		if st.o.Landed != nil {
			st.o.Landed.incr()
		}
		if st.o.Done != nil {
			st.o.Done.incr()
		}
	default:
		return
	}
	if trace.On(trace.Internal) {
		st.trace("done")
	}
	c.am.note(st.o.Notify, nil)
	st.forget()
	c.pr.wakeLocked()
}

// trace reports a step of this member's part (level 3, trace.Internal),
// with the time since it called.
func (st *mcastState) trace(format string, args ...any) {
	var since time.Duration
	if !st.start.IsZero() {
		since = time.Since(st.start)
	}
	trace.Printf(trace.Internal, "lapi %d: multicast %#x (root %d) +%v: %s", st.c.rank, st.id, st.root, since, fmt.Sprintf(format, args...))
}

// forget drops the broadcast from the table, so that its frames are no
// longer placed, and recycles its counters once nothing can bump them
// (c.mu held).
func (st *mcastState) forget() {
	if st.over {
		return
	}
	st.over = true
	c := st.c
	t := c.coll.mcastTable()
	if t.live[st.id] == st {
		delete(t.live, st.id)
	}
	if k := (mcastStream{st.root, st.tag}); !st.isRoot && st.tag != 0 && t.streams[k] == st {
		delete(t.streams, k)
	}
	if st.err != nil {
		t.ended.add(st.id) // its peers' late messages are dropped
		return             // a late increment could still come: left to the collector
	}
	for _, k := range []*Counter{st.end, st.repairs, st.went} {
		if k != nil {
			k.v.Store(0)
			c.trg.spareCntrs = append(c.trg.spareCntrs, k)
		}
	}
	for _, k := range st.kids {
		k.done.v.Store(0)
		c.trg.spareCntrs = append(c.trg.spareCntrs, k.done)
	}
}

// hearStream records the stream a receiver was told (c.mu held): its
// frames are placed from now on.
func (st *mcastState) hearStream(stream uint64) {
	st.tag = stream
	st.c.coll.mcastTable().streams[mcastStream{st.root, stream}] = st
}

// onMcast takes a multicast frame from src (c.mu held, in the progress
// pass): placed if it is of a stream a receiver here was told and it
// brings something new, else dropped and counted.
func (co *collectives) onMcast(src hal.Rank, payload []byte) {
	c := co.c
	t := co.mcastTable()
	var h hal.McastHdr
	data, err := hal.DecodeMcast(payload, &h)
	if err != nil {
		t.stats.Bad++
		return
	}
	st := t.streams[mcastStream{src, h.ID}]
	switch {
	case st == nil || st.err != nil || st.finished:
		t.stats.Unposted++
	case h.Total != uint64(len(st.buf)) || st.rx.seg != 0 && h.Seg != st.rx.seg:
		t.stats.Bad++
	case st.endSeen:
		t.stats.Duplicates++ // its Gets write the buffer now
	case !st.rx.mark(h.Total, h.Seg, h.Offset):
		t.stats.Duplicates++
	default:
		copy(st.buf[h.Offset:], data)
		t.stats.Placed++
		if st.rx.got == frames(h.Total, h.Seg) {
			// Every frame is here: nothing to read, so the receiver
			// need not wait for the end message (ended runs as if it
			// had come; the message is ignored when it does).
			st.endHeard, st.seg = true, h.Seg
			c.am.awaited(st.root, st.end)
			st.end.incr()
		}
	}
}

// mcastMap records which frames of a broadcast a receiver has placed.
type mcastMap struct {
	seg  uint32 // the stream's frame size, from its first frame; 0 before
	have []uint64
	got  uint64 // frames marked
}

// mark records frame off of a broadcast of total bytes in frames of seg
// and reports whether it is new. A header DecodeMcast accepted is on the
// grid and within total.
func (m *mcastMap) mark(total uint64, seg uint32, off uint64) bool {
	if m.seg == 0 {
		m.seg = seg
		m.have = make([]uint64, (frames(total, seg)+63)/64)
	}
	i := off / uint64(seg)
	if m.have[i/64]&(1<<(i%64)) != 0 {
		return false
	}
	m.have[i/64] |= 1 << (i % 64)
	m.got++
	return true
}

// missing calls fn for each maximal range of a broadcast of total bytes
// in frames of seg (what the end message says) that no placed frame
// covers, in order.
func (m *mcastMap) missing(total uint64, seg uint32, fn func(off, end uint64)) {
	if total == 0 {
		return
	}
	if m.seg != seg {
		// No frame came, or the end names another grid (never from a
		// root that keeps one): read everything.
		fn(0, total)
		return
	}
	n := frames(total, seg)
	for i := uint64(0); i < n; {
		if m.have[i/64]&(1<<(i%64)) != 0 {
			i++
			continue
		}
		j := i + 1
		for j < n && m.have[j/64]&(1<<(j%64)) == 0 {
			j++
		}
		fn(i*uint64(seg), min(j*uint64(seg), total))
		i = j
	}
}

// frames is how many frames of seg bytes carry total bytes.
func frames(total uint64, seg uint32) uint64 { return (total + uint64(seg) - 1) / uint64(seg) }

// mcastTable holds a context's multicast broadcasts in flight, the ready
// messages of receivers whose root has not called yet, and the counters.
type mcastTable struct {
	c       *Context
	live    map[uint64]*mcastState
	early   map[uint64][]mcastMsg
	streams map[mcastStream]*mcastState // receivers told their stream, by it
	next    uint64                      // the last stream tag made here
	ended   endedIDs                    // multicasts whose part here failed or was aborted
	stats   McastStats
	off     bool // SetMulticast(false)
}

// mcastStream names a call's stream: its root and the root's tag.
type mcastStream struct {
	root hal.Rank
	tag  uint64
}

// newStream makes a stream tag for a call of this root (c.mu held):
// never 0, and not one of its earlier calls' (nor, from a random start,
// of an earlier life's).
func (t *mcastTable) newStream() uint64 {
	t.next++
	if t.next == 0 {
		t.next++
	}
	return t.next
}

func (co *collectives) mcastTable() *mcastTable {
	c := co.c
	return c.am.handlers[hMcast].h.(*mcastTable)
}

func newMcastTable(c *Context) *mcastTable {
	return &mcastTable{c: c, live: make(map[uint64]*mcastState), early: make(map[uint64][]mcastMsg),
		streams: make(map[mcastStream]*mcastState), next: rand.Uint64()}
}

// OnHeader takes a control message (c.mu held). A go message is acted
// on here, in the progress pass, so that the stream's frames that follow
// it there are placed.
func (t *mcastTable) OnHeader(src hal.Rank, uhdr []byte, n int) ([]byte, any) {
	m, err := decodeMcastMsg(uhdr)
	if err != nil || n != 0 {
		t.stats.Bad++
		return nil, nil
	}
	if m.kind == mcastGo {
		st := t.live[m.id]
		switch {
		case st == nil:
			// For a part no longer here (a go answers its ready).
		case st.isRoot || src != st.root:
			t.stats.Bad++
		case st.tag == 0 && st.err == nil && !st.finished:
			st.hearStream(m.stream)
		}
		return nil, nil
	}
	m.from = src
	return nil, &m
}

// OnComplete acts on a control message (the completion runner calls it,
// outside the progress lock).
func (t *mcastTable) OnComplete(_ hal.Rank, cookie any) {
	m, ok := cookie.(*mcastMsg)
	if !ok {
		return
	}
	c := t.c
	c.mu.Lock()
	st := t.live[m.id]
	switch {
	case st == nil && m.kind == mcastReady && t.ended.has(m.id):
		// Late, for a part that failed or was aborted here: dropped.
	case st == nil && m.kind == mcastReady:
		t.early[m.id] = append(t.early[m.id], *m) // the root has not called yet
	case st == nil && m.kind == mcastEnd:
		// A receiver that had every frame ended without it.
	case st == nil:
		t.stats.Bad++ // a part that failed and ended
	case st.err == nil:
		st.applyLocked(*m)
		st.progressLocked()
	}
	c.mu.Unlock()
	c.am.runCompletions()
}
