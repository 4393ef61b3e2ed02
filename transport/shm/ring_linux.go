package shm

import (
	"fmt"
	"sync/atomic"

	"github.com/weft-hpc/weft/hal"
)

// ring is one side's view of the single-producer, single-consumer ring of
// an ordered pair of slots (see layout.go). The device keeps one per
// destination, as producer, and one per source, as consumer; the fields
// after the views are that role's private state, which only the owning
// device's Send or Poll touch.
type ring struct {
	src, dst int      // slots in the segment
	from, to hal.Rank // their job ranks, for headers and messages
	cells    []byte   // cells × cellStride
	data     []byte   // the data area

	start, end             *uint64 // markers
	wantStart, wantEnd     uint64
	headCell, headData     *uint64 // consumer's published positions
	cellMask, ringBytes    uint64
	dataMask, halfCells    uint64
	dataSlack              uint64 // see advance
	cellSize, cellStride   uint64
	line, inlineMax, maxFr int
	spanMax                uint64 // most cells a frame may run over (0: none)

	// Producer: pos is the next cell to fill, dpos the next free data
	// byte, seenCell and seenData the consumer's head as last read.
	// Consumer: pos is the next cell to read, dpos the data head (the end
	// of the last frame read from the data area), pubCell and pubData what
	// it last published.
	pos, dpos          uint64
	seenCell, seenData uint64
	pubCell, pubData   uint64
	took               uint64 // consumer: cells the frame next returned runs over

	err error // set once the ring failed a check; it is not used again
}

// newRing makes the view of ring (src, dst), between slots, in mem.
func newRing(mem []byte, g *geometry, src, dst int) ring {
	off := g.ringOff(src, dst)
	b := mem[off : off+g.ringStride]
	l := g.line
	return ring{
		src: src, dst: dst,
		from: g.ranks[src], to: g.ranks[dst],
		cells:      b[ringHdrLines*l : ringHdrLines*l+g.cells*g.cellStride],
		data:       b[g.dataOff : g.dataOff+g.ringBytes],
		start:      word64(b, offRingStart),
		end:        word64(b, endLine*l+offRingEnd),
		wantStart:  pairMarker(ringStart, src, dst),
		wantEnd:    pairMarker(ringEnd, src, dst),
		headCell:   word64(b, headLine*l+offHeadCell),
		headData:   word64(b, headLine*l+offHeadData),
		cellMask:   uint64(g.cells - 1),
		halfCells:  uint64(g.cells / 2),
		dataSlack:  dataSlack(g),
		cellSize:   uint64(g.cellSize),
		cellStride: uint64(g.cellStride),
		ringBytes:  uint64(g.ringBytes),
		dataMask:   uint64(g.ringBytes - 1),
		line:       g.line,
		inlineMax:  g.inlineMax,
		maxFr:      g.maxFrame,
		spanMax:    uint64(min(spanMax, g.cells/4)),
	}
}

// spanMax is the most cells one frame may run over: with 2 KiB cells any
// frame up to the MTU could then come in lines that follow the stamp, as
// an inline one does, instead of at a data position read from it, a second
// miss that waits for the first. A frame never takes more than a quarter
// of the cells: with the default 64, frames of up to 33 KiB.
const spanMax = 32

// cellSpan is the compact-type word of a frame that runs over cells.
const cellSpan = 0x100

// cellsFor is how many cells a frame of n bytes fills from a cell's
// inline area, on over the lines between cells. A frame that fits one
// cell, the common case of warm, pays no divide.
func (r *ring) cellsFor(n int) uint64 {
	if n <= r.inlineMax {
		return 1
	}
	return (uint64(cellInlineOff+n) + r.cellStride - 1) / r.cellStride
}

