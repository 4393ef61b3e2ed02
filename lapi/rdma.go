package lapi

import (
	"errors"
	"fmt"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
	"github.com/weft-hpc/weft/internal/track"
)

// RDMA in lapi: large Put and Get, and every Accumulate, travel as hal's
// self-describing RDMA packets rather than as active messages. They bypass
// the per-packet sequence and acknowledgement machinery of link.go: each
// transfer is one rCxt drive, answered by one completion. Over an
// unreliable device a write's target answers the last packet of each
// drive at once, with the completion or with a report of the segments
// still missing, and the origin drives the transfer again under a new
// tid with those segments alone. A transfer whose answer does not come in
// time (the last packet, the report or the completion was lost) is
// probed: driven again with its last packet alone, which the target
// answers the same way; when a probe goes unanswered too it is redriven
// whole, with the timeout doubling each time (progressive back-off). A
// read is placed by this rank, which asks again for the segments it lost
// as soon as its drive's last packet arrives (or its timer runs out). The
// target's engine keeps what earlier drives placed, so each drive only
// has to bring what the previous ones lost.

// opKind is what an rdmaOp does.
type opKind uint8

const (
	opWrite opKind = iota + 1 // Put
	opRead                    // Get
	opAcc                     // Accumulate (half-RDMA)
)

// String names the kind in a leak report: "Put", "Get", "Accumulate".
func (k opKind) String() string {
	switch k {
	case opWrite:
		return "Put"
	case opRead:
		return "Get"
	case opAcc:
		return "Accumulate"
	}
	return fmt.Sprintf("opKind(%d)", uint8(k))
}

// rdmaGroup is one Put, Get or Accumulate: the chunks it was cut into,
// and whom to tell when the last of them completes.
type rdmaGroup struct {
	kind     opKind
	peer     hal.Rank
	left     int // chunks not yet completed
	err      error
	org, cmp *Counter
	notify   Completer
	tcntr    uint32  // a chunked transfer's target counter, bumped by an AM at the end
	local    hal.PVO // a read's destination, registered for the transfer
	next     *rdmaGroup
	trk      track.ID // Config.Track's record of it, 0 when off
}

// rdmaOp is one chunk of a transfer: one rCxt, driven until its
// completion comes.
type rdmaOp struct {
	g        *rdmaGroup
	t        hal.FrameType
	h        hal.RDMAHdr // the chunk's header, before an rCxt is assigned
	mem      []byte      // a write's data
	rc       *hal.RCxt
	stream   hal.RDMAStream // this drive's packets: the data, or the read request
	next     *rdmaOp        // free list
	queued   bool
	sentAll  bool      // this drive's packets are all with the device
	sentAt   time.Time // when they were
	deadline time.Time // redrive when no completion by then (unreliable devices)
	rto      time.Duration
	lastGood time.Time // last sign of life: a drive's start, a read's progress
	left     uint64    // a read's segments outstanding at the last timer
	drives   int
	probed   bool   // the last timeout probed (RestartTail); the next redrives whole
	cut      bool   // the window toward the peer was cut for this chunk's loss
	seq      uint64 // when its drive was sent: the peer's count of drives sent (rdmaState.sent)
}

// outStream is a stream waiting for the device, with the op it drives
// (nil when serving a peer's read).
type outStream struct {
	s     *hal.RDMAStream
	op    *rdmaOp
	ahead bool // queued ahead of new chunks (queueStreamFront)
}

// rdmaState is a context's part of the RDMA engine (guarded by c.mu).
type rdmaState struct {
	eng        *hal.RDMAEngine
	pool       *hal.RCxtPool
	ops        []*rdmaOp // by rCxt ID
	waiting    []*rdmaOp // chunks waiting for an rCxt or for room toward their peer
	spare      []*rdmaOp // launchWaiting's other buffer
	out        []int     // per peer: bytes of chunks launched and not completed
	cwnd       []int     // per peer over an unreliable device: the congestion window, bytes (roomFor)
	nwait      []int     // per peer: chunks waiting (they go first, in order)
	sent       []uint64  // per peer: drives whose packets all went to the device
	doneSeq    []uint64  // per peer: the seq of the latest drive completed
	doneAt     []time.Time
	blocked    []bool // launchWaiting's scratch
	pushing    bool   // pushRDMA is running: a call from within it (a frame polled) leaves the queue to it
	groups     int    // transfers not yet completed
	rtt        []rttEstimator
	queue      []outStream
	dones      []rdmaDone // completions the device had no room for, oldest first
	freeOps    *rdmaOp
	freeGroups *rdmaGroup
	serving    map[servKey]*hal.RDMAStream
	hdrs       [][]byte // header buffers the device may hold until Flush
	used       int
	seg        int
	stats      RDMAStats
}

// rdmaDone is a completion owed to the origin of a transfer.
type rdmaDone struct {
	peer hal.Rank
	h    hal.RDMAHdr
}

type servKey struct {
	peer hal.Rank
	rcxt uint32
}

