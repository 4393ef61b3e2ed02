package mpi

import (
	"encoding/binary"
	"errors"

	"github.com/weft-hpc/weft/lapi"
)

// The header an MPI message carries in its lapi user header,
// little-endian. An eager message's is 16 bytes, so that with lapi's tiny
// header a small message is one cache-line frame; its size is the lapi
// message's. A rendezvous request (RTS) names its size and the sender's
// buffer:
//
//	eager (16 bytes)          RTS (32 + lapi.PVOLen bytes)
//	 0 ctx  u32               0 kind  u8   kindRTS, then 3 zero bytes
//	 4 src  i32               4 ctx   u32  communicator context
//	 8 tag  i32               8 src   i32  sender's rank in the communicator
//	12 seq  u32              12 tag   i32
//	                         16 seq   u32  per (sender, receiver) world-rank pair: matching order
//	                         20 sreq  u32  the sender's request, named in FIN
//	                         24 size  u64  message bytes
//	                         32 pvo        the sender's registered buffer
//
// The two are told apart by length.
const (
	kindEager = 1
	kindRTS   = 2

	envEagerLen = 16
	envLen      = 32
	envRTSLen   = envLen + lapi.PVOLen
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
	pvo  lapi.PVO
}

// encode writes e into b, which has room for it (envEagerLen bytes for an
// eager message, envRTSLen for an RTS), and returns the encoded header.
func (e *envelope) encode(b []byte) []byte {
	if e.kind == kindEager {
		return putEager(b, e.ctx, e.src, e.tag, e.seq)
	}
	le := binary.LittleEndian
	b = b[:envRTSLen]
	b[0], b[1], b[2], b[3] = e.kind, 0, 0, 0
	le.PutUint32(b[4:], e.ctx)
	le.PutUint32(b[8:], uint32(int32(e.src)))
	le.PutUint32(b[12:], uint32(int32(e.tag)))
	le.PutUint32(b[16:], e.seq)
	le.PutUint32(b[20:], e.sreq)
	le.PutUint64(b[24:], e.size)
	lapi.PutPVO(b[envLen:], e.pvo)
	return b
}

// putEager writes an eager message's header into b (envEagerLen bytes)
// and returns it. It takes the fields rather than an envelope: a struct
// built field by field and then copied whole costs the processor a stalled
// store-to-load forward on the small-message path.
func putEager(b []byte, ctx uint32, src, tag int, seq uint32) []byte {
	le := binary.LittleEndian
	b = b[:envEagerLen]
	le.PutUint32(b[0:], ctx)
	le.PutUint32(b[4:], uint32(int32(src)))
	le.PutUint32(b[8:], uint32(int32(tag)))
	le.PutUint32(b[12:], seq)
	return b
}

var errBadEnvelope = errors.New("mpi: malformed message header")

// decode parses a header that came with n data bytes (an eager message's
// size).
func (e *envelope) decode(b []byte, n int) error {
	le := binary.LittleEndian
	// Field by field into a zeroed e, not a composite literal: see putEager.
	*e = envelope{}
	switch {
	case len(b) == envEagerLen:
		e.kind, e.ctx, e.seq, e.size = kindEager, le.Uint32(b[0:]), le.Uint32(b[12:]), uint64(n)
		e.src, e.tag = int(int32(le.Uint32(b[4:]))), int(int32(le.Uint32(b[8:])))
	case len(b) == envRTSLen && b[0] == kindRTS && b[1]|b[2]|b[3] == 0 && n == 0:
		e.kind, e.ctx, e.seq, e.sreq = kindRTS, le.Uint32(b[4:]), le.Uint32(b[16:]), le.Uint32(b[20:])
		e.src, e.tag = int(int32(le.Uint32(b[8:]))), int(int32(le.Uint32(b[12:])))
		e.size, e.pvo = le.Uint64(b[24:]), lapi.GetPVO(b[envLen:])
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