// spanCells is how many cells a whole frame of n bytes runs over, when it
// may: 0 if it fits a cell's inline area or needs more than spanMax. A
// frame a little too long for the inline area takes one cell and the line
// after it.
func (r *ring) spanCells(n int) uint64 {
	if k := r.cellsFor(n); n > r.inlineMax && k <= r.spanMax {
		return k
	}
	return 0
}

// beforeEnd reports whether the k cells from position pos stop at the
// last cell: a frame never wraps.
func (r *ring) beforeEnd(pos, k uint64) bool { return pos&r.cellMask+k <= r.cellMask+1 }

// inline is the n bytes from the inline area of position pos's cell, on
// into the following cells.
func (r *ring) inline(pos uint64, n int) []byte {
	off := (pos&r.cellMask)*r.cellStride + cellInlineOff
	return r.cells[off : off+uint64(n)]
}

// initRing writes the header of ring (src, dst) in a fresh segment.
func initRing(mem []byte, g *geometry, src, dst int) {
	b := mem[g.ringOff(src, dst):]
	*word64(b, offRingStart) = pairMarker(ringStart, src, dst)
	*word32(b, offRingSrc) = uint32(src)
	*word32(b, offRingDst) = uint32(dst)
	*word32(b, offRingCells) = uint32(g.cells)
	*word32(b, offRingCSize) = uint32(g.cellSize)
	*word64(b, offRingData) = uint64(g.ringBytes)
	*word64(b, endLine*g.line+offRingEnd) = pairMarker(ringEnd, src, dst)
}

// attach checks the whole ring header, when the device opens.
func (r *ring) attach(mem []byte, g *geometry) error {
	if !r.intact() {
		return r.checkFailed()
	}
	b := mem[g.ringOff(r.src, r.dst):]
	if *word32(b, offRingSrc) != uint32(r.src) || *word32(b, offRingDst) != uint32(r.dst) ||
		*word32(b, offRingCells) != uint32(g.cells) || *word32(b, offRingCSize) != uint32(g.cellSize) ||
		*word64(b, offRingData) != uint64(g.ringBytes) {
		return r.corrupt("header fields do not match the segment's geometry")
	}
	return nil
}

// intact reports whether the ring passes its check before each use: not
// retired, and both markers in place. When it does not, checkFailed says
// why. The test alone inlines into Send and Poll, where a call to the
// whole check would cost every message (bench/instr.sh counts it).
func (r *ring) intact() bool {
	return r.err == nil && atomic.LoadUint64(r.start) == r.wantStart && atomic.LoadUint64(r.end) == r.wantEnd
}

// checkFailed is the error of a ring intact found failing, now or before.
func (r *ring) checkFailed() error {
	if r.err != nil {
		return r.err
	}
	if s, e := atomic.LoadUint64(r.start), atomic.LoadUint64(r.end); s != r.wantStart || e != r.wantEnd {
		return r.corrupt(fmt.Sprintf("header markers %#x/%#x, want %#x/%#x", s, e, r.wantStart, r.wantEnd))
	}
	// The markers changed between the two reads and changed back: the
	// first read is the one that failed.
	return r.corrupt("header markers changed while read")
}

// corrupt retires the ring with an error saying what failed.
func (r *ring) corrupt(what string) error {
	r.err = fmt.Errorf("shm: ring %d→%d: %s: %w", r.from, r.to, what, ErrCorrupt)
	return r.err
}

// cell is the cell of position pos.
func (r *ring) cell(pos uint64) []byte {
	off := (pos & r.cellMask) * r.cellStride
	return r.cells[off : off+r.cellSize]
}