// RDMAStats count a context's RDMA transfers.
type RDMAStats struct {
	Writes, Reads, Accumulates uint64 // transfers originated
	Redrives                   uint64 // drives after the first
	Reports                    uint64 // reports of missing segments acted on, a write's or a read's (a selective drive each)
	Probes                     uint64 // drives of a write's last packet alone, after a timeout
	Resent                     uint64 // packets of drives after the first
	WindowCuts                 uint64 // congestion window halvings (a chunk's first redrive)
	StaleCompletions           uint64 // completions of an earlier drive, ignored
	Faults                     uint64 // accesses refused (here, or by a replica)
	CMAWrites, CMAReads        uint64 // Puts and Gets done by one copy: cross-memory attach, or in-process
	CMABytes                   uint64
	CMAMisses                  uint64 // PVOs the replica did not know yet: software path
	Engine                     hal.RDMAStats
}

// rdmaHdrSlab is how many packets may go to the device between flushes.
// Over an unreliable device pushRDMA also polls the device and sends the
// acknowledgements owed after each slab, so that what the peer sends this
// way (acknowledgements, completions, reports, its protocol's messages)
// is not held behind a whole window of bulk data, and the round trips
// timed meanwhile are not inflated by it.
const rdmaHdrSlab = 64

func (c *Context) initRDMA() {
	r := &c.rd
	r.eng = hal.NewRDMAEngine(c.tpt)
	r.pool = hal.NewRCxtPool(c.cfg.MaxRCxt, 0)
	r.serving = make(map[servKey]*hal.RDMAStream)
	r.rtt = make([]rttEstimator, c.cfg.Size)
	r.out = make([]int, c.cfg.Size)
	r.cwnd = make([]int, c.cfg.Size)
	for p := range r.cwnd {
		r.cwnd[p] = c.cfg.RDMAWindow
	}
	r.nwait = make([]int, c.cfg.Size)
	r.sent = make([]uint64, c.cfg.Size)
	r.doneSeq = make([]uint64, c.cfg.Size)
	r.doneAt = make([]time.Time, c.cfg.Size)
	r.blocked = make([]bool, c.cfg.Size)
	r.seg = (c.mtu - hal.RDMAPayloadLen(hal.FrameRDMAReadReq)) &^ 63
	r.seg = min(r.seg, (hal.MaxPayload-hal.RDMAHdrLen)&^63)
	slot := hal.StreamBufLen
	if !c.reliable {
		// Writes toward an unreliable peer are answered with reports of
		// what they lost, which go out of a header slot like completions.
		rep := min(c.mtu-hal.RDMAPayloadLen(hal.FrameRDMAReadReq), hal.MaxReport)
		r.eng.SetReportLen(rep)
		slot = max(slot, hal.HeaderLen+hal.RDMAHdrLen+rep)
	}
	r.hdrs = make([][]byte, rdmaHdrSlab)
	slab := make([]byte, rdmaHdrSlab*slot)
	for i := range r.hdrs {
		r.hdrs[i] = slab[i*slot : (i+1)*slot : (i+1)*slot] // an append past it reallocates
	}
	if c.reint != nil {
		r.eng.SetEpoch(uint32(c.reint.Epoch()))
	}
}

// RDMAStats returns a snapshot of the RDMA counters.
func (c *Context) RDMAStats() RDMAStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.rd.stats
	s.Engine = c.rd.eng.Stats()
	return s
}

// useRDMA reports whether a transfer of n bytes to tgt goes by RDMA.
func (c *Context) useRDMA(tgt hal.Rank, n int) bool {
	return tgt != c.rank && c.cfg.RDMAThreshold >= 0 && n >= c.cfg.RDMAThreshold
}

// rdmaChunk is the most one rCxt carries: a longer transfer is cut into
// chunks driven side by side, so a loss costs a chunk's redrive, not the
// whole transfer's, and completion times (the redrive timer's samples)
// do not grow with the transfer.
const rdmaChunk = 1 << 20

// startTransfer begins a transfer of h.Total bytes (c.mu held): its chunks
// get an rCxt each (or wait for one) and are queued for the device.
func (c *Context) startTransfer(g *rdmaGroup, t hal.FrameType, h hal.RDMAHdr, mem []byte) error {
	switch {
	case c.closed:
		return ErrClosed
	case c.peerErr[g.peer] != nil:
		return c.peerErr[g.peer]
	}
	if err := c.rdmaCheck(g.peer); err != nil {
		return err
	}
	h.Notify |= hal.NotifyOrigin // the origin must hear, to know when to redrive
	if h.Total > rdmaChunk && h.Notify&hal.NotifyTarget != 0 {
		// Chunks complete at the target in any order: the target hears
		// once, from the origin, when the last one has.
		h.Notify &^= hal.NotifyTarget
		g.tcntr = h.Cookie
	}
	c.rd.groups++
	if t := c.cfg.Track; t != nil {
		g.trk = t.Add(fmt.Sprintf("RDMA %s of %d bytes to rank %d (rCxts in flight)", g.kind, h.Total, g.peer), 0)
	}
	switch g.kind {
	case opWrite:
		c.rd.stats.Writes++
	case opRead:
		c.rd.stats.Reads++
	case opAcc:
		c.rd.stats.Accumulates++
	}
	for off := uint64(0); ; off += rdmaChunk {
		n := min(rdmaChunk, h.Total-off)
		op := c.rd.freeOps
		if op == nil {
			op = new(rdmaOp)
		} else {
			c.rd.freeOps = op.next
		}
		*op = rdmaOp{g: g, t: t, h: h}
		op.h.Total, op.h.PVO, op.h.Local = n, h.PVO.Add(off), h.Local.Add(off)
		if t == hal.FrameRDMAWrite {
			op.mem = mem[off : off+n]
		}
		g.left++
		c.launch(op)
		if off+n >= h.Total {
			break
		}
	}
	var now time.Time
	if !c.reliable {
		now = c.now() // only redrive timers keep time
	}
	c.pushRDMA(now)
	return nil
}

