package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/cpuid/v2"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
	"github.com/weft-hpc/weft/internal/track"
)

// Device is one rank's shared-memory device. Besides hal.Device it
// implements hal.CrossMemory and hal.SharedMemory.
//
// Its methods speak the job's ranks; inside, the segment's slots (see
// Options.Ranks) index the rings and rank blocks.
type Device struct {
	seg *segment
	// trk records the segment's mapping from Open until Close unmaps it
	// (hal.Config.Track); nil: not recorded.
	trk    *track.Registry
	trkID  track.ID
	g      geometry
	opts   Options
	jobKey uint64
	rank   hal.Rank // this rank, in the job
	slot   int      // this rank's slot in the segment
	addr   string
	caps   hal.Caps
	// shortMax is the most a short frame carries: a cell's inline room,
	// but no more than the MTU, which bounds every payload Poll delivers.
	shortMax int
	// slots is the slot of each job rank, -1 for a rank that does not
	// share the segment: one load on the way to a ring.
	slots []int32

	// life counts the calls inside the device, and closedBit marks it
	// closed (life_linux.go); finished is set by the one call that
	// releases it.
	life     atomic.Uint64
	finished atomic.Bool
	// waiters is held for reading by Wait and by the wake-up of a
	// cancelled context, which may sleep or run beside Close; the release
	// takes it for writing before unmapping the segment.
	waiters  sync.RWMutex
	counters hal.Counters

	out   []ring // by destination slot: this rank produces
	in    []ring // by source slot: this rank consumes
	peers []peer // by slot
	me    *peer  // &peers[slot]

	// Poll's state, kept here so that a Poll allocates nothing.
	rr  int // the source Poll starts from, rotating for fairness
	hdr hal.Header
	// selfSent is set by the first frame this rank sends itself: until
	// then Poll skips that ring (lapi delivers to itself without the
	// device), a look fewer per Poll.
	selfSent atomic.Bool

	// Frames and bytes sent, and delivered, but not yet added to the
	// counters: an atomic add per frame would sit on the latency path (see
	// Send and Poll).
	unsentFrames, unsentBytes     uint64
	uncountedIn, uncountedInBytes uint64

	cma  cmaState
	loss lossState // peers found dead (peerloss_linux.go)

	// blockHook, when set by a test, runs just before Wait sleeps.
	blockHook func()
}

// peer holds the words of a slot's block in the segment and what Connect
// learnt about its rank.
type peer struct {
	state, pid        *uint32 // line A of its block
	probeAddr, probeV *uint64
	wakeSeq, sleepers *uint32 // line B: its futex word and sleeper count

	rank    hal.Rank              // its job rank
	connPid atomic.Int64          // the pid in its address, once connected
	cma     atomic.Int32          // cmaUnknown, cmaOK or cmaRefused
	pidfd   atomic.Int32          // a pidfd on its process plus one, 0 for none (peerloss_linux.go)
	lost    atomic.Pointer[error] // why its process is known dead
}

var (
	_ hal.Device       = (*Device)(nil)
	_ hal.CrossMemory  = (*Device)(nil)
	_ hal.SendPreparer = (*Device)(nil)
)

// cacheLine is the cache line size the layout separates writers by: the
// CPU's, 64 bytes when cpuid cannot tell.
func cacheLine() int {
	if l := cpuid.CPU.CacheLine; pow2(l) && l >= 64 && l <= 256 {
		return l
	}
	return 64
}

