package hal

// RDMAEngine is the software RDMA engine of a rank, for devices without
// native RDMA: it places self-describing RDMA packets into the rank's TPT
// regions, in any arrival order, and says when transfers complete. Like
// the reintegration protocol it is a state machine with no I/O and no
// clock: Handle takes a frame and returns events for the driver and
// header-only frames to send. It never retransmits: the origin's driver
// redrives a transfer under a new tid when its completion does not come.
//
// Tid rules, per (origin, rCxt), at whichever end places data (the target
// of a write, the origin of a read):
//
//   - a lower tid than the transfer's current one is stale: dropped and
//     counted, so an abandoned drive never writes memory;
//   - a higher tid with a new base starts a new transfer;
//   - a higher tid with the same base is a redrive of the current
//     transfer: it continues it, keeping what earlier drives placed (the
//     bytes are the same), so a long transfer over a lossy link completes
//     after a few drives instead of needing one that loses nothing; and a
//     redrive of a transfer that already completed is answered with a
//     completion, not placed again, so memory the target has since reused
//     is never overwritten;
//   - keys are not compared for order: an origin re-keys a context each
//     time it reuses it, but its tids keep growing across transfers, so a
//     packet of a transfer the context carried before is stale by its tid
//     (a restarted origin's fresh tids are the reintegration protocol's
//     business: ResetPeer);
//   - an equal tid continues the transfer; a packet already placed (a
//     duplicate) is dropped, so half-RDMA reduces every packet once.
//
// Not safe for concurrent use: the driver's progress lock guards it.
type RDMAEngine struct {
	tpt     *TPT
	in      [2][][]*xfer // [read][peer][rCxt]: writes into this rank, and reads it asked for
	serve   map[xferKey]uint32
	ev      []RDMAEvent
	out     []RDMAMsg
	stats   RDMAStats
	streams []*RDMAStream // released read-serving streams, for reuse
	epoch   uint32        // this rank's incarnation (low half); 0: not checked
	repLen  int           // the largest report bitmap to send; 0: none (SetReportLen)
	rep     []byte        // the bitmap of the report being sent
}

type xferKey struct {
	peer Rank
	rcxt uint32
	read bool // a read this rank asked for (the rCxt is this rank's)
}

// xfer is one transfer being placed at this rank.
type xfer struct {
	key, tid, base uint32
	total          uint64
	seg            uint32
	left           uint64 // segments not yet placed
	bits           []uint64
	done           bool  // every segment placed
	ended          bool  // a read no longer wanted: its packets are stale
	code           uint8 // a protection check failed: nothing more is placed
	notify         Notify
	place          Placement
	cookie, arg    uint32
	pvo            PVO
	mem            []byte // the region as last checked, valid while removals is
	removals       uint64 // the TPT's count when it was checked
}

// RDMAEventKind says what an RDMAEvent reports.
type RDMAEventKind uint8

// Events.
const (
	// EvTargetDone: a write (direct or half-RDMA) into this rank that
	// asked NotifyTarget completed: Peer, RCxt, Cookie, Len.
	EvTargetDone RDMAEventKind = iota + 1
	// EvOriginDone: a completion arrived for a transfer this rank
	// originated (Peer, RCxt, Key, Tid, Base; Code non-zero if the target
	// refused it). The driver checks it against its RCxt (Completes).
	EvOriginDone
	// EvReadDone: every byte of a read this rank asked for (ExpectRead)
	// has been placed: Peer, RCxt, Key, Tid.
	EvReadDone
	// EvFault: a packet addressed memory of this rank and failed a
	// protection check (Err; Peer, RCxt, Cookie). Nothing was placed; the
	// origin was told when it asked to be.
	EvFault
	// EvFIFO: a half-RDMA packet arrived: Data (valid until the next
	// Handle) for the region slice Dst, at Offset of the transfer, with
	// the origin's Arg. The driver acts on it before the next Handle.
	// The region was checked when the engine handed Dst up, not when the
	// driver writes into it: a driver whose regions may be deregistered
	// by another goroutine meanwhile writes into Place under TPT.Hold
	// instead.
	EvFIFO
	// EvServeRead: Peer asks to read this rank's memory: send it Stream,
	// replacing any earlier stream for the same Peer and RCxt, and give
	// it back with ReleaseStream when done.
	EvServeRead
	// EvMissing: a report (FlagMissing) arrived for a write this rank
	// originated: the drive Tid of Peer, RCxt and Key ended with the
	// segments the bitmap Data names (from Offset; valid until the next
	// Handle) not placed. The driver checks it against its RCxt
	// (Current) and resends those (RDMAStream.RestartMissing).
	EvMissing
	// EvReadMissing: the last packet (FlagLast) of the current drive of a
	// read this rank asked for (Peer, RCxt, Key, Tid) arrived with
	// segments still missing: the driver asks for them again
	// (ReadMissing, RDMAStream.RestartReadMissing) at once.
	EvReadMissing
	// EvReadFIFO: a response packet of a read this rank asked for with
	// PlaceFIFO (half-send RDMA read: the target's engine reads its
	// region, this rank takes the packets through its FIFO) arrived and
	// was not seen before: Data (valid until the next Handle) at Offset
	// of the read, for Peer, RCxt, Key and Tid. Nothing is placed: the
	// driver copies it where it wants before the next Handle. Each
	// segment is handed up once, whatever the redrives, and none after
	// the read ended (EndRead).
	EvReadFIFO
)

