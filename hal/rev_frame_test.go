package hal

import (
	"bytes"
	"testing"
)

// FuzzRevSealCheck: a frame sealed as a device's caller seals it (the
// frame header, then any upper-layer header in hdr, then the payload)
// passes Check with its body intact, and no single flipped bit passes.
func FuzzRevSealCheck(f *testing.F) {
	f.Add(uint8(1), []byte{}, []byte("x"), uint32(0))
	f.Add(uint8(2), make([]byte, 72), make([]byte, 1000), uint32(77))
	f.Add(uint8(11), make([]byte, 40), make([]byte, 63), uint32(12345))
	f.Fuzz(func(t *testing.T, typ uint8, extra, payload []byte, flip uint32) {
		if len(extra)+len(payload) > MaxPayload {
			return
		}
		h := Header{Type: FrameType(typ%uint8(frameTypeEnd-1)) + 1, JobKey: 0x1122334455667788, Src: 3, Dst: 4,
			Len: uint16(len(extra) + len(payload)), Life: typ}
		hdr := make([]byte, HeaderLen+len(extra))
		EncodeHeader(hdr, &h)
		copy(hdr[HeaderLen:], extra)
		Seal(hdr, payload)
		frame := append(bytes.Clone(hdr), payload...)
		var got Header
		body, err := Check(frame, h.JobKey, true, &got)
		if err != nil {
			t.Fatalf("sealed frame refused: %v", err)
		}
		if !bytes.Equal(body, frame[HeaderLen:]) || got.Type != h.Type || got.Len != h.Len || got.Src != 3 || got.Dst != 4 {
			t.Fatalf("decoded %+v", got)
		}
		bit := int(flip % uint32(8*len(frame)))
		frame[bit/8] ^= 1 << (bit % 8)
		if _, err := Check(frame, h.JobKey, true, &got); err == nil {
			t.Fatalf("frame with bit %d flipped accepted", bit)
		}
	})
}