// launch gives a chunk an rCxt and queues its first drive, or has it wait
// for an rCxt (c.mu held).
func (c *Context) launch(op *rdmaOp) {
	peer := op.g.peer
	if c.rd.nwait[peer] > 0 || !c.roomFor(op) || c.rd.pool.InUse() >= c.cfg.MaxRCxt {
		c.wait(op)
		return
	}
	c.start(op)
}

// start gives a chunk that has room an rCxt and queues its first drive.
func (c *Context) start(op *rdmaOp) {
	peer := op.g.peer
	rc, err := c.rd.pool.Alloc()
	if err != nil { // cannot happen: the caller checked MaxRCxt
		c.finishOp(op, fmt.Errorf("lapi: RDMA to rank %d: %w", peer, err))
		return
	}
	c.rd.out[peer] += int(op.h.Total)
	op.rc = rc
	h := op.h
	h.RCxt, h.Key, h.Tid = rc.ID, rc.Key, rc.Begin()
	h.Base, h.Seg, h.DstEp = h.Tid, uint32(c.rd.seg), c.dstEpoch(peer)
	s := &op.stream
	if err := s.Reset(hal.Header{JobKey: c.cfg.JobKey, Src: c.rank, Dst: peer}, op.t, h, op.mem); err != nil {
		// cannot happen: lapi built h
		c.rd.pool.Free(rc)
		op.rc = nil
		c.finishOp(op, fmt.Errorf("lapi: RDMA to rank %d: %w", peer, err))
		return
	}
	op.h = h
	if op.t == hal.FrameRDMAReadReq {
		c.rd.eng.ExpectRead(peer, rc, &op.h)
	}
	for int(rc.ID) >= len(c.rd.ops) {
		c.rd.ops = append(c.rd.ops, nil)
	}
	c.rd.ops[rc.ID] = op
	if !c.reliableTo(peer) {
		op.lastGood = c.now()
		link := c.links[peer].rtt.rto(c.cfg.InitRTO, c.cfg.MinRTO, c.cfg.MaxRTO)
		op.rto = max(2*link, c.rd.rtt[peer].rto(c.cfg.InitRTO, c.cfg.MinRTO, c.cfg.MaxRTO))
	}
	if trace.On(trace.Hot) {
		c.traceRDMAStart(op)
	}
	c.queueStream(outStream{s: s, op: op})
}

func (c *Context) queueStream(o outStream) {
	if o.op != nil {
		o.op.queued, o.op.sentAll = true, false
	}
	c.rd.queue = append(c.rd.queue, o)
}

// pushRDMA hands queued RDMA packets to the device while it takes them
// (c.mu held). Over an unreliable device it pauses after each slab of
// packets to take what has arrived (pause), so now is read again there.
func (c *Context) pushRDMA(now time.Time) {
	r := &c.rd
	if r.pushing {
		return // a frame polled in a pause: the running push takes the queue
	}
	r.pushing = true
	defer func() { r.pushing = false }()
	if len(r.dones) > 0 {
		c.pushDones()
	}
	pushed := 0
	for len(r.queue) > 0 {
		o := r.queue[0]
		if c.peerErr[o.s.Peer] != nil {
			r.popStream()
			continue
		}
		if !c.pushTPT(o.s.Peer) {
			return // TPT changes go first; progress retries
		}
		for !o.s.Done() {
			slot := c.hdrSlot()
			if slot == nil {
				return // the device still holds the headers
			}
			hdr, data, err := o.s.Next(slot)
			if err != nil {
				// Serving a read whose region was deregistered under
				// it: tell the origin which check failed.
				r.popStream()
				c.rdmaFault(o.s, err)
				c.served(o.s)
				goto next
			}
			if !c.reliableTo(o.s.Peer) {
				hal.Seal(hdr, data)
			}
			err = c.dev.Send(hdr, data)
			if errors.Is(err, hal.ErrNoResource) {
				// Flush and start the packet again: a flush that
				// succeeds hands the header slab back, so the packet
				// is encoded afresh into the slot now current.
				if !c.reclaimHdrs() {
					return // still full: progress retries this packet
				}
				continue
			}
			if err != nil {
				if c.reliableTo(o.s.Peer) || fatalSendErr(err) {
					r.popStream()
					c.failPeer(o.s.Peer, err.Error())
					goto next
				}
				c.stats.SendErrors++ // a loss: the redrive covers it
			} else {
				c.countSent(o.s.Peer, len(data))
				if trace.On(trace.HotDetail) {
					c.traceSendRDMA(hdr, len(data))
				}
			}
			r.used++
			if o.op != nil && o.op.drives > 0 {
				r.stats.Resent++
			}
			o.s.Advance()
			if pushed++; pushed%rdmaHdrSlab == 0 && !c.reliable {
				now = c.pause()
				if len(r.queue) == 0 || r.queue[0].s != o.s {
					goto next // what arrived finished or replaced it
				}
			}
		}
		r.popStream()
		if op := o.op; op != nil {
			op.queued, op.sentAll = false, true
			if op.rto > 0 { // an unreliable device toward the peer: a timer redrives
				r.sent[op.g.peer]++
				op.seq = r.sent[op.g.peer]
				op.sentAt, op.deadline = now, now.Add(op.rto)
				c.armTimer(op.deadline)
			}
		} else {
			c.served(o.s)
		}
	next:
	}
	c.flushLocked()
}

