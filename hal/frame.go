package hal

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/klauspost/cpuid/v2"
	"github.com/weft-hpc/weft/internal/crc32c"
)

// Wire layout of a frame header (little-endian), HeaderLen bytes:
//
//	 0 magic   u16  'W','F'
//	 2 version u8
//	 3 type    u8   FrameType
//	 4 flags   u8   FlagCRC, ...
//	 5 srcDev  u8   device index at the source
//	 6 dstDev  u8
//	 7 life    u24  the sender's life (Header.Life); 0: none said
//	10 length  u16  payload bytes after the header
//	12 crc     u32  CRC32C over header (this field zero) and payload, if FlagCRC
//	16 jobKey  u64
//	24 src     u32  source rank
//	28 dst     u32  destination rank
const (
	HeaderLen = 32
	// Magic is the first two bytes of every frame, "WF" read little-endian.
	Magic uint16 = 'W' | 'F'<<8
	// Version is the wire format's version; frames of another are dropped.
	// 2: byte 9 carries the sender's life; 3: bytes 7-9 do (24 bits).
	Version = 3
	// MaxPayload is the largest payload the length field can describe that
	// still fits one UDP datagram (65507 bytes) with the header.
	MaxPayload = 65507 - HeaderLen
)

// FrameType says what a frame carries.
type FrameType uint8

// Frame types. HAL interprets the RDMA and reintegration types; FrameData
// payloads belong to the layer above.
const (
	FrameData         FrameType = 1 + iota // packet mode: a payload for the ULP
	FrameRDMAWrite                         // self-describing RDMA write data
	FrameRDMAReadReq                       // ask the target to send a region
	FrameRDMAReadResp                      // self-describing RDMA read data
	FrameRDMADone                          // header-only RDMA completion
	FrameBooting                           // reintegration: a device is joining
	FrameBootAck                           // reintegration: peer has cleaned up
	FrameBootNack                          // reintegration: peer cannot answer
	FrameRDMAReady                         // reintegration: RDMA enabled
	FrameTPTUpdate                         // TPT entries pushed to a peer's replica
	FrameMcast                             // multicast data, to BroadcastRank (mcast.go)
	frameTypeEnd
)

var frameTypeNames = [...]string{"invalid", "data", "rdma-write", "rdma-read-req",
	"rdma-read-resp", "rdma-done", "booting", "boot-ack", "boot-nack", "rdma-ready", "tpt-update", "mcast"}

// Valid reports whether t is a frame type this version knows.
func (t FrameType) Valid() bool { return t != 0 && t < frameTypeEnd }

// String names the frame type.
func (t FrameType) String() string {
	if t < frameTypeEnd {
		return frameTypeNames[t]
	}
	return "unknown"
}

// Header flags.
const (
	// FlagCRC: the crc field holds a CRC32C over header and payload.
	FlagCRC uint8 = 1 << iota
)

// Header is a decoded frame header.
type Header struct {
	Type           FrameType
	Flags          uint8
	SrcDev, DstDev uint8
	Len            uint16 // payload length
	JobKey         uint64
	Src, Dst       Rank
	// Life is which life of the source rank sent the frame: a digest,
	// 24 bits, never 0, of the epoch it joined with (lapi's
	// reintegration, LifeOf), so that a frame of an earlier life, delayed
	// in the network, is told from the new life's; 0 when the sender does
	// not say.
	Life uint32
}

// MaxLife is the largest Header.Life: it has 24 bits on the wire.
const MaxLife = 1<<24 - 1

// LifeOf digests a reintegration epoch to Header.Life: 1-MaxLife, never
// 0. Two lives of one rank have the same digest once in MaxLife.
func LifeOf(epoch uint64) uint32 {
	x := epoch ^ epoch>>32
	x *= 0x9e3779b97f4a7c15 // mix every bit of the epoch into the low ones
	x ^= x >> 29
	return uint32(x%MaxLife) + 1
}

// castagnoli is the CRC32C table; hash/crc32 switches to the SSE4.2 CRC32
// instruction for this polynomial when the CPU has it. Check uses it for
// the header's few bytes; a frame's long parts go through
// internal/crc32c, the same CRC folded with AVX-512 where the processor
// has it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRCHardware reports whether CRC32C runs on the CPU's CRC32 instruction
// (SSE4.2 on amd64, the CRC extension on arm64).
var CRCHardware = cpuid.CPU.Supports(cpuid.SSE42) || cpuid.CPU.Supports(cpuid.CRC32)

