package mpi

import (
	"encoding/binary"
	"errors"

	"github.com/weft-hpc/weft/hal"
)

// The header an MPI message carries in its lapi user header,
// little-endian:
//
//	 0 kind  u8   kindEager or kindRTS
//	 4 ctx   u32  communicator context
//	 8 src   i32  sender's rank in the communicator
//	12 tag   i32
//	16 seq   u32  per (sender, receiver) world-rank pair: matching order
//	20 sreq  u32  rendezvous: the sender's request, named in FIN
//	24 size  u64  message bytes
//	32 pvo        rendezvous: the sender's registered buffer (hal.PVOLen)
const (
	kindEager = 1
	kindRTS   = 2

	envLen    = 32
	envRTSLen = envLen + hal.PVOLen
)

// envelope is a decoded MPI message header.
type envelope struct {
	kind uint8
	ctx  uint32
	src  int
	tag  int
	seq  uint32
	sreq uint32
	size uint64
	pvo  hal.PVO
}

func (e *envelope) encode(b []byte) []byte {
	n := envLen
	if e.kind == kindRTS {
		n = envRTSLen
	}
	b = b[:n]
	b[0], b[1], b[2], b[3] = e.kind, 0, 0, 0
	binary.LittleEndian.PutUint32(b[4:], e.ctx)
	binary.LittleEndian.PutUint32(b[8:], uint32(int32(e.src)))
	binary.LittleEndian.PutUint32(b[12:], uint32(int32(e.tag)))
	binary.LittleEndian.PutUint32(b[16:], e.seq)
	binary.LittleEndian.PutUint32(b[20:], e.sreq)
	binary.LittleEndian.PutUint64(b[24:], e.size)
	if e.kind == kindRTS {
		hal.PutPVO(b[envLen:], e.pvo)
	}
	return b
}

var errBadEnvelope = errors.New("mpi: malformed message header")

func (e *envelope) decode(b []byte) error {
	if len(b) < envLen {
		return errBadEnvelope
	}
	e.kind = b[0]
	e.ctx = binary.LittleEndian.Uint32(b[4:])
	e.src = int(int32(binary.LittleEndian.Uint32(b[8:])))
	e.tag = int(int32(binary.LittleEndian.Uint32(b[12:])))
	e.seq = binary.LittleEndian.Uint32(b[16:])
	e.sreq = binary.LittleEndian.Uint32(b[20:])
	e.size = binary.LittleEndian.Uint64(b[24:])
	switch {
	case e.kind == kindEager && len(b) == envLen:
	case e.kind == kindRTS && len(b) == envRTSLen:
		e.pvo = hal.GetPVO(b[envLen:])
	default:
		return errBadEnvelope
	}
	if e.src < 0 || e.tag < 0 {
		return errBadEnvelope
	}
	return nil
}

// matches reports whether a receive for (ctx, src, tag) takes e.
func (e *envelope) matches(ctx uint32, src, tag int) bool {
	return e.ctx == ctx && (src == AnySource || src == e.src) && (tag == AnyTag || tag == e.tag)
}