// pause is pushRDMA's break after a slab of packets over an unreliable
// device (c.mu held): it flushes, takes what the device has received
// (acknowledgements, completions, reports, the peers' messages and read
// requests, which would otherwise wait behind the whole queue), sends the
// acknowledgements owed and the packets queued toward the peers, and
// returns the time now, which the rest of the push uses.
func (c *Context) pause() time.Time {
	c.flushLocked()
	c.pollLocked() // it reads the clock: RDMA is queued (keepsTime)
	now := c.pollNow
	for _, p := range c.active {
		if c.reliableTo(p) {
			continue
		}
		l := &c.links[p]
		if c.queues[p].head != nil {
			c.pushLocked(p, now)
		}
		if l.needAck(now) {
			c.sendAck(p)
		}
		// The pass's tick ran before these arrivals: a delayed
		// acknowledgement's timer is folded in here.
		if !l.ackDue.IsZero() {
			c.foldTimer(l.ackDue)
		}
	}
	return now
}

// hdrSlot is the next header buffer of the slab, flushing the device to
// get the slab back when it is used up; nil while the device still holds
// them. A packet sent from it must be counted in rd.used.
func (c *Context) hdrSlot() []byte {
	r := &c.rd
	if r.used == len(r.hdrs) && (c.flushLocked() != nil || r.used != 0) {
		return nil
	}
	return r.hdrs[r.used]
}

// reclaimHdrs flushes the device after it refused a packet, and reports
// whether that handed the header slab back, so that the packet is worth
// encoding again into the slot now current.
func (c *Context) reclaimHdrs() bool {
	used := c.rd.used
	return c.flushLocked() == nil && c.rd.used != used
}

// popStream drops the stream at the head of the queue. The queue is short
// (the chunks in the window, the reads being served): shifting it keeps
// its array for the next append.
func (r *rdmaState) popStream() {
	n := copy(r.queue, r.queue[1:])
	r.queue[n] = outStream{}
	r.queue = r.queue[:n]
}

// armTimer makes sure a waiter wakes by t, a new deadline (unreliable
// devices only).
func (c *Context) armTimer(t time.Time) {
	if c.foldTimer(t) && c.blocking {
		c.wakeLocked() // it set its deadline before this timer existed
	}
}

// foldTimer brings nextTick forward to t if t is sooner, and reports
// whether it did.
func (c *Context) foldTimer(t time.Time) bool {
	if c.reliable || !c.nextTick.IsZero() && !t.Before(c.nextTick) {
		return false
	}
	c.nextTick = t
	return true
}

// rdmaFault tells the origin of a served read that it failed a check.
func (c *Context) rdmaFault(s *hal.RDMAStream, err error) {
	c.rd.stats.Faults++
	if trace.On(trace.Internal) {
		c.traceFault("read by", s.Peer, s.Hdr.RCxt, s.Hdr.Tid, hal.FaultCheck(hal.FaultCode(err)))
	}
	c.sendDone(s.Peer, s.Hdr.Completion(hal.FaultCode(err)))
}

// sendDone sends a header-only completion or a report of missing
// segments (its bitmap in h.Data), or queues it behind those the device
// had no room for (pushDones sends them). One lost on an unreliable
// device is answered again when the origin probes or redrives.
func (c *Context) sendDone(peer hal.Rank, h hal.RDMAHdr) {
	if len(c.rd.dones) > 0 || !c.trySendDone(peer, h) {
		// Kept, not dropped: over a reliable device nothing redrives
		// the transfer, and its origin would wait for ever. A report's
		// bitmap is the engine's until its next packet: copied.
		if len(h.Data) > 0 {
			h.Data = append([]byte(nil), h.Data...)
		}
		c.rd.dones = append(c.rd.dones, rdmaDone{peer, h})
	}
}

