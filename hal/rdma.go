package hal

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire layout of an RDMA header (little-endian), RDMAHdrLen bytes at the
// start of the payload of FrameRDMAWrite, FrameRDMAReadReq,
// FrameRDMAReadResp and FrameRDMADone:
//
//	 0 rcxt    u32  the origin's rCxt: with the origin's rank it names the
//	                transfer at both ends
//	 4 key     u32  the rCxt's key
//	 8 tid     u32  this drive of the transfer
//	12 base    u32  the tid of the transfer's first drive (redrives keep it)
//	16 total   u64  transfer length
//	24 offset  u64  this packet's offset in the transfer
//	32 seg     u32  segment size: a packet carries segment offset/seg, whole
//	                but for the last
//	36 notify  u8   NotifyOrigin | NotifyTarget
//	37 place   u8   PlaceDirect or PlaceFIFO (half-RDMA)
//	38 code    u8   done: 0, or the protection check that failed (FaultCode)
//	39 -       u8   zero
//	40 cookie  u32  the ULP's word for the target (a counter to bump)
//	44 arg     u32  the ULP's word for half-RDMA (an accumulate operation);
//	                a read request's length from offset (0: to the end)
//	48 dstEp   u32  the receiver's incarnation as the sender knows it (0: any)
//	52 pvo     20B  the target's region (write, read request) or the
//	                origin's (read response), at the transfer's start
//	72 data (write, read response), the origin's region (read request:
//	   PVOLen bytes), or nothing (done)
//
// Every packet says where it goes and which transfer it belongs to, so
// packets are placed in whatever order they arrive, over any device of the
// rank (the TPT is the rank's), and nothing is buffered.
const (
	RDMAHdrLen = 72
	// MinSeg is the smallest segment a transfer of more than MinSeg bytes
	// may use: it bounds the arrival bitmap a transfer costs its target.
	MinSeg = 256
	// MaxRCxt bounds the rCxt numbers an origin may use, and so the state
	// a peer can make a target keep.
	MaxRCxt = 1 << 16
)

// Notify says who is told that a transfer completed.
type Notify uint8

// Notification targets; a transfer may ask for both or neither.
const (
	NotifyOrigin Notify = 1 << iota // a FrameRDMADone goes back to the origin
	NotifyTarget                    // the target's ULP gets an event
)

// Placement says what the target does with a write's data.
type Placement uint8

// Placements.
const (
	// PlaceDirect: the data is written into the target's region.
	PlaceDirect Placement = iota
	// PlaceFIFO (half-RDMA): the data is handed to the target's ULP packet
	// by packet, with the region slice it names, for the ULP to act on as
	// it arrives (reduce it into the region, say). Protection is checked as
	// for a direct write.
	PlaceFIFO
)

// RDMAHdr is a decoded RDMA header.
type RDMAHdr struct {
	RCxt, Key uint32
	Tid, Base uint32
	Total     uint64
	Offset    uint64
	Seg       uint32
	Notify    Notify
	Place     Placement
	Code      uint8
	Cookie    uint32
	Arg       uint32
	DstEp     uint32
	PVO       PVO
	Local     PVO    // read request: where the origin wants the data
	Data      []byte // a data packet's bytes, a sub-slice of the payload
}

// ErrBadRDMA is wrapped by every RDMA header decoding failure.
var ErrBadRDMA = errors.New("hal: malformed RDMA packet")

// EncodeRDMA writes h into b[:RDMAHdrLen] (and, for a read request, the
// origin's PVO after it: b must then hold RDMAHdrLen+PVOLen bytes). It
// writes neither the frame header nor the data.
func EncodeRDMA(b []byte, t FrameType, h *RDMAHdr) {
	_ = b[RDMAHdrLen-1]
	le := binary.LittleEndian
	le.PutUint32(b[0:], h.RCxt)
	le.PutUint32(b[4:], h.Key)
	le.PutUint32(b[8:], h.Tid)
	le.PutUint32(b[12:], h.Base)
	le.PutUint64(b[16:], h.Total)
	le.PutUint64(b[24:], h.Offset)
	le.PutUint32(b[32:], h.Seg)
	b[36], b[37], b[38], b[39] = byte(h.Notify), byte(h.Place), h.Code, 0
	le.PutUint32(b[40:], h.Cookie)
	le.PutUint32(b[44:], h.Arg)
	le.PutUint32(b[48:], h.DstEp)
	PutPVO(b[52:], h.PVO)
	if t == FrameRDMAReadReq {
		PutPVO(b[RDMAHdrLen:], h.Local)
	}
}

// Completion is the header-only completion (FrameRDMADone) that answers
// h's transfer at its current drive to the origin, with code non-zero for
// the protection check that failed.
func (h *RDMAHdr) Completion(code uint8) RDMAHdr {
	return RDMAHdr{RCxt: h.RCxt, Key: h.Key, Tid: h.Tid, Base: h.Base, Total: h.Total, Seg: h.Seg,
		Notify: NotifyOrigin, Code: code, Cookie: h.Cookie}
}

// RDMAPayloadLen is how many payload bytes of an RDMA frame of type t
// precede its data: the header, and a read request's origin PVO.
func RDMAPayloadLen(t FrameType) int {
	if t == FrameRDMAReadReq {
		return RDMAHdrLen + PVOLen
	}
	return RDMAHdrLen
}

// IsRDMAFrame reports whether frames of type t carry an RDMA header.
func IsRDMAFrame(t FrameType) bool { return t >= FrameRDMAWrite && t <= FrameRDMADone }

