package stripe

import (
	"errors"
	"fmt"

	"github.com/weft-hpc/weft/hal"
)

// A member's reintegration frame is a frame of one of hal's reintegration
// types (FrameBooting, FrameBootAck, FrameBootNack, FrameRDMAReady) with
// flagStripe set, so that it is told apart from the rank's own
// reintegration, which the layer above runs over the stripe as a whole.
// Payload, reintLen bytes and an address, little-endian:
//
//	 0 magic  [4]byte "WSRI"
//	 4 member u8      the member it was sent on
//	 5 alen   u8      length of the address that follows the fixed part
//	 6 flags  u8      reintRestart: the sender's member is a new incarnation
//	                  of its device (Replace), not a link coming back
//	 7 -      u8      zero
//	 8 reint  [hal.ReintPayloadLen]byte  hal.EncodeReint: incarnation, flags
//	17 addr   [alen]byte  BOOTING: the sender member's address (a replaced
//	                      device is at a new one); otherwise empty
//
// These values are part of the wire protocol.
const reintLen = 8 + hal.ReintPayloadLen

// maxAddr bounds a member's address: its length is one byte on the wire.
const maxAddr = 255

var reintMagic = [4]byte{'W', 'S', 'R', 'I'}

// reintRestart flags a reintegration frame of a member whose device was
// replaced: what arrives from before it is stale.
const reintRestart uint8 = 1

// errReintFrame is wrapped by decodeReint's errors.
var errReintFrame = errors.New("stripe: malformed reintegration frame")

// reintFrame is a decoded reintegration payload. reint and addr alias the
// payload decoded.
type reintFrame struct {
	member uint8
	flags  uint8
	msg    hal.ReintMsg // encode only: decode leaves the payload in reint
	reint  []byte       // hal's reintegration payload, for Reintegration.Handle
	addr   []byte
}

// encodeReint writes f into b, which must hold reintLen+len(f.addr) bytes;
// f.addr must be at most maxAddr bytes.
func encodeReint(b []byte, f reintFrame) {
	copy(b, reintMagic[:])
	b[4] = f.member
	b[5] = uint8(len(f.addr))
	b[6], b[7] = f.flags, 0
	hal.EncodeReint(b[8:], f.msg)
	copy(b[reintLen:], f.addr)
}

// decodeReint decodes a reintegration payload.
func decodeReint(p []byte) (reintFrame, error) {
	if len(p) < reintLen || [4]byte(p[:4]) != reintMagic {
		return reintFrame{}, fmt.Errorf("%w: %d bytes", errReintFrame, len(p))
	}
	if n := int(p[5]); len(p) != reintLen+n {
		return reintFrame{}, fmt.Errorf("%w: %d bytes for an address of %d", errReintFrame, len(p), n)
	}
	return reintFrame{member: p[4], flags: p[6], reint: p[8:reintLen:reintLen], addr: p[reintLen:]}, nil
}