// push copies one frame, hdr then payload, into the ring and publishes it.
// It returns errRingFull when the consumer has not freed enough room.
func (r *ring) push(hdr, payload []byte) error {
	n := len(hdr) + len(payload)
	if err := r.cellFree(); err != nil {
		return err
	}
	c := r.cell(r.pos)
	typ, took, inCells := uint32(0), uint64(1), true
	if n <= r.inlineMax {
		copy(c[cellInlineOff+copy(c[cellInlineOff:], hdr):], payload)
	} else if k := r.spanCells(n); k > 0 && r.beforeEnd(r.pos, k) && r.spanFits(k) {
		f := r.inline(r.pos, n) // over k cells
		copy(f[copy(f, hdr):], payload)
		typ, took = cellSpan, k
	} else {
		span := uint64(frameSpan(n, r.line))
		start, err := r.dataStart(span)
		if err != nil {
			return err
		}
		off := start & r.dataMask
		d := r.data[off : off+uint64(n)]
		copy(d[copy(d, hdr):], payload)
		*word64(c, offCellData) = start
		r.dpos = start + span
		inCells = false
	}
	*word32(c, offCellLen) = uint32(n)
	*word32(c, offCellType) = typ
	// The stamp is the release: everything written above is visible to a
	// consumer that loads it.
	atomic.StoreUint64(word64(c, offCellStamp), r.pos+1)
	r.pos += took
	switch {
	case !inCells:
		r.warmData(n)
	case r.warms(n):
		r.warm(n)
	}
	return nil
}

// warm takes into this core's cache the lines that a frame of n bytes,
// the size of the one just sent, would fill at the producer's position,
// but for the stamp's line, which the consumer polls: the next frame of
// that size then copies into lines it holds instead of fetching each one
// from the consumer's cache as it goes, which a ping-pong of 1-4 KiB
// messages would pay on every message. Only cells the consumer has given back are touched, and
// no word the consumer reads before a stamp publishes it. A frame of one
// line has nothing to warm: callers skip the call (see warms).
func (r *ring) warm(n int) {
	k := r.cellsFor(n)
	if k > max(r.spanMax, 1) || !r.beforeEnd(r.pos, k) || r.pos+k-r.seenCell > r.cellMask+1 {
		return
	}
	f := r.inline(r.pos, int(k*r.cellStride)-cellInlineOff) // the k cells
	l := r.line
	for o := l - cellInlineOff; o < n; o += l { // each line holding frame bytes, but the stamp's
		f[o+l/2] = 0 // mid-line: never a stamp, length or type
	}
}

// warmData is warm for a frame in the data area: it takes into this
// core's cache the lines that the next frame of n bytes would fill there,
// once the consumer has given them back (the head is read again if need
// be: the frame just sent is out, so that costs its receiver nothing).
// Without it each such frame's copy fetched every line from the cache of
// the consumer, which read it a lap of the area before (up to half a
// large ping-pong's time: bench/results/history.md).
func (r *ring) warmData(n int) {
	span := uint64(frameSpan(n, r.line))
	start, err := r.dataStart(span)
	if err != nil {
		return // the consumer may still read it
	}
	off := start & r.dataMask
	d := r.data[off : off+span]
	for o := 0; o < len(d); o += r.line {
		d[o] = 0
	}
}

// dataStart is where the producer's next frame of span bytes in the data
// area goes, or errRingFull while the consumer still holds some of it (the
// head is read again before that is said).
func (r *ring) dataStart(span uint64) (uint64, error) {
	start := r.dpos
	if start&r.dataMask+span > r.ringBytes {
		// A frame never wraps, so that the receiver gets it in one
		// piece: skip to the start of the area.
		start = (start | r.dataMask) + 1
	}
	if start+span-r.seenData > r.ringBytes {
		if err := r.reloadHead(); err != nil {
			return 0, err
		}
		if start+span-r.seenData > r.ringBytes {
			return 0, errRingFull
		}
	}
	return start, nil
}

// warms reports whether a frame of n bytes has lines for warm: a frame
// in the stamp's line alone, a small message's, has none, and its send
// skips the call.
func (r *ring) warms(n int) bool { return cellInlineOff+n > r.line }