// EncodeHeader writes h into b[:HeaderLen] with a zero crc field.
// It panics if b is shorter than HeaderLen, as a slice index would.
func EncodeHeader(b []byte, h *Header) {
	_ = b[HeaderLen-1]
	binary.LittleEndian.PutUint16(b[0:], Magic)
	b[2] = Version
	b[3] = byte(h.Type)
	b[4] = h.Flags &^ FlagCRC
	b[5] = h.SrcDev
	b[6] = h.DstDev
	b[7], b[8], b[9] = byte(h.Life), byte(h.Life>>8), byte(h.Life>>16)
	binary.LittleEndian.PutUint16(b[10:], h.Len)
	binary.LittleEndian.PutUint32(b[12:], 0)
	binary.LittleEndian.PutUint64(b[16:], h.JobKey)
	binary.LittleEndian.PutUint32(b[24:], uint32(h.Src))
	binary.LittleEndian.PutUint32(b[28:], uint32(h.Dst))
}

// Seal sets FlagCRC in an encoded header and stores the CRC32C of the whole
// frame, hdr then payload, for devices that are not Reliable. hdr starts with
// the frame header and may continue with the upper layer's own header (see
// Device.Send): every byte of both slices is covered.
func Seal(hdr, payload []byte) {
	hdr[4] |= FlagCRC
	binary.LittleEndian.PutUint32(hdr[12:], 0)
	c := crc32c.Update(0, hdr)
	c = crc32c.Update(c, payload)
	binary.LittleEndian.PutUint32(hdr[12:], c)
}

// DecodeHeader parses the structure of b's header into h: size, magic,
// version, type and length. It checks neither CRC nor job key (see Check).
func DecodeHeader(b []byte, h *Header) error {
	if len(b) < HeaderLen {
		return frameErrs[DropShort]
	}
	if binary.LittleEndian.Uint16(b[0:]) != Magic {
		return frameErrs[DropMagic]
	}
	if b[2] != Version {
		return frameErrs[DropVersion]
	}
	h.Type = FrameType(b[3])
	if !h.Type.Valid() {
		return frameErrs[DropType]
	}
	h.Flags = b[4] // (unknown flag bits are carried: flags may be optional)
	h.Life = uint32(b[7]) | uint32(b[8])<<8 | uint32(b[9])<<16
	h.SrcDev, h.DstDev = b[5], b[6]
	h.Len = binary.LittleEndian.Uint16(b[10:])
	if int(h.Len) != len(b)-HeaderLen || h.Len > MaxPayload {
		return frameErrs[DropLength]
	}
	h.JobKey = binary.LittleEndian.Uint64(b[16:])
	h.Src = Rank(binary.LittleEndian.Uint32(b[24:]))
	h.Dst = Rank(binary.LittleEndian.Uint32(b[28:]))
	return nil
}

// Check decodes and validates a whole received frame for a device of the
// given job: structure, CRC when the frame carries one (and always when
// needCRC), job key, and that only a multicast frame is addressed to
// BroadcastRank (DropPeer). It returns the payload, a sub-slice of frame.
func Check(frame []byte, jobKey uint64, needCRC bool, h *Header) ([]byte, error) {
	if err := DecodeHeader(frame, h); err != nil {
		return nil, err
	}
	if h.Flags&FlagCRC != 0 {
		want := binary.LittleEndian.Uint32(frame[12:])
		c := crc32.Update(0, castagnoli, frame[:12])
		c = crc32.Update(c, castagnoli, zero4[:])
		c = crc32c.Update(c, frame[16:])
		if c != want {
			return nil, frameErrs[DropCRC]
		}
	} else if needCRC {
		return nil, frameErrs[DropCRC]
	}
	if h.JobKey != jobKey {
		return nil, frameErrs[DropJobKey]
	}
	if h.Dst == BroadcastRank && h.Type != FrameMcast {
		return nil, frameErrs[DropPeer]
	}
	return frame[HeaderLen:], nil
}

var zero4 [4]byte

// frameErrs holds one preallocated error per reason so rejecting a frame
// does not allocate.
var frameErrs = func() (e [NumDropReasons]*FrameError) {
	for i := range e {
		e[i] = &FrameError{DropReason(i)}
	}
	return e
}()