// Open attaches rank cfg.Rank of a job of cfg.Size ranks to the segment
// it shares with opts.Ranks (every rank of the job when nil), creating it
// if this rank comes first. Every member opens with the same cfg.JobKey,
// cfg.Size, cfg.Index, Options.Ranks and geometry Options; frames sent to
// a rank before it opens wait in its rings.
func Open(cfg hal.Config, opts Options) (*Device, error) {
	ranks, slot, err := opts.members(cfg.Size, cfg.Rank)
	if err != nil {
		return nil, err
	}
	line := cacheLine()
	o, err := opts.withDefaults(len(ranks), line)
	if err != nil {
		return nil, err
	}
	if o.Ranks != nil {
		o.Ranks = ranks // a copy: the caller may reuse its slice
	}
	d := &Device{opts: o, jobKey: cfg.JobKey, rank: cfg.Rank, slot: slot,
		caps: hal.Caps{MTU: o.MTU, Reliable: true, Ordered: true}}
	d.slots = make([]int32, cfg.Size)
	for r := range d.slots {
		d.slots[r] = -1
	}
	for s, r := range ranks {
		d.slots[r] = int32(s)
	}
	if d.g, err = newGeometry(ranks, cfg.Size, line, o); err != nil {
		return nil, err
	}
	d.shortMax = min(d.g.inlineMax, o.MTU)
	name := SegmentName(cfg.JobKey, cfg.Index)
	if o.Ranks != nil {
		name = NodeSegmentName(cfg.JobKey, cfg.Index, ranks[0])
	}
	d.seg, err = openSegment(o.Dir, name, &d.g, cfg.JobKey, o.AttachTimeout)
	if err != nil {
		return nil, err
	}
	d.cma.init(o.NoCMA, rand.Uint64()|1)
	if err := d.seg.attach(slot, os.Getpid(), d.cma.probeAddr(), *d.cma.probe); err != nil {
		d.seg.unmap()
		return nil, err
	}
	if err := d.attachRings(); err != nil {
		_ = d.seg.detach(slot)
		return nil, err
	}
	d.addr = fmt.Sprintf("shm:%s:%d:%d:%016x", d.seg.name, cfg.Rank, os.Getpid(), d.seg.nonce)
	if trace.On(trace.Setup) {
		how := "joined"
		if d.seg.creator {
			how = "created"
		}
		trace.Printf(trace.Setup, "shm: rank %d/%d (slot %d of %d) %s %s (%d KiB, %d cells of %d B and %d KiB of data per ring, %d-byte lines), CMA %v",
			cfg.Rank, cfg.Size, slot, len(ranks), how, d.seg.path, d.g.total>>10, d.g.cells, d.g.cellSize, d.g.ringBytes>>10, d.g.line, d.cma.ok.Load())
	}
	d.cma.report(-1)
	if cfg.Track != nil {
		d.trk = cfg.Track
		d.trkID = d.trk.Add(fmt.Sprintf("shm segment %s (%d KiB mapped)", d.seg.path, d.g.total>>10), 0)
	}
	return d, nil
}

// attachRings makes and checks the views of every ring this rank uses, and
// of every slot's block.
func (d *Device) attachRings() error {
	g, mem, me := &d.g, d.seg.mem, d.slot
	d.out, d.in, d.peers = make([]ring, g.size), make([]ring, g.size), make([]peer, g.size)
	for p := range g.size {
		d.out[p] = newRing(mem, g, me, p)
		d.in[p] = newRing(mem, g, p, me)
		if err := d.out[p].attach(mem, g); err != nil {
			return err
		}
		if err := d.in[p].attach(mem, g); err != nil {
			return err
		}
		blk := g.rankBlock(p)
		pr := &d.peers[p]
		pr.rank = g.ranks[p]
		pr.state, pr.pid = word32(mem, blk+offState), word32(mem, blk+offPid)
		pr.probeAddr, pr.probeV = word64(mem, blk+offProbeAddr), word64(mem, blk+offProbeVal)
		pr.wakeSeq, pr.sleepers = word32(mem, blk+g.line+offWakeSeq), word32(mem, blk+g.line+offSleepers)
	}
	d.me = &d.peers[me]
	return nil
}