// pushCompact publishes a frame whose header says nothing the ring does
// not (this job, this source, this destination, no flags): only its type
// and its payload, rest then payload, go in the cell. A small message
// then shares the stamp's cache line: the producer takes one line from
// the consumer's cache instead of two, and the consumer takes it back.
// The caller checked that the payload fits inline; errRingFull as for
// push.
func (r *ring) pushCompact(t hal.FrameType, rest, payload []byte) error {
	if err := r.cellFree(); err != nil {
		return err
	}
	c := r.cell(r.pos)
	copy(c[cellInlineOff+copy(c[cellInlineOff:], rest):], payload)
	n := len(rest) + len(payload)
	*word32(c, offCellLen) = uint32(n)
	*word32(c, offCellType) = uint32(t)
	atomic.StoreUint64(word64(c, offCellStamp), r.pos+1)
	r.pos++
	if r.warms(n) {
		r.warm(n)
	}
	return nil
}

// cellFree reports errRingFull when the consumer still holds every cell,
// as far as its published head says. The common case, a cell known free,
// inlines; the head is read (cellFreeReload) once the cells seen free run
// out.
func (r *ring) cellFree() error {
	if r.pos-r.seenCell > r.cellMask {
		return r.cellFreeReload()
	}
	return nil
}

// cellFreeReload is cellFree once the cells last seen free are used up.
func (r *ring) cellFreeReload() error {
	if err := r.reloadHead(); err != nil {
		return err
	}
	if r.pos-r.seenCell > r.cellMask {
		return errRingFull
	}
	return nil
}

// spanFits reports whether a frame may take the k cells from the
// producer's position: whether the consumer would then still hold no
// more than half the cells. The other half stays for frames of one cell
// each (a frame over cells counts as one frame in flight, but takes
// several). A failed head reload says no: the frame then goes through the
// data area, whose checks report it.
func (r *ring) spanFits(k uint64) bool {
	if r.pos+k-r.seenCell > r.halfCells && r.reloadHead() != nil {
		return false
	}
	return r.pos+k-r.seenCell <= r.halfCells
}

// reloadHead reads the consumer's published head, checking that it is one
// the consumer could have published.
func (r *ring) reloadHead() error {
	hc, hd := atomic.LoadUint64(r.headCell), atomic.LoadUint64(r.headData)
	if hc > r.pos || hc < r.seenCell || hd > r.dpos || hd < r.seenData {
		return r.corrupt(fmt.Sprintf("consumer head %d/%d outside the produced %d..%d/%d..%d",
			hc, hd, r.seenCell, r.pos, r.seenData, r.dpos))
	}
	r.seenCell, r.seenData = hc, hd
	return nil
}

// ready reports whether the consumer has a frame at its published head. It
// reads shared words only, so Wait may call it while Poll runs. A head
// whose publication advance deferred makes it report a frame already
// consumed: Wait then returns early, the caller's next Poll finds the ring
// empty and publishes, and the Wait after that is exact.
func (r *ring) ready() bool {
	h := atomic.LoadUint64(r.headCell)
	return atomic.LoadUint64(word64(r.cell(h), offCellStamp)) == h+1
}

// peek reports whether the frame at the consumer's position is published.
func (r *ring) peek() bool {
	return atomic.LoadUint64(word64(r.cell(r.pos), offCellStamp)) == r.pos+1
}