// DecodeRDMA parses the payload of an RDMA frame of type t into h and
// checks that its fields agree with each other and with its size: a
// packet that passes may be placed without further arithmetic checks.
// h.Data is a sub-slice of b.
func DecodeRDMA(t FrameType, b []byte, h *RDMAHdr) error {
	if !IsRDMAFrame(t) {
		return fmt.Errorf("%w: frame type %v", ErrBadRDMA, t)
	}
	if len(b) < RDMAPayloadLen(t) {
		return fmt.Errorf("%w: %d bytes, header needs %d", ErrBadRDMA, len(b), RDMAPayloadLen(t))
	}
	le := binary.LittleEndian
	h.RCxt, h.Key = le.Uint32(b[0:]), le.Uint32(b[4:])
	h.Tid, h.Base = le.Uint32(b[8:]), le.Uint32(b[12:])
	h.Total, h.Offset = le.Uint64(b[16:]), le.Uint64(b[24:])
	h.Seg = le.Uint32(b[32:])
	h.Notify, h.Place, h.Code = Notify(b[36]), Placement(b[37]), b[38]
	h.Cookie, h.Arg, h.DstEp = le.Uint32(b[40:]), le.Uint32(b[44:]), le.Uint32(b[48:])
	h.PVO = GetPVO(b[52:])
	h.Local = PVO{}
	h.Data = nil
	switch {
	case b[39] != 0:
		return fmt.Errorf("%w: reserved byte %#x", ErrBadRDMA, b[39])
	case h.RCxt >= MaxRCxt:
		return fmt.Errorf("%w: rCxt %d (max %d)", ErrBadRDMA, h.RCxt, MaxRCxt-1)
	case h.Notify > NotifyOrigin|NotifyTarget:
		return fmt.Errorf("%w: notify %#x", ErrBadRDMA, h.Notify)
	case h.Place > PlaceFIFO:
		return fmt.Errorf("%w: placement %d", ErrBadRDMA, h.Place)
	case int32(h.Tid-h.Base) < 0:
		return fmt.Errorf("%w: tid %d before its base %d", ErrBadRDMA, h.Tid, h.Base)
	case h.Total > 1<<48:
		return fmt.Errorf("%w: transfer of %d bytes", ErrBadRDMA, h.Total)
	}
	rest := b[RDMAPayloadLen(t):]
	switch t {
	case FrameRDMAReadReq:
		// Offset and Arg name the part of the transfer wanted (a redrive
		// asks only for what has not arrived); Arg 0: up to its end.
		h.Local = GetPVO(b[RDMAHdrLen:])
		if err := checkSeg(h); err != nil {
			return err
		}
		switch {
		case len(rest) != 0:
			return fmt.Errorf("%w: read request with data", ErrBadRDMA)
		case h.Offset%uint64(h.Seg) != 0 || h.Offset > h.Total || h.Offset == h.Total && h.Total != 0:
			return fmt.Errorf("%w: read request from offset %d of %d (segment %d)", ErrBadRDMA, h.Offset, h.Total, h.Seg)
		case uint64(h.Arg) > h.Total-h.Offset:
			return fmt.Errorf("%w: read request for %d bytes at %d of %d", ErrBadRDMA, h.Arg, h.Offset, h.Total)
		}
		return nil
	case FrameRDMADone:
		if len(rest) != 0 || h.Offset != 0 {
			return fmt.Errorf("%w: completion with data or offset", ErrBadRDMA)
		}
		return checkSeg(h)
	}
	if err := checkSeg(h); err != nil {
		return err
	}
	// A data packet is segment Offset/Seg, whole but for the last.
	want := min(uint64(h.Seg), h.Total-min(h.Offset, h.Total))
	switch {
	case h.Offset%uint64(h.Seg) != 0:
		return fmt.Errorf("%w: offset %d not a multiple of segment %d", ErrBadRDMA, h.Offset, h.Seg)
	case h.Offset >= h.Total && h.Total != 0, h.Total == 0 && h.Offset != 0:
		return fmt.Errorf("%w: offset %d past a %d-byte transfer", ErrBadRDMA, h.Offset, h.Total)
	case uint64(len(rest)) != want:
		return fmt.Errorf("%w: %d data bytes at offset %d, segment needs %d", ErrBadRDMA, len(rest), h.Offset, want)
	}
	h.Data = rest
	return nil
}

// checkSeg checks the segment size against the transfer length.
func checkSeg(h *RDMAHdr) error {
	if h.Seg == 0 || h.Seg < MinSeg && uint64(h.Seg) < h.Total {
		return fmt.Errorf("%w: segment %d for %d bytes (min %d)", ErrBadRDMA, h.Seg, h.Total, MinSeg)
	}
	return nil
}

// Segments is how many packets carry a transfer of total bytes in
// segments of seg (a zero-length transfer still takes one).
func Segments(total uint64, seg uint32) uint64 {
	if total == 0 {
		return 1
	}
	return (total + uint64(seg) - 1) / uint64(seg)
}

// FaultChecks are the protection checks a completion's code names: code i
// is FaultChecks[i] (0: none failed).
var FaultChecks = [...]string{"", "entry", "key", "bounds", "access", "align", "other"}

// FaultCode is the completion code for a protection error (the last,
// "other", for anything that is not one).
func FaultCode(err error) uint8 {
	if pe, ok := errors.AsType[*ProtectionError](err); ok {
		for i, s := range FaultChecks {
			if i > 0 && s == pe.Check {
				return uint8(i)
			}
		}
	}
	return uint8(len(FaultChecks) - 1)
}

// FaultCheck names the check a completion code reports.
func FaultCheck(code uint8) string {
	if int(code) < len(FaultChecks) {
		return FaultChecks[code]
	}
	return "unknown"
}
