package lapi

import (
	"encoding/binary"
	"fmt"

	"github.com/weft-hpc/weft/hal"
)

// The control messages of Broadcast (bcast.go) and Multicast (mcast.go):
// pure encoding and decoding (FuzzBcastMsg, FuzzMcastMsg).

// Wire layout of a broadcast control message's user header
// (little-endian), bcastMsgLen bytes:
//
//	 0 kind    u8   bcastReady, bcastHave, bcastOffer, bcastGot,
//	                bcastRefuse or bcastLost
//	 1 id      u64  the broadcast
//	 9 chunks  u32  ready: how many chunks (the data is that many u32
//	                counter IDs, one per chunk; 0 for 0 bytes); others: 0
//	13 total   u64  ready: the receiver's length, bytes; refuse: the
//	                parent's; others: 0
//	21 pvo     20B  ready: the sender's region (zero when it pulls or
//	                has 0 bytes); offer: the parent's region (zero when
//	                it has 0 bytes: it took the child's length); others:
//	                zero
//
// These values are part of the wire protocol.
const bcastMsgLen = 1 + 8 + 4 + 8 + hal.PVOLen

// Broadcast control message kinds.
const (
	bcastReady  = 1 // a receiver is ready: where its chunks go
	bcastHave   = 2 // a receiver's subtree has the data
	bcastOffer  = 3 // pull: where the parent's buffer is
	bcastGot    = 4 // pull: the receiver has read every chunk
	bcastRefuse = 5 // the parent's length is not the receiver's
	bcastLost   = 6 // a receiver's part failed or was aborted before its subtree had the data
)

// bcastMsg is a decoded control message (from, cntrs and raw are not on
// the wire's header).
type bcastMsg struct {
	kind   uint8
	id     uint64
	chunks uint32
	total  uint64
	pvo    hal.PVO
	from   hal.Rank
	cntrs  []uint32
	raw    []byte
}

// encodeBcastMsg writes m's header fields into b[:bcastMsgLen].
func encodeBcastMsg(b []byte, m bcastMsg) {
	_ = b[bcastMsgLen-1]
	b[0] = m.kind
	binary.LittleEndian.PutUint64(b[1:], m.id)
	binary.LittleEndian.PutUint32(b[9:], m.chunks)
	binary.LittleEndian.PutUint64(b[13:], m.total)
	hal.PutPVO(b[21:], m.pvo)
}

// decodeBcastMsg parses a control message's header.
func decodeBcastMsg(b []byte) (bcastMsg, error) {
	if len(b) != bcastMsgLen {
		return bcastMsg{}, fmt.Errorf("%w: control message of %d bytes, want %d", ErrBcast, len(b), bcastMsgLen)
	}
	m := bcastMsg{kind: b[0], id: binary.LittleEndian.Uint64(b[1:]), chunks: binary.LittleEndian.Uint32(b[9:]),
		total: binary.LittleEndian.Uint64(b[13:]), pvo: hal.GetPVO(b[21:])}
	switch {
	case m.kind < bcastReady || m.kind > bcastLost:
		return bcastMsg{}, fmt.Errorf("%w: control message kind %d", ErrBcast, m.kind)
	case m.kind != bcastReady && m.chunks != 0:
		return bcastMsg{}, fmt.Errorf("%w: kind %d message with chunks", ErrBcast, m.kind)
	case m.kind != bcastReady && m.kind != bcastOffer && m.pvo != hal.PVO{}:
		return bcastMsg{}, fmt.Errorf("%w: kind %d message with a region", ErrBcast, m.kind)
	case m.kind != bcastReady && m.kind != bcastRefuse && m.total != 0:
		return bcastMsg{}, fmt.Errorf("%w: kind %d message with a length", ErrBcast, m.kind)
	case m.kind == bcastReady && ((m.total == 0) != (m.chunks == 0) || m.total > uint64(m.chunks)*rdmaChunk):
		return bcastMsg{}, fmt.Errorf("%w: ready message for %d bytes in %d chunks", ErrBcast, m.total, m.chunks)
	case m.kind == bcastReady && m.chunks > maxBcastChunks:
		return bcastMsg{}, fmt.Errorf("%w: ready message for %d chunks", ErrBcast, m.chunks)
	}
	return m, nil
}

