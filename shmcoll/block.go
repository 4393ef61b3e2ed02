package shmcoll

import (
	"sync/atomic"
	"unsafe"
)

const (
	// SlotLen is the most data a slot holds: larger collectives go by
	// messages.
	SlotLen = 2048
	// slotStride keeps a slot's stamp and first 56 bytes on one line and
	// the two slots on different pairs of lines (adjacent-line
	// prefetchers move lines in pairs).
	slotStride = (8 + SlotLen + 127) &^ 127
	partLen    = 2 * slotStride
	// MaxMembers is the largest group that uses the block: each member
	// reads every other's stamp, which grows with the members where
	// message-based algorithms grow with their logarithm.
	MaxMembers = 16
	// maxAreas bounds the groups with an area.
	maxAreas = 64
)

// Block is a rank's view of the shared block. On one node every world
// rank has a share of it, its world rank's; when the job spans nodes the
// block is the node's, and its shares are the node's ranks'.
type Block struct {
	mem      []byte
	shares   int   // world ranks, or the node's ranks
	slots    []int // share by world rank, -1 off this node; nil: the world rank
	areas    int
	partsOff int
}

// NewBlock lays mem out for shares shares, slots giving each world rank's
// share (-1: none, it runs on another node; nil: its world rank), or
// returns nil when mem has no room for one area, fewer than two shares,
// or is not 8-byte aligned.
func NewBlock(mem []byte, shares int, slots []int) *Block {
	if len(mem) == 0 || shares < 2 || uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil
	}
	b := &Block{mem: mem, shares: shares, slots: slots}
	for a := min(maxAreas, len(mem)/(shares*partLen)); a > 0; a-- {
		off := (a*shares*4 + 127) &^ 127
		if off+a*shares*partLen <= len(mem) {
			b.areas, b.partsOff = a, off
			break
		}
	}
	if b.areas == 0 {
		return nil
	}
	return b
}

// Areas is how many groups the block has room for: areas 0 to Areas()-1.
func (b *Block) Areas() int { return b.areas }

// share is world rank wr's share of the block, or -1 when it has none.
func (b *Block) share(wr int) int {
	if b.slots == nil {
		return wr
	}
	return b.slots[wr]
}

func (b *Block) word(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&b.mem[off]))
}
