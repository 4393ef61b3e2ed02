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
	opWrite     opKind = iota + 1 // Put
	opRead                        // Get
	opAcc                         // Accumulate (half-RDMA)
	opFIFOWrite                   // PutToFIFO (half-send RDMA write)
	opFIFORead                    // GetToFIFO (half-send RDMA read)
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
	case opFIFOWrite:
		return "PutToFIFO"
	case opFIFORead:
		return "GetToFIFO"
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
	tcntr    uint32      // a chunked transfer's target counter, bumped by an AM at the end
	local    hal.PVO     // a read's destination, registered for the transfer
	fifo     FIFOHandler // a half-send read's: takes the packets
	none     bool        // completion "none": no completion asked for (SendOpts.NoCompletion)
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
	off      uint64      // the chunk's offset in its transfer
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
	c          *Context
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
	dones      []rdmaDone    // completions the device had no room for, oldest first
	sentNone   []*rdmaOp     // chunks asking no completion, sent: done once the device is flushed
	fifos      []FIFOHandler // RegisterFIFO's
	early      []earlyFIFO   // packets for FIFOs not registered yet (early.go)
	earlyBytes int
	sources    []FIFOSource // RegisterFIFOSource's
	freeOps    *rdmaOp
	freeGroups *rdmaGroup
	fifoFree   []*fifoMsg // fifoAM messages taken, for reuse (halfrdma.go)
	serving    map[servKey]*hal.RDMAStream
	hdrs       [][]byte // header buffers the device may hold until Flush
	used       int
	seg        int
	stage      bool // a packet's data is copied after its header in its slot (initRDMA)
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

// rdmaHdrSlab is how many packets may go to the device between flushes:
// as many as a UDP device's flush carries by default (udp.DefaultBatch,
// six full segmented datagrams at an Ethernet MTU), since the kernel's
// cost is per system call and per datagram more than per byte. Over an
// unreliable device pushRDMA also polls the device and sends the
// acknowledgements owed after each slab, so that what the peer sends this
// way (acknowledgements, completions, reports, its protocol's messages)
// is not held behind a whole window of bulk data, and the round trips
// timed meanwhile are not inflated by more than a slab's time on the wire.
const rdmaHdrSlab = 264

// rdmaStageMax is the largest packet whose data pushStream copies into
// its header slot toward an unreliable peer, so that the slots of a flush
// lie back to back and the UDP device sends a run of them as one piece of
// memory: the kernel's cost of a send grows with the pieces it gathers
// (a header and a data slice each) as well as the bytes, and the copy,
// into memory the CRC then reads from the cache, costs the sender less
// than the gathering it saves. With larger packets a piece carries enough
// bytes, and the slots would take more memory than they save.
const rdmaStageMax = 4096