// maxBcastChunks bounds the counter IDs a ready message carries (64 GiB
// in 1 MiB chunks).
const maxBcastChunks = 1 << 16

// Wire layout of a multicast control message's user header
// (little-endian), mcastMsgLen bytes:
//
//	 0 kind    u8   mcastReady, mcastEnd, mcastDone, mcastRefuse or
//	                mcastGo
//	 1 id      u64  the broadcast
//	 9 total   u64  ready: the receiver's length; end, refuse: the
//	                root's; done, go: 0
//	17 pvo     20B  end: the root's buffer (zero for 0 bytes); others: zero
//	37 seg     u32  end: the stream's data per frame; others: 0
//	41 stream  u64  go, end, done: the call's stream (its frames' id,
//	                never 0); ready, refuse: 0
//
// These values are part of the wire protocol.
const mcastMsgLen = 1 + 8 + 8 + hal.PVOLen + 4 + 8

// Multicast control message kinds.
const (
	mcastReady  = 1 // a receiver has posted its buffer
	mcastEnd    = 2 // the stream has gone: read what you lost here
	mcastDone   = 3 // a receiver has the data
	mcastRefuse = 4 // the root's length is not the receiver's
	mcastGo     = 5 // the root took a receiver's ready: its stream's tag
)

// mcastMsg is a decoded control message (from is not on the wire).
type mcastMsg struct {
	kind   uint8
	id     uint64
	total  uint64
	pvo    hal.PVO
	seg    uint32
	stream uint64
	from   hal.Rank
}

// encodeMcastMsg writes m into b[:mcastMsgLen].
func encodeMcastMsg(b []byte, m mcastMsg) {
	_ = b[mcastMsgLen-1]
	b[0] = m.kind
	binary.LittleEndian.PutUint64(b[1:], m.id)
	binary.LittleEndian.PutUint64(b[9:], m.total)
	hal.PutPVO(b[17:], m.pvo)
	binary.LittleEndian.PutUint32(b[37:], m.seg)
	binary.LittleEndian.PutUint64(b[41:], m.stream)
}

// decodeMcastMsg parses a control message.
func decodeMcastMsg(b []byte) (mcastMsg, error) {
	if len(b) != mcastMsgLen {
		return mcastMsg{}, fmt.Errorf("%w: multicast control message of %d bytes, want %d", ErrBcast, len(b), mcastMsgLen)
	}
	m := mcastMsg{kind: b[0], id: binary.LittleEndian.Uint64(b[1:]), total: binary.LittleEndian.Uint64(b[9:]),
		pvo: hal.GetPVO(b[17:]), seg: binary.LittleEndian.Uint32(b[37:]), stream: binary.LittleEndian.Uint64(b[41:])}
	switch {
	case m.kind < mcastReady || m.kind > mcastGo:
		return mcastMsg{}, fmt.Errorf("%w: multicast control message kind %d", ErrBcast, m.kind)
	case m.kind != mcastEnd && (m.pvo != hal.PVO{} || m.seg != 0):
		return mcastMsg{}, fmt.Errorf("%w: kind %d message with a region", ErrBcast, m.kind)
	case m.kind == mcastEnd && m.seg == 0:
		return mcastMsg{}, fmt.Errorf("%w: end message without a frame size", ErrBcast)
	case (m.kind == mcastDone || m.kind == mcastGo) && m.total != 0:
		return mcastMsg{}, fmt.Errorf("%w: kind %d message with a length", ErrBcast, m.kind)
	case (m.kind == mcastReady || m.kind == mcastRefuse) != (m.stream == 0):
		return mcastMsg{}, fmt.Errorf("%w: kind %d message with stream %#x", ErrBcast, m.kind, m.stream)
	}
	return m, nil
}
