package faults

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// Stream is the random stream of the device with the given rank and index.
// Keying the stream by sender makes each device's verdicts independent of
// how the other ranks' goroutines interleave.
func Stream(rank hal.Rank, index uint8) uint64 {
	return uint64(rank)<<8 | uint64(index)
}

// Decision is the verdict for one frame.
type Decision struct {
	// Drop: the frame is lost; nothing else applies.
	Drop bool
	// Copies is how many copies go out: 1, or 2 when duplicated (0 when
	// dropped). Both copies get the same corruption; the second its own
	// hold, DupHold.
	Copies int
	// CorruptBit is the bit (byte offset*8 + bit) to flip in the contiguous
	// frame, header included, or -1 to leave it intact. See Decider.Decide
	// for which bits are eligible.
	CorruptBit int
	// Hold is how long the frame is held back before it goes out; zero
	// sends it at once.
	Hold time.Duration
	// DupHold is how long the second copy of a duplicated frame is held
	// back, in (0, Spec.MaxDelay], whatever Hold is: a duplicate may
	// arrive well after its original, once the receiver has moved on, as
	// a copy left behind by a retrying link does. Zero when not duplicated.
	DupHold time.Duration
}

// Corrupt flips d's bit in frame, the header followed by the payload. It does
// nothing when d corrupts nothing or the bit lies beyond frame.
func (d Decision) Corrupt(frame []byte) {
	if d.CorruptBit >= 0 && d.CorruptBit/8 < len(frame) {
		frame[d.CorruptBit/8] ^= 1 << (d.CorruptBit % 8)
	}
}

// The header bytes a corruption may hit: the device indexes and the life
// (bytes 5-9), the crc field, the job key and the source rank (bytes
// 12-27). Only the CRC catches a flip there (hal.Check verifies the CRC
// before the job key), whereas a flip in magic, version, type, flags or
// length would be counted under another drop reason and a flip in the
// destination would misroute the frame before any check. Corruption is also
// applied to the payload.
const (
	corruptFrom1, corruptTo1 = 5, 10
	corruptFrom2, corruptTo2 = 12, 28
	corruptHeader            = corruptTo1 - corruptFrom1 + corruptTo2 - corruptFrom2
)

// drawsPerFrame is how many random numbers every Decide consumes, whatever
// the verdict, so that frame n's verdict depends only on the seed and n.
const drawsPerFrame = 7

// Decider gives a deterministic verdict per frame. It is not safe for
// concurrent use; each sending device owns one.
type Decider struct {
	spec  Spec
	hold  uint64 // spec.MaxDelay in nanoseconds
	rng   rand.PCG
	draws [drawsPerFrame]uint64
}

// NewDecider returns the Decider of one sending device: spec's rates, and
// the PCG stream (spec.Seed, stream), where stream is usually Stream(rank,
// index).
func NewDecider(spec Spec, stream uint64) *Decider {
	d := &Decider{spec: spec, hold: uint64(spec.MaxDelay())}
	d.rng.Seed(spec.Seed, stream)
	return d
}

// Decide returns the verdict for the next frame, frameLen bytes long header
// included. A corrupted bit is chosen uniformly among the header's device,
// life, crc, job key and source fields and the payload.
func (d *Decider) Decide(frameLen int) Decision {
	for i := range d.draws {
		d.draws[i] = d.rng.Uint64()
	}
	r := &d.draws
	if hit(r[0], d.spec.Loss) {
		return Decision{Drop: true, CorruptBit: -1}
	}
	v := Decision{Copies: 1, CorruptBit: -1}
	if hit(r[1], d.spec.Dup) {
		v.Copies = 2
		v.DupHold = time.Duration(1 + r[6]%d.hold)
	}
	if hit(r[2], d.spec.Corrupt) {
		payload := max(frameLen-hal.HeaderLen, 0)
		v.CorruptBit = corruptBit(int(r[3] % uint64((corruptHeader+payload)*8)))
	}
	if hit(r[4], d.spec.Reorder) {
		v.Hold = time.Duration(1 + r[5]%d.hold) // in (0, MaxDelay]
	}
	return v
}

// corruptBit maps bit, in [0, (corruptHeader+payload)*8), to a frame bit:
// the eligible header ranges in order, then the payload.
func corruptBit(bit int) int {
	const n1, n2 = (corruptTo1 - corruptFrom1) * 8, (corruptTo2 - corruptFrom2) * 8
	switch {
	case bit < n1:
		return corruptFrom1*8 + bit
	case bit < n1+n2:
		return corruptFrom2*8 + bit - n1
	}
	return hal.HeaderLen*8 + bit - n1 - n2
}

// hit reports whether a uniform draw falls under rate: never for 0, always
// for 1.
func hit(draw uint64, rate float64) bool {
	return float64(draw>>11)*0x1p-53 < rate
}

// Stats counts what a fault injector did, so a test can account for every
// frame: of Offered frames, Dropped never went out, Duplicated extra copies
// did, Corrupted copies will be dropped as hal.DropCRC by their receiver, and
// Delayed frames were held back (reordered).
type Stats struct {
	Offered    atomic.Uint64
	Dropped    atomic.Uint64
	Duplicated atomic.Uint64
	Corrupted  atomic.Uint64
	Delayed    atomic.Uint64
}

// Count records one frame's verdict once it has been carried out.
func (s *Stats) Count(d Decision) {
	s.Offered.Add(1)
	if d.Drop {
		s.Dropped.Add(1)
		return
	}
	s.Duplicated.Add(uint64(d.Copies - 1))
	if d.CorruptBit >= 0 {
		s.Corrupted.Add(uint64(d.Copies))
	}
	if d.Hold > 0 {
		s.Delayed.Add(1)
	}
}

// Sent is how many copies went (or will go) out for the Offered frames.
func (s *Stats) Sent() uint64 {
	return s.Offered.Load() - s.Dropped.Load() + s.Duplicated.Load()
}
