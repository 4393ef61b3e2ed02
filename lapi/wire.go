package lapi

import (
	"encoding/binary"
	"errors"
)

// Packet header, inside a hal FrameData payload, little-endian:
//
//	 0 kind    u8   kindAM or kindAck
//	 1 flags   u8   flagSeq: seq is meaningful (unreliable device);
//	                flagAckNow: acknowledge this packet at once
//	 2 credit  u16  packets the sender of this packet will accept from its peer
//	 4 seq     u32  per-peer packet sequence number
//	 8 ackCum  u32  every peer packet with seq < ackCum has arrived
//	12 msgID   u32  message identifier, unique per (origin, target) in flight
//	16 sack    u64  bit i: peer packet ackCum+1+i has arrived
//	24 sack2   u64  bits 64..127
//	32 handler u16  active-message handler
//	34 uhdrLen u16  bytes of user header, carried in every packet of a message
//	36 total   u32  message data length
//	40 offset  u32  this packet's data offset in the message
//	44 tcntr   u32  target counter to increment on completion (0: none)
//	48 ccntr   u32  origin counter to increment when the target completes (0: none)
//	52 dstEp   u32  receiver's incarnation as the sender knows it (0: unknown)
//	56 user header, then data
//
// The user header travels in every packet so that whichever packet of a
// message arrives first can run the header handler: packets are placed in
// any order and nothing is buffered waiting for the first one.
//
// On a reliable device (inproc, shm) the sequence, acknowledgement and
// credit fields are never used, so active messages there carry a short
// header instead, 24 bytes smaller: an 8-byte MPI message then fits the
// shm device's inline cell. decodePkt reads it as a kindAM header whose
// flags, credit, seq, ackCum and sack are zero (which an unreliable
// context refuses: flagSeq is not set).
//
//	 0 kind    u8   kindAMShort
//	 1 -       u8   zero
//	 2 handler u16
//	 4 uhdrLen u16
//	 6 -       u16  zero
//	 8 msgID   u32
//	12 total   u32
//	16 offset  u32
//	20 tcntr   u32
//	24 ccntr   u32
//	28 dstEp   u32
//	32 user header, then data
//
// A whole message in one packet with no counters, the common small
// message, has a tiny header instead, 8 bytes: its total is the packet's
// data, its offset and counters zero, and it needs no message id, since
// nothing is reassembled. With it and the MPI eager envelope an 8-byte MPI
// message is one 64-byte frame, one cache line.
//
//	0 kind    u8   kindAMTiny
//	1 uhdrLen u8
//	2 handler u16
//	4 dstEp   u32
//	8 user header, then data
//
// These values are part of the wire protocol.
const (
	pktHdrLen   = 56
	shortHdrLen = 32
	tinyHdrLen  = 8
	// MaxUhdr is the largest user header an active message may carry.
	MaxUhdr = 256
	// sackBits is how many packets past ackCum an acknowledgement describes,
	// and so the largest send window.
	sackBits = 128
)

const (
	kindAM      = 1
	kindAck     = 2
	kindAMShort = 3
	kindAMTiny  = 4

	flagSeq = 1 << 0
	// flagAckNow asks the receiver to acknowledge this packet at once,
	// instead of after AckDelay or AckEvery packets: on the last packet
	// of a message whose sender waits for its acknowledgement (the data
	// was not copied: the buffer is the caller's until then; nothing
	// else the receiver sends may carry it sooner, since it may owe the
	// sender no reply), and every ackAskEvery packets of a sender that
	// has more queued than its window holds.
	flagAckNow = 1 << 1
)

// ackAskEvery is how often (in packets) a sender with more queued than
// its window holds sets flagAckNow.
const ackAskEvery = 8

// pktHdr is a decoded packet header.
type pktHdr struct {
	kind    uint8
	flags   uint8
	credit  uint16
	seq     uint32
	ackCum  uint32
	msgID   uint32
	sack    [2]uint64
	handler uint16
	uhdrLen uint16
	total   uint32
	offset  uint32
	tcntr   uint32
	ccntr   uint32
	dstEp   uint32
}