// trySendDone sends a completion to peer's origin, reporting false when
// the device has no room for it yet (c.mu held).
func (c *Context) trySendDone(peer hal.Rank, h hal.RDMAHdr) bool {
	b := c.hdrSlot()
	if b == nil {
		return false
	}
	h.DstEp = c.dstEpoch(peer)
	if h.Flags&hal.FlagMissing != 0 {
		b = hal.AppendReport(b[:hal.HeaderLen], &h) // the slot holds the longest (initRDMA)
	} else {
		hal.EncodeRDMA(b[hal.HeaderLen:], hal.FrameRDMADone, &h)
		b = b[:hal.HeaderLen+hal.RDMAHdrLen]
	}
	fh := hal.Header{Type: hal.FrameRDMADone, JobKey: c.cfg.JobKey, Src: c.rank, Dst: peer, Len: uint16(len(b) - hal.HeaderLen)}
	hal.EncodeHeader(b, &fh)
	if !c.reliableTo(peer) {
		hal.Seal(b, nil)
	}
	switch err := c.dev.Send(b, nil); {
	case err == nil:
		c.rd.used++
		c.countSent(peer, 0)
		if trace.On(trace.HotDetail) {
			c.traceSendRDMA(b, 0)
		}
	case errors.Is(err, hal.ErrNoResource):
		return false
	case c.reliableTo(peer) || fatalSendErr(err):
		c.failPeer(peer, err.Error())
	default:
		c.stats.SendErrors++ // a loss: the origin's redrive covers it
	}
	return true
}

// pushDones sends the completions the device had no room for, in order
// (c.mu held).
func (c *Context) pushDones() {
	r := &c.rd
	n := 0
	for ; n < len(r.dones); n++ {
		d := r.dones[n]
		if c.peerErr[d.peer] == nil && !c.trySendDone(d.peer, d.h) {
			if !c.reclaimHdrs() || !c.trySendDone(d.peer, d.h) {
				break // still full: progress retries
			}
		}
	}
	r.dones = r.dones[:copy(r.dones, r.dones[n:])]
}

// onRDMA is onFrame for RDMA frames (c.mu held).
func (c *Context) onRDMA(h *hal.Header, payload []byte) {
	if c.peerErr[h.Src] != nil {
		return
	}
	var was hal.RDMAStats
	tracing := trace.On(trace.Hot)
	if tracing {
		was = c.rd.eng.Stats()
	}
	evs, msgs := c.rd.eng.Handle(h.Src, h.Type, payload)
	if tracing {
		c.traceRDMADrops(h.Src, h.Type, payload, was)
	}
	for i := range evs {
		c.rdmaEvent(&evs[i])
	}
	for _, m := range msgs {
		c.sendDone(m.Peer, m.Hdr)
	}
	if len(msgs) > 0 {
		c.flushLocked() // a completion waits for nothing else to ride with
	}
}

func (c *Context) rdmaEvent(ev *hal.RDMAEvent) {
	switch ev.Kind {
	case hal.EvOriginDone, hal.EvReadDone:
		// A completion of an earlier drive of the transfer ends it too
		// (every byte is placed): a probe or redrive that a late
		// completion overtook does not have to be answered.
		op := c.opFor(ev.RCxt)
		if op == nil || op.g.peer != ev.Peer || !op.rc.Current(ev.Key, ev.Tid) &&
			(ev.Kind != hal.EvOriginDone || !op.rc.Completes(ev.Key, ev.Base, ev.Tid)) {
			c.rd.stats.StaleCompletions++
			if trace.On(trace.Hot) {
				trace.Printf(trace.Hot, "lapi %d: drop rdma completion from rank %d: stale (rcxt %d tid %d, an earlier drive's)",
					c.rank, ev.Peer, ev.RCxt, ev.Tid)
			}
			return
		}
		var err error
		if ev.Code != 0 {
			if trace.On(trace.Internal) {
				c.traceFault("refused by", ev.Peer, ev.RCxt, ev.Tid, hal.FaultCheck(ev.Code))
			}
			err = fmt.Errorf("lapi: RDMA at rank %d: %s check failed: %w", ev.Peer, hal.FaultCheck(ev.Code), ErrProtection)
		}
		c.finishOp(op, err)
	case hal.EvTargetDone:
		if k := c.counter(ev.Cookie); k != nil {
			k.incr()
		}
	case hal.EvFault:
		c.rd.stats.Faults++
		if trace.On(trace.Internal) {
			c.traceFault("from", ev.Peer, ev.RCxt, ev.Tid, hal.FaultCheck(ev.Code))
		}
		if k := c.counter(ev.Cookie); k != nil {
			k.fail(fmt.Errorf("lapi: RDMA from rank %d: %w", ev.Peer, ev.Err))
			k.incr()
		}
	case hal.EvFIFO:
		if err := reduceInto(ev.Dst, ev.Data, ev.Arg); err != nil {
			c.stats.BadPackets++
		}
	case hal.EvReadMissing:
		op := c.opFor(ev.RCxt)
		if op == nil || op.g.peer != ev.Peer || !op.rc.Current(ev.Key, ev.Tid) || op.t != hal.FrameRDMAReadReq || !op.sentAll {
			c.rd.stats.StaleCompletions++
			return
		}
		c.rereadMissing(op)
	case hal.EvMissing:
		op := c.opFor(ev.RCxt)
		if op == nil || op.g.peer != ev.Peer || !op.rc.Current(ev.Key, ev.Tid) || op.t != hal.FrameRDMAWrite || !op.sentAll {
			c.rd.stats.StaleCompletions++
			return
		}
		c.redriveMissing(op, ev.Offset, ev.Data)
	case hal.EvServeRead:
		s := ev.Stream
		s.SetFrame(c.cfg.JobKey, c.rank)
		s.Hdr.DstEp = c.dstEpoch(ev.Peer)
		k := servKey{ev.Peer, ev.RCxt}
		if old := c.rd.serving[k]; old != nil {
			c.unqueue(old) // a redrive replaces the earlier drive
			c.rd.eng.ReleaseStream(old)
		}
		c.rd.serving[k] = s
		// Served ahead of this rank's own queued chunks: the reader's
		// timer runs from its request, theirs only once they are sent.
		c.queueStreamFront(outStream{s: s}) // the progress pass pushes it
	}
}

