package shm

import (
	"fmt"
	"math"

	"github.com/weft-hpc/weft/hal"
)

// The segment's layout. All offsets are from the start of the mapping,
// which is page-aligned; every word is aligned to its size. "line" is the
// cache line size (cpuid, 64 when unknown): words written by different
// parties live on different lines so that they do not bounce a line
// between cores that only one of them writes.
//
//	segment header, line 0 (written once by the creator):
//	  0 magic u64   8 version u32   12 line u32   16 size u32 (slots)   20 cellSize u32
//	 24 cells u32  28 mtu u32      32 ringBytes u64  40 ringStride u64
//	 48 total u64  56 jobKey u64
//	segment header, line 1 (changed at attach and close):
//	  0 ready u32 (readyMagic once initialised; a futex word)
//	  4 life u32 (open count, and lifeUnlinked)   8 attached u32   12 creator pid u32
//	segment header, line 2: end marker u64  8 shared block bytes u64
//	  16 job size u32  24 instance nonce u64 (random, never 0: tells this
//	  segment from another made later under the same name, see Connect)
//	rank blocks from 3*line, two lines per slot (size is the number of
//	slots, the members of the segment; slot i is job rank ranks[i]):
//	  line A (read-mostly): 0 state u32  4 pid u32  8 probe address u64  16 probe value u64
//	                        24 job rank u32 (written by the creator)
//	  line B (wake line):   0 wake sequence u32 (futex)  4 sleepers u32
//	shared block from sharedOff (page-aligned), sharedBytes long: the
//	  hal.SharedMemory block, never read or written by the device
//	rings from ringsOff (page-aligned), ring (src, dst) between slots src
//	and dst at ringsOff + (src*size+dst)*ringStride, a header of
//	ringHdrLines lines:
//	  line 0: start marker u64, src u32, dst u32, cells u32, cellSize u32, ringBytes u64
//	  line 2: consumer's head: cell position u64, data position u64
//	  line 4: end marker u64
//	  (lines 1, 3 and 5 are padding: the head, the only line written, then
//	  shares no 128-byte pair with the lines the producer reads on every
//	  Send, since adjacent-line prefetchers move lines in pairs. The
//	  producer's tail is not a word: it is the stamps in the cells.)
//	  cells from ringHdrLines*line, cellSize+line apart (see cellStride):
//	    stamp u64, frame length u32, compact
//	    type u32 (0: a whole frame), then the inline frame, or the
//	    frame's data position u64; a compact frame is the payload alone
//	    (the frame header is the ring's: see ring.pushCompact); a whole
//	    frame too long for one cell but not for spanMax of them may run on
//	    over the next cells (type cellSpan), whose stamps the consumer
//	    zeroes before it gives them back
//	  data area from dataOff (page-aligned)
const (
	segMagic   uint64 = 0x316d687374666577 // "weftshm1" read little-endian
	segEnd     uint64 = 0x444e455354464557 // "WEFTSEND"
	segVersion        = 5                  // 2: cells a line apart; 3: the shared block; 4: slots' job ranks; 5: the instance nonce
	readyMagic uint32 = 0x59444552         // "REDY"
	ringStart  uint64 = 0x474e495254464557 // "WEFTRING"
	ringEnd    uint64 = 0x21444e45474e4952 // "RINGEND!"

	pageSize = 4096

	// Segment header fields.
	offMagic      = 0
	offVersion    = 8
	offLine       = 12
	offSize       = 16
	offCellSize   = 20
	offCells      = 24
	offMTU        = 28
	offRingBytes  = 32
	offRingStride = 40
	offTotal      = 48
	offJobKey     = 56
	// On line 1 (add line).
	offReady    = 0
	offLife     = 4
	offAttached = 8
	offCreator  = 12
	// On line 2 (add 2*line).
	offSegEnd      = 0
	offSharedBytes = 8
	offJobSize     = 16
	offNonce       = 24

	// Rank block fields: line A, then line B (add line).
	offState     = 0
	offPid       = 4
	offProbeAddr = 8
	offProbeVal  = 16
	offRank      = 24
	offWakeSeq   = 0
	offSleepers  = 4

	// Ring header: lines, and fields on line 0, headLine and endLine.
	ringHdrLines = 6
	headLine     = 2
	endLine      = 4
	offRingStart = 0
	offRingSrc   = 8
	offRingDst   = 12
	offRingCells = 16
	offRingCSize = 20
	offRingData  = 24
	offHeadCell  = 0
	offHeadData  = 8
	offRingEnd   = 0

	// Cell fields.
	offCellStamp = 0
	offCellLen   = 8
	offCellType  = 12 // a compact frame's type, 0 for a whole frame (see ring.pushCompact), cellSpan for one over several cells
	offCellData  = 16 // the data position of an external frame; an inline frame starts here too
)