var errShortPacket = errors.New("lapi: packet shorter than its header")
var errBadPacket = errors.New("lapi: malformed packet")

func (h *pktHdr) encode(b []byte) {
	_ = b[pktHdrLen-1]
	b[0], b[1] = h.kind, h.flags
	binary.LittleEndian.PutUint16(b[2:], h.credit)
	binary.LittleEndian.PutUint32(b[4:], h.seq)
	binary.LittleEndian.PutUint32(b[8:], h.ackCum)
	binary.LittleEndian.PutUint32(b[12:], h.msgID)
	binary.LittleEndian.PutUint64(b[16:], h.sack[0])
	binary.LittleEndian.PutUint64(b[24:], h.sack[1])
	binary.LittleEndian.PutUint16(b[32:], h.handler)
	binary.LittleEndian.PutUint16(b[34:], h.uhdrLen)
	h.putTail(b[36:])
}

// Both layouts end with the same 20 bytes: total, offset, tcntr, ccntr
// and dstEp, little-endian u32s.
const tailLen = 20

func (h *pktHdr) putTail(b []byte) {
	_ = b[tailLen-1]
	binary.LittleEndian.PutUint32(b[0:], h.total)
	binary.LittleEndian.PutUint32(b[4:], h.offset)
	binary.LittleEndian.PutUint32(b[8:], h.tcntr)
	binary.LittleEndian.PutUint32(b[12:], h.ccntr)
	binary.LittleEndian.PutUint32(b[16:], h.dstEp)
}

func (h *pktHdr) getTail(b []byte) {
	_ = b[tailLen-1]
	h.total = binary.LittleEndian.Uint32(b[0:])
	h.offset = binary.LittleEndian.Uint32(b[4:])
	h.tcntr = binary.LittleEndian.Uint32(b[8:])
	h.ccntr = binary.LittleEndian.Uint32(b[12:])
	h.dstEp = binary.LittleEndian.Uint32(b[16:])
}

// encodeShort writes h, an active-message header for a reliable device, in
// the short layout. The fields the short layout lacks must be zero.
func (h *pktHdr) encodeShort(b []byte) {
	_ = b[shortHdrLen-1]
	b[0], b[1] = kindAMShort, 0
	binary.LittleEndian.PutUint16(b[2:], h.handler)
	binary.LittleEndian.PutUint16(b[4:], h.uhdrLen)
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint32(b[8:], h.msgID)
	h.putTail(b[12:])
}

// tiny reports whether h, a whole one-packet message of n data bytes, can
// go in the tiny layout.
func (h *pktHdr) tiny(n int) bool {
	return h.uhdrLen <= 0xff && h.offset == 0 && int(h.total) == n && h.tcntr == 0 && h.ccntr == 0
}

// encodeTiny writes h, for which tiny holds, in the tiny layout.
func (h *pktHdr) encodeTiny(b []byte) { putTiny(b, h.handler, int(h.uhdrLen), h.dstEp) }

// putTiny writes the tiny layout's header: a message for handler with a
// user header of uhdrLen bytes (at most 255), to destination epoch dstEp.
func putTiny(b []byte, handler uint16, uhdrLen int, dstEp uint32) {
	_ = b[tinyHdrLen-1]
	b[0], b[1] = kindAMTiny, byte(uhdrLen)
	binary.LittleEndian.PutUint16(b[2:], handler)
	binary.LittleEndian.PutUint32(b[4:], dstEp)
}

// decodeTiny parses a packet in the tiny layout (b[0] is kindAMTiny): its
// handler, the destination epoch it names, its user header and data. It
// reports false for a packet too short for its header or user header.
// The receive path of a reliable device calls it without a pktHdr
// (Context.onTiny).
func decodeTiny(b []byte) (handler uint16, dstEp uint32, uhdr, data []byte, ok bool) {
	if len(b) < tinyHdrLen {
		return 0, 0, nil, nil, false
	}
	u := tinyHdrLen + int(b[1])
	if len(b) < u {
		return 0, 0, nil, nil, false
	}
	return binary.LittleEndian.Uint16(b[2:]), binary.LittleEndian.Uint32(b[4:]), b[tinyHdrLen:u], b[u:], true
}

