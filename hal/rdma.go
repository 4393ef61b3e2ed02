package hal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
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
//	39 flags   u8   RDMAFlags: FlagLast (data packets), FlagMissing (done)
//	40 cookie  u32  the ULP's word for the target (a counter to bump)
//	44 arg     u32  the ULP's word for half-RDMA (an accumulate operation);
//	                a read request's length from offset (0: to the end)
//	48 dstEp   u32  the receiver's incarnation as the sender knows it (0: any)
//	52 pvo     20B  the target's region (write, read request) or the
//	                origin's (read response), at the transfer's start
//	72 data (write, read response), the origin's region (read request:
//	   PVOLen bytes), nothing (done), or a bitmap of missing segments
//	   (done with FlagMissing, 1 to MaxReport bytes: bit i, byte i/8 bit
//	   i%8, set when segment offset/seg+i has not been placed; bits past
//	   the transfer's last segment zero, at least one set; segments past
//	   the bitmap are not reported on); a read request with FlagMissing
//	   carries such a bitmap after the origin's region, naming the
//	   segments it wants
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
	// MaxReport is the largest bitmap a report of missing segments
	// (FlagMissing) carries: 8,192 segments from its first missing one.
	MaxReport = 1024
)

// RDMAFlags are an RDMA header's flag bits.
type RDMAFlags uint8

// Flags.
const (
	// FlagLast marks the last data packet of a drive (write or read
	// response). A target whose engine reports (SetReportLen) answers the
	// last packet of a write's current drive at once: with the
	// completion when the transfer is whole, else with a report of the
	// segments still missing, so that the origin resends only those, a
	// round trip after the loss instead of a timeout after it.
	FlagLast RDMAFlags = 1 << iota
	// FlagMissing marks a FrameRDMADone that is not a completion but a
	// report: the drive it names (Tid) ended with the segments its bitmap
	// names not placed. Its Offset is the first reported segment's. On a
	// FrameRDMAReadReq (Arg 0) it asks for the segments its bitmap names
	// alone: a read's reader knows what it lost.
	FlagMissing
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
	// PlaceFIFO (half-RDMA): on a write (a half-send RDMA write), the data
	// is handed to the target's ULP packet by packet, with the region
	// slice it names, for the ULP to act on as it arrives (reduce it into
	// the region, say); protection is checked as for a direct write. On a
	// read (a half-send RDMA read) it is the origin's choice alone, made
	// in ExpectRead: the target serves its region as for any read, and
	// the origin's engine hands the response packets to its ULP
	// (EvReadFIFO) instead of placing them, so the origin registers
	// nothing; a read request's place is not acted on by the target.
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
	Flags     RDMAFlags
	Cookie    uint32
	Arg       uint32
	DstEp     uint32
	PVO       PVO
	Local     PVO    // read request: where the origin wants the data
	Data      []byte // a data packet's bytes, or a report's bitmap: a sub-slice of the payload
}

// ErrBadRDMA is wrapped by every RDMA header decoding failure.
var ErrBadRDMA = errors.New("hal: malformed RDMA packet")

// EncodeRDMA writes h into b[:RDMAHdrLen] (and, for a read request, the
// origin's PVO after it: b must then hold RDMAHdrLen+PVOLen bytes). It
// writes neither the frame header nor the data (nor a report's bitmap:
// see AppendReport).
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
	b[36], b[37], b[38], b[39] = byte(h.Notify), byte(h.Place), h.Code, byte(h.Flags)
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
	h.Notify, h.Place, h.Code, h.Flags = Notify(b[36]), Placement(b[37]), b[38], RDMAFlags(b[39])
	h.Cookie, h.Arg, h.DstEp = le.Uint32(b[40:]), le.Uint32(b[44:]), le.Uint32(b[48:])
	h.PVO = GetPVO(b[52:])
	h.Local = PVO{}
	h.Data = nil
	switch {
	case h.Flags&^allowedFlags(t) != 0:
		return fmt.Errorf("%w: flags %#x on a %v frame", ErrBadRDMA, h.Flags, t)
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
		if h.Flags&FlagMissing != 0 {
			// Only the segments the bitmap names are wanted.
			if h.Arg != 0 {
				return fmt.Errorf("%w: read request of missing segments with a length", ErrBadRDMA)
			}
			return checkReport(h, rest)
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
		if err := checkSeg(h); err != nil {
			return err
		}
		if h.Flags&FlagMissing != 0 {
			return checkReport(h, rest)
		}
		if len(rest) != 0 || h.Offset != 0 {
			return fmt.Errorf("%w: completion with data or offset", ErrBadRDMA)
		}
		return nil
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

// allowedFlags are the flags a frame of type t may carry.
func allowedFlags(t FrameType) RDMAFlags {
	switch t {
	case FrameRDMAWrite, FrameRDMAReadResp:
		return FlagLast
	case FrameRDMADone, FrameRDMAReadReq:
		return FlagMissing
	}
	return 0
}

// checkReport checks a report's offset and bitmap (b) against its
// transfer, and makes h.Data the bitmap.
func checkReport(h *RDMAHdr, b []byte) error {
	segs := Segments(h.Total, h.Seg)
	first := h.Offset / uint64(h.Seg)
	switch {
	case h.Code != 0:
		return fmt.Errorf("%w: report with fault code %d", ErrBadRDMA, h.Code)
	case len(b) == 0 || len(b) > MaxReport:
		return fmt.Errorf("%w: report of %d bytes (1 to %d)", ErrBadRDMA, len(b), MaxReport)
	case h.Offset%uint64(h.Seg) != 0 || first >= segs:
		return fmt.Errorf("%w: report from offset %d of %d (segment %d)", ErrBadRDMA, h.Offset, h.Total, h.Seg)
	}
	any := false
	for i, v := range b {
		if v == 0 {
			continue
		}
		any = true
		// Bits for segments past the transfer's last must be zero.
		if seg := first + 8*uint64(i); seg+uint64(bits.Len8(v)) > segs {
			return fmt.Errorf("%w: report names segment %d of %d", ErrBadRDMA, seg+uint64(bits.Len8(v))-1, segs)
		}
	}
	if !any {
		return fmt.Errorf("%w: report of no missing segment", ErrBadRDMA)
	}
	h.Data = b
	return nil
}

// AppendReport appends to b the frame payload of a report (FlagMissing):
// h encoded (with FlagMissing set and Code 0) and its bitmap, h.Data.
func AppendReport(b []byte, h *RDMAHdr) []byte {
	n := len(b)
	b = append(b, make([]byte, RDMAHdrLen)...)
	r := *h
	r.Flags, r.Code, r.Notify = FlagMissing, 0, NotifyOrigin
	EncodeRDMA(b[n:], FrameRDMADone, &r)
	return append(b, h.Data...)
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