// served forgets a read-serving stream that has sent its last packet.
func (c *Context) served(s *hal.RDMAStream) {
	k := servKey{s.Peer, s.Hdr.RCxt}
	if c.rd.serving[k] == s {
		delete(c.rd.serving, k)
	}
	c.rd.eng.ReleaseStream(s)
}

func (c *Context) opFor(id uint32) *rdmaOp {
	if int(id) >= len(c.rd.ops) {
		return nil
	}
	return c.rd.ops[id]
}

// unqueue removes a stream from the send queue.
func (c *Context) unqueue(s *hal.RDMAStream) {
	q := c.rd.queue
	for i := range q {
		if q[i].s == s {
			n := copy(q[i:], q[i+1:]) + i
			q[n] = outStream{}
			c.rd.queue = q[:n]
			return
		}
	}
}

// finishOp completes a chunk, successfully or with err, and releases its
// rCxt to the next chunk waiting for one (c.mu held).
func (c *Context) finishOp(op *rdmaOp, err error) {
	g := op.g
	if op.queued {
		c.unqueue(&op.stream)
		op.queued = false
	}
	if rc := op.rc; rc != nil {
		if trace.On(trace.Hot) {
			c.traceRDMADone(op, err)
		}
		if op.t == hal.FrameRDMAReadReq {
			c.rd.eng.EndRead(g.peer, rc)
		}
		if err == nil && op.rto > 0 && !op.sentAt.IsZero() {
			now := c.now()
			if op.drives == 0 {
				// Karn's rule: only a first drive's completion times
				// it, from when the drives ahead of it were done.
				c.rd.rtt[g.peer].sample(now.Sub(c.timerStart(op)))
			}
			if p := g.peer; op.seq > c.rd.doneSeq[p] {
				c.rd.doneSeq[p], c.rd.doneAt[p] = op.seq, now
			}
		}
		if err == nil && op.drives == 0 && op.rto > 0 {
			c.grow(g.peer, int(op.h.Total))
		}
		c.rd.ops[rc.ID] = nil
		c.rd.pool.Free(rc)
		c.rd.out[g.peer] -= int(op.h.Total)
		op.rc = nil
		c.launchWaiting()
	}
	if err != nil && g.err == nil {
		g.err = err
	}
	if g.left--; g.left == 0 {
		c.finishGroup(g)
	}
	*op = rdmaOp{next: c.rd.freeOps}
	c.rd.freeOps = op
}

// roomFor reports whether op's bytes fit the window toward its peer (a
// chunk always goes when nothing else is in flight there). On an
// unreliable device running ahead of the receiver loses packets; on a
// reliable one it only grows the frames in flight past the caches (a
// quarter of 64 MiB Puts' bandwidth over inproc).
func (c *Context) roomFor(op *rdmaOp) bool {
	out := c.rd.out[op.g.peer]
	return out == 0 || out+int(op.h.Total) <= c.rd.cwnd[op.g.peer]
}

// Congestion control of RDMA toward a peer over an unreliable device,
// additive increase and multiplicative decrease on the bytes in flight,
// as TCP's: the origin hears nothing while a chunk streams, so a window
// of RDMAWindow bytes sent back to back overruns any queue smaller than
// it on the way (a rate-limited link's), and every loss costs a redrive
// after a timeout. A redrive halves the window, down to one
// chunk; a chunk completed at its first drive grows it by a chunk's worth
// over a window's worth of completions, up to RDMAWindow. A reliable
// device loses nothing: the window stays RDMAWindow.

// grow opens peer's window after a chunk of n bytes completed at its
// first drive (c.mu held).
func (c *Context) grow(peer hal.Rank, n int) {
	w := &c.rd.cwnd[peer]
	if *w < c.cfg.RDMAWindow {
		*w = min(*w+max(n*n / *w, 1), c.cfg.RDMAWindow)
	}
}

// shrink halves peer's window after a loss (a redrive; c.mu held).
func (c *Context) shrink(peer hal.Rank) {
	w := &c.rd.cwnd[peer]
	*w = max(*w/2, rdmaChunk)
	c.rd.stats.WindowCuts++
}

func (c *Context) wait(op *rdmaOp) {
	c.rd.waiting = append(c.rd.waiting, op)
	c.rd.nwait[op.g.peer]++
}

// launchWaiting launches, oldest first, the waiting chunks that now have
// an rCxt and room toward their peer; toward each peer they go in order.
func (c *Context) launchWaiting() {
	if len(c.rd.waiting) == 0 {
		return
	}
	w := c.rd.waiting
	keep := c.rd.spare[:0]
	blocked := c.rd.blocked
	clear(blocked)
	for i, op := range w {
		if c.rd.pool.InUse() >= c.cfg.MaxRCxt {
			keep = append(keep, w[i:]...)
			break
		}
		p := op.g.peer
		if blocked[p] || !c.roomFor(op) {
			blocked[p] = true
			keep = append(keep, op)
			continue
		}
		c.rd.nwait[p]--
		c.start(op)
	}
	clear(w)
	c.rd.waiting, c.rd.spare = keep, w[:0]
}