// Rank states.
const (
	stateFree     = 0 // not attached yet: frames toward it wait in its rings
	stateAttached = 1
	stateClosed   = 2 // closed: frames toward it are refused
)

// lifeUnlinked is set in the life word once the segment's name is gone; the
// low bits count the ranks that have it open.
const lifeUnlinked = 1 << 31

// geometry is the layout of one segment, the same for every member.
type geometry struct {
	size, line          int // size: the slots, len(ranks)
	ranks               []hal.Rank
	jobSize             int
	cells, cellSize     int
	cellStride          int // from one cell to the next (see newGeometry)
	mtu, ringBytes      int
	rankOff, ringsOff   int // rank blocks, rings
	sharedOff           int // the shared block (hal.SharedMemory)
	sharedBytes         int
	dataOff             int // a ring's data area, from the ring's start
	ringStride          int
	total               int64
	maxFrame, inlineMax int
}

// newGeometry lays out a segment for ranks, the job ranks of its slots
// among jobSize, with opts (defaults filled) and cache lines of line
// bytes.
func newGeometry(ranks []hal.Rank, jobSize, line int, o Options) (geometry, error) {
	size := len(ranks)
	g := geometry{size: size, ranks: ranks, jobSize: jobSize, line: line,
		cells: o.Cells, cellSize: o.CellSize, mtu: o.MTU, ringBytes: o.RingBytes}
	g.rankOff = 3 * line
	g.sharedOff = roundUp(g.rankOff+size*2*line, pageSize)
	g.sharedBytes = size * o.SharedBytes
	g.ringsOff = roundUp(g.sharedOff+g.sharedBytes, pageSize)
	// A line between cells: at a power-of-two stride every stamp of every
	// ring falls in the same few sets of the L1 cache (2 KiB apart, two of
	// its 64), so the consumer's next stamp and the producer's next cell
	// have left it by the time they are used, and each message pays for
	// that on both sides. One line more moves each stamp to the next set.
	// With 64 cells a ring's stamps then stay in L1 (figures in
	// bench/results/history.md).
	g.cellStride = g.cellSize + line
	g.dataOff = roundUp(ringHdrLines*line+g.cells*g.cellStride, pageSize)
	g.ringStride = g.dataOff + g.ringBytes
	g.total = int64(g.ringsOff) + int64(size)*int64(size)*int64(g.ringStride)
	g.maxFrame = hal.HeaderLen + g.mtu
	g.inlineMax = g.cellSize - cellInlineOff
	if g.total > 1<<40 || g.total > math.MaxInt {
		return g, fmt.Errorf("shm: a segment for %d ranks with %d-byte rings would take %d bytes", size, g.ringStride, g.total)
	}
	return g, nil
}

// ringOff is the offset of ring (src, dst), between slots.
func (g *geometry) ringOff(src, dst int) int {
	return g.ringsOff + (src*g.size+dst)*g.ringStride
}

// SegmentName is the file name, in Options.Dir, of the segment of the job
// with this key for device index index, shared by all the job's ranks
// (Options.Ranks nil). It starts with the prefix gorun removes when a job
// dies: weft-<key as 16 lower-case hex digits>-.
func SegmentName(jobKey uint64, index uint8) string {
	return fmt.Sprintf("weft-%016x-shm%d", jobKey, index)
}

// NodeSegmentName is the file name, in Options.Dir, of the segment that
// only some ranks of the job share (Options.Ranks), first being the lowest
// of them: SegmentName followed by -r<first>. Two hosts of one job never
// share a segment, even with one /dev/shm, since no rank is on both.
func NodeSegmentName(jobKey uint64, index uint8, first hal.Rank) string {
	return fmt.Sprintf("%s-r%d", SegmentName(jobKey, index), first)
}

// rankBlock is the offset of slot s's block (line A; line B follows).
func (g *geometry) rankBlock(s int) int { return g.rankOff + s*2*g.line }

// pairMarker makes a ring's marker specific to its pair, so that a ring
// header found at the wrong place fails its check too.
func pairMarker(base uint64, src, dst int) uint64 {
	return base ^ uint64(src)<<40 ^ uint64(dst)<<16
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }
