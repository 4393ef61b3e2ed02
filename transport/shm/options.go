package shm

import (
	"fmt"
	"slices"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// Options tune a Device. The zero value gives the defaults below. Every
// member of a segment must use the same Dir, MTU, Cells, CellSize,
// RingBytes, SharedBytes and Ranks: they fix the segment's name and
// layout, and Open fails with ErrMismatch when a rank's differ from the
// creator's.
type Options struct {
	// Ranks are the job's ranks that share this segment, ascending, this
	// rank among them: slot i of the segment belongs to rank Ranks[i]. Nil
	// means every rank of the job, 0..Size-1. A job that spans hosts gives
	// each host's ranks theirs, and reaches the others by another device:
	// the segment is then sized for len(Ranks) ranks, and its name
	// includes Ranks[0] (see NodeSegmentName), so that two hosts sharing
	// one /dev/shm never share a segment. Everything the device exposes
	// (headers, Send's destination, Connect, ReadFrom, WriteTo, errors)
	// speaks job ranks; a rank outside Ranks is hal.ErrUnknownPeer.
	Ranks []hal.Rank
	// Dir is the directory of the segment file. Empty means DefaultDir,
	// where gorun cleans up after a dead job.
	Dir string
	// MTU is the largest frame payload (header excluded). 0 means
	// hal.MaxPayload, the most the header's length field allows.
	MTU int
	// Cells is the number of cells, and so of frames in flight, per ring:
	// a power of two. 0 means DefaultCells.
	Cells int
	// CellSize is the size of a cell in bytes, a power of two from 64 to
	// 4096. Frames of up to CellSize-16 bytes (header included) travel
	// inline in the cell. 0 means DefaultCellSize.
	CellSize int
	// RingBytes is the size of each ring's data area, where frames too large
	// for a cell go: a power of two, at least two full frames. 0 picks
	// DefaultRingBytes(size).
	RingBytes int
	// Spin is how long Wait busy-polls before sleeping on the futex: waking a
	// sleeping thread costs microseconds, a busy poll tens of nanoseconds.
	// 0 means DefaultSpin, negative sleeps at once.
	Spin time.Duration
	// PollBatch bounds the frames one Poll takes, so that a flooded rank
	// still gets back to its other work. 0 means DefaultPollBatch.
	PollBatch int
	// AttachTimeout bounds how long Open waits for another rank to finish
	// creating the segment. 0 means DefaultAttachTimeout.
	AttachTimeout time.Duration
	// SharedBytes is the size of each slot's share of the block the
	// device offers as hal.SharedMemory (mpi's shared-memory
	// collectives): the block holds one share per member of the segment,
	// in slot order (share i is rank Ranks[i]'s, not rank i's). 0 means
	// DefaultSharedBytes; negative, no block.
	SharedBytes int
	// NoCMA turns cross-memory attach off: CMA reports false, and Open does
	// not relax the process's ptrace policy for its peers.
	NoCMA bool
}

// Defaults for zero Options fields, and the limits.
const (
	DefaultDir           = "/dev/shm"
	DefaultCells         = 64 // see cellStride
	DefaultSpin          = 50 * time.Microsecond
	DefaultPollBatch     = 64
	DefaultAttachTimeout = 10 * time.Second
	// DefaultSharedBytes is each rank's share of the shared block: room
	// for mpi's shared-memory collectives on a few communicators.
	DefaultSharedBytes = 64 << 10

	// MaxRanks bounds the ranks sharing a segment (a job's size, or
	// len(Options.Ranks)): the segment holds size² rings.
	MaxRanks = 256
	// maxJobRanks bounds the size of a job whose segment holds only some of
	// its ranks (Options.Ranks): the device keeps a 4-byte slot per job
	// rank.
	maxJobRanks = 1 << 20
	// maxCells bounds Cells (positions are compared in 64 bits, so this is
	// only about memory).
	maxCells = 1 << 20
	// maxRingBytes bounds RingBytes.
	maxRingBytes = 1 << 30
	// maxSharedBytes bounds SharedBytes.
	maxSharedBytes = 16 << 20
	// minCellSize fits a stamp, a length and a data position; maxCellSize
	// keeps inline frames to a handful of cache lines.
	minCellSize, maxCellSize = 64, 4096
	// cellInlineOff is where an inline frame starts in its cell (after the
	// stamp and the length word).
	cellInlineOff = 16
	// segmentBudget is what DefaultRingBytes aims to keep the data areas of
	// all rings within.
	segmentBudget = 512 << 20
	// cellBudget is what DefaultCellSize keeps the cells of all rings
	// within.
	cellBudget = 64 << 20
)

// DefaultCellSize is the cell size used when Options.CellSize is 0, for a
// job of size ranks with cells cells per ring: 2 KiB, halved until the
// size² rings' cells take at most 64 MiB (not counting the line between
// cells, a quarter more at 256-byte cells), and never below 128 bytes. A
// message that fits in a cell comes in lines next to the stamp the
// receiver polls, which it can fetch at once; one in the data area costs a
// second, dependent miss (about twice the latency of a 1 KiB message:
// bench/results/history.md).
func DefaultCellSize(size, cells int) int {
	n := 2048
	for n > 128 && size*size*cells*n > cellBudget {
		n >>= 1
	}
	return n
}

// DefaultRingBytes is the data area per ring used when Options.RingBytes
// is 0: 512 KiB, less for large jobs so that the size² rings stay within
// about 512 MiB, never less than two full frames. Streaming measured on
// the development machine was as fast from 512 KiB to 1 MiB, slower below
// (the producer waits for room) and above (the area no longer stays in a
// core's L2 cache).
func DefaultRingBytes(size int) int {
	n := 512 << 10
	if size > 0 {
		per := segmentBudget / (size * size)
		for n > per && n > 128<<10 {
			n >>= 1
		}
	}
	return n
}

// withDefaults fills zero fields and rejects impossible values; size is
// the job's size and line the cache line size.
func (o Options) withDefaults(size, line int) (Options, error) {
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.MTU == 0 {
		o.MTU = hal.MaxPayload
	}
	if o.MTU < 1 || o.MTU > hal.MaxPayload {
		return o, fmt.Errorf("shm: MTU %d outside 1..%d", o.MTU, hal.MaxPayload)
	}
	if o.Cells == 0 {
		o.Cells = DefaultCells
	}
	if !pow2(o.Cells) || o.Cells < 2 || o.Cells > maxCells {
		return o, fmt.Errorf("shm: %d cells per ring: want a power of two in 2..%d", o.Cells, maxCells)
	}
	if o.CellSize == 0 {
		o.CellSize = max(DefaultCellSize(size, o.Cells), line)
	}
	if !pow2(o.CellSize) || o.CellSize < minCellSize || o.CellSize > maxCellSize {
		return o, fmt.Errorf("shm: cell size %d: want a power of two in %d..%d", o.CellSize, minCellSize, maxCellSize)
	}
	if o.CellSize < line {
		// Cells start on lines, so that a stamp never shares one with
		// the previous cell's bytes (and ring.warm's mid-line writes
		// stay in the cell).
		return o, fmt.Errorf("shm: cell size %d is smaller than this machine's %d-byte cache line", o.CellSize, line)
	}
	if o.RingBytes == 0 {
		o.RingBytes = max(DefaultRingBytes(size), 2*frameSpan(hal.HeaderLen+o.MTU, line))
	}
	if need := 2 * frameSpan(hal.HeaderLen+o.MTU, line); !pow2(o.RingBytes) || o.RingBytes < need || o.RingBytes > maxRingBytes {
		return o, fmt.Errorf("shm: ring data area of %d bytes: want a power of two from %d (two frames of MTU %d) to %d",
			o.RingBytes, need, o.MTU, maxRingBytes)
	}
	if o.Spin == 0 {
		o.Spin = DefaultSpin
	}
	if o.PollBatch == 0 {
		o.PollBatch = DefaultPollBatch
	}
	if o.PollBatch < 0 {
		return o, fmt.Errorf("shm: poll batch %d: want a positive number", o.PollBatch)
	}
	switch {
	case o.SharedBytes == 0:
		o.SharedBytes = DefaultSharedBytes
	case o.SharedBytes < 0:
		o.SharedBytes = 0
	case o.SharedBytes%8 != 0 || o.SharedBytes > maxSharedBytes:
		return o, fmt.Errorf("shm: shared block of %d bytes per rank: want a multiple of 8 up to %d", o.SharedBytes, maxSharedBytes)
	}
	if o.AttachTimeout <= 0 {
		o.AttachTimeout = DefaultAttachTimeout
	}
	return o, nil
}

// members checks Ranks against the job (size ranks, this one rank) and
// returns the ranks of the segment's slots, ascending (0..size-1 when
// Ranks is nil, a copy of Ranks otherwise), and this rank's slot.
func (o Options) members(size int, rank hal.Rank) ([]hal.Rank, int, error) {
	if o.Ranks == nil {
		if size < 1 || size > MaxRanks {
			return nil, 0, fmt.Errorf("shm: open: job size %d outside 1..%d", size, MaxRanks)
		}
		if int(rank) >= size {
			return nil, 0, fmt.Errorf("shm: open: rank %d of %d: %w", rank, size, hal.ErrUnknownPeer)
		}
		all := make([]hal.Rank, size)
		for i := range all {
			all[i] = hal.Rank(i)
		}
		return all, int(rank), nil
	}
	if size < 1 || size > maxJobRanks {
		return nil, 0, fmt.Errorf("shm: open: job size %d outside 1..%d", size, maxJobRanks)
	}
	if int(rank) >= size {
		return nil, 0, fmt.Errorf("shm: open: rank %d of %d: %w", rank, size, hal.ErrUnknownPeer)
	}
	if n := len(o.Ranks); n < 1 || n > MaxRanks {
		return nil, 0, fmt.Errorf("shm: open: Options.Ranks has %d ranks: want 1..%d", n, MaxRanks)
	}
	slot := -1
	for i, r := range o.Ranks {
		switch {
		case int(r) >= size:
			return nil, 0, fmt.Errorf("shm: open: Options.Ranks holds rank %d, outside the job's 0..%d", r, size-1)
		case i > 0 && r <= o.Ranks[i-1]:
			return nil, 0, fmt.Errorf("shm: open: Options.Ranks is not ascending and unique: rank %d follows %d", r, o.Ranks[i-1])
		case r == rank:
			slot = i
		}
	}
	if slot < 0 {
		return nil, 0, fmt.Errorf("shm: open: rank %d is not in Options.Ranks %v: %w", rank, o.Ranks, hal.ErrUnknownPeer)
	}
	return slices.Clone(o.Ranks), slot, nil
}

func pow2(n int) bool { return n > 0 && n&(n-1) == 0 }

// frameSpan is the room a frame of n bytes takes in a data area: whole
// cache lines, so that the next frame never shares a line with it.
func frameSpan(n, line int) int { return (n + line - 1) &^ (line - 1) }
