package lapi

import "math/bits"

// A msgSlab holds the packets of one copied message back to back, each
// packet's headers followed by its data, so that the device can send a
// run of them from one piece of memory: the kernel's cost of a send grows
// with the pieces it gathers (each header and each data slice a piece of
// its own), not only with the bytes.
type msgSlab struct {
	b    []byte
	refs int // packets still pointing into b
	next *msgSlab
}

// Slab sizes are the powers of two from 1<<minSlabShift to
// 1<<maxSlabShift: a message whose packets need more is copied packet by
// packet (outPkt.own).
const (
	minSlabShift = 11 // 2 KiB: one frame of an Ethernet MTU
	maxSlabShift = 17 // 128 KiB: a NetCopyThreshold message and its headers
)

// slabPool recycles slabs by size class.
type slabPool struct {
	free [maxSlabShift - minSlabShift + 1]*msgSlab
}

// get returns a slab of at least n bytes, or nil when n is above the
// largest class.
func (sp *slabPool) get(n int) *msgSlab {
	shift := max(bits.Len(uint(n-1)), minSlabShift)
	if n < 1 || shift > maxSlabShift {
		return nil
	}
	k := shift - minSlabShift
	s := sp.free[k]
	if s == nil {
		return &msgSlab{b: make([]byte, 1<<shift)}
	}
	sp.free[k], s.next = s.next, nil
	return s
}

// put drops one packet's reference to s and keeps s for reuse once no
// packet points into it.
func (sp *slabPool) put(s *msgSlab) {
	if s.refs--; s.refs > 0 {
		return
	}
	k := bits.Len(uint(len(s.b)-1)) - minSlabShift
	s.next, sp.free[k] = sp.free[k], s
}
