package mpi

import (
	"bytes"
	"testing"

	"github.com/weft-hpc/weft/lapi"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		env envelope
		n   int // data bytes that come with it
	}{
		{envelope{kind: kindEager, ctx: 6, src: 3, tag: 1 << 30, seq: 77, size: 8}, 8},
		{envelope{kind: kindEager, ctx: 1, size: 0}, 0},
		{envelope{kind: kindRTS, ctx: 9, src: 1, tag: 2, seq: 3, sreq: 4, size: 1 << 40,
			pvo: lapi.PVO{Entry: 2, Offset: 3, Key: 4}}, 0},
	} {
		var b [envRTSLen]byte
		enc := tc.env.encode(b[:])
		if want := map[uint8]int{kindEager: envEagerLen, kindRTS: envRTSLen}[tc.env.kind]; len(enc) != want {
			t.Fatalf("%+v: encoded in %d bytes, want %d", tc.env, len(enc), want)
		}
		var got envelope
		if err := got.decode(enc, tc.n); err != nil || got != tc.env {
			t.Fatalf("decoded %+v (%v), want %+v", got, err, tc.env)
		}
	}
	// An RTS carries no data, and its reserved bytes are zero.
	var b [envRTSLen]byte
	rts := (&envelope{kind: kindRTS, size: 1 << 20}).encode(b[:])
	var e envelope
	if e.decode(rts, 1) == nil {
		t.Error("an RTS with data accepted")
	}
	rts[2] = 1
	if e.decode(rts, 0) == nil {
		t.Error("an RTS with a reserved byte set accepted")
	}
}

// FuzzDecodeEnvelope: decode never panics, refuses negative ranks and
// tags, and what it accepts encodes back to the same bytes.
func FuzzDecodeEnvelope(f *testing.F) {
	var b [envRTSLen]byte
	f.Add((&envelope{kind: kindEager, ctx: 2, src: 1, tag: 5, seq: 9}).encode(b[:]), 8)
	f.Add(bytes.Clone((&envelope{kind: kindRTS, ctx: 2, src: 1, tag: 5, seq: 9, sreq: 3, size: 1 << 20,
		pvo: lapi.PVO{Entry: 1, Key: 2}}).encode(b[:])), 0)
	f.Add([]byte{}, 0)
	f.Add(make([]byte, envLen), 0)
	f.Fuzz(func(t *testing.T, in []byte, n int) {
		if n < 0 {
			n = -n
		}
		var e envelope
		if err := e.decode(in, n); err != nil {
			return
		}
		if e.src < 0 || e.tag < 0 {
			t.Fatalf("accepted rank %d tag %d", e.src, e.tag)
		}
		if e.kind == kindEager && e.size != uint64(n) {
			t.Fatalf("eager size %d, want the data's %d", e.size, n)
		}
		var out [envRTSLen]byte
		if again := e.encode(out[:]); !bytes.Equal(again, in) {
			t.Fatalf("re-encoded\n%x\nwant\n%x", again, in)
		}
	})
}