func (r *rdmaState) initRDMA() {
	c := r.c
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
	if frame := hal.HeaderLen + hal.RDMAHdrLen + r.seg; !c.reliable && frame <= rdmaStageMax {
		// A write's packet fills its slot exactly: its successor's
		// header follows its data.
		r.stage, slot = true, max(slot, frame)
	}
	r.hdrs = make([][]byte, rdmaHdrSlab)
	slab := make([]byte, rdmaHdrSlab*slot)
	for i := range r.hdrs {
		r.hdrs[i] = slab[i*slot : (i+1)*slot : (i+1)*slot] // an append past it reallocates
	}
	if c.ri.reint != nil {
		r.eng.SetEpoch(uint32(c.ri.reint.Epoch()))
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
func (r *rdmaState) useRDMA(tgt hal.Rank, n int) bool {
	c := r.c
	return tgt != c.rank && c.cfg.RDMAThreshold >= 0 && n >= c.cfg.RDMAThreshold
}

// rdmaChunk is the most one rCxt carries: a longer transfer is cut into
// chunks driven side by side, so a loss costs a chunk's redrive, not the
// whole transfer's, and completion times (the redrive timer's samples)
// do not grow with the transfer.
const rdmaChunk = 1 << 20

// startTransfer begins a transfer of h.Total bytes (c.mu held): its chunks
// get an rCxt each (or wait for one) and are queued for the device.
func (r *rdmaState) startTransfer(g *rdmaGroup, t hal.FrameType, h hal.RDMAHdr, mem []byte) error {
	c := r.c
	switch {
	case c.closed:
		return ErrClosed
	case c.peerFault(g.peer) != nil:
		return c.peerFault(g.peer)
	}
	if err := c.ri.rdmaCheck(g.peer); err != nil {
		return err
	}
	if g.none {
		c.fenceOwed[g.peer] = true // no completion will say it is placed: Fence probes
	} else {
		h.Notify |= hal.NotifyOrigin // the origin must hear, to know when to redrive
		if h.Total > rdmaChunk && h.Notify&hal.NotifyTarget != 0 {
			// Chunks complete at the target in any order: the target
			// hears once, from the origin, when the last one has.
			h.Notify &^= hal.NotifyTarget
			g.tcntr = h.Cookie
		}
	}
	r.groups++
	if t := c.cfg.Track; t != nil {
		g.trk = t.Add(fmt.Sprintf("RDMA %s of %d bytes to rank %d (rCxts in flight)", g.kind, h.Total, g.peer), 0)
	}
	switch g.kind {
	case opWrite, opFIFOWrite:
		r.stats.Writes++
	case opRead, opFIFORead:
		r.stats.Reads++
	case opAcc:
		r.stats.Accumulates++
	}
	for off := uint64(0); ; off += rdmaChunk {
		n := min(rdmaChunk, h.Total-off)
		op := r.freeOps
		if op == nil {
			op = new(rdmaOp)
		} else {
			r.freeOps = op.next
		}
		*op = rdmaOp{g: g, t: t, h: h}
		op.h.Total, op.h.PVO, op.h.Local, op.off = n, h.PVO.Add(off), h.Local.Add(off), off
		if g.kind == opFIFOWrite {
			op.h.Arg |= uint32(off/rdmaChunk) << fifoChunkShift // the target's handler gets offsets in the transfer
		}
		if t == hal.FrameRDMAWrite {
			op.mem = mem[off : off+n]
		}
		g.left++
		r.launch(op)
		if off+n >= h.Total {
			break
		}
	}
	var now time.Time
	if !c.reliable {
		now = c.now() // only redrive timers keep time
	}
	r.pushRDMA(now)
	return nil
}

// launch gives a chunk an rCxt and queues its first drive, or has it wait
// for an rCxt (c.mu held).
func (r *rdmaState) launch(op *rdmaOp) {
	c := r.c
	peer := op.g.peer
	if r.nwait[peer] > 0 || !r.roomFor(op) || r.pool.InUse() >= c.cfg.MaxRCxt {
		r.wait(op)
		return
	}
	r.start(op)
}

// start gives a chunk that has room an rCxt and queues its first drive.
func (r *rdmaState) start(op *rdmaOp) {
	c := r.c
	peer := op.g.peer
	rc, err := r.pool.Alloc()
	if err != nil { // cannot happen: the caller checked MaxRCxt
		r.finishOp(op, fmt.Errorf("lapi: RDMA to rank %d: %w", peer, err))
		return
	}
	r.out[peer] += int(op.h.Total)
	op.rc = rc
	h := op.h
	h.RCxt, h.Key, h.Tid = rc.ID, rc.Key, rc.Begin()
	h.Base, h.Seg, h.DstEp = h.Tid, uint32(r.seg), c.ri.dstEpoch(peer)
	s := &op.stream
	if err := s.Reset(hal.Header{JobKey: c.cfg.JobKey, Src: c.rank, Dst: peer, Life: c.life}, op.t, h, op.mem); err != nil {
		// cannot happen: lapi built h
		r.pool.Free(rc)
		op.rc = nil
		r.finishOp(op, fmt.Errorf("lapi: RDMA to rank %d: %w", peer, err))
		return
	}
	op.h = h
	if op.t == hal.FrameRDMAReadReq {
		r.eng.ExpectRead(peer, rc, &op.h)
	}
	for int(rc.ID) >= len(r.ops) {
		r.ops = append(r.ops, nil)
	}
	r.ops[rc.ID] = op
	if !c.reliableTo(peer) {
		op.lastGood = c.now()
		link := c.rel.links[peer].rtt.rto(c.cfg.InitRTO, c.cfg.MinRTO, c.cfg.MaxRTO)
		op.rto = max(2*link, r.rtt[peer].rto(c.cfg.InitRTO, c.cfg.MinRTO, c.cfg.MaxRTO))
	}
	if trace.On(trace.Hot) {
		c.tr.traceRDMAStart(op)
	}
	r.queueStream(outStream{s: s, op: op})
}

func (r *rdmaState) queueStream(o outStream) {
	if o.op != nil {
		o.op.queued, o.op.sentAll = true, false
	}
	r.queue = append(r.queue, o)
}

// pushRDMA hands queued RDMA packets to the device while it takes them
// (c.mu held). Over an unreliable device it pauses after each slab of
// packets to take what has arrived (pause), so now is read again there.
func (r *rdmaState) pushRDMA(now time.Time) {
	c := r.c
	if r.pushing {
		return // a frame polled in a pause: the running push takes the queue
	}
	r.pushing = true
	defer func() { r.pushing = false }()
	if len(r.dones) > 0 {
		r.pushDones()
	}
	pushed := 0
	for {
		for len(r.queue) > 0 {
			o := r.queue[0]
			if c.peerFault(o.s.Peer) != nil {
				r.popStream()
				continue
			}
			if !c.cm.pushTPT(o.s.Peer) {
				return // TPT changes go first; progress retries
			}
			if !r.pushStream(o, &pushed, &now) {
				return
			}
		}
		if c.rel.flushLocked() != nil || len(r.sentNone) == 0 {
			return
		}
		// The device holds none of their data now: chunks that asked no
		// completion are done, and those waiting for their rCxts go.
		r.finishSent()
		if len(r.queue) == 0 {
			return
		}
	}
}

// pushStream hands the packets of o, the stream at the head of the queue,
// to the device (pushRDMA's body; pushed counts the packets of the push,
// and now is read again at each pause). It reports whether the push goes
// on with the next stream: false when the device holds every header slot
// or is full, and progress retries.
func (r *rdmaState) pushStream(o outStream, pushed *int, now *time.Time) bool {
	c := r.c
	for !o.s.Done() {
		slot := r.hdrSlot()
		if slot == nil {
			return false // the device still holds the headers
		}
		hdr, data, err := o.s.Next(slot)
		if err != nil {
			// Serving a read whose region was deregistered under
			// it: tell the origin which check failed.
			r.popStream()
			r.rdmaFault(o.s, err)
			r.served(o.s)
			return true
		}
		if !c.reliableTo(o.s.Peer) {
			if r.stage && len(data) > 0 && len(hdr)+len(data) <= len(slot) {
				data = slot[len(hdr) : len(hdr)+copy(slot[len(hdr):], data)]
			}
			hal.Seal(hdr, data)
		}
		err = c.dev.Send(hdr, data)
		if errors.Is(err, hal.ErrNoResource) {
			// Flush and start the packet again: a flush that
			// succeeds hands the header slab back, so the packet
			// is encoded afresh into the slot now current.
			if !r.reclaimHdrs() {
				return false // still full: progress retries this packet
			}
			continue
		}
		if err != nil {
			if c.reliableTo(o.s.Peer) || fatalSendErr(err) {
				r.popStream()
				c.rel.failPeer(o.s.Peer, err.Error())
				return true
			}
			c.stats.SendErrors++ // a loss: the redrive covers it
		} else {
			c.rel.countSent(o.s.Peer, len(data))
			if trace.On(trace.HotDetail) {
				c.tr.traceSendRDMA(hdr, len(data))
			}
		}
		r.used++
		if o.op != nil && o.op.drives > 0 {
			r.stats.Resent++
		}
		o.s.Advance()
		if *pushed++; *pushed%rdmaHdrSlab == 0 && !c.reliable {
			*now = r.pause()
			if len(r.queue) == 0 || r.queue[0].s != o.s {
				return true // what arrived finished or replaced it
			}
		}
	}
	r.popStream()
	r.streamSent(o, *now)
	return true
}

// streamSent is the end of o's packets: a transfer's chunk starts its
// redrive timer over an unreliable device, a stream that served a peer's
// read is done.
func (r *rdmaState) streamSent(o outStream, now time.Time) {
	op := o.op
	if op == nil {
		r.served(o.s)
		return
	}
	op.queued, op.sentAll = false, true
	if op.g.none {
		r.sentNone = append(r.sentNone, op) // done at the next flush
		return
	}
	if op.rto > 0 { // an unreliable device toward the peer: a timer redrives
		r.sent[op.g.peer]++
		op.seq = r.sent[op.g.peer]
		op.sentAt, op.deadline = now, now.Add(op.rto)
		r.armTimer(op.deadline)
	}
}

// finishSent completes the chunks that asked no completion and whose
// packets the device has flushed (c.mu held). An entry whose chunk was
// finished meanwhile (its peer failed) and reused is skipped, unless
// reused by one that is itself sent.
func (r *rdmaState) finishSent() {
	for i, op := range r.sentNone {
		r.sentNone[i] = nil
		if op.g != nil && op.g.none && op.sentAll && op.rc != nil {
			r.finishOp(op, nil)
		}
	}
	r.sentNone = r.sentNone[:0]
}

// pause is pushRDMA's break after a slab of packets over an unreliable
// device (c.mu held): it flushes, takes what the device has received
// (acknowledgements, completions, reports, the peers' messages and read
// requests, which would otherwise wait behind the whole queue), sends the
// acknowledgements owed and the packets queued toward the peers, and
// returns the time now, which the rest of the push uses.
func (r *rdmaState) pause() time.Time {
	c := r.c
	c.rel.flushLocked()
	c.pr.pollLocked() // it reads the clock: RDMA is queued (keepsTime)
	now := c.pr.pollNow
	for _, p := range c.rel.active {
		if c.reliableTo(p) {
			continue
		}
		l := &c.rel.links[p]
		if c.rel.queues[p].head != nil {
			c.rel.pushLocked(p, now)
		}
		if l.needAck(now) {
			c.rel.sendAck(p)
		}
		// The pass's tick ran before these arrivals: a delayed
		// acknowledgement's timer is folded in here.
		if !l.ackDue.IsZero() {
			r.foldTimer(l.ackDue)
		}
	}
	return now
}

// hdrSlot is the next header buffer of the slab, flushing the device to
// get the slab back when it is used up; nil while the device still holds
// them. A packet sent from it must be counted in rd.used.
func (r *rdmaState) hdrSlot() []byte {
	c := r.c
	if r.used == len(r.hdrs) && (c.rel.flushLocked() != nil || r.used != 0) {
		return nil
	}
	return r.hdrs[r.used]
}

// reclaimHdrs flushes the device after it refused a packet, and reports
// whether that handed the header slab back, so that the packet is worth
// encoding again into the slot now current.
func (r *rdmaState) reclaimHdrs() bool {
	c := r.c
	used := r.used
	return c.rel.flushLocked() == nil && r.used != used
}

// popStream drops the stream at the head of the queue. The queue is short
// (the chunks in the window, the reads being served): shifting it keeps
// its array for the next append.
func (r *rdmaState) popStream() {
	n := copy(r.queue, r.queue[1:])
	r.queue[n] = outStream{}
	r.queue = r.queue[:n]
}

// rdmaFault tells the origin of a served read that it failed a check.
func (r *rdmaState) rdmaFault(s *hal.RDMAStream, err error) {
	c := r.c
	r.stats.Faults++
	if trace.On(trace.Internal) {
		c.tr.traceFault("read by", s.Peer, s.Hdr.RCxt, s.Hdr.Tid, hal.FaultCheck(hal.FaultCode(err)))
	}
	r.sendDone(s.Peer, s.Hdr.Completion(hal.FaultCode(err)))
}

func (r *rdmaState) opFor(id uint32) *rdmaOp {
	if int(id) >= len(r.ops) {
		return nil
	}
	return r.ops[id]
}

// unqueue removes a stream from the send queue.
func (r *rdmaState) unqueue(s *hal.RDMAStream) {
	q := r.queue
	for i := range q {
		if q[i].s == s {
			n := copy(q[i:], q[i+1:]) + i
			q[n] = outStream{}
			r.queue = q[:n]
			return
		}
	}
}

// finishOp completes a chunk, successfully or with err, and releases its
// rCxt to the next chunk waiting for one (c.mu held).
func (r *rdmaState) finishOp(op *rdmaOp, err error) {
	c := r.c
	g := op.g
	if op.queued {
		r.unqueue(&op.stream)
		op.queued = false
	}
	if rc := op.rc; rc != nil {
		if trace.On(trace.Hot) {
			c.tr.traceRDMADone(op, err)
		}
		if op.t == hal.FrameRDMAReadReq {
			r.eng.EndRead(g.peer, rc)
		}
		if err == nil && op.rto > 0 && !op.sentAt.IsZero() {
			now := c.now()
			if op.drives == 0 {
				// Karn's rule: only a first drive's completion times
				// it, from when the drives ahead of it were done.
				r.rtt[g.peer].sample(now.Sub(r.timerStart(op)))
			}
			if p := g.peer; op.seq > r.doneSeq[p] {
				r.doneSeq[p], r.doneAt[p] = op.seq, now
			}
		}
		if err == nil && op.drives == 0 && op.rto > 0 {
			r.grow(g.peer, int(op.h.Total))
		}
		r.ops[rc.ID] = nil
		r.pool.Free(rc)
		r.out[g.peer] -= int(op.h.Total)
		op.rc = nil
		r.launchWaiting()
	}
	if err != nil && g.err == nil {
		g.err = err
	}
	if g.left--; g.left == 0 {
		r.finishGroup(g)
	}
	*op = rdmaOp{next: r.freeOps}
	r.freeOps = op
}

// cancelReads ends the RDMA reads in flight or waiting whose Origin
// counter is k, failing them with err (c.mu held): the engine stops
// expecting their data and their local regions are released, so a late
// or redriven answer places nothing (a collective's part that failed or
// was aborted).
func (r *rdmaState) cancelReads(k *Counter, err error) {
	keep := r.waiting[:0]
	for _, op := range r.waiting {
		if op.g.kind == opRead && op.g.org == k {
			r.nwait[op.g.peer]--
			r.finishOp(op, err) // it has no rCxt: nothing launches meanwhile
			continue
		}
		keep = append(keep, op)
	}
	clear(r.waiting[len(keep):])
	r.waiting = keep
	for _, op := range r.ops {
		if op != nil && op.g.kind == opRead && op.g.org == k {
			r.finishOp(op, err)
		}
	}
}

// roomFor reports whether op's bytes fit the window toward its peer (a
// chunk always goes when nothing else is in flight there). On an
// unreliable device running ahead of the receiver loses packets; on a
// reliable one it only grows the frames in flight past the caches (a
// quarter of 64 MiB Puts' bandwidth over inproc).
func (r *rdmaState) roomFor(op *rdmaOp) bool {
	out := r.out[op.g.peer]
	return out == 0 || out+int(op.h.Total) <= r.cwnd[op.g.peer]
}

// Congestion control of RDMA toward a peer over an unreliable device,
// additive increase and multiplicative decrease on the bytes in flight,
// as TCP's: the origin hears nothing while a chunk streams, so a window
// of RDMAWindow bytes sent back to back overruns any queue smaller than
// it on the way (a rate-limited link's), and every loss costs a redrive
// after a timeout. A redrive halves the window, down to one chunk
// (or RDMAWindow, if that is less); a chunk completed at its first
// drive grows it by a chunk's worth over a window's worth of
// completions, up to RDMAWindow. A reliable
// device loses nothing: the window stays RDMAWindow.

// grow opens peer's window after a chunk of n bytes completed at its
// first drive (c.mu held).
func (r *rdmaState) grow(peer hal.Rank, n int) {
	c := r.c
	w := &r.cwnd[peer]
	if *w < c.cfg.RDMAWindow {
		*w = min(*w+max(n*n / *w, 1), c.cfg.RDMAWindow)
	}
}

// shrink halves peer's window after a loss (a redrive; c.mu held).
func (r *rdmaState) shrink(peer hal.Rank) {
	w := &r.cwnd[peer]
	*w = max(*w/2, min(rdmaChunk, r.c.cfg.RDMAWindow))
	r.stats.WindowCuts++
}

func (r *rdmaState) wait(op *rdmaOp) {
	r.waiting = append(r.waiting, op)
	r.nwait[op.g.peer]++
}

// launchWaiting launches, oldest first, the waiting chunks that now have
// an rCxt and room toward their peer; toward each peer they go in order.
func (r *rdmaState) launchWaiting() {
	c := r.c
	if len(r.waiting) == 0 {
		return
	}
	w := r.waiting
	keep := r.spare[:0]
	blocked := r.blocked
	clear(blocked)
	for i, op := range w {
		if r.pool.InUse() >= c.cfg.MaxRCxt {
			keep = append(keep, w[i:]...)
			break
		}
		p := op.g.peer
		if blocked[p] || !r.roomFor(op) {
			blocked[p] = true
			keep = append(keep, op)
			continue
		}
		r.nwait[p]--
		r.start(op)
	}
	clear(w)
	r.waiting, r.spare = keep, w[:0]
}

// finishGroup reports a whole transfer done (c.mu held).
func (r *rdmaState) finishGroup(g *rdmaGroup) {
	c := r.c
	r.groups--
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
		c.am.notifyLocked(g.peer, g.tcntr)
	}
	if g.org != nil {
		g.org.incr()
	}
	if g.cmp != nil {
		g.cmp.incr()
	}
	c.am.note(g.notify, g.err)
	c.pr.wakeLocked()
	*g = rdmaGroup{next: r.freeGroups}
	r.freeGroups = g
}

// newGroup takes a transfer's state from the free list.
func (r *rdmaState) newGroup(kind opKind, peer hal.Rank, o *SendOpts) *rdmaGroup {
	g := r.freeGroups
	if g == nil {
		g = new(rdmaGroup)
	} else {
		r.freeGroups = g.next
	}
	*g = rdmaGroup{kind: kind, peer: peer, org: o.Origin, cmp: o.Completion, notify: o.Notify}
	return g
}

// rdmaPending reports whether RDMA packets wait for the device.
func (r *rdmaState) rdmaPending() bool {
	return len(r.queue) > 0 || len(r.dones) > 0 || len(r.sentNone) > 0
}

// putRDMA is Put by RDMA write; fire-and-forget the way noneByAM says.
func (r *rdmaState) putRDMA(tgt hal.Rank, dst hal.PVO, src []byte, o SendOpts) error {
	if r.noneByAM(tgt, len(src), &o) {
		return r.c.putAM(tgt, dst, src, o)
	}
	return r.write(opWrite, tgt, hal.RDMAHdr{PVO: dst}, src, &o)
}

// write starts an RDMA write of src described by h (direct or half-RDMA)
// with o's counters.
func (r *rdmaState) write(kind opKind, tgt hal.Rank, h hal.RDMAHdr, src []byte, o *SendOpts) error {
	c := r.c
	h.Total, h.Cookie = uint64(len(src)), o.Target
	if o.Target != 0 {
		h.Notify = hal.NotifyTarget
	}
	c.mu.Lock()
	g := r.newGroup(kind, tgt, o)
	g.none = o.NoCompletion
	err := r.startTransfer(g, hal.FrameRDMAWrite, h, src)
	c.mu.Unlock()
	return err
}

// getRDMA is Get by RDMA read: dst is registered for the transfer, so the
// answer is placed like any RDMA write, checked against this rank's TPT.
func (r *rdmaState) getRDMA(tgt hal.Rank, src hal.PVO, dst []byte, o SendOpts) error {
	c := r.c
	local, err := c.tpt.RegisterLocal(dst, hal.AccessWrite)
	if err != nil {
		return fmt.Errorf("lapi: get: %w", err)
	}
	h := hal.RDMAHdr{Total: uint64(len(dst)), PVO: src, Local: local}
	c.mu.Lock()
	g := r.newGroup(opRead, tgt, &o)
	g.cmp, g.local = nil, local // a get's Completion is its Origin
	err = r.startTransfer(g, hal.FrameRDMAReadReq, h, nil)
	c.mu.Unlock()
	if err != nil {
		c.tpt.Deregister(local)
	}
	return err
}