// finishGroup reports a whole transfer done (c.mu held).
func (c *Context) finishGroup(g *rdmaGroup) {
	c.rd.groups--
	if g.trk != 0 {
		c.cfg.Track.Remove(g.trk)
	}
	if g.kind == opRead {
		c.tpt.Deregister(g.local)
	}
	if err := g.err; err != nil {
		g.org.fail(err)
		g.cmp.fail(err)
	} else if g.tcntr != 0 {
		c.notifyLocked(g.peer, g.tcntr)
	}
	if g.org != nil {
		g.org.incr()
	}
	if g.cmp != nil {
		g.cmp.incr()
	}
	c.note(g.notify, g.err)
	c.wakeLocked()
	*g = rdmaGroup{next: c.rd.freeGroups}
	c.rd.freeGroups = g
}

// newGroup takes a transfer's state from the free list.
func (c *Context) newGroup(kind opKind, peer hal.Rank, o *SendOpts) *rdmaGroup {
	g := c.rd.freeGroups
	if g == nil {
		g = new(rdmaGroup)
	} else {
		c.rd.freeGroups = g.next
	}
	*g = rdmaGroup{kind: kind, peer: peer, org: o.Origin, cmp: o.Completion, notify: o.Notify}
	return g
}

// rdmaTick redrives transfers whose completion is overdue and folds the
// next deadline into nextTick (c.mu held; unreliable devices).
func (c *Context) rdmaTick(now time.Time) {
	if c.rd.groups == 0 {
		return
	}
	for _, op := range c.rd.ops {
		if op == nil || !op.sentAll || op.rto == 0 { // (rto 0: a reliable device toward the peer)
			continue
		}
		if d := c.timerStart(op).Add(op.rto); d.After(op.deadline) {
			op.deadline = d // the drives ahead of it were done late
		}
		if now.Before(op.deadline) {
			// A known deadline: a blocked waiter already sleeps until
			// it (or sooner), so it is folded in, not woken for.
			c.foldTimer(op.deadline)
			continue
		}
		if op.t == hal.FrameRDMAReadReq {
			if left := c.rd.eng.ReadLeft(op.g.peer, op.rc); left != 0 && (op.left == 0 || left < op.left) {
				op.left, op.lastGood = left, now // still arriving
				op.deadline = now.Add(op.rto)
				c.foldTimer(op.deadline) // later than the one it replaces
				continue
			}
		}
		if now.Sub(op.lastGood) > c.cfg.PeerTimeout {
			c.failPeer(op.g.peer, fmt.Sprintf("RDMA transfer unanswered for %v", c.cfg.PeerTimeout))
			continue
		}
		c.redrive(op, now)
	}
}

// timerStart is when op's redrive timer runs from: when its drive's last
// packet went to the device, or, if later, when the latest drive toward
// the peer sent before it completed. A drive queued behind others on the
// way (in the device, the network, the peer's receive queue) cannot be
// answered before them, so its timer starts once they are done: its
// timeout is then one drive's service time and a round trip, whatever
// the queue ahead of it.
func (c *Context) timerStart(op *rdmaOp) time.Time {
	p := op.g.peer
	if op.seq > c.rd.doneSeq[p] && c.rd.doneAt[p].After(op.sentAt) {
		return c.rd.doneAt[p]
	}
	return op.sentAt
}

// redriveMissing drives a write again under a new tid with the segments
// its target reported missing (bitmap rep from offset off), ahead of the
// chunks queued after it: the report came a round trip after the loss,
// and the timeout stays as it was.
func (c *Context) redriveMissing(op *rdmaOp, off uint64, rep []byte) {
	tid := op.rc.Tid() + 1
	if op.stream.RestartMissing(tid, off, rep) == 0 {
		c.rd.stats.StaleCompletions++ // names none of its segments
		return
	}
	op.rc.Redrive()
	c.countRedrive(op, tid, true)
	c.rd.stats.Reports++
	op.probed = false
	op.lastGood = c.pollNow
	c.queueStreamFront(outStream{s: &op.stream, op: op})
}

// reread asks again, under tid, for what a read still lacks: this rank
// places a read's data, so it knows what is missing. The segments missing
// when the engine reports (an unreliable device), else the range from the
// first to the last.
func (c *Context) reread(op *rdmaOp, tid uint32) {
	if off, bm := c.rd.eng.ReadMissing(op.g.peer, op.rc); len(bm) > 0 {
		op.stream.RestartReadMissing(tid, off, bm)
	} else {
		off, n := c.rd.eng.MissingRange(op.g.peer, op.rc)
		op.stream.RestartRange(tid, off, n)
	}
	op.h.Tid = tid
	op.left = 0
	c.rd.eng.ExpectRead(op.g.peer, op.rc, &op.h)
}