// RDMAEvent is one thing the driver must act on.
type RDMAEvent struct {
	Kind        RDMAEventKind
	Peer        Rank
	RCxt, Key   uint32
	Tid, Base   uint32
	Code        uint8
	Cookie, Arg uint32
	Len         uint64
	Offset      uint64
	Dst, Data   []byte
	// Place is where Dst is (EvFIFO): a driver that writes into it after
	// Handle returned resolves it again under TPT.Hold, since the region
	// may have been deregistered since.
	Place  PVO
	Err    error
	Stream *RDMAStream
}

// RDMAMsg is a header-only completion the driver must send to Peer.
type RDMAMsg struct {
	Peer Rank
	Hdr  RDMAHdr
}

// RDMAStats count what the engine did with the packets it was given.
type RDMAStats struct {
	Packets    uint64 // RDMA frames handled
	Placed     uint64 // data packets placed (or handed up, half-RDMA)
	Bytes      uint64 // data bytes placed
	Stale      uint64 // packets of an abandoned drive, dropped
	Duplicates uint64 // packets already placed, dropped
	Faults     uint64 // packets that failed a protection check
	Bad        uint64 // malformed packets
	Completed  uint64 // transfers completed here
	Reports    uint64 // reports of missing segments sent (FlagMissing)
}

// NewRDMAEngine makes the engine of a rank whose regions tpt holds.
func NewRDMAEngine(tpt *TPT) *RDMAEngine {
	return &RDMAEngine{tpt: tpt, serve: make(map[xferKey]uint32)}
}

// SetEpoch sets this rank's incarnation (the low half of the
// reintegration epoch): packets addressed to another, an earlier life of
// the rank, are dropped as stale. 0 turns the check off.
func (e *RDMAEngine) SetEpoch(ep uint32) { e.epoch = ep }

// SetReportLen has the engine answer the last packet (FlagLast) of a
// write's drive that leaves segments missing with a report of them, a
// bitmap of at most n bytes (at most MaxReport; 0, the default: no
// reports, the origin's timer finds the loss). n must fit the device's
// frames after the RDMA header.
func (e *RDMAEngine) SetReportLen(n int) {
	e.repLen = min(max(n, 0), MaxReport)
	if cap(e.rep) < e.repLen {
		e.rep = make([]byte, e.repLen)
	}
}

// Stats are the engine's counters.
func (e *RDMAEngine) Stats() RDMAStats { return e.stats }

// ExpectRead records a read this rank asked peer for (on rCxt r's current
// drive, h as in the request), so that its response packets are placed
// into h.Local, or, when h.Place is PlaceFIFO, handed up as EvReadFIFO
// (h.Local unused: this rank registers nothing). Call it again for each
// redrive: what earlier drives placed is kept.
func (e *RDMAEngine) ExpectRead(peer Rank, r *RCxt, h *RDMAHdr) {
	k := xferKey{peer, r.ID, true}
	x := e.get(k)
	if x == nil || x.ended || x.base != r.base || x.key != r.Key {
		x = e.begin(k, x, r.Key, h)
		x.pvo, x.base = h.Local, r.base
		sizeBits(x) // this rank's own request: its total is known good
	}
	x.tid = r.tid
}

