package stripe

import (
	"bytes"
	"errors"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// A reintegration payload decodes to what was encoded: the member, hal's
// payload (incarnation and ask flag) and the address.
func TestReintFrameRoundTrip(t *testing.T) {
	for _, f := range []reintFrame{
		{member: 0, msg: hal.ReintMsg{Type: hal.FrameBootAck, Epoch: 1}},
		{member: 15, msg: hal.ReintMsg{Type: hal.FrameRDMAReady, Epoch: 1<<64 - 1, Ask: true}},
		{member: 3, flags: reintRestart, msg: hal.ReintMsg{Type: hal.FrameBooting, Epoch: 42}, addr: []byte("udp:10.0.1.7:40123")},
		{member: 1, msg: hal.ReintMsg{Type: hal.FrameBooting, Epoch: 7}, addr: bytes.Repeat([]byte{'a'}, maxAddr)},
	} {
		b := make([]byte, reintLen+len(f.addr))
		encodeReint(b, f)
		g, err := decodeReint(b)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		want := make([]byte, hal.ReintPayloadLen)
		hal.EncodeReint(want, f.msg)
		if g.member != f.member || g.flags != f.flags || !bytes.Equal(g.reint, want) || !bytes.Equal(g.addr, f.addr) {
			t.Errorf("decoded %+v, want member %d, flags %d, reint %x, addr %q", g, f.member, f.flags, want, f.addr)
		}
	}
	for _, bad := range [][]byte{nil, make([]byte, reintLen), append(append([]byte{}, reintMagic[:]...), make([]byte, reintLen)...)} {
		if _, err := decodeReint(bad); !errors.Is(err, errReintFrame) {
			t.Errorf("decode %x: %v, want errReintFrame", bad, err)
		}
	}
}

// decodeReint never panics, and what it accepts encodes back to the same
// bytes.
func FuzzReintFrame(f *testing.F) {
	b := make([]byte, reintLen+5)
	encodeReint(b, reintFrame{member: 2, msg: hal.ReintMsg{Epoch: 9, Ask: true}, addr: []byte("x:1:2")})
	f.Add(b)
	f.Add(b[:reintLen])
	f.Add([]byte("WSRI"))
	f.Fuzz(func(t *testing.T, p []byte) {
		g, err := decodeReint(p)
		if err != nil {
			return
		}
		if len(g.reint) != hal.ReintPayloadLen || len(p) != reintLen+len(g.addr) {
			t.Fatalf("accepted %x as %+v", p, g)
		}
		// The reserved byte is not checked; the rest must round-trip.
		out := make([]byte, len(p))
		encodeReint(out, reintFrame{member: g.member, flags: g.flags, addr: g.addr})
		copy(out[8:reintLen], g.reint)
		out[7] = p[7]
		if !bytes.Equal(out, p) {
			t.Fatalf("%x decoded and encoded again: %x", p, out)
		}
	})
}