// putAck rewrites only the acknowledgement fields of an encoded header, so a
// retransmitted packet carries current acknowledgements.
func putAck(b []byte, credit uint16, cum uint32, sack [2]uint64) {
	binary.LittleEndian.PutUint16(b[2:], credit)
	binary.LittleEndian.PutUint32(b[8:], cum)
	binary.LittleEndian.PutUint64(b[16:], sack[0])
	binary.LittleEndian.PutUint64(b[24:], sack[1])
}

// decodePkt parses a packet, in either layout, and checks that its fields
// are consistent with its size. It returns the user header and the data
// that follow.
func decodePkt(b []byte, h *pktHdr) (uhdr, data []byte, err error) {
	if len(b) == 0 {
		return nil, nil, errShortPacket
	}
	var rest []byte
	switch b[0] {
	case kindAMShort:
		if len(b) < shortHdrLen {
			return nil, nil, errShortPacket
		}
		if b[1] != 0 || b[6] != 0 || b[7] != 0 {
			return nil, nil, errBadPacket
		}
		h.kind, h.flags, h.credit = kindAM, 0, 0
		h.seq, h.ackCum, h.sack = 0, 0, [2]uint64{}
		h.handler = binary.LittleEndian.Uint16(b[2:])
		h.uhdrLen = binary.LittleEndian.Uint16(b[4:])
		h.msgID = binary.LittleEndian.Uint32(b[8:])
		h.getTail(b[12:])
		rest = b[shortHdrLen:]
	case kindAMTiny:
		handler, dstEp, uhdr, data, ok := decodeTiny(b)
		if !ok {
			return nil, nil, errShortPacket
		}
		// Field by field into a zeroed h: a composite literal is built
		// aside and copied, and the copy's wide loads stall on the
		// narrow stores just made (no store-to-load forwarding).
		*h = pktHdr{}
		h.kind, h.uhdrLen, h.handler = kindAM, uint16(len(uhdr)), handler
		h.dstEp, h.total = dstEp, uint32(len(data))
		return uhdr, data, nil
	case kindAM, kindAck:
		if len(b) < pktHdrLen {
			return nil, nil, errShortPacket
		}
		h.kind, h.flags = b[0], b[1]
		h.credit = binary.LittleEndian.Uint16(b[2:])
		h.seq = binary.LittleEndian.Uint32(b[4:])
		h.ackCum = binary.LittleEndian.Uint32(b[8:])
		h.msgID = binary.LittleEndian.Uint32(b[12:])
		h.sack[0] = binary.LittleEndian.Uint64(b[16:])
		h.sack[1] = binary.LittleEndian.Uint64(b[24:])
		h.handler = binary.LittleEndian.Uint16(b[32:])
		h.uhdrLen = binary.LittleEndian.Uint16(b[34:])
		h.getTail(b[36:])
		if h.kind == kindAck {
			if len(b) != pktHdrLen {
				return nil, nil, errBadPacket
			}
			return nil, nil, nil
		}
		rest = b[pktHdrLen:]
	default:
		return nil, nil, errBadPacket
	}
	if int(h.uhdrLen) > MaxUhdr || int(h.uhdrLen) > len(rest) {
		return nil, nil, errBadPacket
	}
	uhdr, data = rest[:h.uhdrLen], rest[h.uhdrLen:]
	if uint64(h.offset)+uint64(len(data)) > uint64(h.total) {
		return nil, nil, errBadPacket
	}
	if len(data) == 0 && h.total != 0 {
		return nil, nil, errBadPacket
	}
	return uhdr, data, nil
}

func putSeq(b []byte, seq uint32) { binary.LittleEndian.PutUint32(b[4:], seq) }

// askAck sets flagAckNow in an encoded header.
func askAck(b []byte) { b[1] |= flagAckNow }

// putDstEp rewrites the destination incarnation of an encoded header: a
// packet queued before its peer restarted goes out addressed to the life
// known when it is (re)transmitted.
func putDstEp(b []byte, ep uint32) { binary.LittleEndian.PutUint32(b[52:], ep) }