// ReadLeft is how many segments of a read this rank asked for have not
// arrived (0 when it is unknown): a driver whose timer expires while this
// still falls knows the read is progressing and need not be redriven.
func (e *RDMAEngine) ReadLeft(peer Rank, r *RCxt) uint64 {
	if x := e.get(xferKey{peer, r.ID, true}); x != nil {
		return x.left
	}
	return 0
}

// MissingRange is the part of a read this rank asked for that still has
// holes: from its first missing segment to the end of its last (n 0: none
// missing, or no such read). A redrive asks only for it.
func (e *RDMAEngine) MissingRange(peer Rank, r *RCxt) (off, n uint64) {
	x := e.get(xferKey{peer, r.ID, true})
	if x == nil || x.ended || x.left == 0 {
		return 0, 0
	}
	segs := Segments(x.total, x.seg)
	first, last := segs, uint64(0)
	for i := uint64(0); i < segs; i++ {
		if x.bits[i/64]&(1<<(i%64)) == 0 {
			first = min(first, i)
			last = i
		}
	}
	if first == segs {
		return 0, 0
	}
	off = first * uint64(x.seg)
	return off, min((last+1)*uint64(x.seg), x.total) - off
}

// EndRead forgets a read this rank asked for (completed or abandoned):
// its late packets are then dropped as stale.
func (e *RDMAEngine) EndRead(peer Rank, r *RCxt) {
	if x := e.get(xferKey{peer, r.ID, true}); x != nil {
		x.ended = true // kept, with its bitmap, for the context's next read
	}
}

// ReleaseStream gives back a stream EvServeRead handed out, once the
// driver is done with it (sent, replaced or abandoned).
func (e *RDMAEngine) ReleaseStream(s *RDMAStream) {
	*s = RDMAStream{want: s.want[:0]} // its selection's memory is kept
	e.streams = append(e.streams, s)
}

// ResetPeer forgets every transfer with peer: it restarted.
func (e *RDMAEngine) ResetPeer(peer Rank) {
	for i := range e.in {
		if int(peer) < len(e.in[i]) {
			e.in[i][peer] = nil
		}
	}
	for k := range e.serve {
		if k.peer == peer {
			delete(e.serve, k)
		}
	}
}

// Handle takes the payload of an RDMA frame of type t from peer. The
// events and messages it returns are valid until the next call.
func (e *RDMAEngine) Handle(peer Rank, t FrameType, payload []byte) ([]RDMAEvent, []RDMAMsg) {
	e.ev, e.out = e.ev[:0], e.out[:0]
	e.stats.Packets++
	var h RDMAHdr
	if err := DecodeRDMA(t, payload, &h); err != nil {
		e.stats.Bad++
		return e.ev, e.out
	}
	if e.epoch != 0 && h.DstEp != 0 && h.DstEp != e.epoch {
		e.stats.Stale++ // for an earlier life of this rank
		return e.ev, e.out
	}
	switch t {
	case FrameRDMAWrite:
		e.place(xferKey{peer, h.RCxt, false}, &h, AccessWrite)
	case FrameRDMAReadResp:
		e.place(xferKey{peer, h.RCxt, true}, &h, AccessWrite)
	case FrameRDMAReadReq:
		e.readReq(peer, &h)
	case FrameRDMADone:
		kind := EvOriginDone
		if h.Flags&FlagMissing != 0 {
			kind = EvMissing
		}
		e.ev = append(e.ev, RDMAEvent{Kind: kind, Peer: peer, RCxt: h.RCxt, Key: h.Key,
			Tid: h.Tid, Base: h.Base, Code: h.Code, Cookie: h.Cookie, Offset: h.Offset, Data: h.Data})
	}
	return e.ev, e.out
}

// get is the transfer k names, or nil. Slices indexed by peer and rCxt:
// no map lookup per packet.
func (e *RDMAEngine) get(k xferKey) *xfer {
	t := e.in[b2i(k.read)]
	if int(k.peer) >= len(t) || int(k.rcxt) >= len(t[k.peer]) {
		return nil
	}
	return t[k.peer][k.rcxt]
}