// rereadMissing asks again at once for the segments a read's drive lost
// (its last packet came with segments missing), ahead of the chunks
// queued after it; the timeout stays as it was.
func (c *Context) rereadMissing(op *rdmaOp) {
	tid := op.rc.Redrive()
	c.countRedrive(op, tid, true)
	c.rd.stats.Reports++
	op.lastGood = c.pollNow
	c.reread(op, tid)
	c.queueStreamFront(outStream{s: &op.stream, op: op})
}

// countRedrive counts a drive after a chunk's first, and cuts the window
// toward its peer once per chunk (its later drives are the same loss) when
// loss is known: not for a probe, which a late completion may answer.
func (c *Context) countRedrive(op *rdmaOp, tid uint32, lost bool) {
	if lost && !op.cut {
		c.shrink(op.g.peer)
		op.cut = true
	}
	op.drives++
	c.rd.stats.Redrives++
	c.peerStats[op.g.peer].Redrives++
	if trace.On(trace.Internal) {
		c.traceRedrive(op, tid)
	}
	op.stream.Hdr.DstEp = c.dstEpoch(op.g.peer)
}

// queueStreamFront queues o behind the stream being pushed and the
// streams queued so before it, in the order they came: a redrive's few
// packets, which the peer is waiting for, and the answer to a peer's
// read, whose timer is running, do not wait behind a window of new
// chunks. (In the order they came: served last first, a peer's later
// reads overtook its earlier ones, whose timers then ran out.)
func (c *Context) queueStreamFront(o outStream) {
	o.ahead = true
	c.queueStream(o)
	q := c.rd.queue
	i := 1
	for i < len(q)-1 && q[i].ahead {
		i++
	}
	if n := len(q); i < n-1 {
		copy(q[i+1:], q[i:n-1])
		q[i] = o
	}
}

// redrive sends a transfer again under a new tid after a timeout, with a
// doubled timeout: a write's last packet alone (a probe, which its target
// answers with the completion or a report of what is missing) unless the
// last timeout probed already, else the whole chunk; a read's missing
// range.
func (c *Context) redrive(op *rdmaOp, now time.Time) {
	tid := op.rc.Redrive()
	c.countRedrive(op, tid, op.t == hal.FrameRDMAReadReq || op.probed)
	op.rto = min(2*op.rto, c.cfg.MaxRTO)
	if op.t == hal.FrameRDMAReadReq {
		c.reread(op, tid)
	} else if !op.probed {
		op.stream.RestartTail(tid)
		op.probed = true
		c.rd.stats.Probes++
	} else {
		op.stream.Restart(tid)
		op.probed = false
	}
	c.queueStreamFront(outStream{s: &op.stream, op: op})
	c.pushRDMA(now)
}

// dropRDMA fails every transfer with peer, and stops serving its reads
// (c.mu held): it failed or restarted.
func (c *Context) dropRDMA(peer hal.Rank, err error) {
	for _, op := range c.rd.ops {
		if op != nil && op.g.peer == peer {
			c.finishOp(op, err)
		}
	}
	var keep []*rdmaOp
	for _, op := range c.rd.waiting {
		if op.g.peer == peer {
			c.finishOp(op, err)
		} else {
			keep = append(keep, op)
		}
	}
	c.rd.waiting, c.rd.nwait[peer] = keep, 0
	for k, s := range c.rd.serving {
		if k.peer == peer {
			c.unqueue(s)
			delete(c.rd.serving, k)
			c.rd.eng.ReleaseStream(s)
		}
	}
}

// rdmaPending reports whether RDMA packets wait for the device.
func (c *Context) rdmaPending() bool { return len(c.rd.queue) > 0 || len(c.rd.dones) > 0 }

// putRDMA is Put by RDMA write.
func (c *Context) putRDMA(tgt hal.Rank, dst hal.PVO, src []byte, o SendOpts) error {
	return c.write(opWrite, tgt, hal.RDMAHdr{PVO: dst}, src, &o)
}

// write starts an RDMA write of src described by h (direct or half-RDMA)
// with o's counters.
func (c *Context) write(kind opKind, tgt hal.Rank, h hal.RDMAHdr, src []byte, o *SendOpts) error {
	h.Total, h.Cookie = uint64(len(src)), o.Target
	if o.Target != 0 {
		h.Notify = hal.NotifyTarget
	}
	c.mu.Lock()
	err := c.startTransfer(c.newGroup(kind, tgt, o), hal.FrameRDMAWrite, h, src)
	c.mu.Unlock()
	return err
}

// getRDMA is Get by RDMA read: dst is registered for the transfer, so the
// answer is placed like any RDMA write, checked against this rank's TPT.
func (c *Context) getRDMA(tgt hal.Rank, src hal.PVO, dst []byte, o SendOpts) error {
	local, err := c.tpt.RegisterLocal(dst, hal.AccessWrite)
	if err != nil {
		return fmt.Errorf("lapi: get: %w", err)
	}
	h := hal.RDMAHdr{Total: uint64(len(dst)), PVO: src, Local: local}
	c.mu.Lock()
	g := c.newGroup(opRead, tgt, &o)
	g.cmp, g.local = nil, local // a get's Completion is its Origin
	err = c.startTransfer(g, hal.FrameRDMAReadReq, h, nil)
	c.mu.Unlock()
	if err != nil {
		c.tpt.Deregister(local)
	}
	return err
}
