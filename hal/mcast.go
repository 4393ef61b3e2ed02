package hal

import (
	"encoding/binary"
	"fmt"
)

// Multicast (the IBM seed's multicast RDMA): one frame sent once reaches
// every peer of the device, and only the ranks that posted the broadcast
// it names place it; the others drop and count it. A device that can do
// it (IP multicast on a link that passes it) implements Broadcaster and
// sets Caps.Broadcast; the frames are FrameMcast frames addressed to
// BroadcastRank, whose payload starts with a McastHdr. hal places
// nothing: the layer above owns the broadcast's state and its repair,
// since a multicast frame is as unreliable as any other.

// BroadcastRank is the destination of a frame sent to every peer
// (SendBroadcast). Check accepts it for FrameMcast frames only.
const BroadcastRank Rank = 1<<32 - 1

// Broadcaster is a device that can send one frame to every peer at once.
// SendBroadcast is Send (same header rules, same ownership of hdr and
// payload until a Flush sends it, same ErrNoResource on a full queue) for
// a FrameMcast frame whose destination is BroadcastRank: every peer of
// the device may receive it, each copy lost, duplicated or reordered on
// its own, and the sender does not receive its own. A device implements
// it only where multicast works; Caps.Broadcast says it does.
type Broadcaster interface {
	SendBroadcast(hdr, payload []byte) error
}

// ForRank reports whether a frame with header h is for rank r: addressed
// to r, or a multicast frame addressed to BroadcastRank.
func ForRank(h *Header, r Rank) bool {
	return h.Dst == r || h.Dst == BroadcastRank && h.Type == FrameMcast
}

// Wire layout of a multicast frame's payload header (little-endian),
// McastHdrLen bytes, followed by the data:
//
//	 0 id      u64  the broadcast, as the layer above names it
//	 8 total   u64  the broadcast's length, bytes
//	16 offset  u64  where the data goes: a multiple of seg, below total
//	24 seg     u32  the data per frame of this broadcast (the last one
//	                may be shorter: min(seg, total-offset))
//
// These values are part of the wire protocol.
const McastHdrLen = 28

// McastHdr is a decoded multicast payload header.
type McastHdr struct {
	ID     uint64
	Total  uint64
	Offset uint64
	Seg    uint32
}

// errMcast is DecodeMcast's error, preallocated: a frame is judged on
// the receive path, which allocates nothing.
var errMcast = fmt.Errorf("hal: multicast header: %w", ErrBadFrame)

// EncodeMcast writes h into b[:McastHdrLen]. It panics if b is shorter,
// as a slice index would.
func EncodeMcast(b []byte, h *McastHdr) {
	_ = b[McastHdrLen-1]
	binary.LittleEndian.PutUint64(b[0:], h.ID)
	binary.LittleEndian.PutUint64(b[8:], h.Total)
	binary.LittleEndian.PutUint64(b[16:], h.Offset)
	binary.LittleEndian.PutUint32(b[24:], h.Seg)
}

// DecodeMcast parses a multicast frame's payload b into h and returns its
// data, a sub-slice of b. It checks that the fields agree with each other
// and with the data's size (a frame that passes may be placed at
// h.Offset of a buffer of h.Total bytes without further checks), and
// returns an error wrapping ErrBadFrame if not.
func DecodeMcast(b []byte, h *McastHdr) ([]byte, error) {
	if len(b) < McastHdrLen {
		return nil, errMcast
	}
	h.ID = binary.LittleEndian.Uint64(b[0:])
	h.Total = binary.LittleEndian.Uint64(b[8:])
	h.Offset = binary.LittleEndian.Uint64(b[16:])
	h.Seg = binary.LittleEndian.Uint32(b[24:])
	data := b[McastHdrLen:]
	if h.Seg == 0 || h.Offset >= h.Total || h.Offset%uint64(h.Seg) != 0 ||
		uint64(len(data)) != min(uint64(h.Seg), h.Total-h.Offset) {
		return nil, errMcast
	}
	return data, nil
}