// OpenLocal opens every rank of a job of size ranks in this process, or
// only opts.Ranks when set, each device mapping the segment on its own as a
// separate process would: for tests and benchmarks. The devices come in
// slot order (rank order). On error it closes what it opened.
func OpenLocal(jobKey uint64, size int, opts Options) ([]*Device, error) {
	ranks := opts.Ranks
	if ranks == nil {
		for r := range size {
			ranks = append(ranks, hal.Rank(r))
		}
	}
	devs := make([]*Device, 0, len(ranks))
	for _, r := range ranks {
		d, err := Open(hal.Config{JobKey: jobKey, Rank: r, Size: size}, opts)
		if err != nil {
			for _, d := range devs {
				_ = d.Close()
			}
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// Caps: reliable and ordered, as a memory copy is; no native RDMA frames
// (large transfers go by cross-memory attach, see hal.CrossMemory).
func (d *Device) Caps() hal.Caps { return d.caps }

// Addr is "shm:<segment name>:<rank>:<pid>:<nonce>", rank being this rank
// in the job and nonce the segment instance's, 16 hex digits: the segment
// and nonce tell a peer whether it shares this segment (node, job, and the
// same instance of its name), the pid is for cross-memory attach.
func (d *Device) Addr() string { return d.addr }

// SharedBlock returns the segment's shared block, or nil when the options
// asked for none: Options.SharedBytes per member, so that len(Ranks)
// divides its length. Shares are by slot: share i is rank Ranks[i]'s
// (rank i's when Ranks is nil). It stays mapped until Close: using it
// after Close faults.
func (d *Device) SharedBlock() []byte {
	g := &d.g
	if g.sharedBytes == 0 {
		return nil
	}
	return d.seg.mem[g.sharedOff : g.sharedOff+g.sharedBytes : g.sharedOff+g.sharedBytes]
}

// Options returns the options in effect, defaults filled in.
func (d *Device) Options() Options { return d.opts }

// Counters are this device's statistics. FramesSent and BytesSent may lag
// Send by up to 64 frames: Flush and Poll bring them up to date.
func (d *Device) Counters() *hal.Counters { return &d.counters }

// Connect checks that addr is peer's address in this segment and records
// its pid; when cross-memory attach is possible it probes the peer once,
// so that a refusal shows at setup rather than in the first RDMA. Frames
// need no Connect; ReadFrom and WriteTo do. A peer that does not share the
// segment returns hal.ErrUnknownPeer. A peer in another instance of the
// segment's name (a rank restarted after the name was unlinked, or one
// that came after every earlier rank had closed, opens a segment of its
// own under that name) returns ErrMismatch: frames between the two
// instances would be lost.
func (d *Device) Connect(peer hal.Rank, addr string) error {
	if !d.enter() {
		return errClosed
	}
	defer d.leave()
	s := d.slotOf(peer)
	if s < 0 {
		return d.notMember("connect to", peer)
	}
	name, rank, pid, nonce, err := parseAddr(addr)
	if err != nil {
		return fmt.Errorf("shm: connect to rank %d: %w", peer, err)
	}
	if name != d.seg.name || rank != peer {
		return fmt.Errorf("shm: connect to rank %d: address %q is rank %d of segment %s, not of this node's %s: %w",
			peer, addr, rank, name, d.seg.name, hal.ErrUnknownPeer)
	}
	if nonce != d.seg.nonce {
		return fmt.Errorf("shm: connect to rank %d: rank %d is in another instance of segment %s (nonce %016x, this rank's %016x): restarted, or started after the others left? %w",
			peer, peer, name, nonce, d.seg.nonce, ErrMismatch)
	}
	p := &d.peers[s]
	p.connPid.Store(int64(pid))
	d.watch(p, pid)
	d.probe(peer, p)
	return nil
}

// slotOf is job rank r's slot in the segment, -1 when r does not share
// it.
func (d *Device) slotOf(r hal.Rank) int {
	if uint(r) < uint(len(d.slots)) {
		return int(d.slots[r])
	}
	return -1
}

// notMember is the error of a call toward job rank r, which does not share
// the segment; op says what the call was.
func (d *Device) notMember(op string, r hal.Rank) error {
	if int(r) >= len(d.slots) {
		return fmt.Errorf("shm: %s rank %d: the job has %d ranks: %w", op, r, len(d.slots), hal.ErrUnknownPeer)
	}
	return fmt.Errorf("shm: %s rank %d: it is not one of the %d ranks of segment %s: %w",
		op, r, len(d.peers), d.seg.name, hal.ErrUnknownPeer)
}

// parseAddr splits "shm:<segment>:<rank>:<pid>:<nonce>".
func parseAddr(addr string) (name string, rank hal.Rank, pid int, nonce uint64, err error) {
	f := strings.Split(addr, ":")
	if len(f) != 5 || f[0] != "shm" || f[1] == "" {
		return "", 0, 0, 0, fmt.Errorf("address %q is not shm:<segment>:<rank>:<pid>:<nonce>: %w", addr, hal.ErrUnknownPeer)
	}
	r, err1 := strconv.ParseUint(f[2], 10, 32)
	p, err2 := strconv.ParseUint(f[3], 10, 31)
	n, err3 := strconv.ParseUint(f[4], 16, 64)
	if err := errors.Join(err1, err2, err3); err != nil || p == 0 || n == 0 || len(f[4]) != 16 {
		return "", 0, 0, 0, fmt.Errorf("address %q has a bad rank, pid or nonce: %w", addr, hal.ErrUnknownPeer)
	}
	return f[1], hal.Rank(r), int(p), n, nil
}

// Send copies the frame, hdr then payload, into the ring toward the rank in
// hdr's destination and publishes it: the frame is on its way when Send
// returns, and the caller may reuse both slices at once. A full ring
// returns hal.ErrNoResource. A frame whose header the ring implies goes
// short (SendShort).
func (d *Device) Send(hdr, payload []byte) error {
	if !d.enter() {
		return errClosed
	}
	err := d.send(hdr, payload)
	d.leave()
	return err
}

// send is Send inside the device (enter).
func (d *Device) send(hdr, payload []byte) error {
	if len(hdr) < hal.HeaderLen {
		return errShortHdr
	}
	n := len(hdr) - hal.HeaderLen + len(payload)
	if n > d.caps.MTU {
		return fmt.Errorf("shm: frame payload of %d bytes, MTU %d: %w", n, d.caps.MTU, hal.ErrTooLarge)
	}
	dst := binary.LittleEndian.Uint32(hdr[28:])
	if n <= d.g.inlineMax && d.compact(hdr, n, dst) {
		return d.sendShort(hal.Rank(dst), hal.FrameType(hdr[3]), hdr[hal.HeaderLen:], payload)
	}
	r, p, err := d.outRing(dst)
	if err != nil {
		return err
	}
	return d.published(p, n, r.push(hdr, payload))
}

// SendShort sends a frame whose header the ring implies (hal.ShortSender):
// type t, hdr then payload, in one cell. A frame of more than ShortMax
// bytes (more than a cell holds, or than the MTU) returns hal.ErrTooLarge,
// an invalid type hal.ErrBadFrame.
func (d *Device) SendShort(dst hal.Rank, t hal.FrameType, hdr, payload []byte) error {
	if !d.enter() {
		return errClosed
	}
	err := d.sendShort(dst, t, hdr, payload)
	d.leave()
	return err
}

// sendShort is SendShort inside the device (enter).
func (d *Device) sendShort(dst hal.Rank, t hal.FrameType, hdr, payload []byte) error {
	if !t.Valid() {
		return fmt.Errorf("shm: short frame of type %d: %w", t, hal.ErrBadFrame)
	}
	n := len(hdr) + len(payload)
	if n > d.shortMax {
		return fmt.Errorf("shm: short frame of %d bytes, at most %d (a cell holds %d, MTU %d): %w",
			n, d.shortMax, d.g.inlineMax, d.caps.MTU, hal.ErrTooLarge)
	}
	r, p, err := d.outRing(uint32(dst))
	if err != nil {
		return err
	}
	return d.published(p, n, r.pushCompact(t, hdr, payload))
}

// PrepareSend takes the stamp's line of the next cell of the ring toward
// dst into this core's cache for writing (hal.SendPreparer). Both the
// stamp and a small frame live on that line, which dst's Poll keeps
// reading while it waits; the publication's first store would otherwise
// wait there for dst's copy to be invalidated. Given by lapi under its
// lock just before a send, the invalidation overlaps the building of the
// message (a tenth of an 8-byte ping-pong's time here; the A/B runs are in
// bench/results/history.md). Given much earlier, when a message arrives,
// dst polls the line back first and the hint costs instead. A no-op for a
// rank that does not share the segment, or after Close.
func (d *Device) PrepareSend(dst hal.Rank) {
	s := d.slotOf(dst)
	if s < 0 || !d.enter() {
		return
	}
	r := &d.out[s]
	prefetchWrite(&r.cell(r.pos)[offCellStamp])
	d.leave()
}

// outRing returns the ring toward job rank dst and dst's slot's block,
// once the ring has passed its checks and dst is known not to have closed.
func (d *Device) outRing(dst uint32) (*ring, *peer, error) {
	s := d.slotOf(hal.Rank(dst))
	if s < 0 {
		return nil, nil, d.notMember("send to", hal.Rank(dst))
	}
	r, p := &d.out[s], &d.peers[s]
	if dst == uint32(d.rank) && !d.selfSent.Load() {
		d.selfSent.Store(true) // before the frame's stamp: a Wait that sees the frame sees this
	}
	if !r.intact() {
		return nil, nil, r.checkFailed()
	}
	if atomic.LoadUint32(p.state) == stateClosed {
		return nil, nil, closedPeer("send to", hal.Rank(dst))
	}
	return r, p, nil
}

// closedPeer is the error of a call toward rank r, whose device is
// closed; op says what the call was.
func closedPeer(op string, r hal.Rank) error {
	return fmt.Errorf("shm: %s rank %d: its device is closed: %w", op, r, hal.ErrUnknownPeer)
}

// published ends a send of n payload bytes toward p whose push returned
// err: a full ring is counted, a published frame wakes p if it sleeps and
// is counted.
func (d *Device) published(p *peer, n int, err error) error {
	if err != nil {
		if err == errRingFull {
			d.counters.NoResource.Add(1)
			return d.lostErr(p, err)
		}
		return err
	}
	// After the stamp's store: either the receiver sees the frame before it
	// sleeps, or this load sees it sleeping (both are sequentially
	// consistent atomics).
	if atomic.LoadUint32(p.sleepers) != 0 {
		wake(p)
	}
	d.unsentFrames++
	d.unsentBytes += uint64(n)
	if d.unsentFrames == maxUncounted {
		d.countSent()
	}
	return nil
}

// ShortMax is the most a short frame carries: what fits in a cell, and
// no more than the MTU.
func (d *Device) ShortMax() int { return d.shortMax }

// compact reports whether hdr is a well-formed frame header, of a frame
// with n payload bytes toward dst, with nothing in it that the ring does
// not imply: then only its type travels (ring.pushCompact).
func (d *Device) compact(hdr []byte, n int, dst uint32) bool {
	le := binary.LittleEndian
	return le.Uint16(hdr[0:]) == hal.Magic && hdr[2] == hal.Version && hal.FrameType(hdr[3]).Valid() &&
		le.Uint32(hdr[4:]) == 0 && hdr[8] == 0 && hdr[9] == 0 && int(le.Uint16(hdr[10:])) == n &&
		le.Uint32(hdr[12:]) == 0 && le.Uint64(hdr[16:]) == d.jobKey &&
		le.Uint32(hdr[24:]) == uint32(d.rank) && le.Uint32(hdr[28:]) == dst
}

// maxUncounted bounds how many sent frames the counters may lag behind.
const maxUncounted = 64

// countSent adds the frames sent since the last call to the counters.
// Send defers this to Flush, Poll and every maxUncounted frames: two
// atomic adds cost as much as the rest of a small Send.
func (d *Device) countSent() {
	if d.unsentFrames != 0 {
		d.counters.FramesSent.Add(d.unsentFrames)
		d.counters.BytesSent.Add(d.unsentBytes)
		d.unsentFrames, d.unsentBytes = 0, 0
	}
}

// countIn adds the frames the last Poll delivered to the counters. Poll
// defers this to the next Poll or Flush, as hal allows (counters may lag
// by one call): a ping-pong's next Poll comes while it waits, not while
// its reply is late.
func (d *Device) countIn() {
	if d.uncountedIn != 0 {
		d.counters.FramesRecv.Add(d.uncountedIn)
		d.counters.BytesRecv.Add(d.uncountedInBytes)
		d.uncountedIn, d.uncountedInBytes = 0, 0
	}
}

// Flush has nothing to send, since Send published the frame already; it
// brings the counters up to date.
func (d *Device) Flush() error {
	if !d.enter() {
		return errClosed
	}
	d.countSent()
	d.countIn()
	d.leave()
	return nil
}

// Poll delivers the frames published in the inbound rings, visiting the
// sources round-robin from a starting point that rotates from call to call,
// and at most Options.PollBatch frames per call. A frame's slot goes back
// to its sender after fn returns. Frames of another job, or addressed to
// another rank, are dropped and counted. A ring found corrupted is reported
// as an error wrapping ErrCorrupt, and then on every call.
func (d *Device) Poll(fn func(h *hal.Header, payload []byte)) (int, error) {
	if !d.enter() {
		return 0, errClosed
	}
	n, err := d.poll(fn)
	d.leave()
	return n, err
}

// poll is Poll inside the device (enter).
func (d *Device) poll(fn func(h *hal.Header, payload []byte)) (int, error) {
	if d.unsentFrames != 0 {
		d.countSent()
	}
	if d.uncountedIn != 0 {
		d.countIn()
	}
	size, me := len(d.in), d.slot
	first := d.rr
	if d.rr++; d.rr == size {
		d.rr = 0
	}
	var (
		budget          = d.opts.PollBatch
		delivered, used int
		bytes           uint64
		err             error
	)
	for i := 0; i < size && budget > 0; i++ {
		src := first + i
		if src >= size {
			src -= size
		}
		if src == me && !d.selfSent.Load() {
			continue // the ring to itself, which lapi never uses
		}
		r := &d.in[src]
		if r.err == nil && !r.peek() {
			// The common case, kept short for a caller spinning on
			// Poll: nothing there. Give back what advance kept.
			if r.pos != r.pubCell {
				r.release()
			}
			continue
		}
		delivered, used, bytes, err = d.drain(r, fn, budget, delivered, bytes)
		budget -= used
		if err != nil || d.isClosed() {
			break
		}
	}
	d.uncountedIn += uint64(delivered)
	d.uncountedInBytes += bytes
	return delivered, err
}

// drain delivers up to budget frames of one inbound ring, which has one
// ready (or has failed a check), adding to the running totals of frames
// delivered and payload bytes. It returns those and how many frames it
// consumed (dropped ones included).
func (d *Device) drain(r *ring, fn func(*hal.Header, []byte), budget, delivered int, bytes uint64) (int, int, uint64, error) {
	if !r.intact() {
		return delivered, 0, bytes, r.checkFailed()
	}
	used := 0
	for used < budget {
		frame, t, dataEnd, err := r.next()
		if err != nil {
			r.release()
			return delivered, used, bytes, err
		}
		if frame == nil {
			break
		}
		used++
		payload, ok := frame, true
		if t != 0 {
			// A compact frame: its header is the ring's.
			// Field by field: a composite literal would be built aside
			// and copied, the copy's wide loads stalling on its narrow
			// stores (no store-to-load forwarding).
			h := &d.hdr
			*h = hal.Header{}
			h.Type, h.Len, h.JobKey, h.Src, h.Dst = t, uint16(len(frame)), d.jobKey, r.from, d.rank
		} else if ok = d.accept(frame); ok {
			payload = frame[hal.HeaderLen:]
		}
		if ok {
			delivered++
			bytes += uint64(d.hdr.Len)
			fn(&d.hdr, payload)
			if d.isClosed() {
				// fn closed the device: deliver nothing more (the
				// mapping stays until Poll returns).
				return delivered, used, bytes, nil
			}
		}
		r.advance(dataEnd)
	}
	return delivered, used, bytes, nil
}

// accept decodes a frame's header into d.hdr and reports whether to
// deliver it, counting it if dropped. A reliable device skips the CRC: the
// copy cannot corrupt it.
func (d *Device) accept(frame []byte) bool {
	if err := hal.DecodeHeader(frame, &d.hdr); err != nil {
		d.counters.DropErr(err)
		return false
	}
	switch {
	case d.hdr.JobKey != d.jobKey:
		d.counters.Drop(hal.DropJobKey)
		return false
	case d.hdr.Dst != d.rank || d.slotOf(d.hdr.Src) < 0:
		d.counters.Drop(hal.DropPeer)
		return false
	}
	return true
}