// next returns the frame at the consumer's position, nil if none is
// published yet, and where the data head moves once it is consumed. Every
// value read from the cell is checked before it is used.
//
// A compact frame (pushCompact) comes back as its payload, with its type;
// t is 0 for a whole frame.
func (r *ring) next() (frame []byte, t hal.FrameType, dataEnd uint64, err error) {
	c := r.cell(r.pos)
	if atomic.LoadUint64(word64(c, offCellStamp)) != r.pos+1 {
		return nil, 0, 0, nil
	}
	n := int(*word32(c, offCellLen))
	r.took = 1
	if ct := *word32(c, offCellType); ct == cellSpan {
		k := r.spanCells(n)
		if k == 0 || !r.beforeEnd(r.pos, k) {
			return nil, 0, 0, r.corrupt(fmt.Sprintf("cell %d holds a frame of %d bytes over the next cells", r.pos, n))
		}
		r.took = k
		return r.inline(r.pos, n), 0, r.dpos, nil
	} else if ct != 0 {
		if ct > 0xff || !hal.FrameType(ct).Valid() || n > r.inlineMax {
			return nil, 0, 0, r.corrupt(fmt.Sprintf("cell %d holds a compact frame of type %d and %d bytes", r.pos, ct, n))
		}
		return c[cellInlineOff : cellInlineOff+n], hal.FrameType(ct), r.dpos, nil
	}
	if n <= r.inlineMax {
		return c[cellInlineOff : cellInlineOff+n], 0, r.dpos, nil
	}
	if n > r.maxFr {
		return nil, 0, 0, r.corrupt(fmt.Sprintf("cell %d holds a frame of %d bytes, more than %d", r.pos, n, r.maxFr))
	}
	start, span := *word64(c, offCellData), uint64(frameSpan(n, r.line))
	if start < r.dpos || start+span-r.dpos > r.ringBytes || start&r.dataMask+span > r.ringBytes {
		return nil, 0, 0, r.corrupt(fmt.Sprintf("cell %d places %d bytes at %d, outside the data area (head %d)", r.pos, n, start, r.dpos))
	}
	off := start & r.dataMask
	return r.data[off : off+uint64(n)], 0, start + span, nil
}

// advance moves past the frame next returned, whose callback has
// returned. What it frees goes back to the producer (release) at once only
// when it matters: when half the cells, or dataSlack bytes of data, wait
// to be given back, and after a frame of bigSpan bytes or more (streaming
// large frames, the producer refills the area while later ones are
// delivered); otherwise when the consumer next finds the ring empty. A
// small or medium frame thus costs the consumer no store to shared memory
// on its way to the caller, and a ping-pong's reply leaves earlier.
//
// This cannot starve the producer. It runs out of cells only when more
// than half of them still hold frames, which the consumer will come for.
// It runs out of data with the ring truly empty only if a frame of span s
// must skip to the start of the area: the kept bytes k then exceed
// ringBytes-2s, which dataSlack rules out for every s up to the MTU's.
func (r *ring) advance(dataEnd uint64) {
	for i := uint64(1); i < r.took; i++ {
		// The frame ran over this cell's stamp: zero it, so that its
		// bytes cannot pass for a stamp when the ring comes round.
		atomic.StoreUint64(word64(r.cell(r.pos+i), offCellStamp), 0)
	}
	r.pos += r.took
	if dataEnd != r.dpos {
		big := dataEnd-r.dpos >= bigSpan
		r.dpos = dataEnd
		if big || r.dpos-r.pubData > r.dataSlack {
			r.release()
			return
		}
	}
	if r.pos-r.pubCell >= r.halfCells {
		r.release()
	}
}

// bigSpan is the size from which a frame's data goes back to the producer
// as soon as it is consumed.
const bigSpan = 4096

// dataSlack is how many consumed data bytes advance may keep: a quarter of
// the area, and never so many that a frame of the MTU could find no room
// in an empty ring (see advance).
func dataSlack(g *geometry) uint64 {
	s := g.ringBytes / 4
	if lim := g.ringBytes - 2*frameSpan(g.maxFrame, g.line); lim < s {
		s = lim
	}
	return uint64(max(s, 0))
}

// release publishes the consumer's head, giving the producer back the
// cells and data of every frame consumed so far.
func (r *ring) release() {
	if r.dpos != r.pubData {
		atomic.StoreUint64(r.headData, r.dpos)
		r.pubData = r.dpos
	}
	if r.pos != r.pubCell {
		atomic.StoreUint64(r.headCell, r.pos)
		r.pubCell = r.pos
	}
}