func (e *RDMAEngine) set(k xferKey, x *xfer) {
	t := &e.in[b2i(k.read)]
	for int(k.peer) >= len(*t) {
		*t = append(*t, nil)
	}
	row := &(*t)[k.peer]
	for int(k.rcxt) >= len(*row) {
		*row = append(*row, nil) // rCxt numbers are dense from 0 and below MaxRCxt
	}
	(*row)[k.rcxt] = x
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// begin (re)initialises x for a new transfer described by h. Its arrival
// bitmap is sized by sizeBits: for a peer's write, only once the region
// is checked (admit), since the header's total is the peer's word alone.
func (e *RDMAEngine) begin(k xferKey, x *xfer, key uint32, h *RDMAHdr) *xfer {
	if x == nil {
		x = &xfer{}
		e.set(k, x)
	}
	*x = xfer{key: key, tid: h.Tid, base: h.Base, total: h.Total, seg: h.Seg, left: Segments(h.Total, h.Seg),
		bits: x.bits[:0], notify: h.Notify, place: h.Place, cookie: h.Cookie, arg: h.Arg, pvo: h.PVO}
	return x
}

// sizeBits gives x a cleared arrival bitmap of one bit per segment.
func sizeBits(x *xfer) {
	words := int((x.left + 63) / 64)
	if cap(x.bits) < words {
		x.bits = make([]uint64, words)
	} else {
		x.bits = x.bits[:words]
		clear(x.bits)
	}
}

// place applies the tid rules to a data packet and places it; the last
// packet of a write's current drive that leaves segments missing is
// answered with a report of them.
func (e *RDMAEngine) place(k xferKey, h *RDMAHdr, acc Access) {
	x := e.put(k, h, acc)
	if x == nil || h.Flags&FlagLast == 0 || e.repLen == 0 || x.done || x.code != 0 ||
		h.Tid != x.tid || h.Key != x.key || h.Total != x.total || h.Seg != x.seg {
		return
	}
	switch {
	case k.read && !x.ended:
		e.ev = append(e.ev, RDMAEvent{Kind: EvReadMissing, Peer: k.peer, RCxt: k.rcxt, Key: x.key, Tid: x.tid})
	case !k.read && x.notify&NotifyOrigin != 0:
		e.report(k, x)
	}
}

// put is place but for the report: it returns the transfer the packet
// belongs to, or nil when the packet was stale or its transfer refused.
func (e *RDMAEngine) put(k xferKey, h *RDMAHdr, acc Access) *xfer {
	x := e.get(k)
	switch {
	case k.read:
		// A read's state is made by ExpectRead: a response without one,
		// or for another drive, answers a read that was abandoned.
		if x == nil || x.ended || x.key != h.Key || x.tid != h.Tid || x.total != h.Total || x.seg != h.Seg {
			e.stats.Stale++
			return nil
		}
	case x == nil:
		x = e.begin(k, x, h.Key, h)
		if !e.admit(k, x, acc) {
			return nil
		}
	case int32(h.Tid-x.tid) < 0:
		// Lower than the current drive, whatever its key: the origin
		// re-keys a context each time it reuses it, but its tids only
		// grow, so this is a packet of an earlier transfer.
		e.stats.Stale++
		return nil
	case h.Tid != x.tid && (h.Base != x.base || h.Key != x.key):
		x = e.begin(k, x, h.Key, h)
		if !e.admit(k, x, acc) {
			return nil
		}
	case h.Tid != x.tid: // a redrive of the current transfer
		x.tid = h.Tid
		if x.done || x.code != 0 {
			e.answer(k.peer, k.rcxt, x) // its completion was lost
			e.stats.Duplicates++
			return nil
		}
	}
	if x.done || x.code != 0 || h.Key != x.key || h.Total != x.total || h.Seg != x.seg {
		e.stats.Duplicates++
		return x
	}
	i := h.Offset / uint64(x.seg)
	if x.bits[i/64]&(1<<(i%64)) != 0 {
		e.stats.Duplicates++
		return x
	}
	n := uint64(len(h.Data))
	if k.read && x.place == PlaceFIFO {
		// Half-send read: the packet goes up, nothing is resolved.
		e.took(x, i, n)
		e.ev = append(e.ev, RDMAEvent{Kind: EvReadFIFO, Peer: k.peer, RCxt: k.rcxt, Key: x.key, Tid: x.tid,
			Offset: h.Offset, Data: h.Data})
		e.finish(k, x)
		return x
	}
	// The table stays read-locked from the check to the end of the copy,
	// so a Deregister of the region waits for the copy, and once it has
	// returned nothing lands in the memory.
	e.tpt.mu.RLock()
	mem, err := e.region(x, h.Offset, n, acc)
	if err != nil {
		e.tpt.mu.RUnlock()
		// The region went away (or was never this big) under the
		// transfer: nothing more of this drive is placed.
		e.fault(k, x, err)
		return nil
	}
	e.took(x, i, n)
	if x.place == PlaceFIFO && !k.read {
		e.tpt.mu.RUnlock() // the driver reduces into Dst: EvFIFO
		e.ev = append(e.ev, RDMAEvent{Kind: EvFIFO, Peer: k.peer, RCxt: k.rcxt, Tid: x.tid,
			Cookie: x.cookie, Arg: x.arg, Offset: h.Offset, Dst: mem, Place: x.pvo.Add(h.Offset), Data: h.Data})
	} else {
		copy(mem, h.Data)
		e.tpt.mu.RUnlock()
	}
	e.finish(k, x)
	return x
}

// region is the n bytes at off of x's region, with the table
// read-locked. The region as a whole is checked again only when
// something was deregistered since it last was, and kept while nothing
// more is; a region that no longer holds the whole transfer is checked
// packet by packet.
func (e *RDMAEngine) region(x *xfer, off, n uint64, acc Access) ([]byte, error) {
	t := e.tpt
	if r := t.removals.Load(); x.mem == nil || r != x.removals {
		mem, err := t.lookup(x.pvo, x.total, acc)
		if err != nil {
			x.mem = nil
			return t.lookup(x.pvo.Add(off), n, acc)
		}
		x.mem, x.removals = mem, r // removals moves only under the write lock
	}
	return x.mem[off : off+n], nil
}

// took marks segment i of x (n bytes) placed.
func (e *RDMAEngine) took(x *xfer, i, n uint64) {
	x.bits[i/64] |= 1 << (i % 64)
	x.left--
	e.stats.Placed++
	e.stats.Bytes += n
}

// finish completes x once its last segment is placed.
func (e *RDMAEngine) finish(k xferKey, x *xfer) {
	if x.left == 0 {
		x.done = true
		e.stats.Completed++
		e.complete(k, x)
	}
}

// admit checks a new transfer's whole region before anything is placed.
func (e *RDMAEngine) admit(k xferKey, x *xfer, acc Access) bool {
	r := e.tpt.Removals() // before the check: a removal during it invalidates
	mem, err := e.tpt.Resolve(x.pvo, x.total, acc)
	if err != nil {
		e.fault(k, x, err) // with no bitmap: a refused transfer places nothing
		return false
	}
	x.mem, x.removals = mem, r
	sizeBits(x) // bounded by the region now, not by what the header claims
	return true
}

// fault records a protection failure of x's current drive, tells the ULP,
// and the origin when it asked.
func (e *RDMAEngine) fault(k xferKey, x *xfer, err error) {
	e.stats.Faults++
	x.code = FaultCode(err)
	e.ev = append(e.ev, RDMAEvent{Kind: EvFault, Peer: k.peer, RCxt: k.rcxt, Key: x.key, Tid: x.tid,
		Code: x.code, Cookie: x.cookie, Err: err})
	if !k.read {
		e.answer(k.peer, k.rcxt, x)
	}
}

// report sends the origin of write x the segments its current drive left
// missing: a bitmap from the first missing one, as long as the reports
// may be, with trailing zero bytes cut.
func (e *RDMAEngine) report(k xferKey, x *xfer) {
	first, b := e.missing(x)
	if len(b) == 0 {
		return // cannot happen: x is not done
	}
	e.stats.Reports++
	e.out = append(e.out, RDMAMsg{Peer: k.peer, Hdr: RDMAHdr{RCxt: k.rcxt, Key: x.key, Tid: x.tid, Base: x.base,
		Total: x.total, Offset: first, Seg: x.seg, Notify: NotifyOrigin, Flags: FlagMissing,
		Cookie: x.cookie, Data: b}})
}

// ReadMissing is what a read this rank asked for still lacks, as a read
// request with FlagMissing asks for it: the offset of the first missing
// segment and the bitmap from it (valid until the engine's next call;
// empty when nothing is missing or there is no such read, or when the
// engine does not report: SetReportLen).
func (e *RDMAEngine) ReadMissing(peer Rank, r *RCxt) (off uint64, bitmap []byte) {
	x := e.get(xferKey{peer, r.ID, true})
	if x == nil || x.ended || x.left == 0 || e.repLen == 0 {
		return 0, nil
	}
	return e.missing(x)
}

// missing is the bitmap of x's missing segments from the first (at a
// whole byte of it), as long as reports may be, trailing zero bytes cut,
// and the offset it starts at; empty when none is missing.
func (e *RDMAEngine) missing(x *xfer) (off uint64, bitmap []byte) {
	segs := Segments(x.total, x.seg)
	first := uint64(0)
	for first < segs && x.bits[first/64] == ^uint64(0) {
		first += 64
	}
	for first < segs && x.bits[first/64]&(1<<(first%64)) != 0 {
		first++
	}
	if first >= segs {
		return 0, nil
	}
	first &^= 7 // a whole byte of the bitmap: the placed ones are zero
	b := e.rep[:0]
	for s := first; s < segs && len(b) < e.repLen; s += 8 {
		v := byte(^x.bits[s/64] >> (s % 64))
		if n := segs - s; n < 8 {
			v &= byte(1)<<n - 1
		}
		b = append(b, v)
	}
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return first * uint64(x.seg), b
}

// complete reports a transfer whose every byte is placed.
func (e *RDMAEngine) complete(k xferKey, x *xfer) {
	if k.read {
		e.ev = append(e.ev, RDMAEvent{Kind: EvReadDone, Peer: k.peer, RCxt: k.rcxt, Key: x.key, Tid: x.tid, Len: x.total})
		return
	}
	if x.notify&NotifyTarget != 0 {
		e.ev = append(e.ev, RDMAEvent{Kind: EvTargetDone, Peer: k.peer, RCxt: k.rcxt, Key: x.key, Tid: x.tid,
			Cookie: x.cookie, Arg: x.arg, Len: x.total})
	}
	e.answer(k.peer, k.rcxt, x)
}

// answer sends the origin the completion of x's current drive, when it
// asked for one.
func (e *RDMAEngine) answer(peer Rank, rcxt uint32, x *xfer) {
	if x.notify&NotifyOrigin == 0 {
		return
	}
	h := RDMAHdr{RCxt: rcxt, Key: x.key, Tid: x.tid, Base: x.base, Total: x.total, Seg: x.seg, Cookie: x.cookie}
	e.out = append(e.out, RDMAMsg{Peer: peer, Hdr: h.Completion(x.code)})
}

// readReq answers a request to read this rank's memory with a stream of
// response packets, or with a completion naming the check it failed.
func (e *RDMAEngine) readReq(peer Rank, h *RDMAHdr) {
	k := xferKey{peer, h.RCxt, false}
	if last, ok := e.serve[k]; ok && int32(h.Tid-last) <= 0 {
		e.stats.Stale++ // an earlier drive's request, or a duplicate
		return
	}
	e.serve[k] = h.Tid
	if _, err := e.tpt.Resolve(h.PVO, h.Total, AccessRead); err != nil {
		e.stats.Faults++
		code := FaultCode(err)
		e.ev = append(e.ev, RDMAEvent{Kind: EvFault, Peer: peer, RCxt: h.RCxt, Key: h.Key, Tid: h.Tid,
			Code: code, Cookie: h.Cookie, Err: err})
		if h.Notify&NotifyOrigin != 0 {
			e.out = append(e.out, RDMAMsg{Peer: peer, Hdr: h.Completion(code)})
		}
		return
	}
	r := RDMAHdr{RCxt: h.RCxt, Key: h.Key, Tid: h.Tid, Base: h.Base, Total: h.Total, Seg: h.Seg,
		Notify: h.Notify, Cookie: h.Cookie, PVO: h.Local}
	end := h.Total
	if h.Arg != 0 {
		end = h.Offset + uint64(h.Arg)
	}
	var s *RDMAStream
	if n := len(e.streams); n > 0 {
		s, e.streams = e.streams[n-1], e.streams[:n-1]
	} else {
		s = new(RDMAStream)
	}
	*s = RDMAStream{Peer: peer, Type: FrameRDMAReadResp, Hdr: r, tpt: e.tpt, src: h.PVO,
		frame: Header{Type: FrameRDMAReadResp, Dst: peer}, start: h.Offset, next: h.Offset, end: end, want: s.want}
	if h.Flags&FlagMissing != 0 && s.selectMissing(h.Offset, h.Data) > 0 {
		s.sel = true
		s.next = s.wanted(0) * uint64(s.Hdr.Seg)
	}
	e.ev = append(e.ev, RDMAEvent{Kind: EvServeRead, Peer: peer, RCxt: h.RCxt, Key: h.Key, Tid: h.Tid, Stream: s})
}
